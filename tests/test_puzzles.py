"""The classic GPU puzzles, written in MSL: each kernel the way its puzzle intends (global
ids, guards, threadgroup memory and barriers), checked against numpy on random data.

Outputs are written into buffers larger than the result, filled with a sentinel, so a
missing guard (a write outside the intended output) is caught."""
import numpy as np
import pytest

from conftest import build

SENTINEL = -12345.0


def padded(n, extra=16, dtype=np.float32):
    """A sentinel-filled buffer of n + extra elements: the kernel may write only [:n]."""
    return np.full(n + extra, SENTINEL, dtype)


def assert_untouched(buf, n):
    assert (buf[n:] == SENTINEL).all(), "a thread wrote outside the output"


# -- 1. Map ------------------------------------------------------------------------------------

def test_map(device, rng):
    lib = build("""
    kernel void map_add(device const float* a [[buffer(0)]], device float* out [[buffer(1)]],
                    uint i [[thread_position_in_grid]]) {
        out[i] = a[i] + 10;
    }
    """)
    a = rng.standard_normal(4).astype(np.float32)
    out = np.zeros(4, np.float32)
    lib.map_add(a, out)  # default grid: one thread per element of out
    np.testing.assert_array_equal(out, a + np.float32(10))


# -- 2. Zip ------------------------------------------------------------------------------------

def test_zip(device, rng):
    lib = build("""
    kernel void zip(device const float* a [[buffer(0)]], device const float* b [[buffer(1)]],
                    device float* out [[buffer(2)]], uint i [[thread_position_in_grid]]) {
        out[i] = a[i] + b[i];
    }
    """)
    a = rng.standard_normal(4).astype(np.float32)
    b = rng.standard_normal(4).astype(np.float32)
    out = np.zeros(4, np.float32)
    lib.zip(a, b, out, grid=4)
    np.testing.assert_array_equal(out, a + b)


# -- 3. Guard ----------------------------------------------------------------------------------

GUARD = """
kernel void guard(device const float* a [[buffer(0)]], device float* out [[buffer(1)]],
                  constant uint& size [[buffer(2)]], uint i [[thread_position_in_grid]]) {
    if (i < size) out[i] = a[i] + 10;
}
"""


@pytest.mark.parametrize("size,grid,tg", [(4, 8, 8), (5, 8, 4), (1, 32, 32), (37, 64, 16)])
def test_guard(device, rng, size, grid, tg):
    lib = build(GUARD)
    a = rng.standard_normal(size).astype(np.float32)
    out = padded(size, extra=grid)
    lib.guard(a, out, size, grid=grid, threadgroup=tg)
    np.testing.assert_array_equal(out[:size], a + np.float32(10))
    assert_untouched(out, size)


# -- 4. Map 2D ---------------------------------------------------------------------------------

MAP2D = """
kernel void map_2d(device const float* a [[buffer(0)]], device float* out [[buffer(1)]],
                   constant uint& size [[buffer(2)]], uint2 p [[thread_position_in_grid]]) {
    // p.x is the column, p.y the row
    if (p.x < size && p.y < size) out[p.y * size + p.x] = a[p.y * size + p.x] + 10;
}
"""


@pytest.mark.parametrize("size,grid", [(2, 3), (5, 7)])
def test_map_2d(device, rng, size, grid):
    lib = build(MAP2D)
    a = rng.standard_normal((size, size)).astype(np.float32)
    out = padded(size * size, extra=grid * grid)
    lib.map_2d(a, out, size, grid=(grid, grid), threadgroup=(grid, grid))
    np.testing.assert_array_equal(out[:size * size].reshape(size, size), a + np.float32(10))
    assert_untouched(out, size * size)


# -- 5. Broadcast ------------------------------------------------------------------------------

BROADCAST = """
kernel void broadcast_add(device const float* a [[buffer(0)]],   // size x 1 (a column)
                      device const float* b [[buffer(1)]],   // 1 x size (a row)
                      device float* out [[buffer(2)]],       // size x size
                      constant uint& size [[buffer(3)]],
                      uint2 p [[thread_position_in_grid]]) {
    uint j = p.x, i = p.y;
    if (i < size && j < size) out[i * size + j] = a[i] + b[j];
}
"""


