"""Copies for arrays a backend cannot use in place (non-contiguous or misaligned),
and for every array in checked mode."""
from __future__ import annotations

import numpy as np

from .arrays import _allocate


def stage(arr: np.ndarray, guarded: int = 0) -> np.ndarray:
    """An aligned C-contiguous copy of ``arr`` in the current backend's device memory
    (so the Metal backend binds it as it is, with no second copy). With ``guarded``
    (the element alignment), the copy ends right at 64 GiB of inaccessible address
    space and starts above as much: the CPU simulator's checked mode."""
    if guarded:
        from . import _core
        # The copy must end right at the guard, so a vector read one element past the end faults
        # too: an alignment its size is not a multiple of gives way, down to the dtype's own
        # (kernels read vectors with unaligned moves; 8-byte atomics keep their 8-byte dtypes').
        while guarded > arr.dtype.alignment and arr.nbytes % guarded:
            guarded //= 2
        buf = _core.allocate_guarded(arr.nbytes, guarded)
    else:
        buf = _allocate(arr.nbytes)
    out = np.frombuffer(buf, dtype=np.uint8, count=arr.nbytes).view(arr.dtype).reshape(arr.shape)
    np.copyto(out, arr)
    return out
