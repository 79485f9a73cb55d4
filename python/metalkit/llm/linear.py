"""The linear layers' products, on the bundled kernels of ``matmul.metal``, ``matvec.metal``
and ``quant_matvec.metal``. Weights are laid out as a linear layer stores them, one row of K
inputs per output: ``y = x @ w.T``."""
from __future__ import annotations

from typing import Any

import numpy as np

from ..bundled import run
from ._checks import floats, need, output
from .quant import BLOCK, Q4_0_BLOCK, Q8_0_BLOCK


def _matmul(kernel: str, a: Any, b: Any, out: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    a = floats(kernel, "a", a, ("M", "K"))
    b = floats(kernel, "b", b, ("N", "K"))
    need(a.shape[1] == b.shape[1], kernel, f"a has K = {a.shape[1]} columns but b has "
         f"{b.shape[1]}; b is [N, K], one row per output (pass the transpose of a [K, N] one)")
    need(a.size > 0 and b.size > 0, kernel, f"a {a.shape} and b {b.shape} must not be empty")
    return a, b, output(kernel, out, (a.shape[0], b.shape[0]))


def matmul_tiled(a: Any, b: Any, out: Any = None) -> np.ndarray:
    """``a @ b.T`` for float32 ``a`` [M, K] and ``b`` [N, K], with the register-tiled kernel
    (a 4x4 tile of the result per thread). Returns ``out`` [M, N], new if not given.

    >>> import numpy as np
    >>> from metalkit.llm import matmul_tiled
    >>> a = np.arange(6, dtype=np.float32).reshape(2, 3); b = np.ones((5, 3), np.float32)
    >>> matmul_tiled(a, b).tolist()
    [[3.0, 3.0, 3.0, 3.0, 3.0], [12.0, 12.0, 12.0, 12.0, 12.0]]
    """
    a, b, c = _matmul("matmul_tiled", a, b, out)
    m, n, k = a.shape[0], b.shape[0], a.shape[1]
    run("matmul_tiled", a, b, c, m, n, k, grid=(-(-n // 4), -(-m // 4)), threadgroup=(8, 8))
    return c


def matmul_simdgroup(a: Any, b: Any, out: Any = None) -> np.ndarray:
    """``a @ b.T`` for float32 ``a`` [M, K] and ``b`` [N, K], with ``simdgroup_matrix`` 8x8
    multiply-accumulates (one 8x8 tile of the result per SIMD-group). Returns ``out`` [M, N].

    >>> import numpy as np
    >>> from metalkit.llm import matmul_simdgroup
    >>> a = np.arange(6, dtype=np.float32).reshape(2, 3); b = np.ones((5, 3), np.float32)
    >>> matmul_simdgroup(a, b).tolist()
    [[3.0, 3.0, 3.0, 3.0, 3.0], [12.0, 12.0, 12.0, 12.0, 12.0]]
    """
    a, b, c = _matmul("matmul_simdgroup", a, b, out)
    m, n, k = a.shape[0], b.shape[0], a.shape[1]
    run("matmul_simdgroup", a, b, c, m, n, k, threadgroups=(-(-n // 16), -(-m // 16)),
        threadgroup=128)
    return c


def _vectors(kernel: str, x: Any, k: int, rows: int, out: Any) -> tuple[np.ndarray, np.ndarray]:
    """x as [B, K] (a 1-D x is one vector) and out as [B, N], in x's own number of dims."""
    x = np.asarray(x)
    x2 = floats(kernel, "x", x.reshape(1, -1) if x.ndim == 1 else x, ("B", "K"))
    need(x2.shape[1] == k, kernel, f"x has {x2.shape[1]} values per vector but w has K = {k} "
         "columns; x must be [K] or [B, K]")
    shape = (rows,) if x.ndim == 1 else (x2.shape[0], rows)
    return x2, output(kernel, out, shape)


def matvec(w: Any, x: Any, out: Any = None) -> np.ndarray:
    """``x @ w.T`` for float32 weights ``w`` [N, K] and ``x`` one vector [K] or a batch [B, K],
    one thread per row of ``w`` and 4 vectors. Returns ``out``, [N] or [B, N].

    >>> import numpy as np
    >>> from metalkit.llm import matvec
    >>> w = np.arange(6, dtype=np.float32).reshape(3, 2)
    >>> matvec(w, np.array([1, -1], np.float32)).tolist()
    [-1.0, -1.0, -1.0]
    """
    w = floats("matvec", "w", w, ("N", "K"))
    x2, y = _vectors("matvec", x, w.shape[1], w.shape[0], out)
    if y.size:
        b = x2.shape[0]
        run("matvec", w, x2, y, w.shape[0], w.shape[1], b, grid=(w.shape[0], -(-b // 4)))
    return y


def _quantized(kernel: str, block: np.dtype, w: Any, x: Any, out: Any) -> np.ndarray:
    size = block.itemsize
    w = np.asarray(w)
    need(w.dtype == np.uint8 and w.ndim == 2 and w.shape[1] % size == 0 and w.size > 0, kernel,
         f"w must be uint8 blocks [N, K / {BLOCK} * {size}] as metalkit.llm.quant and GGUF "
         f"store them, not {w.dtype} {w.shape}")
    k = w.shape[1] // size * BLOCK
    x2, y = _vectors(kernel, x, k, w.shape[0], out)
    if y.size:
        blocks = np.ascontiguousarray(w).view(block)  # the bytes as the kernel's structs
        b = x2.shape[0]
        run(kernel, blocks, x2, y, w.shape[0], k, b, grid=(w.shape[0], -(-b // 4)))
    return y


def matvec_q8_0(w: Any, x: Any, out: Any = None) -> np.ndarray:
    """``x @ dequantize_q8_0(w).T`` with ``w`` Q8_0 blocks [N, K / 32 * 34] (uint8, see
    ``metalkit.llm.quant``) and float32 ``x`` [K] or [B, K]. Returns ``out``, [N] or [B, N].

    >>> import numpy as np
    >>> from metalkit.llm import matvec_q8_0, quantize_q8_0
    >>> w = np.full((2, 32), 63.5, np.float32); w[1] *= -1       # exact in Q8_0
    >>> matvec_q8_0(quantize_q8_0(w), np.ones(32, np.float32)).tolist()
    [2032.0, -2032.0]
    """
    return _quantized("matvec_q8_0", Q8_0_BLOCK, w, x, out)


def matvec_q4_0(w: Any, x: Any, out: Any = None) -> np.ndarray:
    """``x @ dequantize_q4_0(w).T`` with ``w`` Q4_0 blocks [N, K / 32 * 18] (uint8, see
    ``metalkit.llm.quant``) and float32 ``x`` [K] or [B, K]. Returns ``out``, [N] or [B, N].

    >>> import numpy as np
    >>> from metalkit.llm import matvec_q4_0, quantize_q4_0
    >>> w = np.full((2, 32), 63.5, np.float32); w[1] *= -1       # exact in Q4_0
    >>> matvec_q4_0(quantize_q4_0(w), np.ones(32, np.float32)).tolist()
    [2032.0, -2032.0]
    """
    return _quantized("matvec_q4_0", Q4_0_BLOCK, w, x, out)
