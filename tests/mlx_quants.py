"""MLX's affine quantization in numpy, for the quantized kernels' references.

A row of weights is cut into groups of `group_size` values along its last axis; each group
stores `bits`-bit codes q with a scale and a bias (in the activation type), w ~ scale * q + bias.
The codes of a row are one little-endian bit stream (code i at bits [i*bits, (i+1)*bits)),
read by the kernels as 32-bit words: for 2, 4 and 8 bits that is pack_factor codes a word,
for 3, 5 and 6 bits codes cross byte boundaries in 3- or 5-byte packs.
"""
from __future__ import annotations

import numpy as np


def pack(q: np.ndarray, bits: int) -> np.ndarray:
    """Codes (..., K) in [0, 2**bits) as the little-endian bit stream, in uint32 words (..., K*bits/32)."""
    assert q.shape[-1] * bits % 32 == 0
    planes = (q[..., :, None].astype(np.uint64) >> np.arange(bits, dtype=np.uint64)) & 1  # (..., K, bits)
    stream = planes.reshape(*q.shape[:-1], -1).astype(np.uint8)
    return np.packbits(stream, axis=-1, bitorder="little").view(np.uint32)


def quantize(w: np.ndarray, group_size: int, bits: int, dtype):
    """(packed, scales, biases, dequantized) for w of shape (rows, K); scales and biases are of
    `dtype`, and `dequantized` (float64) is what a kernel reading them computes with."""
    rows, k = w.shape
    g = w.reshape(rows, k // group_size, group_size).astype(np.float64)
    lo, hi = g.min(axis=2), g.max(axis=2)
    levels = 2**bits - 1
    scales = np.maximum((hi - lo) / levels, 1e-7).astype(dtype)
    biases = lo.astype(dtype)
    s, b = scales.astype(np.float64)[..., None], biases.astype(np.float64)[..., None]
    q = np.clip(np.rint((g - b) / s), 0, levels).astype(np.uint32)
    deq = (s * q + b).reshape(rows, k)
    return pack(q.reshape(rows, k), bits), scales, biases, deq