@pytest.mark.parametrize("size,grid", [(2, 3), (6, 8)])
def test_broadcast(device, rng, size, grid):
    lib = build(BROADCAST)
    a = rng.standard_normal((size, 1)).astype(np.float32)
    b = rng.standard_normal((1, size)).astype(np.float32)
    out = padded(size * size, extra=grid * grid)
    lib.broadcast_add(a, b, out, size, grid=(grid, grid), threadgroup=(grid, grid))
    np.testing.assert_array_equal(out[:size * size].reshape(size, size), a + b)
    assert_untouched(out, size * size)


# -- 6. Threadgroups (blocks) ------------------------------------------------------------------

BLOCKS = """
kernel void blocks(device const float* a [[buffer(0)]], device float* out [[buffer(1)]],
                   constant uint& size [[buffer(2)]],
                   uint group [[threadgroup_position_in_grid]],
                   uint local [[thread_position_in_threadgroup]],
                   uint width [[threads_per_threadgroup]]) {
    uint i = group * width + local;  // the global id, rebuilt from the group coordinates
    if (i < size) out[i] = a[i] + 10;
}
"""


@pytest.mark.parametrize("size,grid,tg", [(9, 12, 4), (100, 128, 32)])
def test_threadgroups(device, rng, size, grid, tg):
    lib = build(BLOCKS)
    a = rng.standard_normal(size).astype(np.float32)
    out = padded(size, extra=grid)
    lib.blocks(a, out, size, grid=grid, threadgroup=tg)
    np.testing.assert_array_equal(out[:size], a + np.float32(10))
    assert_untouched(out, size)


# -- 7. Threadgroups 2D ------------------------------------------------------------------------

BLOCKS2D = """
kernel void blocks_2d(device const float* a [[buffer(0)]], device float* out [[buffer(1)]],
                      constant uint& size [[buffer(2)]],
                      uint2 group [[threadgroup_position_in_grid]],
                      uint2 local [[thread_position_in_threadgroup]],
                      uint2 dims [[threads_per_threadgroup]]) {
    uint col = group.x * dims.x + local.x;
    uint row = group.y * dims.y + local.y;
    if (row < size && col < size) out[row * size + col] = a[row * size + col] + 10;
}
"""


@pytest.mark.parametrize("size,grid,tg", [(5, 6, 3), (13, 16, 4)])
def test_threadgroups_2d(device, rng, size, grid, tg):
    lib = build(BLOCKS2D)
    a = rng.standard_normal((size, size)).astype(np.float32)
    out = padded(size * size, extra=grid * grid)
    lib.blocks_2d(a, out, size, grid=(grid, grid), threadgroup=(tg, tg))
    np.testing.assert_array_equal(out[:size * size].reshape(size, size), a + np.float32(10))
    assert_untouched(out, size * size)


# -- 8. Threadgroup memory (shared) ------------------------------------------------------------

SHARED = """
#define TPB 4
kernel void shared_add(device const float* a [[buffer(0)]], device float* out [[buffer(1)]],
                       constant uint& size [[buffer(2)]],
                       uint i [[thread_position_in_grid]],
                       uint local [[thread_position_in_threadgroup]]) {
    threadgroup float staged[TPB];
    if (i < size) staged[local] = a[i];
    threadgroup_barrier(mem_flags::mem_threadgroup);  // reached by every thread, guarded or not
    if (i < size) out[i] = staged[local] + 10;
}
"""


@pytest.mark.parametrize("size,grid", [(8, 8), (10, 12), (3, 4)])
def test_threadgroup_memory(device, rng, size, grid):
    lib = build(SHARED)
    a = rng.standard_normal(size).astype(np.float32)
    out = padded(size, extra=grid)
    lib.shared_add(a, out, size, grid=grid, threadgroup=4)
    np.testing.assert_array_equal(out[:size], a + np.float32(10))
    assert_untouched(out, size)


