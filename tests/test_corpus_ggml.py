"""llama.cpp's own Metal kernels (ggml-metal.metal from the corpus), launched as its host code does.

Each recipe builds random inputs, launches one ggml kernel with the kargs, function
constants, threadgroup memory and geometry that ggml-metal-ops.cpp / ggml-metal-device.cpp
use for such an op, and checks the output against numpy. Every recipe runs under each
execution model, and the models' outputs are compared bit for bit.

Shapes are chosen so that rows, tiles and threadgroups do not divide evenly. Kernels that
read past a tensor's last row (as ggml's do, inside its larger buffers) get their inputs
with a tail of slack bytes, see ``src``.
"""
from __future__ import annotations

import functools
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import pytest

import metalkit as mk
from corpus import require
from ggml_quants import TYPES, QuantType, random_blocks

GGML_METAL = require("ggml/ggml-metal.metal")

EXECUTIONS = ["auto", "threads"]

# function-constant bases, from ggml-metal-impl.h
FC_FLASH_ATTN_EXT_PAD = 100
FC_FLASH_ATTN_EXT_BLK = 200
FC_FLASH_ATTN_EXT = 300
FC_FLASH_ATTN_EXT_VEC = 400
FC_FLASH_ATTN_EXT_VEC_REDUCE = 500
FC_MUL_MV = 600
FC_MUL_MM = 700
FC_ROPE = 800
FC_UNARY = 1200
FC_BIN = 1300
FC_SUM_ROWS = 1400


@functools.lru_cache(maxsize=None)
def library(execution: str) -> mk.Library:
    if execution == "auto":
        return mk.load(GGML_METAL)
    return mk.load(GGML_METAL, execution=execution)


# ---- recipe plumbing ------------------------------------------------------------------

@dataclass
class Check:
    """One output of a recipe and what numpy says it should be."""
    what: str
    got: np.ndarray
    want: np.ndarray
    rtol: float = 0.0
    atol: float = 0.0

    def verify(self) -> None:
        if self.rtol == 0 and self.atol == 0:
            np.testing.assert_array_equal(self.got, self.want, err_msg=self.what)
        else:
            np.testing.assert_allclose(self.got, self.want, rtol=self.rtol, atol=self.atol, err_msg=self.what)


Recipe = Callable[[mk.Library, str], "list[Check]"]
RECIPES: dict[str, Recipe] = {}
ISOLATED: set[str] = set()  # recipes run in a child process: a crash there fails the test, not the run
# Recipes whose kernel relies on the lanes of a SIMD-group running in lockstep, as Apple GPUs run them:
# name -> what relies on what. They run under "auto" only; "threads" (no lockstep) is wrong there by design.
LOCKSTEP: dict[str, str] = {}


def recipe(*names: str, isolate: bool = False) -> Callable[[Recipe], Recipe]:
    def register(fn: Recipe) -> Recipe:
        for name in names:
            assert name not in RECIPES, name
            RECIPES[name] = fn
            if isolate:
                ISOLATED.add(name)
        return fn
    return register


def rng_for(name: str) -> np.random.Generator:
    return np.random.default_rng(sum(name.encode()) * 7919 + len(name))


def kargs(kernel, values: dict, arg: int = 0) -> np.ndarray:
    """The kargs struct of ``kernel`` (parameter ``arg``) with every field taken from ``values``."""
    dtype = kernel.args[arg].dtype
    missing = [f for f in dtype.names if f not in values]
    assert not missing, f"{kernel.name}: kargs fields without a value: {missing}"
    p = np.zeros((), dtype)
    for f in dtype.names:
        p[f] = values[f]
    return p


def dims(tag: str, a: np.ndarray, qk: int = 1) -> dict:
    """ggml's ne{tag}0..3 / nb{tag}0..3 of array ``a``: ggml's dim 0 is numpy's last axis.

    For quantized rows (arrays of blocks) ``qk`` is the values per block: ne0 counts values,
    nb0 is the block size, as in ggml.
    """
    ne = list(a.shape[::-1]) + [1] * (4 - a.ndim)
    nb = list(a.strides[::-1]) + [a.nbytes] * (4 - a.ndim)
    ne[0] *= qk
    return {**{f"ne{tag}{i}": ne[i] for i in range(4)}, **{f"nb{tag}{i}": nb[i] for i in range(4)}}


SLACK = 1 << 16


def src(a: np.ndarray) -> np.ndarray:
    """``a``'s bytes, for a ``device const char*``, followed by SLACK random bytes it may read past its end."""
    buf = np.random.default_rng(1).integers(-128, 128, a.nbytes + SLACK, dtype=np.int8)
    buf[:a.nbytes] = np.ascontiguousarray(a).reshape(-1).view(np.int8)
    return buf


def dst(a: np.ndarray) -> np.ndarray:
    """``a`` in place, for a ``device char*`` output."""
    assert a.flags.c_contiguous
    return a.reshape(-1).view(np.int8)


def tg_memory(kernel, nbytes: int) -> dict | None:
    """ggml sets threadgroup memory 0 to the pipeline's size whether or not the kernel declares it;
    metalkit takes it only for a declared ``[[threadgroup(0)]]`` parameter."""
    declared = any(a.kind == "threadgroup" and a.index == 0 for a in kernel.args)
    return {0: nbytes} if declared else None


def normal(rng: np.random.Generator, *shape: int, dtype=np.float32) -> np.ndarray:
    return rng.standard_normal(shape, dtype=np.float32).astype(dtype)


