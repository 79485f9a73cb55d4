"""Kernels beyond the puzzles, at realistic sizes and at edge sizes (1, odd, not a multiple
of the threadgroup): reductions (threadgroup memory, simd_sum), block scans, tiled matmul,
row softmax, histograms with atomics, simdgroup_matrix matmul, templates with function
constants, and max_total_threads_per_threadgroup. Each is checked against numpy."""
import numpy as np
import pytest

import metalkit as mk
from conftest import build

SENTINEL = -12345.0

# -- tree reduction with threadgroup memory --------------------------------------------------

REDUCE = """
#define TG 256
// Each thread adds two elements while loading (so a group covers 2*TG elements), then a
// tree reduction in threadgroup memory; thread 0 writes the group's partial sum.
kernel void reduce_sum(device const float* x [[buffer(0)]], device float* partial [[buffer(1)]],
                       constant uint& n [[buffer(2)]],
                       uint l [[thread_position_in_threadgroup]],
                       uint g [[threadgroup_position_in_grid]]) {
    threadgroup float cache[TG];
    uint i = g * (2 * TG) + l;
    float v = 0;
    if (i < n) v = x[i];
    if (i + TG < n) v += x[i + TG];
    cache[l] = v;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint s = TG / 2; s > 0; s >>= 1) {
        if (l < s) cache[l] += cache[l + s];
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    if (l == 0) partial[g] = cache[0];
}
"""


