"""Type stubs for metalkit's compiled core (``metalkit._core``)."""
from types import TracebackType
from typing import Any, Mapping, Optional, Sequence, Union

from ._argspec import ArgSpec

_Dims = Union[int, Sequence[int]]

class Buffer:
    """Device memory shared with the host; numpy views it through the buffer protocol."""
    @property
    def nbytes(self) -> int: ...

def allocate(nbytes: int) -> Buffer: ...
def allocate_guarded(nbytes: int, align: int) -> Buffer: ...

class Kernel:
    """A compute kernel. Calling it binds arguments, dispatches and waits
    (inside ``metalkit.batch()``: checks the arguments and queues the call)."""
    def __call__(self, *args: Any, grid: Optional[_Dims] = None, threadgroups: Optional[_Dims] = None,
                 threadgroup: Optional[_Dims] = None, threadgroup_memory: Optional[Mapping[int, int]] = None,
                 check: Optional[bool] = None, shuffle: Optional[int] = None,
                 timeout: Optional[float] = None) -> None:
        """Run and wait. Array parameters take numpy arrays or objects exporting ``__dlpack__``
        or the buffer protocol (torch CPU tensors, JAX arrays, memoryview, array.array,
        bytearray), used in place: what the kernel writes is in the caller's object.

        Geometry: ``grid`` counts threads (Metal's dispatchThreads), ``threadgroups``
        threadgroups (dispatchThreadgroups: the grid is ``threadgroups * threadgroup``, whole
        groups; it needs ``threadgroup``), ``threadgroup`` threads per threadgroup (default
        ``min(grid x, 256, max_threads_per_threadgroup)`` along x). Each is an int or a tuple
        ``(x, y, z)`` = (width, height, depth), the reverse of numpy's shape order: for an
        ``out`` of shape ``(rows, cols)`` read at ``out[gid.y * cols + gid.x]``, pass
        ``grid=(cols, rows)``. Given neither ``grid`` nor ``threadgroups``, the grid is the
        arrays' common element count along x, only when that is unambiguous: the kernel's
        position builtins are scalars, one of them tells threads apart, every array argument
        holds as many elements (counted in its parameter's type), and a kernel reading its
        threadgroup's geometry (``thread_position_in_threadgroup``, ``[[threadgroup(i)]]``
        memory, ...) is given ``threadgroup``; otherwise DispatchError.

        CPU simulator options: ``check=True`` runs every array on a copy
        ending right below an inaccessible page (an index past the end raises KernelFault naming the
        parameter; the caller's arrays are untouched); ``shuffle=seed`` runs each group's
        threads in a seeded random order (0: index order) to expose missing barriers;
        ``timeout=seconds`` stops a kernel still running after that long with a KernelFault
        naming the kernel, the limit and how many threadgroups completed (``math.inf``: no
        limit). Defaults come from METALKIT_CHECK, METALKIT_SHUFFLE and METALKIT_TIMEOUT.

        Ctrl-C stops a kernel called from the main thread within a few tens of milliseconds and
        raises KeyboardInterrupt at the call (or whatever the SIGINT handler raises; if it
        raises nothing, a KernelFault). After a timeout or an interrupt the arrays the kernel
        writes are partly written (staged copies are not copied back); the process and later
        calls are unaffected. On Metal a committed command buffer cannot be stopped:
        ``timeout=`` is refused with a DispatchError, METALKIT_TIMEOUT does not apply, and
        Ctrl-C waits for the GPU."""
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
    def execution(self) -> str:
        """How the kernel runs: "gpu" on Metal; on the CPU simulator "loop" (no barrier or
        SIMD-group function: a plain loop over threads), "simt" (each SIMD-group's 32 lanes in
        lockstep), or "fibers: <why>" (a fiber per thread, for code the SIMT transform does not
        cover)."""
    @property
    def last_gpu_time(self) -> float:
        """Seconds of GPU time the kernel's last call took. On the CPU simulator this is
        the wall time of the call. A call queued in ``metalkit.batch()`` on the GPU reports
        the time of the batch's whole command buffer. Safe to read from any thread."""
    @property
    def signature(self) -> str: ...
    @property
    def location(self) -> tuple[str, int]: ...

class Batch:
    """What ``metalkit.batch()`` returns: a context manager that queues the kernel calls
    made in its block and waits for them once, at its end. Nested blocks share one batch."""
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

class Library:
    @property
    def kernel_names(self) -> list[str]: ...
    def kernel(self, name: str) -> Optional[Kernel]:
        """The kernel, or None if there is none of that name; CompileError if it cannot be created
        (it uses a function constant that was given no value)."""

def load_cpu_library(path: str) -> Library: ...
