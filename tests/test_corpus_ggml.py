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


@pytest.mark.parametrize("execution", EXECUTIONS)
@pytest.mark.parametrize("name", sorted(RECIPES))
def test_kernel(name: str, execution: str, tmp_path: Path) -> None:
    for check in run(name, execution, tmp_path):
        check.verify()


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_executions_agree(name: str, tmp_path: Path) -> None:
    """Every execution model writes the same bits (each runs the same C++ on the same inputs)."""
    base = run(name, EXECUTIONS[0], tmp_path)
    for execution in EXECUTIONS[1:]:
        other = run(name, execution, tmp_path)
        for a, b in zip(base, other):
            assert a.got.tobytes() == b.got.tobytes(), (
                f"{a.what}: {EXECUTIONS[0]!r} and {execution!r} differ in "
                f"{np.count_nonzero(a.got.view(np.uint8) != b.got.view(np.uint8))} bytes")
