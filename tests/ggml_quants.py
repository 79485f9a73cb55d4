"""ggml's quantized block layouts (ggml-common.h) as numpy dtypes, random blocks, and numpy dequantizers.

Random bytes are valid blocks of these formats, so tests draw the quants at random and only
keep the float16 scales finite and moderate.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np


@dataclass(frozen=True)
class QuantType:
    name: str
    block: np.dtype   # one block, packed as in ggml-common.h
    qk: int           # values per block
    dequantize: Callable[[np.ndarray], np.ndarray]  # blocks (..., nb) -> float32 (..., nb*qk)


def _scales(rng: np.random.Generator, shape, lo=0.005, hi=0.05) -> np.ndarray:
    return (rng.uniform(lo, hi, shape) * rng.choice([-1, 1], shape)).astype(np.float16)


def _dequantize_q4_0(b: np.ndarray) -> np.ndarray:
    q = np.concatenate([b["qs"] & 0xF, b["qs"] >> 4], axis=-1).astype(np.float32) - 8  # low nibbles first
    return (q * b["d"].astype(np.float32)[..., None]).reshape(*b.shape[:-1], -1)


def _dequantize_q8_0(b: np.ndarray) -> np.ndarray:
    return (b["qs"].astype(np.float32) * b["d"].astype(np.float32)[..., None]).reshape(*b.shape[:-1], -1)


def _q4_K_scale_min(scales: np.ndarray, j: int) -> tuple[np.ndarray, np.ndarray]:
    # 8 six-bit (scale, min) pairs packed in 12 bytes: the first 4 pairs in the low 6 bits of
    # bytes 0-7, the last 4 split between the nibbles of bytes 8-11 and the top bits of 0-7
    s = scales.astype(np.int32)
    if j < 4:
        return s[..., j] & 63, s[..., j + 4] & 63
    return ((s[..., j + 4] & 0xF) | ((s[..., j - 4] >> 6) << 4),
            (s[..., j + 4] >> 4) | ((s[..., j] >> 6) << 4))


def _dequantize_q4_K(b: np.ndarray) -> np.ndarray:
    d = b["d"].astype(np.float32)[..., None]
    dmin = b["dmin"].astype(np.float32)[..., None]
    out = []
    for j in range(4):  # 64 values per step: 32 low nibbles, then 32 high nibbles of the same bytes
        q = b["qs"][..., 32 * j:32 * (j + 1)].astype(np.float32)
        for half, nib in ((0, q % 16), (1, q // 16)):
            sc, m = _q4_K_scale_min(b["scales"], 2 * j + half)
            out.append(d * sc[..., None] * nib - dmin * m[..., None])
    return np.concatenate(out, axis=-1).reshape(*b.shape[:-1], -1)


Q4_0 = QuantType("q4_0", np.dtype([("d", "<f2"), ("qs", "u1", 16)]), 32, _dequantize_q4_0)
Q8_0 = QuantType("q8_0", np.dtype([("d", "<f2"), ("qs", "i1", 32)]), 32, _dequantize_q8_0)
Q4_K = QuantType("q4_K", np.dtype([("d", "<f2"), ("dmin", "<f2"), ("scales", "u1", 12), ("qs", "u1", 128)]),
                 256, _dequantize_q4_K)
TYPES = {t.name: t for t in (Q4_0, Q8_0, Q4_K)}


def random_blocks(t: QuantType, rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Random blocks of type ``t``, of numpy shape ``shape`` (the last axis counts blocks of a row)."""
    raw = rng.integers(0, 256, (*shape, t.block.itemsize), dtype=np.uint8)
    b = raw.view(t.block).reshape(shape)
    b["d"] = _scales(rng, shape)
    if "dmin" in t.block.names:
        b["d"] = _scales(rng, shape, 0.001, 0.01)
        b["dmin"] = _scales(rng, shape, 0.001, 0.01)
    return b
