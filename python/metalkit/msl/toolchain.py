"""Finding clang for the CPU backend and the command lines it runs.

Order: ``METALKIT_CXX`` (a clang++), then ``clang++`` on the PATH if it is new
enough for the headers, then the clang inside the ``ziglang`` wheel (a
dependency on every platform, so a Mac whose Xcode clang is older still works).
"""
from __future__ import annotations

import contextlib
import functools
import json
import os
import platform
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

from ..errors import CompileError
from . import cache
from .paths import INCLUDE_DIR

# MSL semantics as clang flags: C++17, property-based swizzles, half/bfloat
# rounded after every operation, no exceptions or RTTI (MSL has neither), and
# type punning through device pointers as real kernels do.
LANGUAGE_FLAGS = [
    "-x", "c++", "-std=c++17", "-fdeclspec", "-fno-exceptions", "-fno-rtti", "-fno-strict-aliasing",
    "-Xclang", "-ffloat16-excess-precision=none", "-Xclang", "-fbfloat16-excess-precision=none",
    "-D__METAL_VERSION__=310", "-D__METAL__=1", "-D__METALKIT_CPU__=1", "-nostdinc++",
]
# A tab counts one column in the source lines clang quotes, as in the columns it
# reports, so diagnostics.py can line quoted text up with the user's own.
DIAGNOSTIC_FLAGS = ["-ftabstop=1"]
NEEDS = ("metalkit needs clang 17 or newer: set METALKIT_CXX to such a clang++, or unset it to use the clang "
         "of the ziglang wheel (pip install ziglang)")


