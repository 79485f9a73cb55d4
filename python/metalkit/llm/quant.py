"""GGUF's Q8_0 and Q4_0 block layouts in numpy: weights quantised to them, and back.

A row of K weights (K a multiple of 32) is K / 32 blocks of 32. Q8_0 stores each block in 34
bytes, a float16 scale d then 32 int8 values q; Q4_0 in 18, d then 16 bytes of 4-bit values
stored with 8 added, the low nibble of byte j being element j and the high nibble element
j + 16. A weight is q * d. Arrays of blocks are uint8, of shape [rows, K / 32 * block bytes],
as ``matvec_q8_0`` and ``matvec_q4_0`` take them and as GGUF files store them.
"""
from __future__ import annotations

import numpy as np

from ..errors import ArgumentError

BLOCK = 32          # weights per block
Q8_0_BYTES = 34     # bytes per Q8_0 block
Q4_0_BYTES = 18     # bytes per Q4_0 block
# The blocks as the kernels' structs: a uint8 array of blocks viewed as these is what they take.
Q8_0_BLOCK = np.dtype([("d", "<f2"), ("qs", "i1", (32,))])
Q4_0_BLOCK = np.dtype([("d", "<f2"), ("qs", "u1", (16,))])


def _blocks(w: np.ndarray, what: str) -> np.ndarray:
    w = np.asarray(w, dtype=np.float32)
    if w.ndim != 2 or w.shape[1] % BLOCK:
        raise ArgumentError(f"{what}: w must be 2-D with a multiple of {BLOCK} columns, "
                            f"not of shape {w.shape}; pad the rows to whole blocks")
    return w.reshape(w.shape[0], -1, BLOCK)


def quantize_q8_0(w: np.ndarray) -> np.ndarray:
    """Rows of float weights as Q8_0 blocks: d = max|w| / 127 per block, q = round(w / d).

    >>> import numpy as np
    >>> w = np.linspace(-1, 1, 64, dtype=np.float32).reshape(1, 64)
    >>> q = quantize_q8_0(w)
    >>> q.shape, q.dtype
    ((1, 68), dtype('uint8'))
    >>> bool(np.abs(dequantize_q8_0(q) - w).max() <= 1 / 127 / 2 + 1e-3)
    True
    """
    b = _blocks(w, "quantize_q8_0")
    d = (np.abs(b).max(axis=2, keepdims=True) / 127).astype(np.float16)
    inv = np.divide(1, d.astype(np.float32), out=np.zeros(d.shape, np.float32), where=d != 0)
    q = np.clip(np.rint(b * inv), -127, 127).astype(np.int8)
    out = np.empty((*b.shape[:2], Q8_0_BYTES), np.uint8)
    out[..., :2] = d.view(np.uint8)
    out[..., 2:] = q.view(np.uint8)
    return out.reshape(b.shape[0], -1)


def quantize_q4_0(w: np.ndarray) -> np.ndarray:
    """Rows of float weights as Q4_0 blocks: d = m / -8 for m the block's weight of largest
    magnitude, q = round(w / d) + 8 clipped to [0, 15]. The error is at most |d| / 2, except at
    the end of the range opposite m, where the clip to 15 leaves up to |d|.

    >>> import numpy as np
    >>> w = np.linspace(-1, 1, 32, dtype=np.float32).reshape(1, 32)
    >>> q = quantize_q4_0(w)
    >>> q.shape
    (1, 18)
    >>> bool(np.abs(dequantize_q4_0(q) - w).max() <= 1 / 8 + 1e-3)
    True
    """
    b = _blocks(w, "quantize_q4_0")
    at = np.abs(b).argmax(axis=2)[..., None]
    d = (np.take_along_axis(b, at, axis=2) / -8).astype(np.float16)
    inv = np.divide(1, d.astype(np.float32), out=np.zeros(d.shape, np.float32), where=d != 0)
    q = np.clip(np.rint(b * inv) + 8, 0, 15).astype(np.uint8)
    out = np.empty((*b.shape[:2], Q4_0_BYTES), np.uint8)
    out[..., :2] = d.view(np.uint8)
    out[..., 2:] = q[..., :16] | (q[..., 16:] << 4)
    return out.reshape(b.shape[0], -1)


def _split(q: np.ndarray, size: int, what: str) -> tuple[np.ndarray, np.ndarray]:
    q = np.asarray(q)
    if q.dtype != np.uint8 or q.ndim != 2 or q.shape[1] % size:
        raise ArgumentError(f"{what}: q must be uint8 blocks of {size} bytes, [rows, blocks * "
                            f"{size}], not {q.dtype} {q.shape}")
    blocks = q.reshape(q.shape[0], -1, size)
    d = np.ascontiguousarray(blocks[..., :2]).view(np.float16).astype(np.float32)
    return d, blocks[..., 2:]


def dequantize_q8_0(q: np.ndarray) -> np.ndarray:
    """Q8_0 blocks back to float32 weights, [rows, K].

    >>> import numpy as np
    >>> w = np.random.default_rng(0).standard_normal((3, 64)).astype(np.float32)
    >>> dequantize_q8_0(quantize_q8_0(w)).shape
    (3, 64)
    """
    d, qs = _split(q, Q8_0_BYTES, "dequantize_q8_0")
    return (qs.view(np.int8).astype(np.float32) * d).reshape(q.shape[0], -1)


def dequantize_q4_0(q: np.ndarray) -> np.ndarray:
    """Q4_0 blocks back to float32 weights, [rows, K].

    >>> import numpy as np
    >>> w = np.random.default_rng(0).standard_normal((3, 64)).astype(np.float32)
    >>> dequantize_q4_0(quantize_q4_0(w)).shape
    (3, 64)
    """
    d, qs = _split(q, Q4_0_BYTES, "dequantize_q4_0")
    values = np.concatenate([qs & 15, qs >> 4], axis=2).astype(np.float32) - 8
    return (values * d).reshape(q.shape[0], -1)