def nans(*shape: int, dtype=np.float32) -> np.ndarray:
    """An output buffer: what the kernel does not write stays NaN and fails the check."""
    return np.full(shape, np.nan, dtype)


def scaled_tol(want: np.ndarray, rel: float) -> float:
    """An absolute tolerance of ``rel`` times the largest expected magnitude (sums of many products)."""
    return rel * float(np.abs(want).max())


# ---- matrix multiplication --------------------------------------------------------------

def _weights(rng: np.random.Generator, type_name: str, shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray, int]:
    """src0 of a mul_mat: (the array the kernel reads, its float64 values, values per block)."""
    if type_name in ("f32", "f16"):
        a = normal(rng, *shape, dtype=np.float32 if type_name == "f32" else np.float16)
        return a, a.astype(np.float64), 1
    t: QuantType = TYPES[type_name]
    b = random_blocks(t, rng, (*shape[:-1], shape[-1] // t.qk))
    return b, t.dequantize(b).astype(np.float64), t.qk


def _mul_mat_problem(name: str, type_name: str, ne00: int, ne01: int, ne11: int, ne02: int = 1, ne12: int = 2):
    """src0 (ne02 matrices ne01 x ne00), src1 (ne12 batches of ne11 rows), broadcast as ggml does (r2 = ne12/ne02)."""
    rng = rng_for(name)
    a, a64, qk = _weights(rng, type_name, (ne02, ne01, ne00))
    b = normal(rng, ne12, ne11, ne00)
    out = nans(ne12, ne11, ne01)
    fields = {**dims("0", a, qk), **dims("1", b), **dims("", out), "r2": ne12 // ne02, "r3": 1}
    return a, a64, b, out, fields


def _mul_mat_ref(a64: np.ndarray, b: np.ndarray) -> np.ndarray:
    r2 = b.shape[0] // a64.shape[0]
    return np.einsum("bmk,bnk->bnm", np.repeat(a64, r2, axis=0), b.astype(np.float64))


# kernel_mul_mv_<t>_f32: (type, ne00). f32/f16 pick "_4" when ne00 % 4 == 0 and "_short" below 32.
MUL_MV = {
    "kernel_mul_mv_f32_f32": ("f32", 1001),
    "kernel_mul_mv_f32_f32_4": ("f32", 1000),
    "kernel_mul_mv_f32_f32_short": ("f32", 19),
    "kernel_mul_mv_f16_f32": ("f16", 517),
    "kernel_mul_mv_f16_f32_4": ("f16", 4100),
    "kernel_mul_mv_f16_f32_short": ("f16", 27),
    "kernel_mul_mv_q4_0_f32": ("q4_0", 32 * 37),
    "kernel_mul_mv_q8_0_f32": ("q8_0", 32 * 37),
    "kernel_mul_mv_q4_K_f32": ("q4_K", 256 * 5),
}
# rows per simdgroup and simdgroups per threadgroup of the quantized mat-vec kernels (N_R0_*, N_SG_*)
MUL_MV_Q = {"q4_0": (4, 2), "q8_0": (2, 4), "q4_K": (2, 2)}


@recipe(*MUL_MV)
def mul_mv(lib: mk.Library, name: str) -> list[Check]:
    type_name, ne00 = MUL_MV[name]
    ne01, ne11 = 37, 3
    a, a64, b, out, fields = _mul_mat_problem(name, type_name, ne00, ne01, ne11)
    # ggml_metal_library_get_pipeline_mul_mv: the geometry of each src0 type
    if name.endswith("_short"):
        nsg, nr0, smem = 1, 32, 0
    elif type_name in ("f32", "f16"):
        nsg, nr0, smem = min(4, (ne00 + 127) // 128), 2, 32 * 4 * 2
    else:
        nr0, nsg = MUL_MV_Q[type_name]
        smem = 32 * 4 * nr0 if type_name == "q8_0" else 0
    k = lib.specialize(name, {FC_MUL_MV + 0: nsg, FC_MUL_MV + 2: 2, FC_MUL_MV + 3: 2, FC_MUL_MV + 4: 1})
    # ggml_metal_op_mul_mat: f32/f16/q8_0 threadgroups cover nr0 rows, the others nr0*nsg
    rows_per_tg = nr0 if type_name in ("f32", "f16", "q8_0") else nr0 * nsg
    k(kargs(k, {**fields, "nr0": nr0}), src(a), src(b), dst(out),
      threadgroups=(-(-ne01 // rows_per_tg), ne11, 2), threadgroup=(32, nsg, 1),
      threadgroup_memory=tg_memory(k, smem))
    want = _mul_mat_ref(a64, b)
    return [Check("dst", out, want, rtol=1e-4, atol=scaled_tol(want, 1e-5))]


# kernel_mul_mv_ext_<t>_f32_r1_<n>: used for 2 <= ne11 <= 8 (4..8 for k-quants), ne00 % 128 == 0
MUL_MV_EXT = {f"kernel_mul_mv_ext_{t}_f32_r1_{r}": (t, r) for t in ("f32", "f16", "q4_0", "q8_0", "q4_K")
              for r in (2, 3, 4, 5)}
# ggml_metal_op_mul_mat picks r1ptg from ne11; one ne11 per r1ptg, not a multiple of it where it can
MUL_MV_EXT_NE11 = {2: 2, 3: 6, 4: 7, 5: 5}


@recipe(*MUL_MV_EXT)
def mul_mv_ext(lib: mk.Library, name: str) -> list[Check]:
    type_name, r1ptg = MUL_MV_EXT[name]
    ne11 = MUL_MV_EXT_NE11[r1ptg]
    ne00 = 512 if type_name == "q4_K" else 384
    ne01 = 45
    a, a64, b, out, fields = _mul_mat_problem(name, type_name, ne00, ne01, ne11)
    nsg = 2
    nxpsg = 16 if ne00 % 256 == 0 and ne11 < 3 else 8
    r0ptg = (32 // nxpsg) * nsg
    k = lib.specialize(name, {FC_MUL_MV + 0: nsg, FC_MUL_MV + 1: nxpsg, FC_MUL_MV + 2: 2,
                              FC_MUL_MV + 3: 2, FC_MUL_MV + 4: 1})
    k(kargs(k, fields), src(a), src(b), dst(out),
      threadgroups=(-(-ne01 // r0ptg), -(-ne11 // r1ptg), 2), threadgroup=(32, nsg, 1))
    want = _mul_mat_ref(a64, b)
    return [Check("dst", out, want, rtol=1e-4, atol=scaled_tol(want, 1e-5))]


MUL_MM = {f"kernel_mul_mm_{t}_f32": (t, n) for t, n in
          (("f32", 200), ("f16", 328), ("q4_0", 320), ("q8_0", 288), ("q4_K", 512))}


@recipe(*MUL_MM)
def mul_mm(lib: mk.Library, name: str) -> list[Check]:
    type_name, ne00 = MUL_MM[name]
    ne01, ne11 = 75, 41  # neither a multiple of the 64 x 32 output tile
    a, a64, b, out, fields = _mul_mat_problem(name, type_name, ne00, ne01, ne11)
    # ggml_metal_library_get_pipeline_mul_mm without tensor API: 64 x 32 tiles, 4 simdgroups;
    # bounds checks on partial input blocks (bc_inp) and partial output tiles (bc_out)
    bc_inp, bc_out = ne00 % 32 != 0, ne01 % 64 != 0 or ne11 % 32 != 0
    k = lib.specialize(name, {FC_MUL_MM + 0: bc_inp, FC_MUL_MM + 1: bc_out, FC_MUL_MM + 2: 2,
                              FC_MUL_MM + 3: 1, FC_MUL_MM + 4: 2, FC_MUL_MM + 5: 1})
    k(kargs(k, fields), src(a), src(b), dst(out),
      threadgroups=(-(-ne11 // 32), -(-ne01 // 64), 2), threadgroup=(32, 4, 1),
      threadgroup_memory={0: 8192 if bc_out else 4096 + 2048})
    # the kernel stages both operands as half in threadgroup memory and accumulates in float
    want = _mul_mat_ref(a64.astype(np.float16).astype(np.float64), b.astype(np.float16))
    return [Check("dst", out, want, rtol=1e-3, atol=scaled_tol(want, 1e-4))]


# ---- softmax, norms, rope -------------------------------------------------------------

MAX_THREADS = 1024  # the pipelines' maxTotalThreadsPerThreadgroup the host code clamps to


@recipe("kernel_soft_max_f32", "kernel_soft_max_f32_4", "kernel_soft_max_f16", "kernel_soft_max_f16_4")
def soft_max(lib: mk.Library, name: str) -> list[Check]:
    """softmax(x*scale + slope*mask) per row, with ALiBi slopes per head and attention sinks (src2)."""
    rng = rng_for(name)
    ne00 = 1000 if name.endswith("_4") else 1001  # ggml_metal_library_get_pipeline_soft_max: "_4" iff ne00 % 4 == 0
    ne01, ne02, ne03 = 2, 3, 1
    x = normal(rng, ne03, ne02, ne01, ne00)
    mask = normal(rng, 1, 1, ne01, ne00, dtype=np.float16 if "_f16" in name else np.float32)
    sinks = normal(rng, ne02)
    out = nans(*x.shape)
    scale, max_bias = 0.7, 8.0
    # ggml_metal_op_soft_max: ALiBi bases and the threads per row
    n_head_log2 = 1 << int(np.floor(np.log2(ne02)))
    m0, m1 = 2.0 ** (-max_bias / n_head_log2), 2.0 ** (-(max_bias / 2) / n_head_log2)
    nth, n = 32, ne00 // 4 if ne00 % 4 == 0 else ne00
    while nth < n and nth * ne01 * ne02 * ne03 < 256:
        nth *= 2
    k = lib[name]
    fields = {**dims("0", x), **dims("1", mask), **dims("", out), "scale": scale, "max_bias": max_bias,
              "m0": m0, "m1": m1, "n_head_log2": n_head_log2}
    k(kargs(k, fields), src(x), src(mask), src(sinks), dst(out),
      threadgroups=(ne01, ne02, ne03), threadgroup=(nth, 1, 1), threadgroup_memory={0: 32 * 4})
    h = np.arange(ne02)
    slope = np.where(h < n_head_log2, m0 ** (h + 1), m1 ** (2 * (h - n_head_log2) + 1))
    logits = x.astype(np.float64) * scale + slope[None, :, None, None] * mask.astype(np.float64)
    top = np.maximum(logits.max(-1, keepdims=True), sinks[None, :, None, None])
    e = np.exp(logits - top)
    want = e / (e.sum(-1, keepdims=True) + np.exp(sinks[None, :, None, None] - top))
    return [Check("dst", out, want, rtol=1e-4, atol=1e-7)]


NORMS = {f"kernel_{kind}_{fuse}f32{vec}": (kind, fuse.count("_") + 1, vec)
         for kind in ("norm", "rms_norm") for fuse in ("", "mul_", "mul_add_") for vec in ("", "_4")}


@recipe(*NORMS)
def norm(lib: mk.Library, name: str) -> list[Check]:
    """(rms_)norm of each row, optionally fused with a broadcast mul and add as ggml_metal_op_norm fuses them."""
    kind, n_fuse, vec = NORMS[name]
    rng = rng_for(name)
    ne00 = 4100 if vec else 1001  # "_4" iff ne00 % 4 == 0
    x = normal(rng, 2, 3, 5, ne00) + 0.3
    ops = [normal(rng, 1, 3, 1, ne00) for _ in range(n_fuse - 1)]  # broadcast over dims 1 and 3
    out = nans(*x.shape)
    eps = 1e-5
    ne00_t = ne00 // 4 if ne00 % 4 == 0 else ne00
    # unfused slots keep ggml's {n} initialisers: ne (and nb) of src0 in slot 0, zeros after
    nef = np.zeros((3, 3), np.int32)
    nbf = np.zeros((3, 3), np.uint64)
    for slot, t in enumerate([x, *ops]):
        nef[:, slot] = t.shape[2::-1]
        nbf[:, slot] = t.strides[2::-1]
    k = lib[name]
    fields = {**dims("", out), "ne00": ne00, "ne00_t": ne00_t, "eps": eps,
              "nef1": nef[0], "nef2": nef[1], "nef3": nef[2], "nbf1": nbf[0], "nbf2": nbf[1], "nbf3": nbf[2]}
    nth = 32
    while nth < ne00_t and nth < MAX_THREADS:
        nth *= 2
    nth = min(nth, MAX_THREADS, (ne00_t + 31) // 32 * 32)
    bufs = [src(t) for t in ops] + [src(x)] * (2 - len(ops))  # unfused operands: src0 again, as ggml binds them
    k(kargs(k, fields), src(x), *bufs, dst(out),
      threadgroups=(5, 3, 2), threadgroup=(nth, 1, 1), threadgroup_memory={0: 32 * 4})
    x64 = x.astype(np.float64)
    if kind == "norm":
        x64 = x64 - x64.mean(-1, keepdims=True)
    want = x64 / np.sqrt((x64 ** 2).mean(-1, keepdims=True) + eps)
    for t in ops[:1]:
        want = want * t
    for t in ops[1:]:
        want = want + t
    return [Check("dst", out, want, rtol=1e-4, atol=1e-5)]


@recipe("kernel_group_norm_f32")
def group_norm(lib: mk.Library, name: str) -> list[Check]:
    rng = rng_for(name)
    ne00, ne01, ne02, ngrp = 37, 11, 12, 4  # groups of 3 channels (dim 2) of 11 x 37 values
    x = normal(rng, ne02, ne01, ne00) * 2 + 0.5
    out = nans(*x.shape)
    eps = 1e-6
    k = lib[name]
    fields = {**dims("0", x), "ngrp": ngrp, "eps": eps}
    k(kargs(k, fields), x, out, threadgroups=(ngrp, 1, 1), threadgroup=(32, 1, 1), threadgroup_memory={0: 32 * 4})
    g = x.astype(np.float64).reshape(ngrp, -1)
    g = g - g.mean(-1, keepdims=True)
    want = (g / np.sqrt((g ** 2).mean(-1, keepdims=True) + eps)).reshape(x.shape)
    return [Check("dst", out, want, rtol=1e-4, atol=1e-5)]


@recipe("kernel_rope_norm_f32", "kernel_rope_neox_f32", "kernel_rope_norm_f16", "kernel_rope_neox_f16")
def rope(lib: mk.Library, name: str) -> list[Check]:
    """Rotary embedding of the first n_dims of each head, with frequency factors (src2); neox pairs i with i + n_dims/2."""
    rng = rng_for(name)
    dtype = np.float16 if name.endswith("f16") else np.float32
    head_dim, n_head, n_tok, n_dims = 72, 5, 7, 48
    x = normal(rng, 1, n_tok, n_head, head_dim, dtype=dtype)
    pos = rng.integers(0, 200, n_tok).astype(np.int32)
    freq_factors = rng.uniform(0.5, 2.0, n_dims // 2).astype(np.float32)
    out = np.full_like(x, np.nan)
    freq_base, freq_scale = 10000.0, 0.5
    k = lib.specialize(name, {FC_ROPE + 0: False, FC_ROPE + 1: False})
    fields = {**dims("0", x), **dims("", out), "n_past": 0, "n_dims": n_dims, "n_offs": 0, "n_ctx_orig": 4096,
              "freq_base": freq_base, "freq_scale": freq_scale, "ext_factor": 0.0, "attn_factor": 1.0,
              "beta_fast": 32.0, "beta_slow": 1.0, "sect_0": 0, "sect_1": 0, "sect_2": 0, "sect_3": 0,
              "src2": True, "inplace": False}
    k(kargs(k, fields), x.view(np.int8).reshape(-1), pos.view(np.int8), freq_factors.view(np.int8),
      dst(out), threadgroups=(n_head, n_tok, 1), threadgroup=(min(1024, head_dim), 1, 1))
    ic = np.arange(n_dims // 2)
    theta = (pos[:, None] * freq_base ** (-2.0 * ic / n_dims) / freq_factors * freq_scale)[None, :, None, :]
    x64 = x.astype(np.float64)
    if "neox" in name:
        i0, i1 = ic, ic + n_dims // 2
    else:
        i0, i1 = 2 * ic, 2 * ic + 1
    want = x64.copy()
    want[..., i0] = x64[..., i0] * np.cos(theta) - x64[..., i1] * np.sin(theta)
    want[..., i1] = x64[..., i0] * np.sin(theta) + x64[..., i1] * np.cos(theta)
    tol = 2e-3 if dtype == np.float16 else 1e-4
    return [Check("dst", out, want, rtol=tol, atol=tol)]


# ---- flash attention ---------------------------------------------------------------------

MAXHALF = 65504.0
FA_D = 64  # head size of K and V: kernel_flash_attn_ext*_f16_dk64_dv64


@dataclass
class Attention:
    """A flash-attention problem in ggml's layout: q (1, heads, queries, D) f32, k/v (1, kv_heads, n_kv, D) f16,
    and an f16 mask (1, 1, rows, n_kv) whose storage has ``mask_rows`` >= queries rows."""
    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    mask: np.ndarray
    n_queries: int
    scale: float

    @property
    def n_kv(self) -> int:
        return self.k.shape[2]

    @property
    def d(self) -> int:
        """The head size of K and V (both the same here)."""
        return self.k.shape[3]

    def fields(self, out: np.ndarray | None = None) -> dict:
        """The kargs fields ggml_metal_op_flash_attn_ext fills for every FA kernel (no ALiBi, no softcap)."""
        q, k, v, m = self.q, self.k, self.v, self.mask
        f = {**dims("0", q), **dims("1", k), **dims("2", v), **dims("3", m)}
        f.update(ne01=self.n_queries, ne31=self.n_queries, ne_12_2=k.shape[1], ne_12_3=k.shape[0],
                 ns10=k.strides[2] // k.itemsize, ns20=v.strides[2] // v.itemsize,
                 scale=self.scale, max_bias=0.0, m0=1.0, m1=1.0, n_head_log2=1, logit_softcap=0.0)
        if out is not None:
            f.update(dims("", out))
        return f

    def reference(self) -> np.ndarray:
        """softmax(scale * q.k + mask) @ v per head, (1, queries, heads, D) as the kernels write it; q as half, as staged."""
        heads, kv_heads = self.q.shape[1], self.k.shape[1]
        q = self.q[:, :, :self.n_queries].astype(np.float16).astype(np.float64)
        k = np.repeat(self.k.astype(np.float64), heads // kv_heads, axis=1)
        v = np.repeat(self.v.astype(np.float64), heads // kv_heads, axis=1)
        s = self.scale * q @ k.transpose(0, 1, 3, 2) + self.mask[:, :, :self.n_queries].astype(np.float64)
        p = np.exp(s - s.max(-1, keepdims=True))
        return (p / p.sum(-1, keepdims=True) @ v).transpose(0, 2, 1, 3)


def _attention(name: str, n_queries: int, n_kv: int = 200, d: int = FA_D) -> Attention:
    """4 query heads over 2 KV heads; n_kv = 200 is not a multiple of the 64 (or 32) KV chunk, so the
    last chunk goes through the pad buffer. The mask has a fully masked block, an all-zero block and
    random blocks, so the blk pass sees every class."""
    rng = rng_for(name)
    q = normal(rng, 1, 4, n_queries, d)
    k = normal(rng, 1, 2, n_kv, d, dtype=np.float16)
    v = normal(rng, 1, 2, n_kv, d, dtype=np.float16)
    rows = -(-n_queries // 8) * 8  # the blk pass reads whole blocks of 8 rows
    mask = normal(rng, 1, 1, rows, n_kv, dtype=np.float16)
    mask[..., 64:128] = -np.inf
    mask[..., 128:192] = 0
    mask[..., 3, 10:20] = -np.inf
    return Attention(q, k, v, mask, n_queries, 1 / np.sqrt(d))


def _fa_pad(lib: mk.Library, a: Attention, ncpsg: int) -> np.ndarray:
    """kernel_flash_attn_ext_pad: the last partial KV chunk of k, v and mask, copied to a buffer of ncpsg rows each."""
    kv_heads = a.k.shape[1]
    size = ncpsg * (a.k.strides[2] * kv_heads + a.v.strides[2] * kv_heads + 2 * a.n_queries)
    pad = np.zeros(size, np.uint8)
    pad[:] = 0xAB  # bytes the kernel must overwrite
    k = lib.specialize("kernel_flash_attn_ext_pad", {FC_FLASH_ATTN_EXT_PAD + 0: True, FC_FLASH_ATTN_EXT_PAD + 25: ncpsg})
    k(kargs(k, a.fields()), src(a.k), src(a.v), src(a.mask), pad.view(np.int8),
      threadgroups=(ncpsg, kv_heads, 1), threadgroup=(32, 1, 1))
    return pad


def _fa_pad_reference(a: Attention, ncpsg: int) -> np.ndarray:
    icp = a.n_kv % ncpsg
    ic0 = a.n_kv - icp
    kv = []
    for t in (a.k, a.v):
        chunk = np.zeros((t.shape[1], ncpsg, a.d), np.float16)
        chunk[:, :icp] = t[0, :, ic0:]
        kv.append(chunk.reshape(-1).view(np.uint8))
    m = np.full((a.n_queries, ncpsg), -MAXHALF, np.float16)
    m[:, :icp] = a.mask[0, 0, :a.n_queries, ic0:]
    return np.concatenate([*kv, m.reshape(-1).view(np.uint8)])


def _fa_blk(lib: mk.Library, a: Attention, nqptg: int, ncpsg: int) -> np.ndarray:
    """kernel_flash_attn_ext_blk: per block of nqptg queries x ncpsg KV, 0 masked, 1 mixed, 2 all zero."""
    nblk1, nblk0 = -(-a.n_queries // nqptg), -(-a.n_kv // ncpsg)
    blk = np.full(-(-nblk0 * nblk1 // 32) * 32, -1, np.int8)
    k = lib.specialize("kernel_flash_attn_ext_blk", {FC_FLASH_ATTN_EXT_BLK + 24: nqptg, FC_FLASH_ATTN_EXT_BLK + 25: ncpsg})
    k(kargs(k, a.fields()), src(a.mask), blk, threadgroups=(nblk0, nblk1, 1), threadgroup=(32, 1, 1))
    return blk[:nblk0 * nblk1].reshape(nblk1, nblk0)


def _fa_blk_reference(a: Attention, nqptg: int, ncpsg: int) -> np.ndarray:
    nblk1, nblk0 = -(-a.n_queries // nqptg), -(-a.n_kv // ncpsg)
    want = np.ones((nblk1, nblk0), np.int8)  # a partial last chunk is always "mixed"
    for i1 in range(nblk1):
        for i0 in range(a.n_kv // ncpsg):
            b = a.mask[0, 0, i1 * nqptg:(i1 + 1) * nqptg, i0 * ncpsg:(i0 + 1) * ncpsg].astype(np.float32)
            want[i1, i0] = 0 if b.max() <= -MAXHALF else 2 if not b.any() else 1
    return want


@recipe("kernel_flash_attn_ext_pad")
def fa_pad(lib: mk.Library, name: str) -> list[Check]:
    a = _attention(name, n_queries=21)
    return [Check("pad", _fa_pad(lib, a, 64), _fa_pad_reference(a, 64))]


@recipe("kernel_flash_attn_ext_blk")
def fa_blk(lib: mk.Library, name: str) -> list[Check]:
    a = _attention(name, n_queries=21)
    return [Check("blk", _fa_blk(lib, a, 8, 64), _fa_blk_reference(a, 8, 64))]


@recipe("kernel_flash_attn_ext_f16_dk64_dv64", isolate=True)
def flash_attn(lib: mk.Library, name: str) -> list[Check]:
    """The simdgroup-matrix kernel, as ggml runs it for 20 or more queries: pad, blk, then attention."""
    nqptg, ncpsg, nsg = 8, 64, 4  # OP_FLASH_ATTN_EXT_NQPSG, _NCPSG; nsg = 4 below a head size of 512
    a = _attention(name, n_queries=21)
    pad, blk = _fa_pad(lib, a, ncpsg), _fa_blk(lib, a, nqptg, ncpsg)
    out = nans(1, a.n_queries, a.q.shape[1], FA_D)
    fc = {FC_FLASH_ATTN_EXT + 0: True, FC_FLASH_ATTN_EXT + 1: False, FC_FLASH_ATTN_EXT + 2: False,
          FC_FLASH_ATTN_EXT + 3: False, FC_FLASH_ATTN_EXT + 4: a.n_kv % ncpsg != 0,
          FC_FLASH_ATTN_EXT + 10: a.n_queries % 8 != 0, FC_FLASH_ATTN_EXT + 20: a.fields()["ns10"],
          FC_FLASH_ATTN_EXT + 21: a.fields()["ns20"], FC_FLASH_ATTN_EXT + 22: nsg}
    k = lib.specialize(name, fc)
    # FATTN_SMEM(nsg) of the half8x8 path: q, two K/V-sized staging rows and 2*2*ncpsg scores and mask per query
    smem = -(-(nqptg * (FA_D + 2 * FA_D + 2 * 2 * ncpsg)) * 2 // 16) * 16
    k(kargs(k, a.fields(out)), src(a.q), src(a.k), src(a.v), src(a.mask), None, pad.view(np.int8),
      blk.reshape(-1), dst(out), threadgroups=(-(-a.n_queries // nqptg), a.q.shape[1], 1),
      threadgroup=(32, nsg, 1), threadgroup_memory={0: smem})
    return [Check("dst", out, a.reference(), rtol=2e-3, atol=2e-3)]


# kernel_flash_attn_ext_vec_f16_dk<D>_dv<D>: (head size, KV length). ggml_metal_op_flash_attn_ext doubles the
# simdgroups (up to 4) while 32 workgroups of nsg simdgroups of 32 KV rows cover less than half the KV cache:
# n_kv = 1000 gives nsg 1, n_kv = 2100 gives nsg 2 (and the kernel's reduction over simdgroups).
FA_VEC = {"kernel_flash_attn_ext_vec_f16_dk64_dv64": (64, 1000),
          "kernel_flash_attn_ext_vec_f16_dk128_dv128": (128, 1000),
          "kernel_flash_attn_ext_vec_f16_dk256_dv256": (256, 2100)}


# The lanes of a SIMD-group share its scores ss[] in threadgroup memory with no barrier between some reads
# and the writes that follow them (line numbers of ggml-metal.metal in the corpus):
# - KV loop, then the store of S and M: in P*V (7687-7691) every lane reads all C scores of the block,
#   ss[cc*NE + ty]; after the last block lane 0 writes S and M into ss[0] and ss[1] (7773-7776). With one head
#   element per lane (NE = 1: dk128, dk256, dk512) no SIMD-group function comes between the two; with NE > 1
#   the lanes meet at the simd_shuffle_down of P*V's reduction (7709-7743), after their reads.
# - Reduction over simdgroups (nsg >= 2, any head size): in `if (sgitg < r)` every lane reads S0 and M0 from
#   ss[0] and ss[1] (7786, 7789), and lane 0 then writes the combined S and M there (7799-7802).
# Without lockstep lane 0 can store first: the other lanes then take its S and M for the block's first two
# scores, or for their simdgroup's S0 and M0. dk64 runs at nsg 1, where neither applies, under both models.
_FA_VEC_LOCKSTEP = ("ss[0..1] are read by every lane of a SIMD-group and then written by lane 0 without a barrier "
                    "between: {}; only lockstep orders the reads first")
LOCKSTEP["kernel_flash_attn_ext_vec_f16_dk128_dv128"] = _FA_VEC_LOCKSTEP.format(
    "P*V's reads of the last KV block (7691) and the store of S, M after the loop (7773-7776), NE = 1")
LOCKSTEP["kernel_flash_attn_ext_vec_f16_dk256_dv256"] = _FA_VEC_LOCKSTEP.format(
    "as in dk128, and in the reduction over its 2 simdgroups (reads 7786/7789, store 7799-7802)")


@recipe(*FA_VEC, isolate=True)
def flash_attn_vec(lib: mk.Library, name: str) -> list[Check]:
    """The vector kernel, as ggml runs it below 20 queries: pad, 32 workgroups over the KV, then their reduction."""
    d, n_kv = FA_VEC[name]
    ncpsg, nwg = 32, 32  # OP_FLASH_ATTN_EXT_VEC_NCPSG; ggml always splits the KV over 32 workgroups
    a = _attention(name, n_queries=3, n_kv=n_kv, d=d)
    nsg = 1
    while 2 * nwg * nsg * ncpsg < a.n_kv and nsg < 4:
        nsg *= 2
    pad = _fa_pad(lib, a, ncpsg)
    heads = a.q.shape[1]
    tmp = nans(a.n_queries * heads * nwg * (d + 2))
    out = nans(1, a.n_queries, heads, d)
    fields = a.fields(out)
    fc = {FC_FLASH_ATTN_EXT_VEC + 0: True, FC_FLASH_ATTN_EXT_VEC + 1: False, FC_FLASH_ATTN_EXT_VEC + 2: False,
          FC_FLASH_ATTN_EXT_VEC + 3: False, FC_FLASH_ATTN_EXT_VEC + 4: a.n_kv % ncpsg != 0,
          FC_FLASH_ATTN_EXT_VEC + 20: fields["ns10"], FC_FLASH_ATTN_EXT_VEC + 21: fields["ns20"],
          FC_FLASH_ATTN_EXT_VEC + 22: nsg, FC_FLASH_ATTN_EXT_VEC + 23: nwg}
    k = lib.specialize(name, fc)
    # FATTN_SMEM(nsg) of the vector path, in halves: the query, 4*ncpsg scores and mask, two V-sized rows
    pd = -(-d // 128) * 128
    smem = -(-((pd + 4 * ncpsg + 2 * pd) * nsg * 2) // 16) * 16
    k(kargs(k, fields), src(a.q), src(a.k), src(a.v), src(a.mask), None, pad.view(np.int8),
      dst(tmp), threadgroups=(a.n_queries, heads, nwg), threadgroup=(32, nsg, 1), threadgroup_memory={0: smem})
    r = lib.specialize("kernel_flash_attn_ext_vec_reduce", {FC_FLASH_ATTN_EXT_VEC_REDUCE + 0: d,
                                                             FC_FLASH_ATTN_EXT_VEC_REDUCE + 1: nwg})
    nrows = a.n_queries * heads
    r(kargs(r, {"nrows": nrows}), dst(tmp), dst(out), threadgroups=(nrows, 1, 1), threadgroup=(32 * nwg, 1, 1))
    return [Check("dst", out, a.reference(), rtol=2e-3, atol=2e-3)]


# ---- rows: get_rows, sum_rows, argmax ---------------------------------------------------

GET_ROWS = {"kernel_get_rows_f32": ("f32", 1500), "kernel_get_rows_f16": ("f16", 333),
            "kernel_get_rows_q4_0": ("q4_0", 32 * 11), "kernel_get_rows_q8_0": ("q8_0", 32 * 7),
            "kernel_get_rows_q4_K": ("q4_K", 256 * 3)}


@recipe(*GET_ROWS)
def get_rows(lib: mk.Library, name: str) -> list[Check]:
    """Rows of src0 picked by int32 indices (repeated, out of order), dequantized to float."""
    type_name, ne00 = GET_ROWS[name]
    rng = rng_for(name)
    table, table64, qk = _weights(rng, type_name, (2, 3, 50, ne00))
    idx = rng.integers(0, 50, (2, 3, 7)).astype(np.int32)
    out = nans(2, 3, 7, ne00)  # every get_rows kernel writes float rows
    # ggml_metal_op_get_rows: quantized rows are dequantized 16 values (a float4x4) per thread
    ne00t = ne00 // 16 if qk > 1 else ne00
    nth = min(ne00t, MAX_THREADS)
    nw0 = -(-ne00t // nth)
    k = lib[name]
    fields = {**dims("0", table, qk), **dims("1", idx), **dims("", out), "ne00t": ne00t}
    k(kargs(k, fields), table.reshape(-1).view(np.uint8), idx.view(np.uint8).reshape(-1),
      out.reshape(-1).view(np.uint8), threadgroups=(nw0 * 7, 3, 2), threadgroup=(nth, 1, 1))
    want = np.take_along_axis(table64, idx[..., None].astype(np.int64), axis=2)
    return [Check("dst", out, want.astype(np.float32))]


@recipe("kernel_sum_rows_f32_f32", "kernel_sum_rows_f32_f32_4")
def sum_rows(lib: mk.Library, name: str) -> list[Check]:
    rng = rng_for(name)
    c4 = name.endswith("_4")
    ne00 = 2000 if c4 else 1999  # "_4" iff ne00 % 4 == 0
    x = normal(rng, 2, 3, 5, ne00)
    out = nans(2, 3, 5, 1)
    # ggml_metal_op_sum_rows: the "_4" kernel counts float4s; nth grows to cover a row
    n = ne00 // 4 if c4 else ne00
    nth = 32
    while nth < n and nth < MAX_THREADS:
        nth *= 2
    nth = min(nth, MAX_THREADS, n)
    k = lib.specialize(name, {FC_SUM_ROWS + 0: 10})  # OP_SUM_ROWS_NUM_SUM_ROWS
    fields = {**dims("0", x), **dims("", out), "ne00": n, "ne0": 1}
    k(kargs(k, fields), src(x), dst(out), threadgroups=(5, 3, 2), threadgroup=(nth, 1, 1),
      threadgroup_memory={0: 32 * 4 * (4 if c4 else 1)})
    return [Check("dst", out, x.astype(np.float64).sum(-1, keepdims=True), rtol=1e-5, atol=1e-4)]


@recipe("kernel_argmax_f32")
def argmax(lib: mk.Library, name: str) -> list[Check]:
    rng = rng_for(name)
    x = normal(rng, 7, 1001)
    out = np.full(7, -1, np.int32)
    nth = 32
    while nth < 1001 and nth * 7 < 256:
        nth *= 2
    k = lib[name]
    k(kargs(k, {"ne00": 1001, "nb01": x.strides[0]}), src(x), dst(out), threadgroups=(7, 1, 1),
      threadgroup=(nth, 1, 1), threadgroup_memory={0: 32 * 8})
    return [Check("dst", out, x.argmax(-1).astype(np.int32))]


# ---- running recipes --------------------------------------------------------------------

_results: dict[tuple[str, str], list[Check]] = {}


def _child(name: str, execution: str, path: str) -> None:
    """In a child process: run one recipe and save its checks to ``path``."""
    checks = RECIPES[name](library(execution), name)
    np.savez(path, **{f"{i}_{field}": np.asarray(getattr(c, field))
                      for i, c in enumerate(checks) for field in ("what", "got", "want", "rtol", "atol")})


def _run_isolated(name: str, execution: str, tmp: Path) -> list[Check]:
    path = tmp / f"{name}-{execution}.npz"
    code = (f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); "
            f"import test_corpus_ggml as t; t._child({name!r}, {execution!r}, {str(path)!r})")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    if proc.returncode < 0:
        pytest.fail(f"{name} under {execution!r} killed the process with {signal.Signals(-proc.returncode).name}\n"
                    f"{proc.stderr[-3000:]}")
    assert proc.returncode == 0, f"{name} under {execution!r} failed in a child process:\n{proc.stderr[-3000:]}"
    with np.load(path) as z:
        n = len(z.files) // 5
        return [Check(str(z[f"{i}_what"]), z[f"{i}_got"], z[f"{i}_want"], float(z[f"{i}_rtol"]),
                      float(z[f"{i}_atol"])) for i in range(n)]


def run(name: str, execution: str, tmp: Path) -> list[Check]:
    key = (name, execution)
    if key not in _results:
        if name in ISOLATED:
            _results[key] = _run_isolated(name, execution, tmp)
        else:
            _results[key] = RECIPES[name](library(execution), name)
    return _results[key]


@pytest.mark.parametrize(("name", "execution"), [(name, execution) for name in sorted(RECIPES)
                                                   for execution in EXECUTIONS
                                                   if name not in LOCKSTEP or execution == "auto"])
def test_kernel(name: str, execution: str, tmp_path: Path) -> None:
    for check in run(name, execution, tmp_path):
        check.verify()


@pytest.mark.parametrize("name", sorted(set(RECIPES) - set(LOCKSTEP)))
def test_executions_agree(name: str, tmp_path: Path) -> None:
    """Every execution model writes the same bits (each runs the same C++ on the same inputs)."""
    base = run(name, EXECUTIONS[0], tmp_path)
    for execution in EXECUTIONS[1:]:
        other = run(name, execution, tmp_path)
        for a, b in zip(base, other):
            assert a.got.tobytes() == b.got.tobytes(), (
                f"{a.what}: {EXECUTIONS[0]!r} and {execution!r} differ in "
                f"{np.count_nonzero(a.got.view(np.uint8) != b.got.view(np.uint8))} bytes")
