"""metal_kernel(): kernels given as a body only, with the signature generated from the call.

This is the interface of MLX's ``mlx.core.fast.metal_kernel``, so code written against it
(MLX users' custom kernels, the Metal Puzzles) runs on metalkit, on the GPU and on the CPU
simulator alike. Each call generates the kernel's full MSL source from the inputs' dtypes,
the output dtypes and the template arguments, compiles it once through ``metalkit.compile``
and runs it on numpy arrays.
"""
from __future__ import annotations

import operator
import re
import threading
from typing import Any, Optional, Sequence, Tuple, Union

import numpy as np
from numpy.typing import DTypeLike

from .errors import ArgumentError, CompileError, DispatchError, MetalkitError

__all__ = ["CustomKernel", "metal_kernel"]

TemplateValue = Union[bool, int, DTypeLike]

# Inputs with fewer elements than this are declared in the constant address space, as MLX does.
_CONSTANT_INPUT_ELEMENTS = 8

# The builtins a body may name, with the type their parameter is declared with (MSL's kernel
# input attributes). A body that mentions one anywhere gets it as a parameter, in this order.
_BUILTINS = (
    ("dispatch_quadgroups_per_threadgroup", "uint"),
    ("dispatch_simdgroups_per_threadgroup", "uint"),
    ("dispatch_threads_per_threadgroup", "uint3"),
    ("grid_origin", "uint3"),
    ("grid_size", "uint3"),
    ("quadgroup_index_in_threadgroup", "uint"),
    ("quadgroups_per_threadgroup", "uint"),
    ("simdgroup_index_in_threadgroup", "uint"),
    ("simdgroups_per_threadgroup", "uint"),
    ("thread_execution_width", "uint"),
    ("thread_index_in_quadgroup", "uint"),
    ("thread_index_in_simdgroup", "uint"),
    ("thread_index_in_threadgroup", "uint"),
    ("thread_position_in_grid", "uint3"),
    ("thread_position_in_threadgroup", "uint3"),
    ("threadgroup_position_in_grid", "uint3"),
    ("threadgroups_per_grid", "uint3"),
    ("threads_per_grid", "uint3"),
    ("threads_per_simdgroup", "uint"),
    ("threads_per_threadgroup", "uint3"),
)

# What every generated source starts with: the names MLX's kernels have in scope
# (the metal namespace, float16_t / bfloat16_t, elem_to_loc, ceildiv).
PRELUDE = """\
#include <metal_stdlib>
using namespace metal;
typedef half float16_t;
#if __METAL_VERSION__ >= 310  // bfloat came with MSL 3.1 (macOS 14)
typedef bfloat bfloat16_t;
#endif

// The offset of element `elem` (counted in row-major order) of an array with the given
// shape and strides (in elements): how a body indexes an input that is not row-contiguous.
template <typename IdxT = int64_t>
inline IdxT elem_to_loc(uint64_t elem, constant const int* shape, constant const int64_t* strides, int ndim) {
  IdxT loc = 0;
  for (int d = ndim - 1; d >= 0 && elem != 0; --d) {
    const uint64_t n = uint64_t(shape[d]);
    loc += IdxT(elem % n) * IdxT(strides[d]);
    elem /= n;
  }
  return loc;
}

// n / m rounded up.
template <typename T, typename U>
inline T ceildiv(T n, U m) { return (n + m - 1) / m; }
"""

_MSL_NAMES = {
    np.dtype(np.float32): "float", np.dtype(np.float16): "float16_t", np.dtype(np.bool_): "bool",
    np.dtype(np.int8): "int8_t", np.dtype(np.int16): "int16_t", np.dtype(np.int32): "int32_t",
    np.dtype(np.int64): "int64_t", np.dtype(np.uint8): "uint8_t", np.dtype(np.uint16): "uint16_t",
    np.dtype(np.uint32): "uint32_t", np.dtype(np.uint64): "uint64_t",
}


