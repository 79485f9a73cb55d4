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
from .errors import ArgumentError, CompileError, DispatchError, KernelFault, MetalkitError
from .library import Library, compile, load

if TYPE_CHECKING:
    from ._core import Kernel

__version__ = "0.1.0"

__all__ = [
    "ArgSpec", "ArgumentError", "CompileError", "DeviceInfo", "DispatchError", "Kernel", "KernelFault",
    "Library", "MetalkitError", "asarray", "compile", "device", "empty", "kernels", "load", "run", "use", "zeros",
]


def __getattr__(name: str) -> Any:
    # The compiled core is loaded on first use, keeping `import metalkit` quick.
    if name == "Kernel":
        from ._core import Kernel
        return Kernel
    raise AttributeError(f"module 'metalkit' has no attribute {name!r}")
