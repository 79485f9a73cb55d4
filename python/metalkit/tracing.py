"""metalkit.trace: which threads read and wrote each element of a kernel's buffers and
threadgroup memory, in one run on the CPU simulator, and pictures of it (trace_drawing.py)."""
from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Any, Optional, Union

import numpy as np

from .errors import DispatchError, KernelFault

# One record of the compiled core (access_trace.h TraceRecord): one element touched by one thread.
_RECORD = np.dtype([("element", "<i8"), ("group", "<u4"), ("thread", "<u2"), ("memory", "u1"), ("flags", "u1")])
_READ, _WRITE, _ATOMIC = 1, 2, 4

_Dims3 = tuple[int, int, int]
# A kernel call's own keywords (Kernel.__call__); the others name parameters.
_LAUNCH = {"grid", "threadgroups", "threadgroup", "threadgroup_memory", "check", "shuffle", "timeout"}


@dataclass(frozen=True)
class TracedMemory:
    """A buffer argument or threadgroup memory of a traced call.

    ``length`` counts elements; ``shape`` is the shape a picture draws it in (the numpy
    array's shape where the call passed one of that size, else ``(length,)``); ``threadgroup``:
    one copy per threadgroup (its elements are indices within a copy).

    >>> import numpy as np, metalkit as mk
    >>> lib = mk.compile('''
    ... #include <metal_stdlib>
    ... using namespace metal;
    ... kernel void shift(device const float* a [[buffer(0)]], device float* out [[buffer(1)]],
    ...                   uint i [[thread_position_in_grid]]) { out[i] = a[i + 1]; }
    ... ''')
    >>> t = mk.trace(lib.shift, np.arange(5, dtype=np.float32), np.zeros(4, np.float32), grid=4)
    >>> t.memories["a"]
    TracedMemory(name='a', length=5, elem_size=4, threadgroup=False, shape=(5,))
    """
    name: str
    length: int
    elem_size: int
    threadgroup: bool
    shape: tuple[int, ...]