def _msl_name(dt: np.dtype) -> Optional[str]:
    """The MSL spelling of a numpy dtype, or None if MSL has no such type."""
    if dt.isnative and dt in _MSL_NAMES:
        return _MSL_NAMES[dt]
    return "bfloat16_t" if dt.name == "bfloat16" else None  # ml_dtypes' bfloat16


def _dtype_fix(dt: np.dtype, value: str) -> str:
    """What to pass instead of ``value``, of a dtype MSL has no type for."""
    native = dt.newbyteorder("=")
    if not dt.isnative and _msl_name(native):
        return f"{value}.astype(np.{native.name}) (native byte order)"
    if dt.kind == "f":
        return f"{value}.astype(np.float32)"
    if dt.kind == "c":
        return "its real and imaginary parts as float32 arrays"
    return "an array of float32, float16, bfloat16 (ml_dtypes), bool, or an 8- to 64-bit integer type"


def _is_identifier(s: Any) -> bool:
    return isinstance(s, str) and s.isascii() and s.isidentifier()


def metal_kernel(name: str, input_names: Sequence[str], output_names: Sequence[str], source: str,
                 header: str = "", ensure_row_contiguous: bool = True, atomic_outputs: bool = False) -> "CustomKernel":
    """A kernel written as a body only: metalkit generates its signature at each call.

    The interface of MLX's ``mx.fast.metal_kernel``: ``source`` is the body of the kernel
    function, ``input_names`` and ``output_names`` name its buffers, and ``header`` holds
    code placed before the kernel (helper functions, constants, includes). The generated
    signature has, in buffer order:

    - each input as ``const device T* name`` (``const constant T* name`` if it has fewer
      than 8 elements; a 0-d input or a Python scalar as ``const constant T& name``), where
      ``T`` is the input's dtype as MLX spells it (``float``, ``float16_t``, ``bfloat16_t``,
      ``int32_t``, ``uint8_t``, ``bool``...); after it, only if the body mentions them,
      ``const constant int* name_shape``, ``const constant int64_t* name_strides`` (in
      elements) and ``const constant int& name_ndim``;
    - each output as ``device T* name`` (``device atomic<T>* name`` with
      ``atomic_outputs=True``), ``T`` from ``output_dtypes``;
    - each builtin the body mentions (``thread_position_in_grid``, ``threads_per_threadgroup``,
      ``simdgroup_index_in_threadgroup``...: every MSL kernel input attribute) as a parameter
      of that name: ``uint3`` for positions and sizes, ``uint`` for indices and counts.

    Names are found in the text as MLX finds them, so a comment that mentions ``x_shape``
    adds that parameter too. The kernel is named ``custom_kernel_<name>`` followed by the
    template arguments and the input and output types; with ``template=`` it is a template
    with one explicit instantiation of that host name. Every source starts with
    ``#include <metal_stdlib>``, ``using namespace metal;``, the ``float16_t`` and
    ``bfloat16_t`` typedefs and two helpers: ``elem_to_loc(elem, shape, strides, ndim)``
    (the offset of row-major element ``elem`` of a strided input) and ``ceildiv(n, m)``.

    ``ensure_row_contiguous`` (default True) copies inputs that are not C-contiguous before
    the launch, so a body can index every input as a dense row-major array. With False,
    inputs are passed as they lie in memory and ``name_strides`` gives their real strides
    (an input with negative strides, or strides that are not a whole number of elements, is
    still copied, and its strides are those of the copy).

    Returns a ``CustomKernel``: call it with keyword arguments (see ``CustomKernel.__call__``)
    to get the outputs as a list of numpy arrays in device memory.

    >>> import numpy as np, metalkit as mk
    >>> kernel = mk.metal_kernel(
    ...     name="myexp", input_names=["inp"], output_names=["out"],
    ...     source='''
    ...         uint elem = thread_position_in_grid.x;
    ...         if (elem < inp_shape[0]) out[elem] = metal::exp(T(inp[elem]));
    ...     ''')
    >>> a = np.linspace(0, 1, 5, dtype=np.float32)
    >>> out, = kernel(inputs=[a], template=[("T", np.float32)], grid=(a.size, 1, 1), threadgroup=(256, 1, 1),
    ...               output_shapes=[a.shape], output_dtypes=[a.dtype])
    >>> bool(np.allclose(out, np.exp(a)))
    True
    """
    if not _is_identifier(name):
        raise ArgumentError(f"metal_kernel: name must be a C identifier (letters, digits, '_'), got {name!r}; "
                            "it becomes part of the kernel's function name")
    where = f"metal_kernel {name!r}"
    inputs = _names(where, "input_names", input_names)
    outputs = _names(where, "output_names", output_names)
    if not outputs:
        raise ArgumentError(f"{where}: output_names is empty; a kernel needs at least one output to write")
    clash = sorted(set(inputs) & set(outputs))
    if clash:
        raise ArgumentError(f"{where}: {clash[0]!r} is both an input and an output name; give each buffer its own name")
    for what, text in (("source", source), ("header", header)):
        if not isinstance(text, str):
            raise ArgumentError(f"{where}: {what} must be MSL text (str), got {type(text).__name__}")
    return CustomKernel(name, inputs, outputs, source, header, bool(ensure_row_contiguous), bool(atomic_outputs))