def test_threadgroup_memory_is_per_group(device, rng):
    """Each thread reads a neighbour's staged value: wrong if groups shared one array."""
    lib = build("""
    kernel void rotate_in_group(device const float* a [[buffer(0)]], device float* out [[buffer(1)]],
                       uint i [[thread_position_in_grid]], uint local [[thread_position_in_threadgroup]],
                       uint width [[threads_per_threadgroup]]) {
        threadgroup float staged[64];
        staged[local] = a[i];
        threadgroup_barrier(mem_flags::mem_threadgroup);
        out[i] = staged[(local + 1) % width];
    }
    """)
    n = 64 * 37
    a = rng.standard_normal(n).astype(np.float32)
    out = np.zeros(n, np.float32)
    lib.rotate_in_group(a, out, threadgroup=64)
    np.testing.assert_array_equal(out, np.roll(a.reshape(-1, 64), -1, axis=1).ravel())


# -- 9. Pooling --------------------------------------------------------------------------------

POOL = """
// out[i] = a[i-2] + a[i-1] + a[i] (the terms that exist). One threadgroup of `size` threads
// stages a in threadgroup memory sized by the caller.
kernel void pool(device const float* a [[buffer(0)]], device float* out [[buffer(1)]],
                 constant uint& size [[buffer(2)]],
                 threadgroup float* cache [[threadgroup(0)]],
                 uint i [[thread_position_in_grid]]) {
    if (i < size) cache[i] = a[i];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (i < size) {
        float s = cache[i];
        if (i >= 1) s += cache[i - 1];
        if (i >= 2) s += cache[i - 2];
        out[i] = s;
    }
}
"""


def pool_ref(a):
    ref = a.copy()
    ref[1:] += a[:-1]
    ref[2:] += a[:-2]
    return ref


@pytest.mark.parametrize("size,grid", [(8, 8), (1, 4), (2, 2), (29, 32)])
def test_pooling(device, rng, size, grid):
    lib = build(POOL)
    a = rng.standard_normal(size).astype(np.float32)
    out = padded(size, extra=grid)
    lib.pool(a, out, size, grid=grid, threadgroup=grid, threadgroup_memory={0: 4 * grid})
    np.testing.assert_allclose(out[:size], pool_ref(a), rtol=1e-6, atol=1e-6)
    assert_untouched(out, size)


# -- 10. Dot product ---------------------------------------------------------------------------

DOT = """
#define TPB 8
kernel void dot_product(device const float* a [[buffer(0)]], device const float* b [[buffer(1)]],
                device float* out [[buffer(2)]], constant uint& size [[buffer(3)]],
                uint i [[thread_position_in_grid]], uint local [[thread_position_in_threadgroup]]) {
    threadgroup float products[TPB];
    products[local] = i < size ? a[i] * b[i] : 0.0f;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (local == 0) {
        float s = 0;
        for (uint k = 0; k < TPB; ++k) s += products[k];
        out[0] = s;
    }
}
"""


@pytest.mark.parametrize("size", [8, 5, 1])
def test_dot_product(device, rng, size):
    lib = build(DOT)
    a = rng.standard_normal(size).astype(np.float32)
    b = rng.standard_normal(size).astype(np.float32)
    out = padded(1, extra=8)
    lib.dot_product(a, b, out, size, grid=8, threadgroup=8)
    np.testing.assert_allclose(out[0], np.dot(a.astype(np.float64), b), rtol=1e-5, atol=1e-6)
    assert_untouched(out, 1)


def test_dot_product_int(device, rng):
    src = DOT.replace("float", "int").replace("0.0f", "0")
    lib = build(src)
    a = rng.integers(-1000, 1000, 7, dtype=np.int32)
    b = rng.integers(-1000, 1000, 7, dtype=np.int32)
    out = np.zeros(3, np.int32)
    lib.dot_product(a, b, out, 7, grid=8, threadgroup=8)
    assert out.tolist() == [int(np.dot(a.astype(np.int64), b)), 0, 0]


# -- 11. 1-D convolution -----------------------------------------------------------------------

