"""Compiling MSL into a Library of Kernels."""
from __future__ import annotations

import functools
import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Tuple, Union

from . import _device
from ._lru import Lru
from .errors import ArgumentError, CompileError, KernelNotFound

if TYPE_CHECKING:
    from ._core import Kernel

Constants = Mapping[Union[str, int], Union[bool, int, float]]
# msl.build.build's arguments before kernels=: source, filename, include_dirs, constants, fast_math, defines, execution
_Options = Tuple[str, str, Tuple[str, ...], dict, bool, dict, str]

# The in-memory library cache: the LIBRARY_CACHE most recently compiled or loaded
# libraries. One dropped from it is freed (its modules unloaded) once nothing else
# refers to it or its kernels.
LIBRARY_CACHE = 64
_libraries: "Lru[Library]" = Lru(lambda: LIBRARY_CACHE)


def _load(path: str) -> Any:
    from . import _core
    return _core.load_cpu_library(path)


class Library:
    """Kernels compiled from one MSL source. ``lib["name"]`` or ``lib.name`` is a Kernel.

    ``lib.filename`` is the source's name, ``lib.backend`` the backend it was
    compiled for ("cpu" or "metal"), ``lib.constants`` its function constants.

    >>> import metalkit
    >>> lib = metalkit.compile('''
    ... #include <metal_stdlib>
    ... using namespace metal;
    ... kernel void twice(device float* x [[buffer(0)]], uint i [[thread_position_in_grid]]) { x[i] *= 2; }
    ... ''')
    >>> lib.kernels, lib.filename, "twice" in lib
    (['twice'], '<source>', True)
    """

    def __init__(self, core: Any, filename: str, backend: str, constants: Constants | None = None,
                 rebuild: Callable[..., "Library"] | None = None, checked: Callable[..., Any] | None = None):
        self._core = core
        self.filename = filename
        self.backend = backend
        self.constants = dict(constants or {})
        self._rebuild = rebuild  # the same source and options with other constants
        self._checked = checked  # (build, name=) -> a kernel's build for check= (_checked_kernel)

    def specialize(self, name: str, constants: Constants) -> "Kernel":
        """Kernel ``name`` with function constants bound for it alone, on top of the library's.

        >>> import numpy as np, metalkit
        >>> lib = metalkit.compile('''
        ... #include <metal_stdlib>
        ... using namespace metal;
        ... constant float gain [[function_constant(0)]];
        ... kernel void amp(device float* x [[buffer(0)]], uint i [[thread_position_in_grid]]) { x[i] *= gain; }
        ... ''', constants={"gain": 2.0})
        >>> x = np.ones(2, np.float32)
        >>> lib.specialize("amp", {"gain": 5.0})(x); lib.amp(x); x.tolist()
        [10.0, 10.0]
        """
        if self._rebuild is None:
            raise CompileError(f"{self.filename}: this library cannot be specialised (no source to rebuild from)",
                               filename=self.filename)
        if name not in self:
            self[name]  # raises the KernelNotFound naming the kernels
        return self._rebuild({**self.constants, **dict(constants)}, [name])[name]

    @property
    def kernels(self) -> list[str]:
        """Names of the kernels in this library."""
        return list(self._core.kernel_names)

    def __getitem__(self, name: str) -> "Kernel":
        k = self._core.kernel(name)
        if k is None:
            raise KernelNotFound(f"no kernel named {name!r} in {self.filename}; it has: "
                                 f"{', '.join(self.kernels) or 'none'}; check the name (a template kernel is named "
                                 "by its host_name instantiations)")
        if self._checked is not None and k._checked_factory is None:
            k._checked_factory = functools.partial(self._checked, name=name)
        return k

    def __getattr__(self, name: str) -> "Kernel":
        if name.startswith("_"):
            raise AttributeError(name)
        return self[name]

    def __contains__(self, name: str) -> bool:
        return name in self._core.kernel_names

    def build(self, *, jobs: int | None = None, progress: bool | None = None) -> "Library":
        """Compile every kernel now, ``jobs`` compilers at a time (default: one per core), with a
        progress bar on stderr if it is a terminal (``progress`` forces it on or off). A large
        file on the CPU backend is otherwise compiled a kernel at a time, on first use; a small
        one, and any file on Metal, is compiled whole by ``compile``/``load``, so this does nothing.

        >>> import metalkit
        >>> lib = metalkit.load(metalkit.bundled.KERNELS_DIR / "add_arrays.metal")
        >>> lib.build().kernels
        ['add_arrays']
        """
        if isinstance(self._core, _LazyCore):
            self._core.build(jobs, progress)
        return self

    def __dir__(self) -> Iterable[str]:
        return list(super().__dir__()) + self.kernels

    def __repr__(self) -> str:
        return f"<metalkit.Library {self.filename} ({self.backend}): {', '.join(self.kernels)}>"


