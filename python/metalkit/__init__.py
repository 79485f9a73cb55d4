"""metalkit: run Metal Shading Language compute kernels on numpy arrays.

On macOS kernels run on the Apple GPU; everywhere else on a CPU simulator
that runs the same ``.metal`` source.

>>> import numpy as np, metalkit as mk
>>> a = np.full(1000, 1.0, np.float32); b = np.full_like(a, 2.0); out = np.empty_like(a)
>>> mk.run("add_arrays", a, b, out)
>>> float(out[0]), float(out[-1])
(3.0, 3.0)
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import _validation

_validation.apply()  # before anything loads the compiled core, which creates the Metal device

from ._argspec import ArgSpec
from ._device import DeviceInfo, device, use
from .arrays import asarray, empty, zeros
from .bundled import kernels, run
from .custom_kernel import CustomKernel, metal_kernel
from .execution import Execution
from .errors import (ArgumentError, CacheError, CheckWarning, CompileError, DeviceError, DispatchError, KernelFault,
                     KernelNotFound, MetalkitError, MetalkitWarning)
from .kernel_log import KernelMessage, set_kernel_log_handler
from .library import Library, compile, load
from .tracing import Trace, TracedMemory, trace

if TYPE_CHECKING:
    from ._core import Batch, Kernel

__version__ = "0.1.0"

__all__ = [
    "ArgSpec", "ArgumentError", "Batch", "CacheError", "CheckWarning", "CompileError", "CustomKernel", "DeviceError",
    "DeviceInfo", "DispatchError", "Execution", "Kernel", "KernelFault", "KernelMessage", "KernelNotFound", "Library",
    "MetalkitError", "MetalkitWarning", "Trace", "TracedMemory", "asarray",
    "batch", "compile", "device", "empty", "kernels", "load", "metal_kernel", "run", "set_kernel_log_handler", "trace",
    "use", "zeros",
]


def batch() -> Batch:
    """Queue the kernel calls made in a ``with`` block and wait for them once, at its end.

    On the GPU the calls are encoded into one command buffer, run in the order
    they were made (a call sees what the calls before it wrote) and waited for
    when the block exits, instead of one wait per call. On the CPU simulator each
    call runs at once, in order. Results are guaranteed only after the block
    exits, on every backend: don't read arrays the block's calls write, or change
    arrays they read, until then.

    - Arguments are checked at the call: an ``ArgumentError`` or ``DispatchError``
      is raised there, before anything is queued, and the batch stays usable.
    - A ``KernelFault`` is raised when the block exits, naming the kernel; calls
      made after a fault do not run. On the CPU simulator, where each call runs at
      once, ``timeout=`` limits each call and a timeout is such a fault; Ctrl-C
      raises ``KeyboardInterrupt`` at the call. Metal refuses ``timeout=``.
    - Arrays passed to calls are kept alive until the batch completes; scalars
      and structs are copied at the call. Staged arrays (strided, misaligned or,
      on Metal, host memory it cannot use in place) are copied back when the
      batch completes; calls passing the same array share one copy.
    - A batch belongs to the thread that opened it; a nested ``batch()`` joins
      the enclosing one. If the block raises, the calls made before still
      complete, then the exception propagates.
    - The returned ``Batch`` has ``gpu_time`` (seconds; the CPU simulator: wall
      time) and ``calls``. ``Kernel.last_gpu_time`` of a call queued on the GPU
      is the time of the batch's whole command buffer.

    >>> import numpy as np, metalkit as mk
    >>> x = np.arange(4, dtype=np.float32); y = np.empty_like(x); z = np.empty_like(x)
    >>> with mk.batch() as b:
    ...     mk.run("add_arrays", x, x, y)      # y = 2x
    ...     mk.run("add_arrays", y, x, z)      # z = y + x: reads what the call before wrote
    >>> z.tolist(), b.calls
    ([0.0, 3.0, 6.0, 9.0], 2)
    """
    from ._core import Batch
    return Batch()


def __getattr__(name: str) -> Any:
    # The compiled core is loaded on first use, keeping `import metalkit` quick.
    if name in ("Kernel", "Batch"):
        from . import _core
        return getattr(_core, name)
    raise AttributeError(f"module 'metalkit' has no attribute {name!r}")
