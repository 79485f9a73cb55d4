"""Choosing the next token on the bundled kernels of ``sampling.metal``: greedy (argmax) and
top-k/top-p sampling, one threadgroup per row of logits."""
from __future__ import annotations

from typing import Any

import numpy as np

from ..bundled import run
from ._checks import floats, need, output

# Threads per row: 2 SIMD-groups. The simulator runs a threadgroup's SIMD-groups in turn, and
# these kernels make many passes over the row, so more threads cost it more (256: twice the
# time); a GPU may take more (the kernels take any multiple of 32).
_WIDTH = 64


def argmax(logits: Any, out: Any = None) -> np.ndarray:
    """The index of the largest value of each row of float32 ``logits`` [B, V] (the lowest
    index on ties; NaN never wins). Returns ``out``, int32 [B].

    >>> import numpy as np
    >>> from metalkit.llm import argmax
    >>> argmax(np.array([[0, 3, 3], [-1, -2, -3]], np.float32)).tolist()
    [1, 0]
    """
    x = floats("argmax", "logits", logits, ("B", "V"))
    need(x.shape[1] > 0, "argmax", "the rows of logits are empty")
    y = output("argmax", out, (x.shape[0],), np.int32)
    if y.size:
        run("argmax", x, y, x.shape[1], threadgroups=x.shape[0], threadgroup=_WIDTH)
    return y


def sample_top_k_top_p(logits: Any, uniforms: Any, temperature: float = 1.0, top_k: int = 0,
                       top_p: float = 1.0, probs: Any = None, out: Any = None) -> np.ndarray:
    """One token per row of float32 ``logits`` [B, V], drawn from ``softmax(logits /
    temperature)`` restricted to the tokens at least as likely as the ``top_k``-th most likely
    (0: all), then to the most likely of those whose mass first reaches ``top_p`` of theirs
    (ties at a cut are kept). ``uniforms`` [B], in [0, 1), pick the token: the first, in
    vocabulary order, where the running sum of kept probabilities passes ``uniforms[b]`` times
    their total, so the same uniforms give the same tokens. ``probs`` [B, V], if given,
    receives the probabilities. Returns ``out``, int32 [B].

    >>> import numpy as np
    >>> from metalkit.llm import sample_top_k_top_p
    >>> logits = np.log(np.array([[0.5, 0.2, 0.3]], np.float32))
    >>> [int(sample_top_k_top_p(logits, [u], top_p=0.7)[0]) for u in (0.1, 0.7, 0.99)]
    [0, 2, 2]
    """
    kernel = "sample_top_k_top_p"
    x = floats(kernel, "logits", logits, ("B", "V"))
    b, v = x.shape
    u = floats(kernel, "uniforms", np.asarray(uniforms, np.float32), ("B",))
    need(u.shape[0] == b, kernel, f"uniforms holds {u.shape[0]} values for {b} rows of logits")
    need(bool(((u >= 0) & (u < 1)).all()), kernel, "uniforms must be in [0, 1), as "
         "numpy's Generator.random gives them")
    need(v > 0, kernel, "the rows of logits are empty")
    need(temperature > 0, kernel, f"temperature must be positive, got {temperature}; for "
         "greedy decoding use argmax")
    need(0 <= top_k < 2**31, kernel, f"top_k must be 0 (no limit) or a count, got {top_k}")
    need(0 < top_p <= 1, kernel, f"top_p must be in (0, 1], got {top_p}")
    p = output(kernel, probs, (b, v))
    y = output(kernel, out, (b,), np.int32)
    if b:
        run(kernel, x, u, p, y, v, float(temperature), int(top_k), float(top_p),
            threadgroups=b, threadgroup=_WIDTH)
    return y