class _LazyCore:
    """The kernels of a large file, each compiled when first asked for (``_core.Library``'s interface)."""

    def __init__(self, filename: str, names: list[str], options: _Options):
        self.filename = filename
        self.kernel_names = list(names)
        self._known = set(names)
        self._options = options
        self._lock = threading.Lock()
        self._kernels: dict[str, Any] = {}  # name -> _core.Kernel
        self._modules: dict[str, Any] = {}  # module path -> _core.Library (a group's module holds several kernels)

    def kernel(self, name: str) -> Any:
        with self._lock:
            k = self._kernels.get(name)
        if k is not None or name not in self._known:
            return k
        from .msl import build as msl_build, cache as msl_cache
        try:
            core = self._module(msl_build.build(*self._options, [name]), name)
        except CompileError as e:  # its own instantiation, or a body only the compiler reads
            raise e.reworded(f"kernel {name!r}: {e.msg}") from None
        k = core.kernel(name)
        if k is None:
            raise CompileError(f"kernel {name!r}: its cached module does not hold it; remove the kernel cache "
                               f"({msl_cache.cache_dir()}) and run again", filename=self.filename)
        with self._lock:
            return self._kernels.setdefault(name, k)

    def _module(self, path: str, name: str) -> Any:
        from .msl import build as msl_build
        with self._lock:
            core = self._modules.get(path)
        if core is None:
            try:
                core = _load(path)
            except RuntimeError:  # verified, yet it does not load here: build afresh
                path = msl_build.build(*self._options, [name], rebuild=True)
                core = _load_fresh(path, self.filename)
            with self._lock:
                core = self._modules.setdefault(path, core)
        return core

    def build(self, jobs: int | None, progress: bool | None) -> None:
        import time
        from .msl import build as msl_build
        from ._progress import Progress
        bar = Progress(len(self.kernel_names), Path(self.filename).name, enabled=progress)
        start = time.monotonic()
        try:
            msl_build.build_all(*self._options, jobs=jobs, progress=bar.advance)
        finally:
            bar.close(time.monotonic() - start)