def _names(where: str, what: str, names: Any) -> list[str]:
    if isinstance(names, str) or not isinstance(names, Sequence):
        raise ArgumentError(f"{where}: {what} must be a list of parameter names, got {names!r}")
    out = list(names)
    for n in out:
        if not _is_identifier(n):
            raise ArgumentError(f"{where}: {what} holds {n!r}, which is not a C identifier; "
                                "each name becomes a parameter of the kernel")
    dup = sorted({n for n in out if out.count(n) > 1})
    if dup:
        raise ArgumentError(f"{where}: {what} names {dup[0]!r} twice; give each buffer its own name")
    return out


class _Input:
    """One input as the kernel receives it: the value bound, and what the signature says of it."""
    __slots__ = ("value", "dtype", "msl", "shape", "strides", "space")

    def __init__(self, value: Any, dtype: np.dtype, msl: str, shape: tuple, strides: tuple, space: str):
        self.value, self.dtype, self.msl, self.shape, self.strides, self.space = \
            value, dtype, msl, shape, strides, space


class CustomKernel:
    """What ``metalkit.metal_kernel`` returns: call it to run the kernel (see ``__call__``).

    ``name``, ``input_names``, ``output_names``, ``source``, ``header``,
    ``ensure_row_contiguous`` and ``atomic_outputs`` hold what ``metal_kernel`` was given.

    >>> import metalkit as mk
    >>> mk.metal_kernel("neg", ["a"], ["out"], "out[0] = -a[0];")
    <metalkit.CustomKernel 'neg' inputs=['a'] outputs=['out']>
    """

    def __init__(self, name: str, input_names: list[str], output_names: list[str], source: str, header: str,
                 ensure_row_contiguous: bool, atomic_outputs: bool):
        self.name = name
        self.input_names = list(input_names)
        self.output_names = list(output_names)
        self.source = source
        self.header = header
        self.ensure_row_contiguous = ensure_row_contiguous
        self.atomic_outputs = atomic_outputs
        # Per input: which of name_shape, name_strides, name_ndim the body uses.
        self._shape_info = [tuple(f"{n}{s}" in source for s in ("_shape", "_strides", "_ndim"))
                            for n in input_names]
        self._builtins = [f"  {t} {a} [[{a}]]" for a, t in _BUILTINS if a in source]
        self._lock = threading.Lock()
        self._generated: dict[tuple, tuple[str, str, _Lines]] = {}  # signature -> (kernel name, source, lines)
        self._compiled: dict[tuple, Any] = {}  # (backend, source) -> Kernel

    def __repr__(self) -> str:
        return f"<metalkit.CustomKernel {self.name!r} inputs={self.input_names} outputs={self.output_names}>"

    def __call__(self, *, inputs: Sequence[Any], output_shapes: Sequence[Union[int, Sequence[int]]],
                 output_dtypes: Sequence[DTypeLike], grid: Tuple[int, int, int], threadgroup: Tuple[int, int, int],
                 template: Optional[Sequence[Tuple[str, TemplateValue]]] = None, init_value: Optional[float] = None,
                 verbose: bool = False, stream: Any = None, check: Optional[bool] = None,
                 shuffle: Optional[int] = None, timeout: Optional[float] = None) -> list[np.ndarray]:
        """Run the kernel and wait; returns its outputs, new arrays in device memory (``metalkit.empty``).

        - ``inputs``: one value per input name: numpy arrays, anything ``np.asarray`` takes,
          or scalars. Python scalars and lists take MLX's types: ``bool``, ``int32`` (``int64``
          past its range), ``float32``; arrays keep their dtype (float64 is refused: Metal has
          no double).
        - ``output_shapes``, ``output_dtypes``: one shape (a tuple of ints) and one dtype per
          output name.
        - ``grid``: (x, y, z) counted in **threads** (Metal's ``dispatchThreads``: the last
          threadgroup of a dimension may be partial); x is the fastest-varying dimension, the
          reverse of numpy's shape order. A 0 anywhere runs nothing.
        - ``threadgroup``: (x, y, z) threads per threadgroup, each clipped to the grid's
          dimension; its product may not exceed the kernel's maximum (usually 1024).
        - ``template``: ``[("T", np.float32), ("N", 4), ("B", True)]``: numpy dtypes become
          ``typename`` parameters, ints ``int`` and bools ``bool`` ones.
        - ``init_value``: a number every output is filled with before the launch (rounded to a
          float output's dtype; an integer or bool output must hold it exactly); without it
          outputs start uninitialised.
        - ``verbose=True`` prints the full generated source before running it.
        - ``check``, ``shuffle``, ``timeout``: the CPU simulator's debug options, as a ``Kernel``
          call takes them (guarded copies of the arrays, a seeded order of the threads, a time
          limit in seconds).
        - ``stream`` is accepted for code written for MLX and ignored: the kernel runs on
          metalkit's current device (``metalkit.use``).

        >>> import numpy as np, metalkit as mk
        >>> k = mk.metal_kernel("axpy", ["a", "x", "y"], ["out"],
        ...                     "uint i = thread_position_in_grid.x; out[i] = a * x[i] + y[i];")
        >>> x = np.arange(4, dtype=np.float32); y = np.ones(4, np.float32)
        >>> k(inputs=[2.0, x, y], output_shapes=[(4,)], output_dtypes=[np.float32],
        ...   grid=(4, 1, 1), threadgroup=(32, 1, 1))[0].tolist()
        [1.0, 3.0, 5.0, 7.0]

        Errors name the kernel as it was given and lines as the body's (or the header's) own:

        >>> bad = mk.metal_kernel("bad", ["x"], ["out"], "uint i = thread_position_in_grid.x;\\nout[i] = x[i] + y;")
        >>> try:
        ...     bad(inputs=[x], output_shapes=[(4,)], output_dtypes=[np.float32], grid=(4, 1, 1),
        ...         threadgroup=(4, 1, 1))
        ... except mk.CompileError as e:
        ...     print(f"{e.filename}:{e.lineno}: {e.msg}")
        bad source:2: metal_kernel 'bad': use of undeclared identifier 'y'
        """
        where = f"metal_kernel {self.name!r}"
        args = self._inputs(where, inputs)
        shapes, dtypes, types = self._outputs(where, output_shapes, output_dtypes)
        grid3 = _dims(where, "grid", grid, 0)
        tg3 = _dims(where, "threadgroup", threadgroup, 1)
        targs = _template(where, template)
        if init_value is not None and not isinstance(init_value, (bool, int, float, np.bool_, np.integer, np.floating)):
            raise ArgumentError(f"{where}: init_value must be a number every output is filled with, "
                                f"got {init_value!r}")

        kernel_name, source, lines = self._generate(args, dtypes, types, targs)
        if verbose:
            print(f"Generated source code for `{self.name}`:\n```\n{source}\n```")
        kernel = self._kernel(where, kernel_name, source, lines)
        if tg3[0] * tg3[1] * tg3[2] > kernel.max_threads_per_threadgroup:
            raise DispatchError(f"{where}: threadgroup {tg3} has {tg3[0] * tg3[1] * tg3[2]} threads but this kernel "
                                f"allows at most {kernel.max_threads_per_threadgroup}; pass a smaller threadgroup=")

        from .arrays import empty
        outs = [empty(shape, dt) for shape, dt in zip(shapes, dtypes)]
        if init_value is not None:
            for o, out in zip(self.output_names, outs):
                out[...] = _fill_value(where, o, init_value, out.dtype)
        if 0 in grid3:
            return outs
        bound = []
        for a, (want_shape, want_strides, want_ndim) in zip(args, self._shape_info):
            bound.append(a.value)
            if a.shape:
                if want_shape:
                    bound.append(np.array(a.shape, np.int32))
                if want_strides:
                    bound.append(np.array(a.strides, np.int64))
                if want_ndim:
                    bound.append(len(a.shape))
        try:
            kernel(*bound, *outs, grid=grid3, threadgroup=tuple(min(t, g) for t, g in zip(tg3, grid3)),
                   check=check, shuffle=shuffle, timeout=timeout)
        except MetalkitError as e:  # a fault, a bad check=/shuffle=/timeout=: in the user's names
            raise type(e)(lines.reword(str(e), where, kernel_name)) from None
        return outs

    # -- the call's parts ------------------------------------------------------------------------

    def _inputs(self, where: str, inputs: Any) -> list[_Input]:
        if isinstance(inputs, (str, bytes, np.ndarray)) or not isinstance(inputs, Sequence):
            raise ArgumentError(f"{where}: inputs must be a list with one value per input name "
                                f"({', '.join(self.input_names) or 'none'}), got {type(inputs).__name__}")
        if len(inputs) != len(self.input_names):
            raise ArgumentError(f"{where}: got {len(inputs)} inputs for {len(self.input_names)} input names "
                                f"({', '.join(self.input_names) or 'none'}); pass one value per name, in order")
        return [self._input(where, n, x) for n, x in zip(self.input_names, inputs)]

    def _input(self, where: str, name: str, x: Any) -> _Input:
        a = _as_array(where, name, x)
        t = _msl_name(a.dtype)
        if t is None:
            raise ArgumentError(f"{where}: input {name!r} has dtype {a.dtype}, which Metal has no type for; "
                                f"pass {_dtype_fix(a.dtype, name)}")
        if a.ndim == 0:
            return _Input(a[()], a.dtype, t, (), (), "scalar")
        space = "constant" if a.size < _CONSTANT_INPUT_ELEMENTS else "device"
        dense = _row_major_strides(a.shape)
        if a.flags.c_contiguous:
            return _Input(a, a.dtype, t, a.shape, dense, space)
        if not self.ensure_row_contiguous:
            view = _in_place(a)
            if view is not None:
                return _Input(view, a.dtype, t, a.shape, _element_strides(a, dense), space)
        return _Input(np.ascontiguousarray(a), a.dtype, t, a.shape, dense, space)

    def _outputs(self, where: str, shapes: Any, dtypes: Any) -> tuple[list[tuple], list[np.dtype], list[str]]:
        """Each output's shape, dtype and MSL type."""
        n = len(self.output_names)
        for what, given in (("output_shapes", shapes), ("output_dtypes", dtypes)):
            if isinstance(given, (str, bytes)) or not isinstance(given, Sequence):
                raise ArgumentError(f"{where}: {what} must be a list with one entry per output name "
                                    f"({', '.join(self.output_names)}), got {given!r}")
            if len(given) != n:
                raise ArgumentError(f"{where}: got {len(given)} {what} for {n} output names "
                                    f"({', '.join(self.output_names)}); pass one per output, in order")
        out_shapes = [_shape(where, o, s) for o, s in zip(self.output_names, shapes)]
        out_dtypes, out_types = [], []
        for o, d in zip(self.output_names, dtypes):
            try:
                dt = np.dtype(d)
            except TypeError:
                raise ArgumentError(f"{where}: output_dtypes entry for {o!r} is {d!r}, not a numpy dtype; "
                                    "pass one such as np.float32") from None
            t = _msl_name(dt)
            if t is None:
                native = dt.newbyteorder("=")
                fix = f"np.{native.name} (native byte order)" if _msl_name(native) else "np.float32 or another " \
                    "type Metal has (float16, bfloat16, bool, 8- to 64-bit integers)"
                raise ArgumentError(f"{where}: output {o!r} has dtype {dt}, which Metal has no type for; pass {fix} "
                                    "in output_dtypes")
            out_dtypes.append(dt)
            out_types.append(t)
        return out_shapes, out_dtypes, out_types

    def _generate(self, args: list[_Input], out_dtypes: list[np.dtype], out_types: list[str],
                  targs: list[tuple[str, str, str]]) -> tuple[str, str, "_Lines"]:
        """The kernel's name, full source and where its parts lie, for these input kinds, output dtypes
        and template arguments."""
        key = (tuple((a.dtype, a.space) for a in args), tuple(out_dtypes), tuple(targs))
        with self._lock:
            hit = self._generated.get(key)
        if hit is not None:
            return hit
        kernel_name = "custom_kernel_" + self.name
        if targs:
            kernel_name += "_" + "".join("_" + _name_part(v) for _, _, v in targs)
        for a in args:
            kernel_name += "_" + a.msl + {"scalar": "s", "constant": "c", "device": ""}[a.space]
        for t in out_types:
            kernel_name += "_" + t

        params: list[str] = []
        for n, a, (shape, strides, ndim) in zip(self.input_names, args, self._shape_info):
            t, i = a.msl, len(params)
            if a.space == "scalar":
                params.append(f"  const constant {t}& {n} [[buffer({i})]]")
                continue
            params.append(f"  const {a.space} {t}* {n} [[buffer({i})]]")
            for used, decl in ((shape, f"const constant int* {n}_shape"),
                               (strides, f"const constant int64_t* {n}_strides"),
                               (ndim, f"const constant int& {n}_ndim")):
                if used:
                    params.append(f"  {decl} [[buffer({len(params)})]]")
        for n, t in zip(self.output_names, out_types):
            elem = f"atomic<{t}>" if self.atomic_outputs else t
            params.append(f"  device {elem}* {n} [[buffer({len(params)})]]")
        params += self._builtins

        parts = [PRELUDE, self.header, "\n"]
        header_at = PRELUDE.count("\n") + 1
        if targs:
            parts.append("template <" + ", ".join(f"{kind} {n}" for n, kind, _ in targs) + ">\n")
        parts.append(f"[[kernel]] void {kernel_name}(\n" + ",\n".join(params) + ") {\n")
        body_at = "".join(parts).count("\n") + 1
        parts.append(self.source)
        parts.append("\n}\n")
        if targs:
            inst = kernel_name + "<" + ", ".join(v for _, _, v in targs) + ">"
            parts.append(f'\ntemplate [[host_name("{kernel_name}")]] [[kernel]] decltype({inst}) {inst};\n')
        lines = _Lines(self.name, header_at, self.header.count("\n") + 1, body_at, self.source.count("\n") + 1)
        hit = (kernel_name, "".join(parts), lines)
        with self._lock:
            return self._generated.setdefault(key, hit)

    def _kernel(self, where: str, kernel_name: str, source: str, lines: "_Lines") -> Any:
        """The compiled kernel of a generated source: compiled once per source and backend."""
        from . import _device
        from .library import compile
        key = (_device.current(), source)
        with self._lock:
            k = self._compiled.get(key)
        if k is not None:
            return k
        try:
            k = compile(source, filename=f"{self.name}.metal")[kernel_name]
        except CompileError as e:
            raise lines.compile_error(e, where) from None
        with self._lock:
            return self._compiled.setdefault(key, k)


