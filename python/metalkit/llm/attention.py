"""Attention on the bundled kernels: causal prefill with the flash-attention online softmax
(``attention_prefill.metal``), and decode over a paged KV cache with split-K
(``paged_attention.metal``). Heads are grouped-query: Hq query heads share Hkv key/value heads,
query head h reading key/value head ``h // (Hq // Hkv)``."""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..bundled import run
from ._checks import floats, ints, need, output

MAX_HEAD_DIM = 128  # the kernels keep a row of the head in registers


def _heads(kernel: str, d: int, hq: int, hkv: int) -> None:
    need(d % 4 == 0 and 0 < d <= MAX_HEAD_DIM, kernel, f"the head dimension D = {d} must be a "
         f"multiple of 4 up to {MAX_HEAD_DIM}")
    need(hkv > 0 and hq % hkv == 0, kernel, f"{hq} query heads cannot share {hkv} key/value "
         "heads evenly; Hq must be a multiple of Hkv")


def attention_prefill(q: Any, k: Any, v: Any, scale: float | None = None,
                      out: Any = None) -> np.ndarray:
    """Causal attention of a prompt: ``q`` [T, Hq, D], ``k`` and ``v`` [T, Hkv, D] (float32);
    token t attends to tokens 0..t with ``softmax(q @ k.T * scale)``, ``scale`` defaulting to
    ``1 / sqrt(D)``. One thread per (token, query head). Returns ``out`` [T, Hq, D].

    >>> import numpy as np
    >>> from metalkit.llm import attention_prefill
    >>> q = np.ones((2, 1, 4), np.float32); k = q.copy()
    >>> v = np.array([[[1, 1, 1, 1]], [[3, 3, 3, 3]]], np.float32)
    >>> attention_prefill(q, k, v)[:, 0, 0].tolist()   # token 0 sees itself; token 1 both, equally
    [1.0, 2.0]
    """
    q = floats("attention_prefill", "q", q, ("T", "Hq", "D"))
    k = floats("attention_prefill", "k", k, ("T", "Hkv", "D"))
    v = floats("attention_prefill", "v", v, ("T", "Hkv", "D"))
    t, hq, d = q.shape
    need(k.shape == v.shape and k.shape[0] == t and k.shape[2] == d, "attention_prefill",
         f"k {k.shape} and v {v.shape} must both be [T, Hkv, D] with T = {t}, D = {d} as q")
    _heads("attention_prefill", d, hq, k.shape[1])
    y = output("attention_prefill", out, q.shape)
    if y.size:
        s = 1 / math.sqrt(d) if scale is None else float(scale)
        run("attention_prefill", q, k, v, y, t, hq, k.shape[1], d, s, grid=(t, hq))
    return y


def _cache(kernel: str, k_cache: Any, v_cache: Any) -> tuple[np.ndarray, np.ndarray]:
    dims = ("num_blocks", "block_size", "Hkv", "D")
    kc = floats(kernel, "k_cache", k_cache, dims)
    vc = floats(kernel, "v_cache", v_cache, dims)
    need(kc.shape == vc.shape, kernel, f"k_cache {kc.shape} and v_cache {vc.shape} must have "
         "the same shape")
    return kc, vc


def paged_kv_write(k: Any, v: Any, k_cache: Any, v_cache: Any, slots: Any) -> None:
    """Stores the keys and values of T new tokens, ``k`` and ``v`` [T, Hkv, D], in the paged
    caches [num_blocks, block_size, Hkv, D] at ``slots`` [T]: token t goes to block
    ``slots[t] // block_size``, row ``slots[t] % block_size``.

    >>> import numpy as np
    >>> from metalkit.llm import paged_kv_write
    >>> kc = np.zeros((2, 2, 1, 4), np.float32); vc = np.zeros_like(kc)   # 2 blocks of 2 tokens
    >>> k = np.ones((1, 1, 4), np.float32)
    >>> paged_kv_write(k, 2 * k, kc, vc, slots=[3])                      # block 1, row 1
    >>> kc[1, 1, 0].tolist(), vc[1, 1, 0].tolist()
    ([1.0, 1.0, 1.0, 1.0], [2.0, 2.0, 2.0, 2.0])
    """
    k = floats("paged_kv_write", "k", k, ("T", "Hkv", "D"))
    v = floats("paged_kv_write", "v", v, ("T", "Hkv", "D"))
    kc, vc = _cache("paged_kv_write", k_cache, v_cache)
    need(k.shape == v.shape and k.shape[1:] == kc.shape[2:], "paged_kv_write",
         f"k {k.shape} and v {v.shape} must be [T, Hkv, D] with Hkv, D = {kc.shape[2:]} as "
         "the caches")
    rows = kc.shape[0] * kc.shape[1]
    s = ints("paged_kv_write", "slots", slots, 1, 0, rows, f"the caches hold {rows} token slots")
    need(s.shape[0] == k.shape[0], "paged_kv_write", f"slots holds {s.shape[0]} slots for "
         f"{k.shape[0]} tokens; give one slot per token")
    need(len(np.unique(s)) == len(s), "paged_kv_write", "two tokens share a slot; give each "
         "token its own")
    if k.size:
        width = k.shape[1] * k.shape[2]
        run("paged_kv_write", k, v, kc, vc, s, width, grid=(width, k.shape[0]))


