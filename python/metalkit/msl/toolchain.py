"""Finding clang for the CPU backend and the command lines it runs.

Order: ``METALKIT_CXX`` (a clang++), then ``clang++`` on the PATH if it is new
enough for the headers, then the clang inside the ``ziglang`` wheel (a
dependency on every platform, so a Mac whose Xcode clang is older still works).
"""
from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from ..errors import CompileError

INCLUDE_DIR = str(Path(__file__).resolve().parent.parent / "include")

# MSL semantics as clang flags: C++17, property-based swizzles, half/bfloat
# rounded after every operation, no exceptions or RTTI (MSL has neither), and
# type punning through device pointers as real kernels do.
LANGUAGE_FLAGS = [
    "-x", "c++", "-std=c++17", "-fdeclspec", "-fno-exceptions", "-fno-rtti", "-fno-strict-aliasing",
    "-Xclang", "-ffloat16-excess-precision=none", "-Xclang", "-fbfloat16-excess-precision=none",
    "-D__METAL_VERSION__=310", "-D__METAL__=1", "-D__METALKIT_CPU__=1", "-nostdinc++",
]


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

    def preprocess(self, source: str, include_dirs: list[str]) -> list[str]:
        cmd = self._clang() + LANGUAGE_FLAGS + ["-E", "-I", INCLUDE_DIR, "-include", "metal_stdlib"]
        for d in include_dirs:
            cmd += ["-I", d]
        return cmd + [source]

    def compile(self, source: str, output: str, fast_math: bool) -> list[str]:
        if self.kind == "zig":
            # zig targets the native CPU by default, and adds debug info unless told not to
            # (a quarter of the build time of a large library, and half its memory).
            cmd = [self.path, "c++", "-nostdlib++", "-g0"]
        else:
            cmd = [self.path, "-march=native"]
        # Stack-clash probes touch every page a large frame spans, so a thread
        # that outgrows its fiber stack hits the guard page instead of leaping past it.
        cmd += LANGUAGE_FLAGS + ["-O2", "-fPIC", "-shared", "-fvisibility=hidden", "-w", "-I", INCLUDE_DIR,
                                 "-fno-math-errno", "-fstack-clash-protection"]
        if fast_math:
            cmd.append("-ffast-math")
        return cmd + [source, "-o", output]

    def version(self) -> str:
        out = subprocess.run(self._clang() + ["--version"], capture_output=True, text=True)
        return out.stdout.splitlines()[0] if out.stdout else out.stderr.strip()


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
        return Toolchain("zig" if Path(path).name.startswith("zig") else "clang", path)
    path = shutil.which("clang++")
    if path and _capable(Toolchain("clang", path)):
        return Toolchain("clang", path)
    zig = _zig()
    if zig:
        return Toolchain("zig", zig)
    if path:
        raise CompileError(f"{path} is too old for metalkit's CPU backend (it needs clang 17 or newer: __bf16 "
                           "arithmetic and -fbfloat16-excess-precision); pip install ziglang, or set METALKIT_CXX "
                           "to a newer clang++")
    raise CompileError("no C++ compiler for the CPU backend: install the ziglang wheel (pip install ziglang), "
                       "put clang++ on the PATH, or set METALKIT_CXX to a clang++")


# What the headers need from the compiler beyond C++17.
_PROBE = """
__bf16 add_bf(__bf16 a, __bf16 b) { return a + b; }
_Float16 add_h(_Float16 a, _Float16 b) { return a + b; }
struct S { int g() const { return 1; } __declspec(property(get = g)) int p; };
int use(S s) { return s.p; }
"""


def _capable(tc: Toolchain) -> bool:
    """Whether a system clang compiles what metalkit's headers use (an older Apple
    clang does not); remembered per compiler binary in the cache directory."""
    import json
    from . import cache
    record = cache.cache_dir().parent / "compilers.json"
    try:
        known = json.loads(record.read_text())
    except (OSError, ValueError):
        known = {}
    if tc.identity in known:
        return bool(known[tc.identity])
    proc = subprocess.run(tc._clang() + LANGUAGE_FLAGS + ["-fsyntax-only", "-"], input=_PROBE,
                          capture_output=True, text=True)
    known[tc.identity] = proc.returncode == 0
    try:
        record.parent.mkdir(parents=True, exist_ok=True)
        tmp = record.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(known))
        os.replace(tmp, record)
    except OSError:  # a read-only cache directory: the probe simply runs again in the next process
        return known[tc.identity]
    return known[tc.identity]


def find() -> Toolchain:
    """The toolchain to use now (``METALKIT_CXX`` is read on each call)."""
    return _find(os.environ.get("METALKIT_CXX") or None)