class _Lines:
    """Where the header and the body lie in a generated source, and errors reworded in their lines.

    The source is compiled as ``<name>.metal``; a line of the body is reported as ``<name> source:N``
    (N counted in the body as given), a line of the header as ``<name> header:N``. A line of the
    generated rest (the signature, the prelude) keeps its number, with a pointer to ``verbose=True``.
    """

    def __init__(self, name: str, header_at: int, header_lines: int, body_at: int, body_lines: int):
        self.filename = f"{name}.metal"
        self._parts = ((f"{name} header", header_at, header_lines), (f"{name} source", body_at, body_lines))
        self._at = re.compile(re.escape(self.filename) + r":(\d+)")

    def place(self, line: int) -> Optional[tuple[str, int]]:
        """(the part's name, the line in it) of a line of the generated source; None in the generated rest."""
        for part, first, count in self._parts:
            if first <= line < first + count:
                return part, line - first + 1
        return None

    def compile_error(self, e: CompileError, where: str) -> CompileError:
        place = self.place(e.lineno) if e.filename == self.filename and e.lineno else None
        if place is None:
            return e.reworded(f"{where}: {e.msg} (a line of the generated source: call with verbose=True to print it)",
                              log=self._log(e.log))
        return e.reworded(f"{where}: {e.msg}", filename=place[0], lineno=place[1], log=self._log(e.log))

    def reword(self, message: str, where: str, kernel_name: str) -> str:
        """A runtime error's message with the user's kernel name and lines."""
        message = re.sub(rf"kernel '{kernel_name}'( \({re.escape(self.filename)}:\d+\))?", where, message)
        return self._at.sub(self._sub, message)

    def _sub(self, m: "re.Match[str]") -> str:
        place = self.place(int(m.group(1)))
        return f"{place[0]}:{place[1]}" if place else m.group(0)

    def _log(self, log: str) -> str:
        """The compiler's log in the parts' lines: each ``file:line`` and the numbered quote under it."""
        out, place = [], None
        for line in log.splitlines():
            m = self._at.match(line)
            if m:
                place = self.place(int(m.group(1)))
                line = self._at.sub(self._sub, line, count=1)
            elif place is not None:  # clang's quote: "   30 | text", its number made the part's
                q = re.match(r"(\s*)(\d+)( \| .*)", line)
                if q:
                    number = str(place[1])
                    line = number.rjust(len(q.group(1)) + len(q.group(2))) + q.group(3)
            out.append(line)
        return "\n".join(out)


