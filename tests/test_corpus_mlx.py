"""MLX's own Metal kernels, launched as MLX's host code (mlx/backend/metal/*.cpp) launches them.

Each recipe builds seeded random inputs, runs one kernel of the MLX corpus with the
template instantiation, function constants, parameters and geometry MLX uses, and
returns its outputs with numpy references. Every recipe runs under the default
execution model ("auto": SIMT where the kernel allows it) and under the reference
model ("threads": each thread its own fiber, the C++ unchanged); the two must
also agree bit for bit.
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Callable

import ml_dtypes
import numpy as np
import pytest

import metalkit as mk
from corpus import CORPUS, require

MLX_KERNELS = "mlx/mlx/backend/metal/kernels"
EXECUTIONS = ["auto", "threads"]
bf16 = ml_dtypes.bfloat16
# MLX's type_to_name suffixes and the numpy dtypes of its float instantiations
FLOATS = {"float32": np.float32, "float16": np.float16, "bfloat16": bf16}


class Mlx:
    """The kernels of the MLX corpus under one execution model."""

    _libs: dict = {}

    def __init__(self, execution: str):
        self.execution = execution

    def __call__(self, file: str, name: str, constants: dict | None = None):
        key = (file, self.execution)
        if key not in self._libs:
            path = require(f"{MLX_KERNELS}/{file}")
            # "auto" is the default; only the reference model is asked for by name
            kw = {} if self.execution == "auto" else {"execution": self.execution}
            self._libs[key] = mk.load(path, include_dirs=[str(CORPUS / "mlx")], **kw)
        lib = self._libs[key]
        return lib.specialize(name, constants) if constants else lib[name]


@dataclass
class Out:
    """One output of a recipe and its numpy reference, compared with |got - want| <= atol + rtol * |want|."""
    what: str
    got: np.ndarray
    want: np.ndarray
    rtol: float = 0.0
    atol: float = 0.0

    def check(self) -> None:
        got = np.asarray(self.got).astype(np.float64) if self.got.dtype.kind == "f" or self.got.dtype == bf16 \
            else np.asarray(self.got)
        want = np.asarray(self.want)
        assert got.shape == want.shape, f"{self.what}: shape {got.shape}, expected {want.shape}"
        if self.rtol == 0 and self.atol == 0:
            bad = got != want
        else:
            bad = ~(np.abs(got - want) <= self.atol + self.rtol * np.abs(want))
        if bad.any():
            idx = np.argwhere(bad)
            first = tuple(idx[0])
            pytest.fail(f"{self.what}: {bad.sum()} of {bad.size} elements differ from numpy "
                        f"(rtol={self.rtol}, atol={self.atol}); first at {first}: got {got[first]!r}, "
                        f"expected {want[first]!r}")


RECIPES: dict[str, Callable[[Mlx, np.random.Generator], list[Out]]] = {}


def recipe(*cases: dict):
    """Register a recipe once per case; a case's "id" names it, the rest are the recipe's keywords."""
    def register(fn):
        for case in cases:
            kw = dict(case)
            name = f"{fn.__name__.removeprefix('recipe_')}[{kw.pop('id')}]"
            assert name not in RECIPES, name
            RECIPES[name] = lambda mlx, rng, fn=fn, kw=kw: fn(mlx, rng, **kw)
        return fn
    return register


def randn(rng, shape, dtype, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(dtype)


def f64(a):
    return np.asarray(a).astype(np.float64)


def tol(dtype, f32=(1e-5, 1e-6), f16=(4e-3, 1e-3), b16=(3e-2, 1e-2)):
    """(rtol, atol) for an output of dtype: float32's, then half's and bfloat's rounding."""
    return {np.dtype(np.float32): f32, np.dtype(np.float16): f16, np.dtype(bf16): b16}[np.dtype(dtype)]


# ---------------------------------------------------------------- softmax (softmax.cpp)

def softmax_geometry(k, axis, rows, n_reads=4, looped_limit=4096):
    """Rows up to the looped limit: one threadgroup of enough whole SIMD-groups for
    axis/n_reads threads; longer rows: the pipeline's largest threadgroup."""
    if axis <= looped_limit:
        tg = 32 * -(-(-(-axis // n_reads)) // 32)
    else:
        tg = k.max_threads_per_threadgroup
    return dict(grid=(rows * tg, 1, 1), threadgroup=(tg, 1, 1))


@recipe(*[dict(id=f"{kind}_{t}{'_precise' if p else ''}-{rows}x{axis}", kind=kind, t=t, rows=rows, axis=axis,
               precise=p)
          for kind, rows, axis in [("block", 5, 1), ("block", 7, 333), ("block", 3, 4096), ("looped", 3, 5003)]
          for t in FLOATS for p in ([False, True] if t != "float32" else [False])
          if not (p and kind == "block" and axis == 1)])
def recipe_softmax(mlx, rng, kind, t, rows, axis, precise):
    name = f"{kind}_softmax_{'precise_' if precise else ''}{t}"
    assert (kind == "looped") == (axis > 4096)
    k = mlx("softmax.metal", name)
    x = randn(rng, (rows, axis), FLOATS[t], 3.0)
    out = np.empty_like(x)
    k(x, out, np.int32(axis), **softmax_geometry(k, axis, rows))
    e = np.exp(f64(x) - f64(x).max(axis=1, keepdims=True))
    return [Out(name, out, e / e.sum(axis=1, keepdims=True), *tol(t))]


# ---------------------------------------------------------------- tests

_outcomes: dict = {}


def run(name: str, execution: str) -> list[Out]:
    """The recipe's outputs under one model, run once per process and shared by the tests below
    (inputs are seeded by the recipe's name, so both models see the same data)."""
    key = (name, execution)
    if key not in _outcomes:
        rng = np.random.default_rng(zlib.crc32(name.encode()))
        try:
            _outcomes[key] = (True, RECIPES[name](Mlx(execution), rng))
        except Exception as e:  # kept to be raised again by every test that needs this run
            _outcomes[key] = (False, e)
    ok, value = _outcomes[key]
    if not ok:
        raise value
    return value


@pytest.mark.parametrize("execution", EXECUTIONS)
@pytest.mark.parametrize("name", list(RECIPES))
def test_mlx_kernel(name, execution):
    for out in run(name, execution):
        out.check()


@pytest.mark.parametrize("name", list(RECIPES))
def test_mlx_models_agree(name):
    """The default model and the reference model give the same bits."""
    for a, t in zip(run(name, "auto"), run(name, "threads")):
        diff = np.flatnonzero(bits(a.got) != bits(t.got))
        if diff.size:
            i = diff[0]
            pytest.fail(f"{a.what}: {diff.size} of {a.got.size} elements differ between the models; first at "
                        f"flat index {i}: auto {a.got.ravel()[i]!r}, threads {t.got.ravel()[i]!r}")


def bits(a: np.ndarray) -> np.ndarray:
    """The raw bits of each element, as unsigned integers of its size."""
    return np.ascontiguousarray(a).reshape(-1).view(f"u{a.dtype.itemsize}")
