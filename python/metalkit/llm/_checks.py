"""Argument checks shared by the wrappers of the bundled transformer kernels: each failure is
an ``ArgumentError`` naming the kernel, the parameter and the fix, raised before anything runs."""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from .. import _device
from ..arrays import empty
from ..errors import ArgumentError


def floats(kernel: str, name: str, x: Any, dims: Sequence[str]) -> np.ndarray:
    """``x`` as a float32 array of ``len(dims)`` dimensions named ``dims`` (for the message)."""
    a = x if isinstance(x, np.ndarray) else np.asarray(x)
    if a.dtype != np.float32:
        raise ArgumentError(f"{kernel}: {name} is {a.dtype}, the kernel reads float32; "
                            f"pass {name}.astype(np.float32)")
    if a.ndim != len(dims):
        raise ArgumentError(f"{kernel}: {name} must be {len(dims)}-D, [{', '.join(dims)}], "
                            f"not of shape {a.shape}")
    return a


def ints(kernel: str, name: str, x: Any, ndim: int, low: int, high: int, what: str) -> np.ndarray:
    """``x`` as a C-contiguous int32 array of ``ndim`` dimensions whose values are in
    [low, high); ``what`` says what the values index, for the message."""
    a = np.asarray(x)
    if a.dtype.kind not in "iu":
        raise ArgumentError(f"{kernel}: {name} must hold integers, not {a.dtype}")
    if a.ndim != ndim:
        raise ArgumentError(f"{kernel}: {name} must be {ndim}-D, not of shape {a.shape}")
    if a.size and (a.min() < low or a.max() >= high):
        bad = a[(a < low) | (a >= high)].ravel()[0]
        raise ArgumentError(f"{kernel}: {name} holds {bad}, outside [{low}, {high}): {what}")
    return np.ascontiguousarray(a, dtype=np.int32)


def need(ok: bool, kernel: str, message: str) -> None:
    """Raise ``ArgumentError('<kernel>: <message>')`` unless ``ok``."""
    if not ok:
        raise ArgumentError(f"{kernel}: {message}")


def output(kernel: str, out: Any, shape: tuple[int, ...], dtype: Any = np.float32) -> np.ndarray:
    """``out`` checked against ``shape`` and ``dtype``, or a new array: device memory on Metal,
    where the GPU uses it without a copy, and a numpy array on the simulator."""
    if out is None:
        if _device.current() == "metal":
            return empty(shape, dtype)
        return np.empty(shape, dtype)
    a = out if isinstance(out, np.ndarray) else np.asarray(out)
    need(a.shape == shape and a.dtype == dtype, kernel,
         f"out must be a {np.dtype(dtype).name} array of shape {shape}, not {a.dtype} {a.shape}")
    return a