def _as_array(where: str, name: str, x: Any) -> np.ndarray:
    """An input as a numpy array; Python scalars and lists in MLX's default types."""
    try:
        a = np.asarray(x)
    except (ValueError, TypeError, OverflowError) as e:
        raise ArgumentError(f"{where}: input {name!r} cannot be made an array: {e}") from None
    if a.dtype == object:
        raise ArgumentError(f"{where}: input {name!r} ({type(x).__name__}) is not numbers numpy can hold in an array "
                            "(objects, ragged lists, an int past 64 bits); pass a numeric numpy array")
    if isinstance(x, (bool, int, float, complex, list, tuple)):  # np.float64 is a float: it becomes float32 too
        if a.dtype == np.float64:
            return a.astype(np.float32)
        if a.dtype == np.int64 and (a.size == 0 or (a.min() >= -2**31 and a.max() < 2**31)):
            return a.astype(np.int32)
    return a


def _fill_value(where: str, output: str, value: Any, dt: np.dtype) -> np.ndarray:
    """init_value in an output's dtype; refused if an integer or bool output cannot hold it exactly."""
    given = np.asarray(value)
    with np.errstate(all="ignore"):
        cast = given.astype(dt)
    if dt.kind in "biu" and cast != given:
        raise ArgumentError(f"{where}: init_value {value!r} is not a value output {output!r} ({dt}) can hold; "
                            f"pass one in its range")
    return cast