@dataclass(frozen=True)
class Toolchain:
    kind: str          # "clang" or "zig"
    path: str

    @property
    def identity(self) -> str:
        """Changes whenever the compiler binary does (part of the cache key)."""
        st = os.stat(self.path)
        return f"{self.kind}:{os.path.realpath(self.path)}:{st.st_size}:{st.st_mtime_ns}"

    def _clang(self) -> list[str]:
        return [self.path, "clang"] if self.kind == "zig" else [self.path]

    def preprocess(self, source: str, include_dirs: list[str], stubs=None) -> list[str]:
        """``clang -E`` of ``source`` after ``<metal_stdlib>``; with ``stubs`` (msl/stdlib_stubs.py),
        after its macros and stand-ins instead."""
        cmd = self._clang() + LANGUAGE_FLAGS + DIAGNOSTIC_FLAGS + ["-E"]
        if stubs is not None:
            cmd += ["-I", stubs.include, "-I", INCLUDE_DIR, "-include", stubs.macros]
        else:
            cmd += ["-I", INCLUDE_DIR, "-include", "metal_stdlib"]
        for d in include_dirs:
            cmd += ["-I", d]
        return cmd + [source]

    def compile(self, source: str, output: str, fast_math: bool, pch: str | None = None,
                checked: bool = False, runtime: bool = False) -> list[str]:
        """``source`` (preprocessed C++) -> the shared module ``output``; ``pch``: a header from
        ``precompile`` to read first (same ``fast_math`` and ``checked``: its flags must match);
        ``checked``: every memory access calls the runtime (checked_access.h); ``runtime``: link
        zig's compiler runtime (``needs_runtime``)."""
        return self._codegen(source, fast_math, checked, runtime) + (["-include-pch", pch] if pch else []) + \
            ["-shared", source, "-o", output]

    def precompile(self, header: str, output: str, fast_math: bool, checked: bool = False) -> list[str]:
        """The precompiled header ``output`` of ``header``, for ``compile(..., pch=output)``. No
        timestamp in it: a header is checked against its input's size only, the cache's key
        standing for the content (msl/pch.py)."""
        return self._codegen(header, fast_math, checked) + ["-Xclang", "-fno-pch-timestamp", "-x", "c++-header", header,
                                                   "-o", output]

    def _codegen(self, source: str, fast_math: bool, checked: bool = False, runtime: bool = False) -> list[str]:
        if self.kind == "zig":
            # zig targets the native CPU by default, and adds full debug info unless told
            # otherwise (a quarter of the build time of a large library, and half its memory).
            cmd = [self.path, "c++", "-nostdlib++"]
            if sys.platform.startswith("linux") and not runtime:
                # zig builds its compiler runtime (compiler_rt) the first time it links, into its
                # cache: 4 s of a new machine's first compile, for functions kernels seldom call
                # (128-bit division, say). Linked without it, and with every symbol required to
                # resolve, a module that needs it fails to link (needs_runtime) and is linked again
                # with it, which zig builds then.
                cmd += ["-rtlib=none", "-Wl,-z,defs"]
        else:
            cmd = [self.path, "-march=native"]
        # Line tables only, so a fault names the user's line (symbols.py); ELF keeps them in the
        # module, where Darwin would need dsymutil after the link. Compilation directory ".":
        # file names are kept as the user wrote them, whatever the working directory; the
        # build's own temporary folder is left out, so a rebuild makes the same bytes.
        if sys.platform == "darwin":
            cmd.append("-g0")
        else:
            cmd += ["-gline-tables-only", "-fdebug-compilation-dir=.",
                    f"-fdebug-prefix-map={os.path.dirname(os.path.abspath(source))}=."]
        # Stack-clash probes touch every page a large frame spans, so a thread
        # that outgrows its fiber stack hits the guard page instead of leaping past it.
        # -fmax-type-align=8: a pointer to a float4 (or any type aligned past 8 bytes) is
        # assumed 8-byte aligned only, so it is read and written with unaligned vector moves:
        # a GPU reads a vector at its element's alignment, and real kernels do (a float4
        # through a float pointer + 1). Aligned data moves as fast that way; 8-byte atomics keep
        # their natural alignment. -fno-finite-loops: C++ lets the compiler assume that a loop
        # without side effects ends, and delete it; a GPU spins in `while (flag[0] == 0) {}`
        # forever, and so must the simulator, so that timeout= or Ctrl-C can name the hang.
        cmd += LANGUAGE_FLAGS + DIAGNOSTIC_FLAGS + ["-O2", "-fPIC", "-fvisibility=hidden", "-w",
                                                    "-I", INCLUDE_DIR, "-fno-math-errno", "-fstack-clash-protection",
                                                    "-fmax-type-align=8", "-fno-finite-loops"]
        if fast_math:
            cmd.append("-ffast-math")
        if checked:
            # ThreadSanitizer's instrumentation given to the compiler's core only, so the driver
            # links no sanitizer runtime: the module's own callbacks take the calls. Every read
            # is kept (not only those a write in the same block does not cover), so an
            # uninitialised read is seen. The pass leaves accesses wider than 16 bytes, gathers
            # and masked loads and stores uninstrumented: code for the baseline CPU (SSE2, or
            # Armv8's NEON) has none of those, so it may be vectorised, except for interleaved
            # groups (one wide load for several strided ones).
            cmd += ["-Xclang", "-fsanitize=thread", "-mllvm", "-tsan-instrument-func-entry-exit=0",
                    "-mllvm", "-tsan-instrument-read-before-write=1", baseline_cpu_flag(self.kind),
                    "-mllvm", "-enable-interleaved-mem-accesses=0"]
        return cmd

    def version(self) -> str:
        """The first line ``--version`` prints ("" if it prints nothing)."""
        out = run(self._clang() + ["--version"])
        return next((line.strip() for line in (out.stdout + out.stderr).splitlines() if line.strip()), "")


def baseline_cpu_flag(kind: str) -> str:
    """The flag that has the compiler of ``kind`` ("zig" or "clang") target the baseline CPU of
    this machine's architecture."""
    if kind == "zig":
        return "-mcpu=baseline"
    return "-march=armv8-a" if platform.machine().lower() in ("arm64", "aarch64") else "-march=x86-64"


def needs_runtime(log: str) -> bool:
    """Whether a link failed for a function of the compiler runtime (``compile(runtime=True)``)."""
    return re.search(r"undefined symbol: __\w+", log) is not None


def verbose() -> bool:
    """``METALKIT_VERBOSE=1``: each compiler command line is printed to stderr, and a failing
    build's input is kept (build.py). Read on each call."""
    return os.environ.get("METALKIT_VERBOSE", "") not in ("", "0")


