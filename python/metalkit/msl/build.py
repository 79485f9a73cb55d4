"""MSL source -> a loaded-ready native module, cached in memory and on disk.

Pipeline: ``clang -E`` (so macros that generate kernels are expanded), the
token pre-pass (MSL -> C++, kernels found), launchers appended, ``clang -O2
-shared``. The module carries its own kernel table, so a disk hit needs nothing
but the file.
"""
from __future__ import annotations

import os
import threading

from ..errors import CacheError, CompileError
from . import cache, codegen, toolchain
from .defines import define_lines
from .diagnostics import compile_error, source_line
from .prepass import MslError, prepass

_lock = threading.Lock()
_key_locks: dict[str, threading.Lock] = {}
_memory: dict[str, tuple[str, dict[str, tuple[int, int]]]] = {}

_NOT_USER = ("<built-in>", "<command line>", "<scratch space>")


def _stat(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
        return st.st_mtime_ns, st.st_size
    except OSError:
        return None


def build(source: str, filename: str = "<source>", include_dirs=(), constants=None, fast_math: bool = False,
          defines=None, kernels=None, rebuild: bool = False) -> str:
    """Path of the compiled module for this source and these options.

    ``defines``: macros defined before the source; ``kernels``: host names of
    the only kernels to build (None: all), which makes a large library quick;
    ``rebuild``: compile again even if a cached module exists (it would not load).
    """
    tc = toolchain.find()
    include_dirs = [os.path.abspath(d) for d in include_dirs]
    constants = dict(constants or {})
    prologue = define_lines(defines)
    kernels = None if kernels is None else sorted(set(kernels))
    k = cache.key(prologue + source, filename, include_dirs, constants, fast_math, tc.identity, kernels)
    hit = None if rebuild else _memory.get(k)
    if hit and all(_stat(p) == st for p, st in hit[1].items()):
        return hit[0]
    with _lock:
        key_lock = _key_locks.setdefault(k, threading.Lock())
    with key_lock:
        entry = None if rebuild else cache.lookup(k)
        if entry is None:
            entry = _compile_in_cache(tc, source, filename, include_dirs, constants, fast_math, k, prologue, kernels)
        _memory[k] = (str(entry.module), {p: _stat(p) for p in entry.deps})
        return str(entry.module)


def _compile_in_cache(*args) -> cache.Entry:
    """``_compile``; if the cache directory refuses a write, once more in a private one."""
    try:
        return _compile(*args)
    except CacheError:
        raise
    except OSError as e:
        cache.abandon(e)
    try:
        return _compile(*args)
    except CacheError:
        raise
    except OSError as e:
        raise cache.unwritable(e) from None


def _compile(tc, source, filename, include_dirs, constants, fast_math, key: str, prologue: str,
             kernels) -> cache.Entry:
    with cache.workspace() as tmp:
        src = tmp / "source.metal"
        # #line keeps every diagnostic in the user's own file name and lines.
        src.write_text(f'{prologue}#line 1 "{_escape(filename)}"\n{source}')
        pp = _run(tc.preprocess(str(src), include_dirs), source, filename)
        user = lambda f: f not in _NOT_USER and not f.startswith(toolchain.INCLUDE_DIR) and f != str(src)
        try:
            result = prepass(pp, user, constants, only=kernels)
        except MslError as e:
            raise CompileError(e.msg, filename=e.file, lineno=e.line or None, offset=e.col or None,
                               text=source_line(e.file, e.line, source, filename), log=str(e)) from None
        missing = sorted(set(kernels or ()) - {k.host_name for k in result.kernels})
        if missing:
            raise CompileError(f"kernels=: no kernel named {missing[0]!r} in {filename}; check the name "
                               "(a template is named by its host_name instantiations)", filename=filename)
        module = tmp / "module.cpp"
        module.write_text(result.text + "\n" + codegen.launchers(result.kernels))
        out = tmp / "module.so"
        _run(tc.compile(str(module), str(out), fast_math), source, filename)
        deps = {f: cache.file_digest(f) for f in result.files if f != filename and os.path.isfile(f)}
        return cache.store(key, out, deps, [k.host_name for k in result.kernels])


def _escape(s: str) -> str:
    return s.replace("\\", "\\\\").replace('"', '\\"')


def _run(cmd: list[str], source: str, filename: str) -> str:
    proc = toolchain.run(cmd)
    if proc.returncode != 0:
        raise compile_error(proc.stderr or str(proc.returncode), source, filename)
    return proc.stdout