def _row_major_strides(shape: tuple) -> tuple:
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= n
    return tuple(reversed(strides))


def _element_strides(a: np.ndarray, dense: tuple) -> tuple:
    # A dimension of length 1 is never stepped along: its stride is reported as a dense one.
    return tuple(s // a.itemsize if n > 1 else d for n, s, d in zip(a.shape, a.strides, dense))


def _in_place(a: np.ndarray) -> Optional[np.ndarray]:
    """The memory a strided view spans, as a 1-D array starting at its first element, or None
    when its first element is not its lowest address (negative strides) or strides are not whole
    elements: the kernel then gets a copy."""
    steps = [s for n, s in zip(a.shape, a.strides) if n > 1]
    if a.size == 0 or any(s < 0 or s % a.itemsize for s in steps):
        return None
    span = 1 + sum((n - 1) * s for n, s in zip(a.shape, a.strides) if n > 1) // a.itemsize
    return np.lib.stride_tricks.as_strided(a, shape=(span,), strides=(a.itemsize,), writeable=False)


def _shape(where: str, output: str, s: Any) -> tuple:
    try:
        dims = (operator.index(s),) if not isinstance(s, Sequence) else tuple(operator.index(n) for n in s)
    except TypeError:
        raise ArgumentError(f"{where}: output_shapes entry for {output!r} is {s!r}; pass a tuple of ints") from None
    if any(n < 0 for n in dims):
        raise ArgumentError(f"{where}: output_shapes entry for {output!r} is {dims}; sizes cannot be negative")
    return dims


def _dims(where: str, what: str, dims: Any, low: int) -> tuple[int, int, int]:
    try:
        d = tuple(operator.index(n) for n in dims)
    except TypeError:
        d = ()
    if len(d) != 3:
        raise DispatchError(f"{where}: {what} must be a tuple of 3 ints (x, y, z), got {dims!r}; "
                            f"a 1-D {what} of n is (n, 1, 1)")
    if any(n < low or n > 0xFFFFFFFF for n in d):
        raise DispatchError(f"{where}: {what} {d} has a dimension outside {low}..4294967295")
    return d


def _template(where: str, template: Any) -> list[tuple[str, str, str]]:
    """Template arguments as (name, parameter kind, value as MSL writes it)."""
    if template is None:
        return []
    if isinstance(template, (str, bytes)) or not isinstance(template, Sequence):
        raise ArgumentError(f"{where}: template must be a list of (name, value) pairs, got {template!r}")
    out = []
    for entry in template:
        if not (isinstance(entry, Sequence) and len(entry) == 2 and _is_identifier(entry[0])):
            raise ArgumentError(f"{where}: template entry {entry!r} is not a (name, value) pair with a C identifier "
                                "for the name, such as ('T', np.float32)")
        n, v = entry
        if isinstance(v, (bool, np.bool_)):
            out.append((n, "bool", "1" if v else "0"))
        elif isinstance(v, (int, np.integer)):
            if not -2**31 <= int(v) < 2**31:
                raise ArgumentError(f"{where}: template argument {n!r} is {int(v)}, outside an int's range")
            out.append((n, "int", str(int(v))))
        elif isinstance(v, np.dtype) or (isinstance(v, type) and issubclass(v, np.generic)):
            dt = np.dtype(v)
            t = _msl_name(dt)
            if t is None:
                raise ArgumentError(f"{where}: template argument {n!r} is {dt}, which Metal has no type for; "
                                    "pass np.float32 or another type Metal has")
            out.append((n, "typename", t))
        else:
            raise ArgumentError(f"{where}: template argument {n!r} is {v!r}; a template argument must be a numpy "
                                "dtype (np.float32), an int or a bool")
    return out


def _name_part(value: str) -> str:
    """A template argument as part of the kernel's name: '-' is not a name character."""
    return value.replace("-", "n")