def conv_ref(a, b):
    """out[i] = sum_j a[i + j] * b[j], terms past the end of a are zero."""
    n, k = len(a), len(b)
    ap = np.concatenate([a, np.zeros(k, a.dtype)]).astype(np.float64)
    return sum(ap[j:j + n] * b[j] for j in range(k))


CONV_SIMPLE = """
#define TPB 8
#define MAX_CONV 4
// One threadgroup covers the whole input: stage a and b, then each thread sums its window.
kernel void conv_simple(device const float* a [[buffer(0)]], device const float* b [[buffer(1)]],
                        device float* out [[buffer(2)]],
                        constant uint& size [[buffer(3)]], constant uint& conv [[buffer(4)]],
                        uint i [[thread_position_in_grid]]) {
    threadgroup float sa[TPB];
    threadgroup float sb[MAX_CONV];
    if (i < size) sa[i] = a[i];
    if (i < conv) sb[i] = b[i];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (i < size) {
        float acc = 0;
        for (uint j = 0; j < conv && i + j < size; ++j) acc += sa[i + j] * sb[j];
        out[i] = acc;
    }
}
"""


@pytest.mark.parametrize("size,conv", [(6, 3), (8, 4), (1, 1), (3, 4)])
def test_conv1d_simple(device, rng, size, conv):
    lib = build(CONV_SIMPLE)
    a = rng.standard_normal(size).astype(np.float32)
    b = rng.standard_normal(conv).astype(np.float32)
    out = padded(size, extra=8)
    lib.conv_simple(a, b, out, size, conv, grid=8, threadgroup=8)
    np.testing.assert_allclose(out[:size], conv_ref(a, b), rtol=1e-5, atol=1e-6)
    assert_untouched(out, size)


CONV_FULL = """
#define MAX_CONV 8
// Several threadgroups: each stages its slice of a plus a halo of conv - 1 elements past
// its end (the threads with local < conv - 1 load one halo element each).
kernel void conv_full(device const float* a [[buffer(0)]], device const float* b [[buffer(1)]],
                      device float* out [[buffer(2)]],
                      constant uint& size [[buffer(3)]], constant uint& conv [[buffer(4)]],
                      threadgroup float* sa [[threadgroup(0)]],  // TPB + MAX_CONV floats
                      uint i [[thread_position_in_grid]],
                      uint local [[thread_position_in_threadgroup]],
                      uint tpb [[dispatch_threads_per_threadgroup]]) {
    threadgroup float sb[MAX_CONV];
    sa[local] = i < size ? a[i] : 0.0f;
    if (local < conv - 1) {
        uint h = i + tpb;  // (the group's first id + tpb) + local: just past the group
        sa[tpb + local] = h < size ? a[h] : 0.0f;
    }
    if (local < conv) sb[local] = b[local];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (i < size) {
        float acc = 0;
        for (uint j = 0; j < conv; ++j) acc += sa[local + j] * sb[j];
        out[i] = acc;
    }
}
"""