def device_sum(lib, x):
    """Reduce on the device until one value is left (each pass shrinks by 512)."""
    while True:
        n = len(x)
        groups = -(-n // 512)
        partial = np.full(groups + 1, SENTINEL, np.float32)
        lib.reduce_sum(x, partial, n, grid=groups * 256, threadgroup=256)
        assert partial[groups] == SENTINEL
        x = partial[:groups]
        if groups == 1:
            return x[0]


@pytest.mark.parametrize("n", [1, 7, 511, 512, 513, 100_003, 2**20, 2**20 + 3])
def test_tree_reduction(device, rng, n):
    lib = build(REDUCE)
    x = rng.random(n, dtype=np.float32)  # positive: a relative tolerance is meaningful
    # first pass: check the partials one by one against numpy
    groups = -(-n // 512)
    partial = np.full(groups + 2, SENTINEL, np.float32)
    lib.reduce_sum(x, partial, n, grid=groups * 256, threadgroup=256)
    xp = np.zeros(groups * 512, np.float64)
    xp[:n] = x
    np.testing.assert_allclose(partial[:groups], xp.reshape(groups, 512).sum(axis=1), rtol=1e-5)
    assert (partial[groups:] == SENTINEL).all()
    # then reduce the partials on the device down to one value
    total = device_sum(lib, x)
    np.testing.assert_allclose(total, x.astype(np.float64).sum(), rtol=1e-5)


# -- reduction with simd_sum -----------------------------------------------------------------

SIMD_REDUCE = """
// One value per thread; simd_sum within each SIMD-group, lane 0 stores the SIMD-group's sum
// in threadgroup memory, then SIMD-group 0 adds those with another simd_sum.
template <typename T>
kernel void simd_reduce(device const T* x [[buffer(0)]], device T* partial [[buffer(1)]],
                        constant uint& n [[buffer(2)]],
                        threadgroup T* sums [[threadgroup(0)]],
                        uint i [[thread_position_in_grid]],
                        uint g [[threadgroup_position_in_grid]],
                        uint lane [[thread_index_in_simdgroup]],
                        uint sg [[simdgroup_index_in_threadgroup]],
                        uint nsg [[simdgroups_per_threadgroup]]) {
    T v = i < n ? x[i] : T(0);
    T s = simd_sum(v);
    if (lane == 0) sums[sg] = s;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (sg == 0) {
        T t = lane < nsg ? sums[lane] : T(0);
        t = simd_sum(t);
        if (lane == 0) partial[g] = t;
    }
}
template [[host_name("simd_reduce_f")]] kernel void simd_reduce<float>(
    device const float*, device float*, constant uint&, threadgroup float*, uint, uint, uint, uint, uint);
template [[host_name("simd_reduce_i")]] kernel void simd_reduce<int>(
    device const int*, device int*, constant uint&, threadgroup int*, uint, uint, uint, uint, uint);
"""


@pytest.mark.parametrize("n,tg", [(1, 256), (33, 64), (1000, 256), (2**20 + 5, 1024), (4097, 96)])
def test_simd_sum_reduction(device, rng, n, tg):
    lib = build(SIMD_REDUCE)
    groups = -(-n // tg)
    nsg = -(-tg // 32)
    # float: the grid is exactly n threads, so the last threadgroup (and SIMD-group) is partial
    x = rng.random(n, dtype=np.float32)
    partial = np.full(groups + 1, SENTINEL, np.float32)
    lib.simd_reduce_f(x, partial, n, grid=n, threadgroup=tg, threadgroup_memory={0: 4 * nsg})
    xp = np.zeros(groups * tg, np.float64)
    xp[:n] = x
    np.testing.assert_allclose(partial[:groups], xp.reshape(groups, tg).sum(axis=1), rtol=1e-5)
    assert partial[groups] == SENTINEL
    # int: exact
    xi = rng.integers(-10**6, 10**6, n, dtype=np.int32)
    pi = np.full(groups + 1, -7, np.int32)
    lib.simd_reduce_i(xi, pi, n, grid=n, threadgroup=tg, threadgroup_memory={0: 4 * nsg})
    xpi = np.zeros(groups * tg, np.int64)
    xpi[:n] = xi
    np.testing.assert_array_equal(pi[:groups], xpi.reshape(groups, tg).sum(axis=1))
    assert pi[groups] == -7


# -- block prefix scans ----------------------------------------------------------------------

BLELLOCH = """
#define TG 256
#define BLOCK (2 * TG)
// Work-efficient (Blelloch) exclusive scan of each block of 512 ints by 256 threads:
// up-sweep builds partial sums in place, the root is cleared, down-sweep distributes.
kernel void blelloch_scan(device const int* x [[buffer(0)]], device int* y [[buffer(1)]],
                          device int* block_sums [[buffer(2)]], constant uint& n [[buffer(3)]],
                          uint l [[thread_position_in_threadgroup]],
                          uint g [[threadgroup_position_in_grid]]) {
    threadgroup int t[BLOCK];
    uint base = g * BLOCK;
    t[l] = base + l < n ? x[base + l] : 0;
    t[l + TG] = base + l + TG < n ? x[base + l + TG] : 0;
    uint offset = 1;
    for (uint d = BLOCK / 2; d > 0; d >>= 1) {
        threadgroup_barrier(mem_flags::mem_threadgroup);
        if (l < d) {
            uint ai = offset * (2 * l + 1) - 1, bi = offset * (2 * l + 2) - 1;
            t[bi] += t[ai];
        }
        offset <<= 1;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (l == 0) {
        block_sums[g] = t[BLOCK - 1];
        t[BLOCK - 1] = 0;
    }
    for (uint d = 1; d < BLOCK; d <<= 1) {
        offset >>= 1;
        threadgroup_barrier(mem_flags::mem_threadgroup);
        if (l < d) {
            uint ai = offset * (2 * l + 1) - 1, bi = offset * (2 * l + 2) - 1;
            int tmp = t[ai];
            t[ai] = t[bi];
            t[bi] += tmp;
        }
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (base + l < n) y[base + l] = t[l];
    if (base + l + TG < n) y[base + l + TG] = t[l + TG];
}

// Adds each block's offset (the exclusive scan of the block sums) to its elements.
kernel void add_offsets(device int* y [[buffer(0)]], device const int* offsets [[buffer(1)]],
                        uint i [[thread_position_in_grid]]) {
    y[i] += offsets[i / BLOCK];
}
"""


@pytest.mark.parametrize("n", [1, 5, 511, 512, 513, 1000, 2**20, 2**20 - 3])
def test_blelloch_scan(device, rng, n):
    lib = build(BLELLOCH)
    x = rng.integers(-1000, 1000, n, dtype=np.int32)
    blocks = -(-n // 512)
    y = np.full(n + 8, -7, np.int32)
    sums = np.full(blocks + 1, -7, np.int32)
    lib.blelloch_scan(x, y, sums, n, grid=blocks * 256, threadgroup=256)
    # per block: exclusive scan, block totals
    xp = np.zeros(blocks * 512, np.int64)
    xp[:n] = x
    xb = xp.reshape(blocks, 512)
    excl = (np.cumsum(xb, axis=1) - xb).ravel()[:n]
    np.testing.assert_array_equal(y[:n], excl)
    np.testing.assert_array_equal(sums[:blocks], xb.sum(axis=1))
    assert (y[n:] == -7).all() and sums[blocks] == -7
    # the whole array: scan the block sums, add them back on the device
    offsets = (np.cumsum(sums[:blocks]) - sums[:blocks]).astype(np.int32)
    yy = y[:n]
    lib.add_offsets(yy, offsets, grid=n)  # one thread per element; offsets has one per block
    np.testing.assert_array_equal(yy, np.cumsum(x.astype(np.int64)) - x)


HILLIS_STEELE = """
// Hillis-Steele inclusive scan of each block (the threadgroup width, up to 512) of floats,
// double-buffered in a threadgroup memory parameter of 2 * width floats.
kernel void hs_scan(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                    constant uint& n [[buffer(2)]],
                    threadgroup float* buf [[threadgroup(0)]],
                    uint i [[thread_position_in_grid]],
                    uint l [[thread_position_in_threadgroup]],
                    uint w [[dispatch_threads_per_threadgroup]]) {
    uint src = 0, dst = w;
    buf[l] = i < n ? x[i] : 0.0f;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint off = 1; off < w; off <<= 1) {
        buf[dst + l] = l >= off ? buf[src + l] + buf[src + l - off] : buf[src + l];
        threadgroup_barrier(mem_flags::mem_threadgroup);
        uint t = src; src = dst; dst = t;
    }
    if (i < n) y[i] = buf[src + l];
}
"""


@pytest.mark.parametrize("n,w", [(1, 256), (300, 256), (2**20 + 1, 512), (777, 512), (1024, 256)])
def test_hillis_steele_scan(device, rng, n, w):
    lib = build(HILLIS_STEELE)
    x = rng.standard_normal(n).astype(np.float32)
    y = np.full(n + 4, SENTINEL, np.float32)
    blocks = -(-n // w)
    lib.hs_scan(x, y, n, grid=blocks * w, threadgroup=w, threadgroup_memory={0: 2 * 4 * w})
    xp = np.zeros(blocks * w, np.float64)
    xp[:n] = x
    ref = np.cumsum(xp.reshape(blocks, w), axis=1).ravel()[:n]
    np.testing.assert_allclose(y[:n], ref, rtol=1e-4, atol=1e-4)
    assert (y[n:] == SENTINEL).all()


# -- tiled matmul ----------------------------------------------------------------------------

MATMUL = """
#define TILE 16
kernel void matmul16(device const float* A [[buffer(0)]], device const float* B [[buffer(1)]],
                     device float* C [[buffer(2)]],
                     constant uint& n [[buffer(3)]], constant uint& k [[buffer(4)]],
                     constant uint& m [[buffer(5)]],
                     uint2 l [[thread_position_in_threadgroup]],
                     uint2 g [[threadgroup_position_in_grid]]) {
    threadgroup float As[TILE][TILE];
    threadgroup float Bs[TILE][TILE];
    uint row = g.y * TILE + l.y, col = g.x * TILE + l.x;
    float acc = 0;
    for (uint t0 = 0; t0 < k; t0 += TILE) {
        As[l.y][l.x] = (row < n && t0 + l.x < k) ? A[row * k + t0 + l.x] : 0.0f;
        Bs[l.y][l.x] = (t0 + l.y < k && col < m) ? B[(t0 + l.y) * m + col] : 0.0f;
        threadgroup_barrier(mem_flags::mem_threadgroup);
        for (uint j = 0; j < TILE; ++j) acc += As[l.y][j] * Bs[j][l.x];
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    if (row < n && col < m) C[row * m + col] = acc;
}
"""


@pytest.mark.parametrize("n,k,m", [(67, 45, 33), (1, 1, 1), (16, 16, 16), (17, 3, 31), (256, 200, 130)])
def test_tiled_matmul(device, rng, n, k, m):
    lib = build(MATMUL)
    a = rng.standard_normal((n, k)).astype(np.float32)
    b = rng.standard_normal((k, m)).astype(np.float32)
    c = np.full(n * m + 16, SENTINEL, np.float32)
    grid = (-(-m // 16) * 16, -(-n // 16) * 16)
    lib.matmul16(a, b, c, n, k, m, grid=grid, threadgroup=(16, 16))
    np.testing.assert_allclose(c[:n * m].reshape(n, m), a @ b, rtol=1e-5, atol=1e-6 * k)
    assert (c[n * m:] == SENTINEL).all()


# -- row softmax -----------------------------------------------------------------------------

SOFTMAX = """
#define TG 256
// One threadgroup per row; threads stride over the columns. A max tree reduction, then
// exp(x - max) summed by a second tree reduction, then each element divided by the sum.
kernel void softmax_rows(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                         constant uint& cols [[buffer(2)]],
                         uint2 l2 [[thread_position_in_threadgroup]],
                         uint2 g [[threadgroup_position_in_grid]],
                         uint2 w2 [[threads_per_threadgroup]]) {
    threadgroup float red[TG];
    uint l = l2.x, w = w2.x;
    device const float* row = x + g.y * cols;
    device float* out = y + g.y * cols;
    float mx = -INFINITY;
    for (uint c = l; c < cols; c += w) mx = max(mx, row[c]);
    red[l] = mx;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint s = w / 2; s > 0; s >>= 1) {
        if (l < s) red[l] = max(red[l], red[l + s]);
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    mx = red[0];
    threadgroup_barrier(mem_flags::mem_threadgroup);  // everyone has read red[0]
    float sum = 0;
    for (uint c = l; c < cols; c += w) {
        float e = exp(row[c] - mx);
        out[c] = e;
        sum += e;
    }
    red[l] = sum;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint s = w / 2; s > 0; s >>= 1) {
        if (l < s) red[l] += red[l + s];
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    float inv = 1.0f / red[0];
    for (uint c = l; c < cols; c += w) out[c] *= inv;
}
"""


def softmax_ref(x):
    x = x.astype(np.float64)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


@pytest.mark.parametrize("rows,cols,tg", [(3, 1, 32), (5, 7, 32), (9, 300, 256), (64, 1024, 256), (2, 1024, 64)])
def test_row_softmax(device, rng, rows, cols, tg):
    lib = build(SOFTMAX)
    x = (rng.standard_normal((rows, cols)) * 5).astype(np.float32)
    x[0] += 200  # exp(200) overflows float: only a max-subtracted softmax survives
    y = np.full(rows * cols + 8, SENTINEL, np.float32)
    lib.softmax_rows(x, y, cols, grid=(tg, rows), threadgroup=(tg, 1))
    out = y[:rows * cols].reshape(rows, cols)
    np.testing.assert_allclose(out, softmax_ref(x), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(out.sum(axis=1), 1.0, rtol=1e-5)
    assert (y[rows * cols:] == SENTINEL).all()


# -- histograms with atomics -----------------------------------------------------------------

HIST = """
kernel void hist_global(device const uint* x [[buffer(0)]], device atomic_uint* bins [[buffer(1)]],
                        constant uint& n [[buffer(2)]], uint i [[thread_position_in_grid]]) {
    if (i < n) atomic_fetch_add_explicit(&bins[x[i]], 1u, memory_order_relaxed);
}

#define NBINS 256
// A threadgroup-local histogram in threadgroup atomics, merged into the global one at the
// end; each thread also handles several elements (a grid-stride loop).
kernel void hist_local(device const uint* x [[buffer(0)]], device atomic_uint* bins [[buffer(1)]],
                       constant uint& n [[buffer(2)]], constant uint& nbins [[buffer(3)]],
                       uint i [[thread_position_in_grid]], uint total [[threads_per_grid]],
                       uint l [[thread_position_in_threadgroup]], uint w [[threads_per_threadgroup]]) {
    threadgroup atomic_uint local_bins[NBINS];
    for (uint b = l; b < nbins; b += w) atomic_store_explicit(&local_bins[b], 0u, memory_order_relaxed);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint j = i; j < n; j += total)
        atomic_fetch_add_explicit(&local_bins[x[j]], 1u, memory_order_relaxed);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint b = l; b < nbins; b += w) {
        uint c = atomic_load_explicit(&local_bins[b], memory_order_relaxed);
        if (c) atomic_fetch_add_explicit(&bins[b], c, memory_order_relaxed);
    }
}
"""


@pytest.mark.parametrize("n,nbins", [(1, 256), (1001, 13), (2**20, 256), (2**20 + 7, 100)])
def test_histogram_global_atomics(device, rng, n, nbins):
    lib = build(HIST)
    x = rng.integers(0, nbins, n, dtype=np.uint32)
    start = rng.integers(0, 1000, nbins, dtype=np.uint32)  # bins accumulate onto what is there
    bins = start.copy()
    lib.hist_global(x, bins, n, grid=n)
    np.testing.assert_array_equal(bins, start + np.bincount(x, minlength=nbins).astype(np.uint32))


@pytest.mark.parametrize("n,nbins,grid,tg", [(1, 256, 1, 1), (1001, 13, 999, 64), (2**20, 256, 16384, 256),
                                             (2**20 + 7, 100, 5000, 96)])
def test_histogram_threadgroup_atomics(device, rng, n, nbins, grid, tg):
    lib = build(HIST)
    x = rng.integers(0, nbins, n, dtype=np.uint32)
    start = rng.integers(0, 1000, nbins, dtype=np.uint32)
    bins = start.copy()
    lib.hist_local(x, bins, n, nbins, grid=grid, threadgroup=tg)
    np.testing.assert_array_equal(bins, start + np.bincount(x, minlength=nbins).astype(np.uint32))


def test_atomic_counter_and_return_values(device, rng):
    """atomic_fetch_add returns the old value: each thread claims a distinct output slot."""
    lib = build("""
    kernel void compact(device const float* x [[buffer(0)]], device float* out [[buffer(1)]],
                        device atomic_uint* count [[buffer(2)]], constant uint& n [[buffer(3)]],
                        uint i [[thread_position_in_grid]]) {
        if (i < n && x[i] > 0) {
            uint slot = atomic_fetch_add_explicit(count, 1u, memory_order_relaxed);
            out[slot] = x[i];
        }
    }
    """)
    n = 100_001
    x = rng.standard_normal(n).astype(np.float32)
    out = np.full(n, SENTINEL, np.float32)
    count = np.zeros(1, np.uint32)
    lib.compact(x, out, count, n, grid=n)
    k = int((x > 0).sum())
    assert count[0] == k
    np.testing.assert_array_equal(np.sort(out[:k]), np.sort(x[x > 0]))
    assert (out[k:] == SENTINEL).all()


# -- simdgroup_matrix matmul -----------------------------------------------------------------

SIMD_MM = """
// Each SIMD-group computes one 8x8 tile of C; a threadgroup of 4 SIMD-groups covers a
// 16x16 block (2x2 tiles). n, k, m are multiples of 8.
kernel void mm_simdgroup(device const float* A [[buffer(0)]], device const float* B [[buffer(1)]],
                         device float* C [[buffer(2)]],
                         constant uint& n [[buffer(3)]], constant uint& k [[buffer(4)]],
                         constant uint& m [[buffer(5)]],
                         uint2 g [[threadgroup_position_in_grid]],
                         uint sg [[simdgroup_index_in_threadgroup]]) {
    uint row = (g.y * 2 + sg / 2) * 8, col = (g.x * 2 + sg % 2) * 8;
    if (row >= n || col >= m) return;  // a whole SIMD-group leaves together
    simdgroup_float8x8 acc = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
    for (uint t = 0; t < k; t += 8) {
        simdgroup_float8x8 a, b;
        simdgroup_load(a, A + row * k + t, k);
        simdgroup_load(b, B + t * m + col, m);
        simdgroup_multiply_accumulate(acc, a, b, acc);
    }
    simdgroup_store(acc, C + row * m + col, m);
}
"""


@pytest.mark.parametrize("n,k,m", [(64, 64, 64), (8, 8, 8), (24, 40, 16)])
def test_simdgroup_matrix_matmul(device, rng, n, k, m):
    lib = build(SIMD_MM)
    a = rng.standard_normal((n, k)).astype(np.float32)
    b = rng.standard_normal((k, m)).astype(np.float32)
    c = np.full(n * m + 16, SENTINEL, np.float32)
    groups = (-(-m // 16), -(-n // 16))
    lib.mm_simdgroup(a, b, c, n, k, m, grid=(groups[0] * 128, groups[1]), threadgroup=(128, 1))
    np.testing.assert_allclose(c[:n * m].reshape(n, m), a @ b, rtol=1e-5, atol=1e-6 * k)
    assert (c[n * m:] == SENTINEL).all()


# -- templates with host_name and a function constant ----------------------------------------

TEMPLATED = """
constant bool relu [[function_constant(0)]];
constant bool take_max [[function_constant(1)]];

// Elementwise: y = (relu ? max(x, 0) : x) * s, for float and half.
template <typename T>
kernel void scale(device const T* x [[buffer(0)]], device T* y [[buffer(1)]], constant T& s [[buffer(2)]],
                  uint i [[thread_position_in_grid]]) {
    T v = x[i];
    if (relu) v = max(v, T(0));
    y[i] = v * s;
}
template [[host_name("scale_float")]] kernel void scale<float>(device const float*, device float*, constant float&, uint);
template [[host_name("scale_half")]] kernel void scale<half>(device const half*, device half*, constant half&, uint);

// A block reduction templated on the element type: max or sum by the function constant.
template <typename T>
kernel void block_reduce(device const T* x [[buffer(0)]], device T* out [[buffer(1)]], constant uint& n [[buffer(2)]],
                         uint i [[thread_position_in_grid]], uint l [[thread_position_in_threadgroup]],
                         uint g [[threadgroup_position_in_grid]], uint w [[dispatch_threads_per_threadgroup]]) {
    threadgroup T cache[128];
    T id = take_max ? T(-INFINITY) : T(0);
    cache[l] = i < n ? x[i] : id;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint s = w / 2; s > 0; s >>= 1) {
        if (l < s) cache[l] = take_max ? max(cache[l], cache[l + s]) : T(cache[l] + cache[l + s]);
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    if (l == 0) out[g] = cache[0];
}
template [[host_name("reduce_float")]] kernel void block_reduce<float>(device const float*, device float*, constant uint&, uint, uint, uint, uint);
template [[host_name("reduce_half")]] kernel void block_reduce<half>(device const half*, device half*, constant uint&, uint, uint, uint, uint);
"""


@pytest.mark.parametrize("relu", [False, True])
def test_template_with_function_constant_elementwise(device, rng, relu):
    lib = build(TEMPLATED, constants={"relu": relu, "take_max": False})
    assert {"scale_float", "scale_half", "reduce_float", "reduce_half"} <= set(lib.kernels)
    n = 1001
    x = rng.standard_normal(n).astype(np.float32)
    y = np.zeros_like(x)
    lib.scale_float(x, y, 1.5)
    ref = (np.maximum(x, 0) if relu else x) * np.float32(1.5)
    np.testing.assert_array_equal(y, ref)
    xh = x.astype(np.float16)
    yh = np.zeros_like(xh)
    lib.scale_half(xh, yh, np.float16(-0.75))
    refh = (np.maximum(xh, np.float16(0)) if relu else xh) * np.float16(-0.75)
    np.testing.assert_array_equal(yh, refh)
    with pytest.raises(mk.ArgumentError):
        lib.scale_half(x, y, 1.5)  # float32 arrays for a half kernel


@pytest.mark.parametrize("n", [1, 127, 128, 1000, 65537])
def test_template_with_function_constant_reduction(device, rng, n):
    groups = -(-n // 128)
    lmax = build(TEMPLATED, constants={"relu": False, "take_max": True})
    lsum = build(TEMPLATED, constants={"relu": False, "take_max": False})
    x = rng.standard_normal(n).astype(np.float32)
    xp = np.full(groups * 128, -np.inf)
    xp[:n] = x
    out = np.full(groups + 1, SENTINEL, np.float32)
    lmax.reduce_float(x, out, n, grid=groups * 128, threadgroup=128)
    np.testing.assert_array_equal(out[:groups], xp.reshape(groups, 128).max(axis=1).astype(np.float32))
    assert out[groups] == SENTINEL
    lsum.reduce_float(x, out, n, grid=groups * 128, threadgroup=128)
    xp[n:] = 0
    np.testing.assert_allclose(out[:groups], xp.reshape(groups, 128).sum(axis=1), rtol=1e-5, atol=1e-5)
    # half: max is exact
    xh = x.astype(np.float16)
    outh = np.zeros(groups, np.float16)
    lmax.reduce_half(xh, outh, n, grid=groups * 128, threadgroup=128)
    xph = np.full(groups * 128, -np.inf, np.float16)
    xph[:n] = xh
    np.testing.assert_array_equal(outh, xph.reshape(groups, 128).max(axis=1))


# -- max_total_threads_per_threadgroup -------------------------------------------------------

LIMITED = """
// Reverses each threadgroup's slice in place through threadgroup memory sized for the
// kernel's declared maximum of 64 threads.
[[max_total_threads_per_threadgroup(64)]]
kernel void reverse_groups(device float* x [[buffer(0)]], constant uint& n [[buffer(1)]],
                           uint i [[thread_position_in_grid]],
                           uint l [[thread_position_in_threadgroup]],
                           uint w [[threads_per_threadgroup]]) {
    threadgroup float t[64];
    if (i < n) t[l] = x[i];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (i < n) x[i] = t[w - 1 - l];
}
"""


def reverse_ref(x, w):
    out = x.copy()
    for s in range(0, len(x), w):
        out[s:s + w] = x[s:s + w][::-1]
    return out


def test_max_total_threads_per_threadgroup(device, rng):
    lib = build(LIMITED)
    k = lib.reverse_groups
    if device == "cpu":
        assert k.max_threads_per_threadgroup == 64
    else:
        assert 0 < k.max_threads_per_threadgroup <= 64
    limit = k.max_threads_per_threadgroup
    # the default threadgroup respects the limit: n = 1000 gives groups of 64, the last of 40
    n = 1000
    x = rng.standard_normal(n).astype(np.float32)
    y = x.copy()
    k(y, n, grid=n)
    np.testing.assert_array_equal(y, reverse_ref(x, limit))
    for tg in (1, 7, 32):
        y = x.copy()
        k(y, n, threadgroup=tg)
        np.testing.assert_array_equal(y, reverse_ref(x, tg))
    y = x[:1].copy()
    k(y, 1, grid=1)
    assert y[0] == x[0]
    for bad in (limit + 1, 256, (16, 8)):
        y = x.copy()
        with pytest.raises(mk.DispatchError, match=rf"allows at most {limit} per threadgroup"):
            k(y, n, threadgroup=bad)
        np.testing.assert_array_equal(y, x)  # nothing ran
