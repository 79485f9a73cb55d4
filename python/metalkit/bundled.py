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


def run(name: str, *args: Any, grid: Any = None, threadgroups: Any = None, threadgroup: Any = None,
        threadgroup_memory: Optional[dict] = None, check: Optional[bool] = None,
        shuffle: Optional[int] = None, timeout: Optional[float] = None) -> None:
    """Run a bundled kernel by name and wait for it.

    Arrays are numpy arrays or objects exporting ``__dlpack__`` or the buffer protocol
    (torch CPU tensors, memoryviews), used in place. ``grid`` counts threads per dimension,
    ``threadgroups`` threadgroups per dimension (then the grid is whole groups:
    ``threadgroups * threadgroup``), ``threadgroup`` threads per threadgroup. Each is an
    int or a tuple ``(x, y, z)`` = (width, height, depth), the reverse of numpy's shape
    order: an array of shape ``(rows, cols)`` is ``grid=(cols, rows)``. Without ``grid``
    and ``threadgroups`` the grid is the arrays' common length, when that is unambiguous
    (see Kernel.__call__; otherwise DispatchError). ``check`` and ``shuffle`` are the CPU
    simulator's debug options, ``timeout`` its time limit in seconds (see Kernel).

    >>> import numpy as np, metalkit
    >>> a = np.full(8, 1.0, np.float32); b = np.full_like(a, 2.0); out = np.empty_like(a)
    >>> metalkit.run("add_arrays", a, b, out)
    >>> out.tolist()
    [3.0, 3.0, 3.0, 3.0, 3.0, 3.0, 3.0, 3.0]
    >>> metalkit.run("add_arrays", a, out, out, threadgroups=2, threadgroup=4)  # 2 groups of 4 threads
    >>> out.tolist()
    [4.0, 4.0, 4.0, 4.0, 4.0, 4.0, 4.0, 4.0]
    """
    return _find(name)(*args, grid=grid, threadgroups=threadgroups, threadgroup=threadgroup,
                       threadgroup_memory=threadgroup_memory, check=check, shuffle=shuffle, timeout=timeout)
