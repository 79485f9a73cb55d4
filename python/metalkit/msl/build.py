"""MSL source -> a loaded-ready native module, cached in memory and on disk.

Pipeline: ``clang -E`` (so macros that generate kernels are expanded), the
token pre-pass (MSL -> C++, kernels found), launchers appended, ``clang -O2
-shared``. The module carries its own kernel table, so a disk hit needs nothing
but the file.

A file of more than ``EAGER_KERNELS`` kernels is compiled on first use: ``plan``
runs only the front end (``clang -E`` and the pre-pass) and lists the kernels;
each is then built alone (``build(kernels=[name])``), or all of them at once in
groups over the cores (``build_all``). Either way kernel ``name``'s entry is the
one keyed by ``kernels=[name]``: a group's module is recorded under each of its
kernels' keys too.
"""
from __future__ import annotations

import math
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ..errors import CacheError, CompileError
from .. import _progress
from .._lru import Lru
from . import cache, clang_facts, pch, stdlib_stubs, toolchain, zig_direct
from .defines import define_lines
from .paths import INCLUDE_DIR
from .tokens import line_directive

# The front end, code generator and diagnostics are imported when first needed: a
# process that finds its kernels in the cache never loads them.

EAGER_KERNELS = 8  # a file with at most this many kernels is compiled whole, at once
# A whole file's front end asks clang for facts below this much clang -E output (the headers are
# about 0.5 MB of it): a large file's are asked for per kernel built.
FACTS_WHOLE_FILE = 1 << 20
STATUS_AFTER = 1.0  # seconds a compile runs before a terminal shows its status line
MEMORY_ENTRIES = 1024  # entries kept by each in-memory cache below (least recently used dropped)

_NOT_USER = ("<built-in>", "<command line>", "<scratch space>")


# key -> (module path, {user file: (mtime, size)}); lib key -> (names, tag, stats); lib key -> preprocessed text
_memory: Lru = Lru(lambda: MEMORY_ENTRIES)
_names: Lru = Lru(lambda: MEMORY_ENTRIES)
_preprocessed: Lru = Lru(lambda: 4)  # the front end's clang -E output (and its whole pre-pass), for the build that follows
_locks_lock = threading.Lock()
_key_locks: dict[str, list] = {}  # key -> [lock, users]: only while someone builds it


@dataclass(frozen=True)
class Options:
    """One source and the options it is compiled with."""
    source: str
    filename: str
    include_dirs: tuple[str, ...]
    constants: tuple  # items of the constants dict
    fast_math: bool
    prologue: str  # defines= as #define lines
    execution: str  # "auto", "fibers" or "threads" (execution.py); "checked", "checked-threads", "guarded"
    # (prepass: the builds for check=)

    @property
    def checked(self) -> bool:
        """A checked build: every memory access instrumented (check= races, uninit, lockstep)."""
        return self.execution.startswith("checked")

    @staticmethod
    def of(source: str, filename: str = "<source>", include_dirs=(), constants=None, fast_math: bool = False,
           defines=None, execution: str = "auto") -> "Options":
        return Options(source, filename, tuple(os.path.abspath(d) for d in include_dirs),
                       tuple(dict(constants or {}).items()), fast_math, define_lines(defines), execution)

    def key(self, tc: toolchain.Toolchain, kernels) -> str:
        return cache.key(self.prologue + self.source, self.filename, list(self.include_dirs), dict(self.constants),
                         self.fast_math, tc.identity, None if kernels is None else sorted(set(kernels)),
                         self.execution)


