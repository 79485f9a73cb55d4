"""Which backend runs kernels: ``metalkit.use()``, ``METALKIT_DEVICE``, or the best available."""
from __future__ import annotations

import os
import platform
import sys
import threading
from typing import NamedTuple

from .errors import DeviceError

BACKENDS = ("cpu", "metal")
_lock = threading.Lock()
_chosen: str | None = None


class DeviceInfo(NamedTuple):
    """What ``metalkit.device()`` returns.

    >>> import metalkit
    >>> d = metalkit.device()
    >>> d.simd_width, d.max_threads_per_threadgroup >= 256
    (32, True)
    """
    name: str
    backend: str
    max_threads_per_threadgroup: int
    max_threadgroup_memory: int
    simd_width: int


DeviceInfo.name.__doc__ = "The device's name (str): the GPU's, or the CPU's for the simulator."
DeviceInfo.backend.__doc__ = 'The backend that runs kernels (str): "metal" or "cpu".'
DeviceInfo.max_threads_per_threadgroup.__doc__ = "The most threads a threadgroup may have on this device (int)."
DeviceInfo.max_threadgroup_memory.__doc__ = "The most threadgroup memory a threadgroup may use, in bytes (int)."
DeviceInfo.simd_width.__doc__ = ("Threads per SIMD-group (int): 32, as on Apple GPUs; a kernel's own is "
                                  "Kernel.simd_width (on Metal, its pipeline's threadExecutionWidth).")


def metal_available() -> bool:
    if platform.system() != "Darwin":
        return False
    from . import _core
    return hasattr(_core, "metal_device")


def _validate(name: str, source: str) -> str:
    name = name.strip().lower()
    if name not in BACKENDS:
        raise DeviceError(f"{source}: unknown device {name!r}; use 'cpu' or 'metal'")
    if name == "metal" and not metal_available():
        raise DeviceError(f"{source}: Metal is only available on macOS with an Apple GPU; use 'cpu' here")
    return name


def current() -> str:
    """The backend in use, chosen on first use."""
    global _chosen
    if _chosen is None:
        with _lock:
            if _chosen is None:
                env = os.environ.get("METALKIT_DEVICE")
                _chosen = _validate(env, "METALKIT_DEVICE") if env else ("metal" if metal_available() else "cpu")
    return _chosen


def use(name: str) -> None:
    """Select the backend ("cpu" or "metal") for kernels compiled from now on.

    >>> import metalkit
    >>> metalkit.use("cpu")
    >>> metalkit.device().backend
    'cpu'
    """
    global _chosen
    name = _validate(name, "metalkit.use")
    with _lock:
        _chosen = name


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def device() -> DeviceInfo:
    """The device kernels run on.

    >>> import metalkit
    >>> d = metalkit.device()
    >>> d.backend in ("cpu", "metal"), d.simd_width
    (True, 32)
    """
    if current() == "metal" and sys.platform == "darwin":  # the Metal backend is built on macOS only
        from . import _core
        info = _core.metal_device()
        return DeviceInfo(info["name"], "metal", info["max_threads_per_threadgroup"],
                          info["max_threadgroup_memory"], 32)
    return DeviceInfo(f"{_cpu_name()} (metalkit CPU simulator, {os.cpu_count()} threads)", "cpu", 1024, 32768, 32)