def compile(source: str, *, filename: str = "<source>", include_dirs: Iterable[str] = (),
            constants: Constants | None = None, fast_math: bool = False,
            defines: Mapping[str, Any] | None = None, kernels: Iterable[str] | None = None,
            execution: str | None = None) -> Library:
    """Compile MSL source into a Library for the current device.

    ``include_dirs`` are searched for ``#include "..."``; ``constants`` binds
    ``[[function_constant(i)]]`` values by name or index; ``fast_math`` allows
    unsafe floating-point optimisations; ``defines`` sets preprocessor macros
    (``{"USE_BF16": 1}``, as ``MTLCompileOptions.preprocessorMacros`` does);
    ``kernels`` names the only kernels to build on the CPU backend (a large
    file then builds in a fraction of the time; Metal compiles the whole
    source). ``execution`` picks how the CPU simulator runs kernels with
    barriers or SIMD-group functions: "auto" (the default, or
    ``METALKIT_EXECUTION``: SIMT, each SIMD-group's lanes in lockstep),
    "threads" (the reference model: every thread its own fiber, running the
    code as written; slow, for checking results and debugging) or "fibers"
    (a fiber per thread, lanes in lockstep); Metal runs the GPU whatever it
    says. Compiled code is cached in memory and on disk, keyed by the source
    and options. On the CPU backend a file of more than 8 kernels is
    compiled a kernel at a time, on first use (``lib.build()`` compiles all
    of it now); errors the pre-pass sees are raised here, a kernel's own on
    its first use.

    >>> import numpy as np, metalkit
    >>> lib = metalkit.compile('''
    ... #include <metal_stdlib>
    ... using namespace metal;
    ... kernel void scale(device float* x [[buffer(0)]], constant float& s [[buffer(1)]],
    ...                   uint i [[thread_position_in_grid]]) { x[i] *= s; }
    ... ''')
    >>> x = np.arange(4, dtype=np.float32)
    >>> lib.scale(x, 3.0)
    >>> x.tolist()
    [0.0, 3.0, 6.0, 9.0]
    """
    if not isinstance(source, str):
        hint = "decode it first (source.decode())" if isinstance(source, (bytes, bytearray)) else \
            "use metalkit.load(path) for a file"
        raise ArgumentError(f"metalkit.compile takes MSL source text (str), got {type(source).__name__}; {hint}")
    _check_constants(constants or {})
    from .execution import choose
    execution = choose(execution)
    backend = _device.current()
    include_dirs = tuple(str(d) for d in include_dirs)
    consts = dict(constants or {})
    defines = dict(defines or {})
    only = None if kernels is None else tuple(sorted(set(kernels)))
    key = (backend, source, filename, include_dirs, tuple(sorted((repr(k), repr(v)) for k, v in consts.items())),
           fast_math, tuple(sorted((k, repr(v)) for k, v in defines.items())), only,
           execution if backend == "cpu" else "")

    def rebuild(c: dict, names: Iterable[str] | None = only) -> Library:
        return compile(source, filename=filename, include_dirs=include_dirs, constants=c, fast_math=fast_math,
                       defines=defines, kernels=names, execution=execution)
    if backend == "cpu":
        from .msl import build as msl_build
        options = (source, filename, include_dirs, consts, fast_math, defines, execution)
        if only is None:
            path, names, tag = msl_build.plan(*options)
        else:
            path, names, tag = msl_build.build(*options, only), [], ""
        checked = functools.partial(_checked_kernel, options)
        if path is None:  # a large file: each kernel is compiled when it is first used
            return _libraries.get_or_make(key + ("lazy", tag), lambda: Library(
                _LazyCore(filename, names, options), filename, backend, consts, rebuild, checked))
        lib = _libraries.get(key + (path,))
        if lib is None:
            try:
                core = _load(path)
            except RuntimeError:  # verified, yet it does not load here (another system's libc...): build afresh
                path = msl_build.build(*options, only, rebuild=True)
                core = _load_fresh(path, filename)
            lib = _libraries.get_or_make(key + (path,), lambda: Library(core, filename, backend, consts, rebuild,
                                                                        checked))
        return lib
    from . import _metal
    from .msl.defines import define_lines
    from .msl.includes import inline_includes
    text = define_lines(defines) + inline_includes(source, filename, include_dirs)
    metal_key = key + (text,)  # the headers as they are now: an edited header makes a new library
    lib = _libraries.get_or_make(metal_key, lambda: Library(
        _metal.compile_source(text, source, filename, consts, fast_math), filename, backend, consts, rebuild))
    missing = sorted(set(only or ()) - set(lib.kernels))
    if missing:  # Metal compiles every kernel; the names are still checked, as on the CPU
        raise CompileError(f"kernels=: no kernel named {missing[0]!r} in {filename}; check the name "
                           "(a template is named by its host_name instantiations)", filename=filename)
    return lib


