"""A llama-architecture transformer whose every operation is a metalkit kernel: RMSNorm, RoPE,
grouped-query attention (prefill: causal flash attention; decode: paged, split-K) and a SwiGLU
MLP. Weights are float32 or GGUF's Q8_0/Q4_0 blocks; numpy only reshapes and holds arrays."""
from __future__ import annotations

import numpy as np

import metalkit as mk
from metalkit import llm

import weights as W
from kv_cache import PagedKVCache


def linear(x: np.ndarray, w: W.Weight, prompt: bool) -> np.ndarray:
    """x [T, K] @ w.T: the tiled matmul for a prompt's tokens on float weights; the mat-vec
    kernels for decode (a row per sequence, each output summed in one order whatever the batch,
    so a sequence's numbers do not depend on its batch) and for quantised weights."""
    if w.kind == "q8_0":
        return llm.matvec_q8_0(w.data, x)
    if w.kind == "q4_0":
        return llm.matvec_q4_0(w.data, x)
    return llm.matmul_tiled(x, w.data) if prompt else llm.matvec(w.data, x)


def add_into(x: np.ndarray, y: np.ndarray) -> None:
    """x += y, the residual connection, with the bundled add_arrays kernel."""
    mk.run("add_arrays", x.reshape(-1), y.reshape(-1), x.reshape(-1))


class Llama:
    """The model: ``prefill`` runs a new sequence's prompt, ``decode`` one token for each of a
    batch of sequences; both keep keys and values in a ``PagedKVCache`` from ``new_cache``.
    Decode attention splits a context into partitions of ``partition_size`` tokens."""

    def __init__(self, config: W.Config, weights: dict[str, W.Weight], partition_size: int = 256):
        self.config = config
        self.partition_size = partition_size
        emb = weights["token_embd.weight"]  # the gather kernel reads float32 rows
        embed = emb.data if emb.kind == "f32" else (
            llm.dequantize_q8_0 if emb.kind == "q8_0" else llm.dequantize_q4_0)(emb.data)
        weights = dict(weights, **{"token_embd.weight": W.Weight(embed)})
        if mk.device().backend == "metal":  # copied into device memory once, which the GPU
            # reads in place; the file's read-only maps would be copied at every call
            weights = {n: W.Weight(mk.asarray(w.data), w.kind) for n, w in weights.items()}
        self.w = weights
        self.layers = [{role: weights[name] for role, name in W.layer_names(i).items()}
                       for i in range(config.n_layers)]
        self.embed = weights["token_embd.weight"].data
        self.output = weights.get("output.weight", weights["token_embd.weight"])  # tied if absent

    def new_cache(self, num_blocks: int, block_size: int = 16) -> PagedKVCache:
        c = self.config
        return PagedKVCache(c.n_layers, num_blocks, block_size, c.n_kv_heads, c.head_dim)

    def _qkv(self, x: np.ndarray, layer: dict, positions: np.ndarray, prompt: bool):
        """The attention's queries, keys and values of x [T, dim], rotated to their positions."""
        c, t = self.config, x.shape[0]
        h = llm.rms_norm(x, layer["attn_norm"].data, c.norm_eps)
        q = linear(h, layer["wq"], prompt).reshape(t, c.n_heads, c.head_dim)
        k = linear(h, layer["wk"], prompt).reshape(t, c.n_kv_heads, c.head_dim)
        v = linear(h, layer["wv"], prompt).reshape(t, c.n_kv_heads, c.head_dim)
        llm.rope(q, positions, c.rope_theta)
        llm.rope(k, positions, c.rope_theta)
        return q, k, v

    def _mlp(self, x: np.ndarray, layer: dict, prompt: bool) -> None:
        """x += the SwiGLU MLP of x."""
        h = llm.rms_norm(x, layer["ffn_norm"].data, self.config.norm_eps)
        gate, up = linear(h, layer["w_gate"], prompt), linear(h, layer["w_up"], prompt)
        add_into(x, linear(llm.swiglu(gate, up), layer["w_down"], prompt))

    def _logits(self, x: np.ndarray, prompt: bool) -> np.ndarray:
        h = llm.rms_norm(x, self.w["output_norm.weight"].data, self.config.norm_eps)
        return linear(h, self.output, prompt)

    def prefill(self, tokens: list[int], seq: int, cache: PagedKVCache,
                all_logits: bool = False) -> np.ndarray:
        """Runs a new sequence's prompt, caching its keys and values: the logits of its last
        token [V] (all_logits: of every token, [T, V])."""
        c, t = self.config, len(tokens)
        slots = cache.append(seq, t)
        positions = np.arange(t, dtype=np.int32)
        x = llm.embedding(self.embed, tokens)
        for i, layer in enumerate(self.layers):
            q, k, v = self._qkv(x, layer, positions, prompt=True)
            llm.paged_kv_write(k, v, cache.k[i], cache.v[i], slots)
            attn = llm.attention_prefill(q, k, v).reshape(t, c.dim)
            add_into(x, linear(attn, layer["wo"], prompt=True))
            self._mlp(x, layer, prompt=True)
        if all_logits:
            return self._logits(x, prompt=True)
        return self._logits(x[-1:], prompt=False)[0]

    def decode(self, tokens: list[int], seqs: list[int], cache: PagedKVCache) -> np.ndarray:
        """One step for a batch of running sequences, token b extending sequence seqs[b]:
        their logits [B, V]."""
        c, b = self.config, len(seqs)
        positions = np.array([cache.lengths[s] for s in seqs], np.int32)
        slots = np.concatenate([cache.append(s, 1) for s in seqs])
        tables = cache.block_tables(seqs)
        lens = positions + 1
        x = llm.embedding(self.embed, tokens)
        for i, layer in enumerate(self.layers):
            q, k, v = self._qkv(x, layer, positions, prompt=False)
            llm.paged_kv_write(k, v, cache.k[i], cache.v[i], slots)
            attn = llm.paged_attention(q, cache.k[i], cache.v[i], tables, lens,
                                       partition_size=self.partition_size).reshape(b, c.dim)
            add_into(x, linear(attn, layer["wo"], prompt=False))
            self._mlp(x, layer, prompt=False)
        return self._logits(x, prompt=False)
