"""SIMT kernels whose SIMD-groups cover a threadgroup in different shapes: whole rows of 32 or
more, rows of a 16- or 8-wide tile (each shape has a loop of its own), and the rest. Every
shape must give the same answer as the GPU: each thread's own positions and lockstep within
its SIMD-group."""
from __future__ import annotations

import numpy as np
import pytest

from conftest import build

POSITIONS = """
kernel void k(device const float* x [[buffer(0)]], device float* o [[buffer(1)]],
              device uint* p [[buffer(2)]], constant uint3& g [[buffer(3)]],
              VEC gid [[thread_position_in_grid]], VEC tid [[thread_position_in_threadgroup]]) {
    threadgroup float t[4][8][64];
    const uint i = (Z(gid) * g.y + gid.y) * g.x + gid.x;
    t[Z(tid)][tid.y][tid.x] = x[i];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    float v = t[Z(tid)][tid.y][tid.x] * float(tid.x + 1) + float(tid.y) + 1000.0f * float(Z(tid));
    if (tid.x % 3 == 1 || tid.y == 1) v += 100.0f * float(gid.y);
    o[i] = v;
    p[i] = (Z(tid) * 8 + tid.y) * 64 + tid.x;
}
"""

SHAPES = [(16, 4), (8, 4), (16, 3), (8, 3), (32, 2), (64, 2), (4, 8), (8, 4, 2), (16, 2, 3), (8, 2, 2), (16, 1, 4)]


# A 2-component position only for 2D threadgroups.
CASES = [(vec, tg) for vec in ("uint2", "uint3", "ushort2", "ushort3") for tg in SHAPES
         if vec.endswith("3") or len(tg) == 2]


@pytest.mark.parametrize("vec, tg", CASES, ids=[f"{v}-{'x'.join(map(str, t))}" for v, t in CASES])
def test_positions_in_every_shape(device, rng, vec, tg):
    """Positions, a branch on them and a threadgroup tile, on grids with clipped edge groups."""
    tg3 = tuple(tg) + (1,) * (3 - len(tg))
    grid = (2 * tg3[0] + 3, 2 * tg3[1] + 1, 2 if len(tg) == 3 else 1)
    z = "(v).z" if vec.endswith("3") else "0u"
    lib = build(f"#define VEC {vec}\n#define Z(v) {z}\n" + POSITIONS)
    assert lib.k.execution == "simt"
    x = rng.random(grid[::-1], dtype=np.float32)
    o = np.full_like(x, np.nan)
    p = np.zeros(x.shape, np.uint32)
    lib.k(x, o, p, np.array(grid, np.uint32), grid=grid[:len(tg)], threadgroup=tg)

    gz, gy, gx = np.meshgrid(*(np.arange(n) for n in grid[::-1]), indexing="ij")
    tx, ty, tz = gx % tg3[0], gy % tg3[1], gz % tg3[2]
    want = x * (tx + 1) + ty + 1000 * tz + np.where((tx % 3 == 1) | (ty == 1), 100 * gy, 0)
    np.testing.assert_allclose(o, want.astype(np.float32), rtol=1e-6)
    np.testing.assert_array_equal(p, (tz * 8 + ty) * 64 + tx)


PAIRS = """
kernel void pairs(device const float* x [[buffer(0)]], device float* o [[buffer(1)]],
                  constant uint& w [[buffer(2)]],
                  uint2 gid [[thread_position_in_grid]], uint2 tid [[thread_position_in_threadgroup]]) {
    threadgroup float t[8][32];
    t[tid.y][tid.x] = x[gid.y * w + gid.x];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (tid.x != 5) t[tid.y][tid.x] += t[tid.y][tid.x ^ 1u];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    o[gid.y * w + gid.x] = t[tid.y][tid.x];
}
"""


@pytest.mark.parametrize("tg", [(16, 4), (8, 4), (32, 2), (4, 8), (16, 2)], ids=lambda t: "x".join(map(str, t)))
def test_lanes_of_a_row_read_before_any_writes(device, rng, tg):
    """A row of the tile lies in one SIMD-group, whose lanes all read their neighbour before any
    lane stores: every sum is of two old values (lane 5 keeps its own)."""
    lib = build(PAIRS)
    w, h = tg[0] * 3, tg[1] * 2
    x = rng.random((h, w), dtype=np.float32)
    o = np.full_like(x, np.nan)
    lib.pairs(x, o, w, grid=(w, h), threadgroup=tg)
    tx = np.arange(w) % tg[0]
    partner = np.arange(w) - tx + (tx ^ 1)
    want = np.where(tx == 5, x, x + x[:, partner])
    np.testing.assert_array_equal(o, want)


ROW_LOOP = """
kernel void row_loop(device const float* x [[buffer(0)]], device float* o [[buffer(1)]],
                     constant uint& w [[buffer(2)]], uint2 gid [[thread_position_in_grid]],
                     uint2 tid [[thread_position_in_threadgroup]], uint2 size [[threads_per_threadgroup]]) {
    threadgroup float t[8][64];
    t[tid.y][tid.x] = x[gid.y * w + gid.x];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (gid.y == 1 && tid.x == 3) return;  // the SIMD-groups holding it run the loop under a partial mask
    float acc = 0.0f;
    for (uint k = 0; k < size.x; ++k) {
        float a = t[tid.y][k] * float(k + 1);
        acc += a + t[tid.y][(tid.x + k) % size.x];
        o[gid.y * w + gid.x] = acc;  // a lane that returned must not store
    }
}
"""


@pytest.mark.parametrize("tg", [(16, 4), (8, 4), (32, 2), (4, 8), (12, 3)], ids=lambda t: "x".join(map(str, t)))
def test_a_uniform_loop_of_lane_statements_in_every_shape(device, rng, tg):
    """A uniform loop whose body is per-lane statements is written once per shape and for a full
    mask or not (each version keeps its lanes' values in registers across iterations): every
    version must give each thread its own row's sums."""
    lib = build(ROW_LOOP)
    assert lib.row_loop.execution == "simt"
    w, h = tg[0] * 2, tg[1] * 2
    x = rng.random((h, w), dtype=np.float32)
    o = np.full_like(x, np.nan)
    lib.row_loop(x, o, w, grid=(w, h), threadgroup=tg)
    tx = np.arange(w) % tg[0]
    want = np.empty((h, w))
    for r in range(h):
        for c in range(w):
            row = x[r, c - tx[c]:c - tx[c] + tg[0]].astype(np.float64)
            k = np.arange(tg[0])
            want[r, c] = (row * (k + 1)).sum() + row[(tx[c] + k) % tg[0]].sum()
    want[1, tx == 3] = np.nan  # those threads returned
    np.testing.assert_allclose(o, want, rtol=1e-5)
