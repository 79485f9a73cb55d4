"""Compiling MSL into a Library of Kernels."""
from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Union

from . import _device
from .errors import ArgumentError, CompileError, KernelNotFound

Constants = Mapping[Union[str, int], Union[bool, int, float]]

_lock = threading.Lock()
_libraries: dict[tuple, "Library"] = {}


class Library:
    """Kernels compiled from one MSL source. ``lib["name"]`` or ``lib.name`` is a Kernel.

    >>> import metalkit
    >>> lib = metalkit.compile('''
    ... #include <metal_stdlib>
    ... using namespace metal;
    ... kernel void twice(device float* x [[buffer(0)]], uint i [[thread_position_in_grid]]) { x[i] *= 2; }
    ... ''')
    >>> lib.kernels
    ['twice']
    """

    def __init__(self, core: Any, filename: str, backend: str, constants: Constants | None = None,
                 rebuild: Callable[..., "Library"] | None = None):
        self._core = core
        self.filename = filename
        self.backend = backend
        self.constants = dict(constants or {})
        self._rebuild = rebuild  # the same source and options with other constants

    def specialize(self, name: str, constants: Constants):
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

    def __getitem__(self, name: str):
        k = self._core.kernel(name)
        if k is None:
            raise KernelNotFound(f"no kernel named {name!r} in {self.filename}; it has: "
                                 f"{', '.join(self.kernels) or 'none'}; check the name (a template kernel is named "
                                 "by its host_name instantiations)")
        return k

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        return self[name]

    def __contains__(self, name: str) -> bool:
        return name in self._core.kernel_names

    def __dir__(self) -> Iterable[str]:
        return list(super().__dir__()) + self.kernels

    def __repr__(self) -> str:
        return f"<metalkit.Library {self.filename} ({self.backend}): {', '.join(self.kernels)}>"


def compile(source: str, *, filename: str = "<source>", include_dirs: Iterable[str] = (),
            constants: Constants | None = None, fast_math: bool = False,
            defines: Mapping[str, Any] | None = None, kernels: Iterable[str] | None = None) -> Library:
    """Compile MSL source into a Library for the current device.

    ``include_dirs`` are searched for ``#include "..."``; ``constants`` binds
    ``[[function_constant(i)]]`` values by name or index; ``fast_math`` allows
    unsafe floating-point optimisations; ``defines`` sets preprocessor macros
    (``{"USE_BF16": 1}``, as ``MTLCompileOptions.preprocessorMacros`` does);
    ``kernels`` names the only kernels to build on the CPU backend (a large
    file then builds in a fraction of the time; Metal compiles the whole
    source). Compiled code is cached in memory and on disk, keyed by the
    source and options.

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
    backend = _device.current()
    include_dirs = tuple(str(d) for d in include_dirs)
    consts = dict(constants or {})
    defines = dict(defines or {})
    only = None if kernels is None else tuple(sorted(set(kernels)))
    key = (backend, source, filename, include_dirs, tuple(sorted((repr(k), repr(v)) for k, v in consts.items())),
           fast_math, tuple(sorted((k, repr(v)) for k, v in defines.items())), only)

    def rebuild(c: dict, names: Iterable[str] | None = only) -> Library:
        return compile(source, filename=filename, include_dirs=include_dirs, constants=c, fast_math=fast_math,
                       defines=defines, kernels=names)
    if backend == "cpu":
        from . import _core, msl
        path = msl.build(source, filename, include_dirs, consts, fast_math, defines, only)
        with _lock:
            lib = _libraries.get(key + (path,))
        if lib is None:
            try:
                core = _core.load_cpu_library(path)
            except RuntimeError:  # verified, yet it does not load here (another system's libc...): build afresh
                path = msl.build(source, filename, include_dirs, consts, fast_math, defines, only, rebuild=True)
                core = _load_fresh(path, filename)
            with _lock:
                lib = _libraries.setdefault(key + (path,), Library(core, filename, backend, consts, rebuild))
        return lib
    from . import _metal
    from .msl.defines import define_lines
    from .msl.includes import inline_includes
    text = define_lines(defines) + inline_includes(source, filename, include_dirs)
    key = key + (text,)  # the headers as they are now: an edited header makes a new library
    with _lock:
        lib = _libraries.get(key)
        if lib is None:
            lib = _libraries[key] = Library(
                _metal.compile_source(text, source, filename, consts, fast_math), filename, backend, consts, rebuild)
    missing = sorted(set(only or ()) - set(lib.kernels))
    if missing:  # Metal compiles every kernel; the names are still checked, as on the CPU
        raise CompileError(f"kernels=: no kernel named {missing[0]!r} in {filename}; check the name "
                           "(a template is named by its host_name instantiations)", filename=filename)
    return lib


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
         kernels: Iterable[str] | None = None) -> Library:
    """Compile a ``.metal`` file; its own folder is searched first for ``#include "..."``.

    A precompiled ``.metallib`` loads on the Metal backend only; its kernels
    take an array for every ``[[buffer(n)]]`` (a scalar as a 1-element array).

    >>> import metalkit, pathlib
    >>> lib = metalkit.load(pathlib.Path(metalkit.__file__).parent / "kernels" / "add_arrays.metal")
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
                   constants=constants, fast_math=fast_math, defines=defines, kernels=kernels)


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
    with _lock:
        lib = _libraries.get(key)
        if lib is None:
            lib = _libraries[key] = Library(_metal.load_metallib(str(p), constants), str(p), backend, constants,
                                            lambda c, names=None: _load_metallib(p, c))
    return lib
