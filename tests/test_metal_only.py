"""What only a Mac's GPU can show: each test runs Metal and is skipped elsewhere.

Everything the Metal backend decides is tested on every platform (test_metal_rules.py,
test_batch.py, test_metal_selectors.py); these tests check what Metal itself does with
those decisions, and run in the macOS workflow (.github/workflows/macos.yml).
"""
from __future__ import annotations

import numpy as np
import pytest

import metalkit as mk
from metalkit import _device

from conftest import build

pytestmark = pytest.mark.skipif(not _device.metal_available(),
                                reason="needs Metal: macOS with a Metal GPU (this runs on the CPU simulator only)")


@pytest.fixture(autouse=True)
def metal():
    before = mk.device().backend
    mk.use("metal")
    yield
    mk.use(before)


def test_struct_parameters_get_their_dtype_from_reflection():
    lib = build("""
struct Params { float scale; uint n; float2 offset; };
kernel void k(constant Params& p [[buffer(0)]], device float* out [[buffer(1)]],
              uint i [[thread_position_in_grid]]) {
  if (i < p.n) out[i] = p.scale * float(i) + p.offset.y;
}""")
    dtype = lib.k.args[0].dtype
    assert dtype is not None and dtype.names == ("scale", "n", "offset") and dtype.itemsize == 16
    p = np.zeros((), dtype)
    p["scale"], p["n"], p["offset"] = 2.0, 5, (0.0, 1.0)
    out = np.zeros(8, np.float32)
    lib.k(p, out, grid=8)
    np.testing.assert_array_equal(out, [1, 3, 5, 7, 9, 0, 0, 0])


def test_exp_is_precise_without_fast_math():
    """Within 1 ulp of numpy's float64 exp rounded to float32, as MSL's precise exp promises."""
    lib = build("""
kernel void k(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
              uint i [[thread_position_in_grid]]) { y[i] = exp(x[i]); }""")
    x = np.linspace(-80, 80, 1 << 16, dtype=np.float32)
    y = np.empty_like(x)
    lib.k(x, y)
    want = np.exp(x.astype(np.float64)).astype(np.float32)
    ulps = np.abs(y.view(np.int32).astype(np.int64) - want.view(np.int32).astype(np.int64))
    assert ulps.max() <= 1, f"exp is {ulps.max()} ulp off at x = {x[ulps.argmax()]}"
