"""The transformer's other layers on the bundled kernels: RMSNorm, RoPE, softmax, SwiGLU and the
embedding gather."""
from __future__ import annotations

from typing import Any

import numpy as np

from ..bundled import run
from ._checks import floats, ints, need, output


def _rows(kernel: str, name: str, x: Any) -> tuple[np.ndarray, np.ndarray]:
    """x as [R, C] (a 1-D x is one row) and x itself."""
    x = np.asarray(x)
    need(x.ndim in (1, 2), kernel, f"{name} must be one row [C] or rows [R, C], not of shape "
         f"{x.shape}; reshape it to rows")
    return floats(kernel, name, x.reshape(1, -1) if x.ndim == 1 else x, ("rows", "C")), x


def _width(columns: int) -> int:
    """Threads for a row of ``columns``: a SIMD-group per 1024 values, at most 8. Each thread
    takes 32 values or more: the simulator runs a threadgroup's SIMD-groups in turn, each paying
    for every statement, so idle ones cost time (the kernels take any multiple of 32)."""
    return min(256, 32 * -(-columns // 1024))


def rms_norm(x: Any, w: Any, eps: float = 1e-5, out: Any = None) -> np.ndarray:
    """RMSNorm of each row: ``x / sqrt(mean(x**2) + eps) * w``, for float32 ``x`` [R, D] or
    [D] and weights ``w`` [D]; one threadgroup per row. Returns ``out``, shaped as ``x``.

    >>> import numpy as np
    >>> from metalkit.llm import rms_norm
    >>> rms_norm(np.array([3, -4], np.float32), np.array([1, 2], np.float32), eps=0).round(4)
    array([ 0.8485, -2.2627], dtype=float32)
    """
    x2, x = _rows("rms_norm", "x", x)
    w = floats("rms_norm", "w", w, ("D",))
    need(w.shape[0] == x2.shape[1], "rms_norm", f"w holds {w.shape[0]} weights but the rows of x "
         f"hold {x2.shape[1]} values; w must have one weight per column")
    need(eps >= 0, "rms_norm", f"eps must not be negative, got {eps}")
    y = output("rms_norm", out, x.shape)
    if y.size:
        run("rms_norm", x2, w, y, x2.shape[1], float(eps), threadgroups=x2.shape[0],
            threadgroup=_width(x2.shape[1]))
    return y


def rope(x: Any, positions: Any, theta: float = 10000.0) -> np.ndarray:
    """Rotary position embedding of float32 ``x`` [T, H, D] **in place**, llama layout: in each
    head the pairs (x[2i], x[2i + 1]) turn by ``positions[t] * theta ** (-2i / D)``. Returns x.

    >>> import numpy as np
    >>> from metalkit.llm import rope
    >>> x = np.array([[[1, 0, 1, 0]]], np.float32)           # one token, one head, D = 4
    >>> rope(x, [1], theta=1.0).astype(float).round(4).tolist()  # both pairs turn by 1 radian
    [[[0.5403, 0.8415, 0.5403, 0.8415]]]
    """
    x = floats("rope", "x", x, ("T", "H", "D"))
    t, h, d = x.shape
    need(d % 2 == 0, "rope", f"the head dimension D = {d} must be even: RoPE turns pairs")
    need(theta > 0, "rope", f"theta must be positive, got {theta}")
    pos = ints("rope", "positions", positions, 1, 0, 2**31 - 1, "positions are token indices")
    need(pos.shape[0] == t, "rope", f"positions holds {pos.shape[0]} values for {t} tokens; "
         "give one position per token (the first dimension of x)")
    if x.size:
        run("rope", x, pos, h, d, float(theta), grid=(d // 2, h, t))
    return x


def softmax(x: Any, out: Any = None) -> np.ndarray:
    """Softmax of each row of float32 ``x`` [R, C] or [C], safe against overflow; one
    threadgroup per row. Returns ``out``, shaped as ``x``.

    >>> import numpy as np
    >>> from metalkit.llm import softmax
    >>> softmax(np.array([1000, 1000, -np.inf], np.float32)).tolist()
    [0.5, 0.5, 0.0]
    """
    x2, x = _rows("softmax", "x", x)
    y = output("softmax", out, x.shape)
    if y.size:
        run("softmax", x2, y, x2.shape[1], threadgroups=x2.shape[0],
            threadgroup=_width(x2.shape[1]))
    return y


def swiglu(gate: Any, up: Any, out: Any = None) -> np.ndarray:
    """``silu(gate) * up`` elementwise, ``silu(g) = g / (1 + exp(-g))``, for float32 arrays of
    one shape. Returns ``out``, of that shape.

    >>> import numpy as np
    >>> from metalkit.llm import swiglu
    >>> y = swiglu(np.array([0, 2], np.float32), np.array([5, 1], np.float32))
    >>> y.astype(float).round(4).tolist()
    [0.0, 1.7616]
    """
    gate, up = np.asarray(gate), np.asarray(up)
    floats("swiglu", "gate", gate, ("n",) * gate.ndim)
    floats("swiglu", "up", up, ("n",) * up.ndim)
    need(gate.shape == up.shape, "swiglu", f"gate {gate.shape} and up {up.shape} must have the "
         "same shape")
    y = output("swiglu", out, gate.shape)
    if y.size:
        run("swiglu", gate, up, y, grid=gate.size)
    return y


def embedding(table: Any, ids: Any, out: Any = None) -> np.ndarray:
    """The rows of float32 ``table`` [V, D] for token ``ids`` [T]. Returns ``out`` [T, D].

    >>> import numpy as np
    >>> from metalkit.llm import embedding
    >>> table = np.arange(6, dtype=np.float32).reshape(3, 2)
    >>> embedding(table, [2, 0, 2]).tolist()
    [[4.0, 5.0], [0.0, 1.0], [4.0, 5.0]]
    """
    table = floats("embedding", "table", table, ("V", "D"))
    v, d = table.shape
    ids = ints("embedding", "ids", ids, 1, 0, v, f"token ids index the table's {v} rows")
    y = output("embedding", out, (ids.shape[0], d))
    if y.size:
        run("embedding", table, ids, y, d, grid=(-(-d // 4), ids.shape[0]))
    return y