def run(cmd: list[str], input: str | None = None) -> subprocess.CompletedProcess:
    """Run a compiler command and wait for it.

    The compiler gets its own process group, killed whole if the wait is
    interrupted (Ctrl-C) or fails: ``zig c++`` runs clang as a child, which
    would otherwise outlive it. Its caches (zig's) go under metalkit's cache
    directory, not the user's home.
    """
    env = dict(os.environ)
    zig_cache = str(cache.root() / "zig")
    env.setdefault("ZIG_GLOBAL_CACHE_DIR", zig_cache)
    env.setdefault("ZIG_LOCAL_CACHE_DIR", zig_cache)
    if verbose():
        print(f"metalkit: {shlex.join(cmd)}", file=sys.stderr, flush=True)
    try:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL if input is None else subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                                start_new_session=True)
    except OSError as e:
        raise CompileError(f"cannot run the compiler {cmd[0]}: {e.strerror or e}; {NEEDS}") from None
    with _running_lock:
        _running.add(proc)
    try:
        out, err = proc.communicate(input)
    except BaseException:
        _kill(proc)
        proc.wait()
        raise
    finally:
        with _running_lock:
            _running.discard(proc)
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


_running: set[subprocess.Popen] = set()  # compilers running on any thread
_running_lock = threading.Lock()


def _kill(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)


def kill_running() -> None:
    """End every compiler this process is running: an interrupt reaches only the main thread,
    and a parallel build's compilers run in worker threads."""
    with _running_lock:
        procs = list(_running)
    for proc in procs:
        _kill(proc)


def _zig() -> str | None:
    try:
        import ziglang  # noqa: F401  (the wheel ships the zig binary next to its package)
    except ImportError:
        return None
    exe = Path(sys.modules["ziglang"].__file__).parent / ("zig.exe" if os.name == "nt" else "zig")
    return str(exe) if exe.exists() else None


@functools.lru_cache(maxsize=None)
def _find(override: str | None) -> Toolchain:
    if override:
        path = shutil.which(override) or override
        if not os.path.exists(path):
            raise CompileError(f"METALKIT_CXX={override!r} does not exist; point it at a clang++ or unset it")
        tc = Toolchain("zig" if Path(path).name.startswith("zig") else "clang", path)
        problem = _problem(tc)
        if problem:
            raise CompileError(f"METALKIT_CXX={override!r} ({path}) cannot build metalkit kernels: {problem}. {NEEDS}")
        return tc
    path = shutil.which("clang++")
    problem = _problem(Toolchain("clang", path)) if path else None
    if path and problem is None:
        return Toolchain("clang", path)
    zig = _zig()
    if zig:
        return Toolchain("zig", zig)
    if path:
        raise CompileError(f"{path} cannot build metalkit kernels: {problem}. {NEEDS}")
    raise CompileError("no C++ compiler for the CPU backend: install the ziglang wheel (pip install ziglang), "
                       "put clang++ 17 or newer on the PATH, or set METALKIT_CXX to one")


# What the headers need from the compiler beyond C++17.
_PROBE = """
__bf16 add_bf(__bf16 a, __bf16 b) { return a + b; }
_Float16 add_h(_Float16 a, _Float16 b) { return a + b; }
struct S { int g() const { return 1; } __declspec(property(get = g)) int p; };
int use(S s) { return s.p; }
"""


def _problem(tc: Toolchain) -> str | None:
    """None if ``tc`` is a clang that compiles what metalkit's headers use, else
    what is wrong; remembered per compiler binary in the cache directory."""
    record = cache.root() / "compilers.json"
    try:
        known = json.loads(record.read_text())
        if not isinstance(known, dict):
            known = {}
    except (OSError, ValueError):
        known = {}
    if known.get(tc.identity) is True:
        return None
    if isinstance(known.get(tc.identity), str):
        return known[tc.identity]
    problem = _probe(tc)
    known[tc.identity] = problem or True
    tmp = record.with_suffix(f".{os.getpid()}.tmp")
    with contextlib.suppress(OSError):  # an unwritable cache directory: the probe runs again in the next process
        tmp.write_text(json.dumps(known))
        os.replace(tmp, record)
    return problem


def _probe(tc: Toolchain) -> str | None:
    version = tc.version()
    if "clang" not in version:
        return f"it is not clang (its --version says {version!r})" if version else \
            "it is not clang (its --version printed nothing)"
    proc = run(tc._clang() + LANGUAGE_FLAGS + ["-fsyntax-only", "-"], input=_PROBE)
    if proc.returncode == 0:
        return None
    lines = [line.strip() for line in proc.stderr.splitlines() if line.strip()]
    first = next((line for line in lines if "error" in line), lines[0] if lines else "no output")
    return f"{version} is too old (a test compile failed: {first})"


def find() -> Toolchain:
    """The toolchain to use now (``METALKIT_CXX`` is read on each call)."""
    return _find(os.environ.get("METALKIT_CXX") or None)
