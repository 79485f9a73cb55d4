"""Every position/size builtin, in uint/ushort scalar and vector forms, on grids
whose edge threadgroups are partial (dispatchThreads semantics)."""
import numpy as np
import pytest

from conftest import build

SRC = """
kernel void ids(device uint* out [[buffer(0)]],
                uint3 pos [[thread_position_in_grid]],
                uint3 local [[thread_position_in_threadgroup]],
                uint3 group [[threadgroup_position_in_grid]],
                uint3 size [[threads_per_threadgroup]],
                uint3 dsize [[dispatch_threads_per_threadgroup]],
                uint3 ngroups [[threadgroups_per_grid]],
                uint3 grid [[threads_per_grid]],
                uint index [[thread_index_in_threadgroup]],
                uint width [[thread_execution_width]],
                uint lane [[thread_index_in_simdgroup]],
                uint sg [[simdgroup_index_in_threadgroup]],
                uint nsg [[simdgroups_per_threadgroup]]) {
    uint lin = pos.x + grid.x * (pos.y + grid.y * pos.z);
    device uint* o = out + lin * 25;
    o[0] = pos.x; o[1] = pos.y; o[2] = pos.z;
    o[3] = local.x; o[4] = local.y; o[5] = local.z;
    o[6] = group.x; o[7] = group.y; o[8] = group.z;
    o[9] = size.x; o[10] = size.y; o[11] = size.z;
    o[12] = ngroups.x; o[13] = ngroups.y; o[14] = ngroups.z;
    o[15] = grid.x; o[16] = grid.y; o[17] = grid.z;
    o[18] = index; o[19] = width; o[20] = lane; o[21] = sg; o[22] = nsg;
    o[23] = dsize.x * 10000 + dsize.y * 100 + dsize.z;
    o[24] = 1;
}

kernel void ids_short(device ushort* out [[buffer(0)]],
                      ushort2 pos [[thread_position_in_grid]],
                      ushort2 local [[thread_position_in_threadgroup]],
                      ushort2 size [[threads_per_threadgroup]],
                      ushort2 grid [[threads_per_grid]],
                      ushort index [[thread_index_in_threadgroup]]) {
    uint lin = pos.x + grid.x * pos.y;
    device ushort* o = out + lin * 7;
    o[0] = pos.x; o[1] = pos.y; o[2] = local.x; o[3] = local.y; o[4] = size.x; o[5] = size.y; o[6] = index;
}

kernel void ids_1d(device uint* out [[buffer(0)]], uint pos [[thread_position_in_grid]],
                   ushort local [[thread_position_in_threadgroup]], uint group [[threadgroup_position_in_grid]],
                   ushort size [[threads_per_threadgroup]]) {
    out[pos * 4 + 0] = pos; out[pos * 4 + 1] = local; out[pos * 4 + 2] = group; out[pos * 4 + 3] = size;
}
"""


