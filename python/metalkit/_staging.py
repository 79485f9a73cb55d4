"""Copies for arrays a backend cannot use in place (non-contiguous or misaligned)."""
from __future__ import annotations

import numpy as np

from .arrays import _allocate


def stage(arr: np.ndarray) -> np.ndarray:
    """An aligned C-contiguous copy of ``arr`` in the current backend's device memory
    (so the Metal backend binds it as it is, with no second copy)."""
    buf = _allocate(arr.nbytes)
    out = np.frombuffer(buf, dtype=np.uint8, count=arr.nbytes).view(arr.dtype).reshape(arr.shape)
    np.copyto(out, arr)
    return out
