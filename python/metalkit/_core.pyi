"""Type stubs for metalkit's compiled core (``metalkit._core``); tests/test_stub.py checks they match it."""
import sys
from types import ModuleType, TracebackType
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence, Union

from ._argspec import ArgSpec
from .execution import Execution

_Dims = Union[int, Sequence[int]]
_Constants = Mapping[Union[str, int], Union[bool, int, float]]

class Buffer:
    """Device memory shared with the host; numpy views it through the buffer protocol."""
    @property
    def nbytes(self) -> int: ...

def allocate(nbytes: int) -> Buffer: ...
def allocate_guarded(nbytes: int, align: int) -> Buffer: ...

class Kernel:
    """A compiled compute kernel; calling it runs the kernel and waits (see ``__call__``)."""
    def __call__(self, *args: Any, grid: Optional[_Dims] = None, threadgroups: Optional[_Dims] = None,
                 threadgroup: Optional[_Dims] = None, threadgroup_memory: Optional[Mapping[int, int]] = None,
                 check: Union[bool, str, Iterable[str], None] = None, shuffle: Optional[int] = None, timeout: Optional[float] = None,
                 **params: Any) -> None:
        """Run and wait: ``grid``/``threadgroups``/``threadgroup`` are (x, y, z) = (width, height, depth);
        ``check``, ``shuffle`` and ``timeout`` are the CPU simulator's (defaults: METALKIT_CHECK,
        METALKIT_SHUFFLE, METALKIT_TIMEOUT). Arguments bind in buffer-index order, then by parameter
        name (``**params``); ``None`` for a buffer the kernel does not read.
        ``help(metalkit.Kernel.__call__)`` tells each in full."""
    @property
    def name(self) -> str: ...
    @property
    def args(self) -> list[ArgSpec]: ...
    @property
    def max_threads_per_threadgroup(self) -> int: ...
    @property
    def simd_width(self) -> int: ...
    @property
    def uses_barriers(self) -> bool: ...
    @property
    def execution(self) -> Execution:
        """How the kernel runs: GPU on Metal; on the CPU simulator LOOP (no barrier or SIMD-group
        function), SIMT (each SIMD-group's 32 lanes in lockstep), FIBERS (a fiber per thread,
        lanes in lockstep) or THREADS (the reference: a fiber per thread, code as written)."""
    @property
    def execution_reason(self) -> str:
        """Why FIBERS or THREADS (the construct and file:line, or execution= asking); else ""."""
    @property
    def last_gpu_time(self) -> float:
        """Seconds of GPU time the kernel's last call took. On the CPU simulator this is
        the wall time of the call. A call queued in ``metalkit.batch()`` on the GPU reports
        the time of the batch's whole command buffer. Safe to read from any thread."""
    @property
    def signature(self) -> str: ...
    @property
    def location(self) -> tuple[str, int]: ...
    # Builds this kernel checked (every access recorded) for check= races, uninit, lockstep (its
    # bool: every thread a fiber); set by metalkit.Library (None: no source to build from).
    _checked_factory: Optional[Callable[[str], Kernel]]

class Batch:
    """What ``metalkit.batch()`` returns: a context manager that queues the kernel calls
    made in its block and waits for them once, at its end. Nested blocks share one batch."""
    def __init__(self) -> None: ...
    def __enter__(self) -> Batch: ...
    def __exit__(self, exc_type: Optional[type[BaseException]], exc: Optional[BaseException],
                 tb: Optional[TracebackType]) -> bool: ...
    @property
    def gpu_time(self) -> float:
        """Seconds of GPU time the batch's calls took (the CPU simulator: their wall time)."""
    @property
    def calls(self) -> int:
        """Number of kernel calls the batch queued or ran."""

def _emulate_gpu_batches(on: bool) -> None:
    """Tests only: CPU calls in a batch are queued and run at its end, as on a GPU."""

def _open_batches(limit: Optional[int] = None) -> tuple[int, int]:
    """Tests only: (batches holding queued GPU work, how many may); limit= sets the latter."""

class Library:
    """A loaded module's kernels (``metalkit.Library`` wraps it)."""
    @property
    def kernel_names(self) -> list[str]: ...
    def kernel(self, name: str) -> Optional[Kernel]:
        """The kernel, or None if there is none of that name; CompileError if it cannot be created
        (it uses a function constant that was given no value)."""

def load_cpu_library(path: str) -> Library: ...

def _trace_call(kernel: Kernel, max_accesses: int, *args: Any, **kwargs: Any) -> Any:
    """Calls kernel(*args, **kwargs) recording who touches each element, at most max_accesses times
    (metalkit.trace; CPU simulator)."""

def _take_trace() -> Optional[dict[str, Any]]:
    """The last traced dispatch of this thread, once (metalkit.trace reads it); None if none."""

metal_rules: ModuleType  # the Metal backend's decisions, callable on every platform (tests)

if sys.platform == "darwin":  # built with the Metal backend
    def metal_device() -> dict[str, Any]: ...
    def metal_compile(source: str, filename: str, constants: _Constants, fast_math: bool,
                      kernels: Any, logging: bool = ...) -> Library: ...
    def metal_load_metallib(path: str, constants: _Constants) -> Library: ...
    def metal_allocate(nbytes: int) -> Buffer: ...