class Trace:
    """Who touched what in one call of a kernel: made by :func:`metalkit.trace`.

    Threads are named by their linear index in the grid (``x + grid_x * (y + grid_y * z)``);
    :meth:`thread_positions` turns them into positions. :meth:`draw` makes the picture.

    >>> import numpy as np, metalkit as mk
    >>> lib = mk.compile('''
    ... #include <metal_stdlib>
    ... using namespace metal;
    ... kernel void shift(device const float* a [[buffer(0)]], device float* out [[buffer(1)]],
    ...                   uint i [[thread_position_in_grid]]) { out[i] = a[i + 1]; }
    ... ''')
    >>> t = mk.trace(lib.shift, np.arange(5, dtype=np.float32), np.zeros(4, np.float32), grid=4)
    >>> t
    <metalkit.Trace of 'shift': grid (4, 1, 1), threadgroup (4, 1, 1), 8 accesses of a, out>
    >>> t.reads("a").tolist()   # (element, thread): thread i reads a[i + 1]
    [[1, 0], [2, 1], [3, 2], [4, 3]]
    """

    def __init__(self, got: dict[str, Any], shapes: dict[str, tuple[int, ...]], fault: Optional[str]):
        self.kernel: str = got["kernel"]
        self.grid: _Dims3 = tuple(got["grid"])  # type: ignore[assignment]
        self.threadgroup: _Dims3 = tuple(got["threadgroup"])  # type: ignore[assignment]
        self.threadgroups: _Dims3 = tuple(got["threadgroups"])  # type: ignore[assignment]
        #: The KernelFault's message if the call faulted (an access past an array ends it), else None.
        self.fault: Optional[str] = fault
        self.memories: dict[str, TracedMemory] = {}
        for name, nbytes, elem_size, threadgroup in got["memories"]:
            n = nbytes // elem_size
            shape = shapes.get(name, (n,))
            self.memories[name] = TracedMemory(name, n, elem_size, threadgroup,
                                               shape if int(np.prod(shape)) == n else (n,))
        self._names = [m for m, *_ in got["memories"]]
        self._records = np.frombuffer(got["records"], _RECORD)

    def __repr__(self) -> str:
        return (f"<metalkit.Trace of '{self.kernel}': grid {self.grid}, threadgroup {self.threadgroup}, "
                f"{len(self._records)} accesses of {', '.join(self.memories)}"
                + (", faulted>" if self.fault else ">"))

    def _memory(self, name: str) -> int:
        if name not in self.memories:
            raise KeyError(f"'{self.kernel}' has no traced buffer or threadgroup memory '{name}'; "
                           f"it has {', '.join(self.memories) or 'none'}")
        return self._names.index(name)

    def accesses(self, name: str) -> np.ndarray:
        """Every access of memory ``name``, one row per element and thread that touched it.

        A structured array with fields ``element`` (an index past the end or below 0 is out
        of bounds), ``thread`` (linear in the grid), ``group`` (the threadgroup, linear),
        ``local`` (the thread's linear index in its threadgroup) and ``read``, ``write``,
        ``atomic`` (bool). A thread touching an element again right after counts once.

        >>> import numpy as np, metalkit as mk
        >>> lib = mk.compile('''
        ... #include <metal_stdlib>
        ... using namespace metal;
        ... kernel void shift(device const float* a [[buffer(0)]], device float* out [[buffer(1)]],
        ...                   uint i [[thread_position_in_grid]]) { out[i] = a[i + 1]; }
        ... ''')
        >>> t = mk.trace(lib.shift, np.arange(5, dtype=np.float32), np.zeros(4, np.float32), grid=4)
        >>> w = t.accesses("out")
        >>> w["element"].tolist(), w["thread"].tolist(), bool(w["write"].all())
        ([0, 1, 2, 3], [0, 1, 2, 3], True)
        """
        r = self._records[self._records["memory"] == self._memory(name)]
        out = np.empty(len(r), [("element", "i8"), ("thread", "i8"), ("group", "i8"), ("local", "i8"),
                                ("read", "?"), ("write", "?"), ("atomic", "?")])
        out["element"], out["group"], out["local"] = r["element"], r["group"], r["thread"]
        out["thread"] = self._global(r["group"].astype(np.int64), r["thread"].astype(np.int64))
        out["read"] = (r["flags"] & _READ) != 0
        out["write"] = (r["flags"] & _WRITE) != 0
        out["atomic"] = (r["flags"] & _ATOMIC) != 0
        return out

    def reads(self, name: str) -> np.ndarray:
        """The distinct (element, thread) pairs of reads of ``name``, sorted: shape (k, 2).

        >>> import numpy as np, metalkit as mk
        >>> lib = mk.compile('''
        ... #include <metal_stdlib>
        ... using namespace metal;
        ... kernel void shift(device const float* a [[buffer(0)]], device float* out [[buffer(1)]],
        ...                   uint i [[thread_position_in_grid]]) { out[i] = a[i + 1]; }
        ... ''')
        >>> t = mk.trace(lib.shift, np.arange(5, dtype=np.float32), np.zeros(4, np.float32), grid=4)
        >>> t.reads("a")[:2].tolist(), t.reads("out").shape
        ([[1, 0], [2, 1]], (0, 2))
        """
        return self._pairs(name, "read")

    def writes(self, name: str) -> np.ndarray:
        """The distinct (element, thread) pairs of writes to ``name``, sorted: shape (k, 2).

        >>> import numpy as np, metalkit as mk
        >>> lib = mk.compile('''
        ... #include <metal_stdlib>
        ... using namespace metal;
        ... kernel void shift(device const float* a [[buffer(0)]], device float* out [[buffer(1)]],
        ...                   uint i [[thread_position_in_grid]]) { out[i] = a[i + 1]; }
        ... ''')
        >>> t = mk.trace(lib.shift, np.arange(5, dtype=np.float32), np.zeros(4, np.float32), grid=4)
        >>> t.writes("out")[-1].tolist()
        [3, 3]
        """
        return self._pairs(name, "write")

    def _pairs(self, name: str, kind: str) -> np.ndarray:
        a = self.accesses(name)
        a = a[a[kind]]
        return np.unique(np.stack([a["element"], a["thread"]], axis=1).reshape(-1, 2), axis=0)

    def thread_positions(self, thread: Union[int, np.ndarray]) -> np.ndarray:
        """Grid positions (x, y, z) of threads given by linear index: shape (..., 3).

        >>> import numpy as np, metalkit as mk
        >>> lib = mk.compile('''
        ... #include <metal_stdlib>
        ... using namespace metal;
        ... kernel void shift(device const float* a [[buffer(0)]], device float* out [[buffer(1)]],
        ...                   uint i [[thread_position_in_grid]]) { out[i] = a[i + 1]; }
        ... ''')
        >>> t = mk.trace(lib.shift, np.arange(5, dtype=np.float32), np.zeros(4, np.float32), grid=4)
        >>> t.thread_positions(3).tolist()
        [3, 0, 0]
        """
        t = np.asarray(thread, np.int64)
        gx, gy, _ = self.grid
        return np.stack([t % gx, t // gx % gy, t // (gx * gy)], axis=-1)

    def _global(self, group: np.ndarray, local: np.ndarray) -> np.ndarray:
        (tx, ty, tz), (nx, ny, _), (gx, gy, gz) = self.threadgroup, self.threadgroups, self.grid
        ox, oy, oz = group % nx * tx, group // nx % ny * ty, group // (nx * ny) * tz
        # A threadgroup at the grid's edge may be partial: its threads count across its own width.
        wx, wy = np.minimum(tx, gx - ox), np.minimum(ty, gy - oy)
        return ox + local % wx + gx * (oy + local // wx % wy + gy * (oz + local // (wx * wy)))

    def draw(self, path: Optional[str] = None, color_by: str = "thread", groups: int = 4) -> Any:
        """Draw the trace as the GPU puzzles draw their answers; returns a matplotlib Figure.

        The grid of threads comes first, each thread a square in its colour (``color_by``
        "thread" or "threadgroup"), threadgroups outlined; then each array, 1D as rows, 2D as
        a grid: a cell a thread wrote is filled with its colour (split among several writers),
        a dot in a thread's colour marks each thread that read it, and elements out of bounds
        appear past the array's edge in red. Threadgroup memory is drawn per threadgroup, for
        the first ``groups`` of them (in the threadgroup's shape if it holds one element per
        thread of a 2D threadgroup). ``path`` ("out.png", "out.svg"...): also saved there.
        Needs matplotlib (``pip install "metalkit[draw]"``).

        >>> import numpy as np, metalkit as mk
        >>> lib = mk.compile('''
        ... #include <metal_stdlib>
        ... using namespace metal;
        ... kernel void shift(device const float* a [[buffer(0)]], device float* out [[buffer(1)]],
        ...                   uint i [[thread_position_in_grid]]) { out[i] = a[i + 1]; }
        ... ''')
        >>> t = mk.trace(lib.shift, np.arange(5, dtype=np.float32), np.zeros(4, np.float32), grid=4)
        >>> try:
        ...     import matplotlib
        ... except ImportError:  # the picture needs it
        ...     matplotlib = None
        >>> fig = t.draw(color_by="threadgroup") if matplotlib else None
        """
        from .trace_drawing import draw
        return draw(self, path, color_by, groups)

    def _repr_png_(self) -> Optional[bytes]:
        return self._render("png")

    def _repr_svg_(self) -> Optional[str]:
        svg = self._render("svg")
        return svg.decode() if svg is not None else None

    def _render(self, fmt: str) -> Optional[bytes]:
        try:
            fig = self.draw()
        except ImportError:  # a notebook without matplotlib shows the repr
            return None
        out = io.BytesIO()
        fig.savefig(out, format=fmt)
        return out.getvalue()


def _shapes(kernel: Any, args: tuple[Any, ...], named: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    """The shapes of the numpy arrays the call passes, by parameter name (as the call matches them:
    buffers and scalars in [[buffer(i)]] order, or by name)."""
    params = sorted((a for a in kernel.args if a.kind in ("buffer", "scalar")), key=lambda a: a.index)
    given = dict(zip((p.name for p in params), args))
    given.update(named)
    return {k: tuple(v.shape) for k, v in given.items() if isinstance(v, np.ndarray) and v.ndim > 0}


def trace(kernel: Any, *args: Any, max_accesses: int = 1 << 24, **launch: Any) -> Trace:
    """Run ``kernel(*args, **launch)`` once on the CPU simulator, recording which threads read
    and wrote each element of every buffer argument and of threadgroup memory.

    Every thread runs on its own (as under ``check="lockstep"``), on copies of the arrays
    between inaccessible pages, which are copied back as usual: outputs are computed. An access
    past an array's end is recorded, then ends the call as a ``KernelFault`` would (with
    ``check=True``: your arrays stay as they were); ``Trace.fault`` then holds its message and
    the trace shows what happened until then. At
    most ``max_accesses`` are kept (one per element and thread; 16 bytes each); a call making
    more raises ``KernelFault`` saying so.

    >>> import numpy as np, metalkit as mk
    >>> lib = mk.compile('''
    ... #include <metal_stdlib>
    ... using namespace metal;
    ... kernel void pool(device const float* a [[buffer(0)]], device float* out [[buffer(1)]],
    ...                  uint i [[thread_position_in_grid]]) { out[i] = a[i] + a[i + 1]; }
    ... ''')
    >>> t = mk.trace(lib.pool, np.arange(4, dtype=np.float32), np.zeros(4, np.float32), grid=4, threadgroup=4)
    >>> t.reads("a")[:, 0].tolist()   # elements read (thread 3 reads a[4], past the end)
    [0, 1, 1, 2, 2, 3, 3, 4]
    >>> t.fault is not None, t.writes("out").tolist()   # thread 3 faulted before writing
    (True, [[0, 0], [1, 1], [2, 2]])
    """
    from . import _core
    if not isinstance(kernel, _core.Kernel) or kernel.execution == "gpu":
        raise DispatchError(f"metalkit.trace runs kernels of the CPU simulator (metalkit.use('cpu')), got {kernel!r}")
    if max_accesses < 1:
        raise ValueError(f"max_accesses must be at least 1, got {max_accesses}")
    fault: Optional[str] = None
    try:
        _core._trace_call(kernel, max_accesses, *args, **launch)
    except KernelFault as e:
        fault = str(e)
        got = _core._take_trace()
        if got is None or got["full"]:
            raise
    else:
        got = _core._take_trace()
    if got is None:  # an empty grid runs nothing
        raise DispatchError(f"kernel '{kernel.name}' ran no threads: nothing to trace")
    return Trace(got, _shapes(kernel, args, {k: v for k, v in launch.items() if k not in _LAUNCH}), fault)