def expected(grid, tg):
    gx, gy, gz = grid
    tx, ty, tz = tg
    z, y, x = np.meshgrid(np.arange(gz), np.arange(gy), np.arange(gx), indexing="ij")
    pos = np.stack([x, y, z], -1).reshape(-1, 3)
    t = np.array(tg)
    g = np.array(grid)
    group = pos // t
    local = pos % t
    size = np.minimum(t, g - group * t)
    ngroups = -(-g // t)
    index = local[:, 0] + size[:, 0] * (local[:, 1] + size[:, 1] * local[:, 2])
    nsg = (size.prod(1) + 31) // 32
    rows = np.concatenate([
        pos, local, group, size, np.broadcast_to(ngroups, pos.shape), np.broadcast_to(g, pos.shape),
        index[:, None], np.full((len(pos), 1), 32), (index % 32)[:, None], (index // 32)[:, None], nsg[:, None],
        np.full((len(pos), 1), tx * 10000 + ty * 100 + tz), np.ones((len(pos), 1)),
    ], 1)
    return rows.astype(np.uint32)


@pytest.mark.parametrize("grid,tg", [
    ((13, 1, 1), (4, 1, 1)),
    ((10, 7, 1), (4, 3, 1)),
    ((5, 6, 7), (2, 4, 3)),
    ((33, 3, 2), (32, 2, 2)),
    ((1, 1, 1), (1, 1, 1)),
    ((70, 1, 1), (64, 1, 1)),
])
def test_every_builtin_3d(device, grid, tg):
    lib = build(SRC)
    n = int(np.prod(grid))
    out = np.full(n * 25, 0xDEADBEEF, np.uint32)
    lib.ids(out, grid=grid, threadgroup=tg)
    np.testing.assert_array_equal(out.reshape(n, 25), expected(grid, tg))


def test_ushort2_builtins(device):
    lib = build(SRC)
    grid, tg = (11, 5), (4, 2)
    out = np.zeros(11 * 5 * 7, np.uint16)
    lib.ids_short(out, grid=grid, threadgroup=tg)
    e = expected((11, 5, 1), (4, 2, 1))
    want = np.stack([e[:, 0], e[:, 1], e[:, 3], e[:, 4], e[:, 9], e[:, 10], e[:, 18]], 1).astype(np.uint16)
    np.testing.assert_array_equal(out.reshape(-1, 7), want)


def test_scalar_builtins_with_default_threadgroup(device):
    lib = build(SRC)
    n = 1000  # default threadgroup is 256 along x: the last group has 232 threads
    out = np.zeros(n * 4, np.uint32)
    lib.ids_1d(out, grid=n)
    o = out.reshape(n, 4)
    i = np.arange(n)
    np.testing.assert_array_equal(o[:, 0], i)
    np.testing.assert_array_equal(o[:, 1], i % 256)
    np.testing.assert_array_equal(o[:, 2], i // 256)
    np.testing.assert_array_equal(o[:, 3], np.where(i < 768, 256, 232))


def test_2d_kernel_over_matrix_with_partial_groups(device, rng):
    lib = build("""
    kernel void transpose_add(device const float* a [[buffer(0)]], device float* out [[buffer(1)]],
                              constant uint& rows [[buffer(2)]], constant uint& cols [[buffer(3)]],
                              uint2 p [[thread_position_in_grid]]) {
        out[p.x * rows + p.y] = a[p.y * cols + p.x] + 1.0f;
    }""")
    rows, cols = 37, 53
    a = rng.standard_normal((rows, cols)).astype(np.float32)
    out = np.zeros((cols, rows), np.float32)
    lib.transpose_add(a, out, rows, cols, grid=(cols, rows), threadgroup=(8, 8))
    np.testing.assert_array_equal(out, a.T + 1)


def test_quadgroup_counts_of_partial_threadgroups(device):
    lib = build("""
    kernel void quads(device uint* out [[buffer(0)]], uint i [[thread_position_in_grid]],
                      uint n [[quadgroups_per_threadgroup]], uint dn [[dispatch_quadgroups_per_threadgroup]],
                      uint q [[quadgroup_index_in_threadgroup]], uint l [[thread_index_in_quadgroup]]) {
        out[i * 4 + 0] = n; out[i * 4 + 1] = dn; out[i * 4 + 2] = q; out[i * 4 + 3] = l;
    }""")
    grid, tg = 23, 10  # groups of 10, 10 and a partial 3: 3, 3 and 1 quadgroups; 3 dispatched per group
    out = np.full(grid * 4, 0xDEADBEEF, np.uint32)
    lib.quads(out, grid=grid, threadgroup=tg)
    i = np.arange(grid)
    size = np.minimum(tg, grid - i // tg * tg)
    want = np.stack([(size + 3) // 4, np.full(grid, (tg + 3) // 4), i % tg // 4, i % tg % 4], 1)
    np.testing.assert_array_equal(out.reshape(grid, 4), want)
