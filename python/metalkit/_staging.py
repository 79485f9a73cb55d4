"""Copies for arrays a backend cannot use in place (non-contiguous or misaligned)."""
from __future__ import annotations

import numpy as np

from . import _core


def stage(arr: np.ndarray) -> np.ndarray:
    """An aligned C-contiguous copy of ``arr`` in device memory."""
    buf = _core.allocate(max(arr.nbytes, 1))
    out = np.frombuffer(buf, dtype=np.uint8, count=arr.nbytes).view(arr.dtype).reshape(arr.shape)
    np.copyto(out, arr)
    return out