@pytest.mark.parametrize("size,conv,tpb", [(15, 4, 8), (8, 3, 8), (40, 7, 16), (1000, 8, 64), (17, 1, 8)])
def test_conv1d_full(device, rng, size, conv, tpb):
    lib = build(CONV_FULL)
    a = rng.standard_normal(size).astype(np.float32)
    b = rng.standard_normal(conv).astype(np.float32)
    out = padded(size, extra=tpb)
    grid = -(-size // tpb) * tpb  # whole groups: every thread of a group helps stage the halo
    lib.conv_full(a, b, out, size, conv, grid=grid, threadgroup=tpb, threadgroup_memory={0: 4 * (tpb + 8)})
    np.testing.assert_allclose(out[:size], conv_ref(a, b), rtol=1e-5, atol=1e-5)
    assert_untouched(out, size)


# -- 12. Prefix sum per block ------------------------------------------------------------------

SCAN = """
#define TPB 8
// Hillis-Steele inclusive scan of each block of TPB elements in threadgroup memory; writes
// the per-element inclusive sums and, from the last thread, the block's total.
kernel void block_scan(device const float* a [[buffer(0)]], device float* scan [[buffer(1)]],
                       device float* totals [[buffer(2)]], constant uint& size [[buffer(3)]],
                       uint i [[thread_position_in_grid]],
                       uint local [[thread_position_in_threadgroup]],
                       uint group [[threadgroup_position_in_grid]]) {
    threadgroup float cache[TPB];
    cache[local] = i < size ? a[i] : 0.0f;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint offset = 1; offset < TPB; offset *= 2) {
        float add = local >= offset ? cache[local - offset] : 0.0f;
        threadgroup_barrier(mem_flags::mem_threadgroup);  // all reads before any write
        cache[local] += add;
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    if (i < size) scan[i] = cache[local];
    if (local == TPB - 1) totals[group] = cache[local];
}
"""


@pytest.mark.parametrize("size", [8, 15, 1, 64 + 3])
def test_prefix_sum_per_block(device, rng, size):
    lib = build(SCAN)
    nblocks = -(-size // 8)
    a = rng.standard_normal(size).astype(np.float32)
    scan = padded(size, extra=8)
    totals = padded(nblocks, extra=4)
    lib.block_scan(a, scan, totals, size, grid=nblocks * 8, threadgroup=8)
    padded_a = np.zeros(nblocks * 8, np.float64)
    padded_a[:size] = a
    ref = np.cumsum(padded_a.reshape(nblocks, 8), axis=1)
    np.testing.assert_allclose(scan[:size], ref.ravel()[:size], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(totals[:nblocks], ref[:, -1], rtol=1e-5, atol=1e-5)
    assert_untouched(scan, size)
    assert_untouched(totals, nblocks)


def test_prefix_sum_per_block_int(device, rng):
    src = SCAN.replace("float", "int").replace("0.0f", "0")
    lib = build(src)
    size = 15
    a = rng.integers(-10**6, 10**6, size, dtype=np.int32)
    scan = np.zeros(size, np.int32)
    totals = np.zeros(2, np.int32)
    lib.block_scan(a, scan, totals, size, grid=16, threadgroup=8)
    ref = np.concatenate([np.cumsum(a[:8]), np.cumsum(a[8:])])
    np.testing.assert_array_equal(scan, ref)
    assert totals.tolist() == [int(a[:8].sum()), int(a[8:].sum())]


# -- 13. Axis sum ------------------------------------------------------------------------------

AXIS_SUM = """
#define TPB 8
// One threadgroup per row (threadgroup (TPB, 1), grid (TPB, rows)); a tree reduction in
// threadgroup memory; thread 0 writes the row's sum. Rows longer than TPB are first folded.
kernel void axis_sum(device const float* a [[buffer(0)]], device float* out [[buffer(1)]],
                     constant uint& cols [[buffer(2)]],
                     uint2 local [[thread_position_in_threadgroup]],
                     uint2 group [[threadgroup_position_in_grid]]) {
    threadgroup float cache[TPB];
    uint row = group.y;
    float s = 0;
    for (uint c = local.x; c < cols; c += TPB) s += a[row * cols + c];
    cache[local.x] = s;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint stride = TPB / 2; stride > 0; stride /= 2) {
        if (local.x < stride) cache[local.x] += cache[local.x + stride];
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    if (local.x == 0) out[row] = cache[0];
}
"""


@pytest.mark.parametrize("rows,cols", [(4, 6), (1, 1), (3, 8), (5, 37)])
def test_axis_sum(device, rng, rows, cols):
    lib = build(AXIS_SUM)
    a = rng.standard_normal((rows, cols)).astype(np.float32)
    out = padded(rows, extra=4)
    lib.axis_sum(a, out, cols, grid=(8, rows), threadgroup=(8, 1))
    np.testing.assert_allclose(out[:rows], a.astype(np.float64).sum(axis=1), rtol=1e-5, atol=1e-5)
    assert_untouched(out, rows)


# -- 14. Matmul --------------------------------------------------------------------------------

MATMUL_SMALL = """
#define TPB 3
// One threadgroup: stage both matrices in threadgroup memory, then one thread per output.
kernel void matmul_small(device const float* a [[buffer(0)]], device const float* b [[buffer(1)]],
                         device float* out [[buffer(2)]], constant uint& size [[buffer(3)]],
                         uint2 p [[thread_position_in_threadgroup]]) {
    threadgroup float sa[TPB * TPB];
    threadgroup float sb[TPB * TPB];
    uint col = p.x, row = p.y;
    if (row < size && col < size) {
        sa[row * size + col] = a[row * size + col];
        sb[row * size + col] = b[row * size + col];
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (row < size && col < size) {
        float acc = 0;
        for (uint k = 0; k < size; ++k) acc += sa[row * size + k] * sb[k * size + col];
        out[row * size + col] = acc;
    }
}
"""


@pytest.mark.parametrize("size", [2, 3, 1])
def test_matmul_small(device, rng, size):
    lib = build(MATMUL_SMALL)
    a = rng.standard_normal((size, size)).astype(np.float32)
    b = rng.standard_normal((size, size)).astype(np.float32)
    out = padded(size * size, extra=9)
    lib.matmul_small(a, b, out, size, grid=(3, 3), threadgroup=(3, 3))
    ref = a.astype(np.float64) @ b
    np.testing.assert_allclose(out[:size * size].reshape(size, size), ref, rtol=1e-5, atol=1e-6)
    assert_untouched(out, size * size)


MATMUL_TILED = """
// C (n x m) = A (n x k) @ B (k x m). Square tiles of T x T threads (T = the threadgroup
// width); both tiles live in threadgroup memory parameters of T*T floats. Loads past the
// matrices' edges are guarded and stage zeros, so T need not divide the sizes.
kernel void matmul_tiled(device const float* A [[buffer(0)]], device const float* B [[buffer(1)]],
                         device float* C [[buffer(2)]],
                         constant uint& n [[buffer(3)]], constant uint& k [[buffer(4)]],
                         constant uint& m [[buffer(5)]],
                         threadgroup float* ta [[threadgroup(0)]],
                         threadgroup float* tb [[threadgroup(1)]],
                         uint2 g [[thread_position_in_grid]],
                         uint2 l [[thread_position_in_threadgroup]],
                         uint2 dims [[threads_per_threadgroup]]) {
    uint T = dims.x;
    uint row = g.y, col = g.x;
    float acc = 0;
    for (uint t0 = 0; t0 < k; t0 += T) {
        uint ac = t0 + l.x, br = t0 + l.y;
        ta[l.y * T + l.x] = (row < n && ac < k) ? A[row * k + ac] : 0.0f;
        tb[l.y * T + l.x] = (br < k && col < m) ? B[br * m + col] : 0.0f;
        threadgroup_barrier(mem_flags::mem_threadgroup);
        for (uint j = 0; j < T; ++j) acc += ta[l.y * T + j] * tb[j * T + l.x];
        threadgroup_barrier(mem_flags::mem_threadgroup);  // before the next tile overwrites
    }
    if (row < n && col < m) C[row * m + col] = acc;
}
"""


@pytest.mark.parametrize("n,k,m,tile", [(8, 8, 8, 4), (8, 8, 8, 3), (2, 2, 2, 3), (7, 5, 9, 4), (1, 1, 1, 2)])
def test_matmul_tiled(device, rng, n, k, m, tile):
    lib = build(MATMUL_TILED)
    a = rng.standard_normal((n, k)).astype(np.float32)
    b = rng.standard_normal((k, m)).astype(np.float32)
    out = padded(n * m, extra=64)
    grid = (-(-m // tile) * tile, -(-n // tile) * tile)  # whole tiles: every thread stages
    nbytes = 4 * tile * tile
    lib.matmul_tiled(a, b, out, n, k, m, grid=grid, threadgroup=(tile, tile),
                     threadgroup_memory={0: nbytes, 1: nbytes})
    ref = a.astype(np.float64) @ b
    np.testing.assert_allclose(out[:n * m].reshape(n, m), ref, rtol=1e-5, atol=1e-5)
    assert_untouched(out, n * m)