def _checked_kernel(options: _Options, build: str, name: str) -> Any:
    """Kernel ``name`` of the source and options ``options`` (msl.build.build's), built for check=:
    ``build`` "checked" has every memory access told to the runtime (check= races, uninit; its
    SIMT kernels stay SIMT, as the runtime knows the SIMD-group of an access, the rest run a fiber
    per thread), "checked-threads" runs every kernel a fiber per thread as well (lockstep: the
    runtime knows the thread), and "guarded" keeps threadgroup variables declared in a kernel
    between inaccessible pages (check=True)."""
    from .msl import build as msl_build
    source, filename, include_dirs, constants, fast_math, defines, _ = options
    try:
        path = msl_build.build(source, filename, include_dirs, constants, fast_math, defines, build, [name])
    except CompileError as e:
        raise e.reworded(f"kernel {name!r}, built for check=: {e.msg}") from None
    return _load(path).kernel(name)


def _check_constants(constants: Constants) -> None:
    for name, value in constants.items():
        if isinstance(name, bool) or not isinstance(name, (str, int)):
            raise ArgumentError(f"constants=: key {name!r} is a {type(name).__name__}; name a function constant by "
                                "its name (str) or its [[function_constant(index)]] (int)")
        if not isinstance(value, (bool, int, float)):
            raise ArgumentError(f"constants=: function constant {name!r} is given a {type(value).__name__}; pass a "
                                "bool, int or float (convert a numpy scalar with .item())")


def _load_fresh(path: str, filename: str) -> Any:
    """Load a module just compiled; failing that, the compiler makes modules this system cannot load."""
    from . import _core
    try:
        return _core.load_cpu_library(path)
    except RuntimeError as e:
        raise CompileError(f"{filename}: the compiled module cannot be loaded ({e}); the compiler builds for "
                           "another system: set METALKIT_CXX to a clang++ for this one, or unset it",
                           filename=filename) from None


def load(path: Union[str, os.PathLike], *, include_dirs: Iterable[str] = (), constants: Constants | None = None,
         fast_math: bool = False, defines: Mapping[str, Any] | None = None,
         kernels: Iterable[str] | None = None, execution: str | None = None) -> Library:
    """Compile a ``.metal`` file; its own folder is searched first for ``#include "..."``. The
    options are ``compile``'s.

    A precompiled ``.metallib`` loads on the Metal backend only; its kernels
    take an array for every ``[[buffer(n)]]`` (a scalar as a 1-element array).

    >>> import metalkit
    >>> lib = metalkit.load(metalkit.bundled.KERNELS_DIR / "add_arrays.metal")
    >>> lib.kernels
    ['add_arrays']
    """
    p = Path(path)
    if p.suffix == ".metallib":
        return _load_metallib(p, dict(constants or {}))
    try:
        source = p.read_text()
    except OSError as e:
        raise CompileError(f"cannot read {p}: {e.strerror}", filename=str(p)) from None
    return compile(source, filename=str(p), include_dirs=(str(p.resolve().parent), *include_dirs),
                   constants=constants, fast_math=fast_math, defines=defines, kernels=kernels, execution=execution)


def _load_metallib(p: Path, constants: dict) -> Library:
    backend = _device.current()
    if backend != "metal":
        raise CompileError(f"{p} is compiled GPU code, which only the Metal backend runs; load the .metal source "
                           "on this backend", filename=str(p))
    from . import _metal
    try:
        mtime = p.stat().st_mtime_ns  # a rebuilt .metallib makes a new library
    except OSError as e:
        raise CompileError(f"cannot read {p}: {e.strerror}", filename=str(p)) from None
    key = (backend, "metallib", str(p.resolve()), mtime, tuple(sorted((repr(k), repr(v)) for k, v in constants.items())))
    return _libraries.get_or_make(key, lambda: Library(_metal.load_metallib(str(p), constants), str(p), backend,
                                                       constants, lambda c, names=None: _load_metallib(p, c)))