def paged_attention(q: Any, k_cache: Any, v_cache: Any, block_tables: Any, context_lens: Any,
                    scale: float | None = None, partition_size: int = 256,
                    out: Any = None) -> np.ndarray:
    """Attention of one new token per sequence over its cached context: ``q`` [B, Hq, D];
    ``k_cache``, ``v_cache`` [num_blocks, block_size, Hkv, D]; sequence b's context is its
    first ``context_lens[b]`` tokens, stored in the blocks ``block_tables[b]`` lists (entries
    past its context are not read; -1 is fine there). The context is split into partitions of
    ``partition_size`` tokens run in parallel and combined after (split-K). ``scale``
    defaults to ``1 / sqrt(D)``. Returns ``out`` [B, Hq, D].

    >>> import numpy as np
    >>> from metalkit.llm import paged_attention
    >>> kc = np.ones((3, 2, 1, 4), np.float32); vc = np.arange(3.0, dtype=np.float32)[:, None,
    ...     None, None] * kc                                # block i holds values i
    >>> q = np.ones((1, 1, 4), np.float32)
    >>> paged_attention(q, kc, vc, block_tables=[[2, 0]], context_lens=[4])[0, 0].tolist()
    [1.0, 1.0, 1.0, 1.0]
    """
    kernel = "paged_attention"
    q = floats(kernel, "q", q, ("B", "Hq", "D"))
    kc, vc = _cache(kernel, k_cache, v_cache)
    b, hq, d = q.shape
    nblocks, bs, hkv, dc = kc.shape
    need(dc == d, kernel, f"q has D = {d} but the caches {dc}")
    _heads(kernel, d, hq, hkv)
    need(partition_size > 0, kernel, f"partition_size must be positive, got {partition_size}")
    tables = ints(kernel, "block_tables", block_tables, 2, -2**31, 2**31 - 1, "")
    need(tables.shape[0] == b, kernel, f"block_tables has {tables.shape[0]} rows for {b} "
         "sequences; give one row per sequence")
    lens = ints(kernel, "context_lens", context_lens, 1, 1, tables.shape[1] * bs + 1,
                f"a context holds 1 to {tables.shape[1]} blocks of {bs} tokens")
    need(lens.shape[0] == b, kernel, f"context_lens holds {lens.shape[0]} lengths for {b} "
         "sequences")
    for i in range(b):  # the blocks a context uses must exist
        used = tables[i, :-(-int(lens[i]) // bs)]
        bad = used[(used < 0) | (used >= nblocks)]
        if bad.size:
            need(False, kernel, f"block_tables[{i}] lists block {int(bad[0])} for its context "
                 f"of {int(lens[i])} tokens, outside the cache's {nblocks} blocks")
    y = output(kernel, out, q.shape)
    if y.size:
        s = 1 / math.sqrt(d) if scale is None else float(scale)
        parts = -(-int(lens.max()) // partition_size)
        acc = output(kernel, None, (b, hq, parts, d))  # each partition's share
        mx = output(kernel, None, (b, hq, parts))
        sm = output(kernel, None, (b, hq, parts))
        run(kernel, q, kc, vc, tables, lens, acc, mx, sm, hq, hkv, d, bs, tables.shape[1],
            partition_size, s, grid=(hq, parts, b))
        run("paged_attention_reduce", acc, mx, sm, y, parts, d, grid=(d, b * hq))
    return y
