"""Transformer kernels: the bundled kernels a llama-style model's forward pass runs, each
behind a function that checks its arguments' shapes and launches it with ``metalkit.run``.

================================  =======================================================
function                          bundled kernel (``kernels/``)
================================  =======================================================
``matmul_tiled(a, b)``            ``matmul_tiled``: ``a @ b.T``, register tiles
``matmul_simdgroup(a, b)``        ``matmul_simdgroup``: ``a @ b.T``, ``simdgroup_matrix``
``matvec(w, x)``                  ``matvec``: ``x @ w.T`` for decode
``matvec_q8_0(w, x)``             ``matvec_q8_0``: on GGUF Q8_0 blocks
``matvec_q4_0(w, x)``             ``matvec_q4_0``: on GGUF Q4_0 blocks
``rms_norm(x, w, eps)``           ``rms_norm``
``rope(x, positions, theta)``     ``rope``: llama layout, in place
``softmax(x)``                    ``softmax``: online max and sum
``swiglu(gate, up)``              ``swiglu``: ``silu(gate) * up``
``embedding(table, ids)``         ``embedding``: row gather
``attention_prefill(q, k, v)``    ``attention_prefill``: causal, online softmax
``paged_kv_write(k, v, ...)``     ``paged_kv_write``: new tokens into cache blocks
``paged_attention(q, ...)``       ``paged_attention`` + ``paged_attention_reduce``: split-K
``argmax(logits)``                ``argmax``
``sample_top_k_top_p(...)``       ``sample_top_k_top_p``
================================  =======================================================

``metalkit.llm.quant`` packs weights into GGUF's Q8_0 and Q4_0 blocks and back, in numpy.
``examples/llm`` is a small inference engine built on these functions.

>>> import numpy as np
>>> from metalkit import llm
>>> x = np.array([[1, 2, 3]], np.float32)
>>> llm.argmax(llm.matvec(np.eye(3, dtype=np.float32), x)).tolist()
[2]
"""
from .attention import attention_prefill, paged_attention, paged_kv_write
from .layers import embedding, rms_norm, rope, softmax, swiglu
from .linear import matmul_simdgroup, matmul_tiled, matvec, matvec_q4_0, matvec_q8_0
from .quant import dequantize_q4_0, dequantize_q8_0, quantize_q4_0, quantize_q8_0
from .sampling import argmax, sample_top_k_top_p

__all__ = [
    "argmax", "attention_prefill", "dequantize_q4_0", "dequantize_q8_0", "embedding",
    "matmul_simdgroup", "matmul_tiled", "matvec", "matvec_q4_0", "matvec_q8_0",
    "paged_attention", "paged_kv_write", "quantize_q4_0", "quantize_q8_0", "rms_norm", "rope",
    "sample_top_k_top_p", "softmax", "swiglu",
]