def _stat(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
        return st.st_mtime_ns, st.st_size
    except OSError:
        return None


def _fresh(stats: dict) -> bool:
    return all(_stat(p) == st for p, st in stats.items())


class _KeyLock:
    """Serialises the threads of this process that build one key (other processes race safely: see cache.py)."""

    def __init__(self, k: str):
        self.k = k

    def __enter__(self):
        with _locks_lock:
            slot = _key_locks.setdefault(self.k, [threading.Lock(), 0])
            slot[1] += 1
        slot[0].acquire()

    def __exit__(self, *exc):
        with _locks_lock:
            slot = _key_locks[self.k]
            slot[0].release()
            slot[1] -= 1
            if not slot[1]:
                del _key_locks[self.k]


def build(source: str, filename: str = "<source>", include_dirs=(), constants=None, fast_math: bool = False,
          defines=None, execution: str = "auto", kernels=None, rebuild: bool = False) -> str:
    """Path of the compiled module for this source and these options.

    ``defines``: macros defined before the source; ``execution``: the execution
    model of kernels with barriers or SIMD-group functions; ``kernels``: host
    names of the only kernels to build (None: all), which makes a large library
    quick; ``rebuild``: compile again even if a cached module exists (it would
    not load).
    """
    return _build(toolchain.find(),
                  Options.of(source, filename, include_dirs, constants, fast_math, defines, execution), kernels,
                  rebuild)


def _build(tc, opts: Options, kernels, rebuild: bool = False) -> str:
    kernels = None if kernels is None else sorted(set(kernels))
    k = opts.key(tc, kernels)
    hit = None if rebuild else _memory.get(k)
    if hit and _fresh(hit[1]):
        return hit[0]
    with _KeyLock(k):
        entry = None if rebuild else cache.lookup(k)
        if entry is None:
            entry = _in_cache(lambda: _compile(tc, opts, k, kernels))
        _memory.put(k, (str(entry.module), {p: _stat(p) for p in entry.deps}))
        return str(entry.module)


def plan(source: str, filename: str = "<source>", include_dirs=(), constants=None, fast_math: bool = False,
         defines=None, execution: str = "auto") -> tuple[str | None, list[str], str]:
    """How to load this source: ``(module, [], "")`` for a whole-file module (a small file, or one
    compiled whole before), or ``(None, kernel names, tag)`` for a file compiled on first use.
    ``tag`` changes with the user's included files. Errors the front end finds are raised here."""
    tc = toolchain.find()
    opts = Options.of(source, filename, include_dirs, constants, fast_math, defines, execution)
    k = opts.key(tc, None)
    hit = _memory.get(k)
    if hit and _fresh(hit[1]):
        return hit[0], [], ""
    hit = _names.get(k)
    if hit and _fresh(hit[2]):
        return None, hit[0], hit[1]
    entry = cache.lookup(k)
    if entry is not None:
        _memory.put(k, (str(entry.module), {p: _stat(p) for p in entry.deps}))
        return str(entry.module), [], ""
    index = cache.lookup_index(k)
    if index is None:
        result = _in_cache(lambda: _scan(tc, opts, k))
        names = [x.host_name for x in result.kernels]
        if len(names) <= EAGER_KERNELS:
            return _build(tc, opts, None), [], ""
        index = _in_cache(lambda: cache.store_index(k, names, _deps(result, opts)))
    _names.put(k, (index.kernels, index.tag, {p: _stat(p) for p in index.deps}))
    return None, index.kernels, index.tag


def build_all(source: str, filename: str = "<source>", include_dirs=(), constants=None, fast_math: bool = False,
              defines=None, execution: str = "auto", jobs: int | None = None,
              progress: Callable[[int], None] | None = None) -> int:
    """Compiles every kernel of a file not cached yet, in groups, ``jobs`` compilers at a time
    (default: one per core); ``progress(n)`` is called as each ``n`` kernels are done. Returns
    the number of kernels compiled. Kernels that fail (a failing group is split until they are
    found) are reported together, after the rest are built."""
    tc = toolchain.find()
    opts = Options.of(source, filename, include_dirs, constants, fast_math, defines, execution)
    module, names, _ = plan(source, filename, include_dirs, constants, fast_math, defines, execution)
    if module is not None:
        return 0
    todo = [n for n in names if cache.lookup(opts.key(tc, [n])) is None]
    if progress:
        progress(len(names) - len(todo))
    if not todo:
        return 0
    jobs = max(1, jobs or os.cpu_count() or 1)
    # Four groups per compiler balance the load; each group re-reads the whole file, so not too many.
    size = max(1, min(64, math.ceil(len(todo) / (jobs * 4))))
    groups = [todo[i:i + size] for i in range(0, len(todo), size)]
    cancel = threading.Event()
    failures: dict[str, CompileError] = {}
    pool = ThreadPoolExecutor(jobs, thread_name_prefix="metalkit-build")
    futures = [pool.submit(_build_group, tc, opts, g, cancel) for g in groups]
    try:
        for f in as_completed(futures):
            failed = f.result()
            failures.update(failed)
            if progress:
                progress(len(groups[futures.index(f)]))
    except BaseException:  # Ctrl-C included: no compiler outlives the build
        cancel.set()
        for f in futures:
            f.cancel()
        while not all(f.done() for f in futures):
            toolchain.kill_running()
            threading.Event().wait(0.02)
        raise
    finally:
        pool.shutdown(wait=True)
    if failures:
        first = failures[min(failures, key=names.index)]
        listed = ", ".join(sorted(failures, key=names.index)[:10]) + (", ..." if len(failures) > 10 else "")
        raise CompileError(f"{len(failures)} of {len(names)} kernels do not compile ({listed}); the first: "
                           f"{first.msg}", filename=first.filename, lineno=first.lineno, offset=first.offset,
                           text=first.text, log=first.log)
    return len(todo)


def _build_group(tc, opts: Options, group: list[str], cancel: threading.Event) -> dict[str, CompileError]:
    """Builds ``group`` as one module and records it under each kernel's key; if it fails, each
    half the same way, down to the kernels that fail alone. Returns those failures."""
    if cancel.is_set():
        return {}
    _status.on = False
    try:
        _build(tc, opts, group)
    except CompileError as e:
        if len(group) == 1:
            return {group[0]: e}
        half = len(group) // 2
        return {**_build_group(tc, opts, group[:half], cancel), **_build_group(tc, opts, group[half:], cancel)}
    entry = cache.lookup(opts.key(tc, group))
    if entry is None:  # removed since by another process: its kernels build on first use
        return {}
    keys = [opts.key(tc, [name]) for name in group]
    _in_cache(lambda: cache.link(keys, entry))
    for k in keys:
        _memory.put(k, (str(entry.module), {p: _stat(p) for p in entry.deps}))
    return {}


def _in_cache(step: Callable):
    """``step()``; if the cache directory refuses a write, once more in a private one."""
    try:
        return step()
    except CacheError:
        raise
    except OSError as e:
        cache.abandon(e)
    try:
        return step()
    except CacheError:
        raise
    except OSError as e:
        raise cache.unwritable(e) from None


def _scan(tc, opts: Options, k: str):
    """The front end alone: preprocessed once (kept for the build that may follow), pre-passed."""
    with cache.workspace() as tmp, _status_line(f"reading {opts.filename}"):
        return _front(tc, opts, k, tmp, None, building=False)[0]


def _front(tc, opts: Options, lib_key: str, tmp, kernels, building: bool = True):
    """The pre-passed source and the name clang -E was given it by. ``building``: the result is
    compiled (so clang's facts are asked for), not only read for its kernels' names."""
    from .diagnostics import source_line
    from .prepass import MslError, prepass
    pp = _preprocessed.get(lib_key)
    if pp is None or not _fresh(pp[2]):
        src = tmp / "source.metal"
        # #line keeps every diagnostic in the user's own file name and lines.
        src.write_text(f'{opts.prologue}{line_directive(1, opts.filename)}\n{opts.source}')
        pp = (_preprocess(tc, opts, str(src)), str(src), {}, None)
    text, src_name, _, whole = pp
    if kernels is None and whole is not None and pch.ENABLED:  # plan's scan, then the build of a small file
        return whole, src_name
    user = lambda f: f not in _NOT_USER and not f.startswith(INCLUDE_DIR) and f != src_name
    # A large file's listing of its kernels goes without: its kernels get facts as they are built.
    with_facts = building or len(text) < FACTS_WHOLE_FILE
    facts = (lambda cpp: clang_facts.gather(tc, cpp, src_name, opts.fast_math, tmp)) if with_facts else None
    try:
        result = prepass(text, user, dict(opts.constants), only=kernels, execution=opts.execution,
                         head=pch.head(text, src_name) if pch.ENABLED else 0, facts=facts)
    except MslError as e:
        raise CompileError(e.msg, filename=e.file, lineno=e.line or None, offset=e.col or None,
                           text=source_line(e.file, e.line, opts.source, opts.filename), log=str(e)) from None
    files = [f for f in result.files if f != opts.filename and os.path.isfile(f)]
    reuse = result if kernels is None and with_facts else whole  # what a build of the whole file may take
    _preprocessed.put(lib_key, (text, src_name, {f: _stat(f) for f in files}, reuse))
    return result, src_name


def _preprocess(tc, opts: Options, src: str) -> str:
    """``clang -E`` output for ``src``: through the stand-ins of msl/stdlib_stubs.py where they
    serve, else (or if that fails, so errors read as they did) in full."""
    stubs = stdlib_stubs.get(tc) if pch.ENABLED else None
    if stubs is not None:
        proc = toolchain.run(tc.preprocess(src, list(opts.include_dirs), stubs))
        text = stubs.restore(proc.stdout, src) if proc.returncode == 0 else None
        if text is not None:
            return text
    return _run(tc.preprocess(src, list(opts.include_dirs)), opts.source, opts.filename)


def _deps(result, opts: Options) -> dict[str, str | None]:
    return {f: cache.file_digest(f) for f in result.files if f != opts.filename and os.path.isfile(f)}


def _compile(tc, opts: Options, key: str, kernels) -> cache.Entry:
    from . import codegen
    with cache.workspace() as tmp:
        result, src_name = _front(tc, opts, opts.key(tc, None), tmp, kernels)
        missing = sorted(set(kernels or ()) - {k.host_name for k in result.kernels})
        if missing:
            raise CompileError(f"kernels=: no kernel named {missing[0]!r} in {opts.filename}; check the name "
                               "(a template is named by its host_name instantiations)", filename=opts.filename)
        text = result.text + "\n" + codegen.launchers(result.kernels, result.structs,
                                                      checked=opts.checked, logs=result.logs)
        label = opts.filename if kernels is None or len(kernels) != 1 else f"{opts.filename} ({kernels[0]})"
        with _status_line(f"compiling {label}"):
            out = _codegen(tc, opts, text, src_name, tmp)
        return cache.store(key, out, _deps(result, opts), [k.host_name for k in result.kernels])


class _StatusSwitch(threading.local):
    on = True  # False on build_all's worker threads: the build's bar stands for them


_status = _StatusSwitch()


def _status_line(label: str) -> _progress.Status:
    """A long step's status line on a terminal (not on build_all's workers)."""
    return _progress.Status(label, enabled=None if _status.on else False, delay=STATUS_AFTER)


def _codegen(tc, opts: Options, text: str, src_name: str, tmp: Path) -> Path:
    """The pre-passed ``text`` compiled into ``tmp/module.so``: against the precompiled headers when
    they can be had (msl/pch.py), else, or if that fails, the whole text as it is."""
    module, out = tmp / "module.cpp", tmp / "module.so"
    parts = pch.split(text, src_name) if pch.ENABLED else None
    checked = opts.checked
    header = pch.header(tc, opts.fast_math, parts[0], checked) if parts else None
    if header is not None:
        module.write_text(parts[1])
        if _against(tc, opts, header, module, out):
            return out
    module.write_text(text)
    _check(_driver(tc, opts, module, out, None), opts.source, opts.filename)
    if header is not None:  # the whole text compiles, so the header was at fault
        pch.refuse(tc, opts.fast_math, parts[0], checked)
    return out


def _against(tc, opts: Options, header: Path, module: Path, out: Path) -> bool:
    """Whether ``module`` compiled against ``header``: with zig, by the commands zig_direct.py
    recorded for the header (recording them the first time), else by the compiler's driver."""
    checked = opts.checked
    direct = zig_direct.commands(header, str(module), str(module.with_suffix(".o")), str(out)) \
        if tc.kind == "zig" else None
    if direct is not None:
        failed = next((p for p in map(toolchain.run, direct) if p.returncode != 0), None)
        if failed is None:
            return True
        if toolchain.needs_runtime(failed.stderr):
            return toolchain.run(tc.compile(str(module), str(out), opts.fast_math, str(header), checked,
                                            runtime=True)).returncode == 0
    elif tc.kind == "zig" and zig_direct.may_record(header):
        proc = zig_direct.compile_and_record(tc, header, str(module), str(out), opts.fast_math, checked)
        if proc.returncode == 0 or not toolchain.needs_runtime(proc.stderr):
            return proc.returncode == 0
    built = _driver(tc, opts, module, out, header).returncode == 0
    if built and direct is not None:  # zig's driver built what the recorded commands did not
        zig_direct.drop(header)
    return built


def _driver(tc, opts: Options, module: Path, out: Path, header: Path | None) -> subprocess.CompletedProcess:
    """The compiler driver's build of ``module``: linked without the compiler runtime, and again
    with it if the link asks for it (toolchain.needs_runtime)."""
    pch = str(header) if header is not None else None
    checked = opts.checked
    proc = toolchain.run(tc.compile(str(module), str(out), opts.fast_math, pch, checked))
    if proc.returncode != 0 and toolchain.needs_runtime(proc.stderr):
        proc = toolchain.run(tc.compile(str(module), str(out), opts.fast_math, pch, checked, runtime=True))
    return proc


def _run(cmd: list[str], source: str, filename: str) -> str:
    return _check(toolchain.run(cmd), source, filename)


def _check(proc: subprocess.CompletedProcess, source: str, filename: str) -> str:
    """A compiler's output; a CompileError in the user's terms if it failed."""
    from .diagnostics import compile_error
    cmd = proc.args
    if proc.returncode != 0:
        error = compile_error(proc.stderr or str(proc.returncode), source, filename)
        if toolchain.verbose():
            _keep_input(cmd, error)
        raise error
    return proc.stdout


def _keep_input(cmd: list[str], error: CompileError) -> None:
    """METALKIT_VERBOSE: copy the file a failing command compiled (the generated C++, or the source
    given to the preprocessor) out of the build's temporary folder, and name it in ``error``."""
    src = next(a for a in reversed(cmd) if a.endswith((".cpp", ".metal")))
    fd, kept = tempfile.mkstemp(prefix="metalkit-failed-", suffix=os.path.splitext(src)[1])
    with os.fdopen(fd, "wb") as f, open(src, "rb") as g:
        shutil.copyfileobj(g, f)
    note = f"the code the compiler was given is kept in {kept} (METALKIT_VERBOSE)"
    error.msg = f"{error.msg}; {note}"
    error.args = (error.msg,) + error.args[1:]
    print(f"metalkit: {note}", file=sys.stderr)
