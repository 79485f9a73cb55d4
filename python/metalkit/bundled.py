"""The kernels shipped in metalkit's ``kernels/`` folder, run by name."""
from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Optional

from . import _device
from .errors import KernelNotFound
from .library import load

KERNELS_DIR = Path(__file__).resolve().parent / "kernels"
_lock = threading.Lock()
_by_name: dict[tuple[str, str], Any] = {}


def kernels() -> list[str]:
    """Names of the bundled kernels.

    >>> import metalkit
    >>> "add_arrays" in metalkit.kernels()
    True
    """
    names = []
    for f in sorted(KERNELS_DIR.glob("*.metal")):
        names.extend(load(f).kernels)
    return sorted(names)


def _find(name: str):
    backend = _device.current()
    k = _by_name.get((backend, name))
    if k is not None:
        return k
    with _lock:
        for f in sorted(KERNELS_DIR.glob("*.metal")):
            lib = load(f)
            for kname in lib.kernels:
                _by_name.setdefault((backend, kname), lib[kname])
    k = _by_name.get((backend, name))
    if k is None:
        raise KernelNotFound(f"no bundled kernel named {name!r}; bundled kernels: {', '.join(kernels())}. "
                       "Use metalkit.compile(source) or metalkit.load(path) for your own")
    return k


def run(name: str, *args: Any, grid: Any = None, threadgroup: Any = None,
        threadgroup_memory: Optional[dict] = None, check: Optional[bool] = None,
        shuffle: Optional[int] = None, timeout: Optional[float] = None) -> None:
    """Run a bundled kernel by name and wait for it.

    ``grid`` counts threads per dimension (default: the element count of the
    first written array); ``threadgroup`` counts threads per threadgroup.
    ``check`` and ``shuffle`` are the CPU simulator's debug options, ``timeout`` its time
    limit in seconds (see Kernel).

    >>> import numpy as np, metalkit
    >>> a = np.full(5, 1.0, np.float32); b = np.full_like(a, 2.0); out = np.empty_like(a)
    >>> metalkit.run("add_arrays", a, b, out)
    >>> out.tolist()
    [3.0, 3.0, 3.0, 3.0, 3.0]
    """
    return _find(name)(*args, grid=grid, threadgroup=threadgroup, threadgroup_memory=threadgroup_memory,
                       check=check, shuffle=shuffle, timeout=timeout)
