"""metalkit.metal_kernel: kernels given as a body, with the signature generated from the call.

The first part is a puzzle-style suite: each test is a kernel body, its inputs and a check
against numpy on random data, at edge sizes (1, odd, not a multiple of the threadgroup, 0).
Outputs that a guard must keep threads from overrunning are longer than the result and
filled with a sentinel through init_value, so a missing guard shows. The rest checks the
interface itself: the generated signature, shapes and strides, templates, atomics, headers,
several outputs, caching and errors."""
import numpy as np
import pytest

import metalkit as mk

SENTINEL = -777.0


def run1(kernel, inputs, shape, dtype=np.float32, **kw):
    """Run a kernel of one output and return it."""
    out = kernel(inputs=inputs, output_shapes=[shape], output_dtypes=[dtype], **kw)
    assert isinstance(out, list) and len(out) == 1
    return out[0]


# == Puzzles ====================================================================================

# -- map: one thread per element ----------------------------------------------------------------

MAP = mk.metal_kernel("map_add", ["a"], ["out"], """
    uint i = thread_position_in_grid.x;
    out[i] = a[i] + 10;
""")


@pytest.mark.parametrize("n", [1, 7, 256, 1000])
def test_map(device, rng, n):
    a = rng.standard_normal(n).astype(np.float32)
    out = run1(MAP, [a], a.shape, grid=(n, 1, 1), threadgroup=(256, 1, 1))
    np.testing.assert_array_equal(out, a + np.float32(10))
    assert mk.arrays._on_device(out)


def test_map_of_nothing_runs_nothing(device):
    out = run1(MAP, [np.zeros(0, np.float32)], (0,), grid=(0, 1, 1), threadgroup=(256, 1, 1))
    assert out.shape == (0,) and out.dtype == np.float32


# -- zip: two inputs ----------------------------------------------------------------------------

ZIP = mk.metal_kernel("zip_mul_add", ["a", "b"], ["out"], """
    uint i = thread_position_in_grid.x;
    out[i] = a[i] * b[i] + a[i];
""")


@pytest.mark.parametrize("n", [1, 5, 300])
def test_zip(device, rng, n):
    a = rng.standard_normal(n).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    out = run1(ZIP, [a, b], (n,), grid=(n, 1, 1), threadgroup=(64, 1, 1))
    np.testing.assert_allclose(out, a * b + a, rtol=1e-6, atol=1e-6)  # a fused multiply-add rounds once


# -- guard: more threads than elements ----------------------------------------------------------

GUARD = mk.metal_kernel("guard", ["a"], ["out"], """
    uint i = thread_position_in_grid.x;
    if (i < a_shape[0]) out[i] = a[i] * 2;
""")


@pytest.mark.parametrize("n,grid,tg", [(1, 32, 32), (5, 8, 4), (37, 64, 16), (100, 129, 32)])
def test_guard(device, rng, n, grid, tg):
    a = rng.standard_normal(n).astype(np.float32)
    out = run1(GUARD, [a], (grid + 8,), grid=(grid, 1, 1), threadgroup=(tg, 1, 1), init_value=SENTINEL)
    np.testing.assert_array_equal(out[:n], a * 2)
    assert (out[n:] == SENTINEL).all(), "a thread past the guard wrote"


# -- 2-D map: x is the column, y the row ---------------------------------------------------------

MAP2D = mk.metal_kernel("map_2d", ["a"], ["out"], """
    uint col = thread_position_in_grid.x, row = thread_position_in_grid.y;
    uint rows = a_shape[0], cols = a_shape[1];
    if (row < rows && col < cols) out[row * cols + col] = a[row * cols + col] - 1;
""")


@pytest.mark.parametrize("rows,cols,tg", [(1, 1, (8, 8, 1)), (3, 5, (4, 4, 1)), (17, 33, (8, 8, 1))])
def test_map_2d(device, rng, rows, cols, tg):
    a = rng.standard_normal((rows, cols)).astype(np.float32)
    grid = (cols + 3, rows + 2, 1)  # spare threads on both axes
    out = run1(MAP2D, [a], (rows * cols + 16,), grid=grid, threadgroup=tg, init_value=SENTINEL)
    np.testing.assert_array_equal(out[:rows * cols].reshape(rows, cols), a - 1)
    assert (out[rows * cols:] == SENTINEL).all()


# -- broadcast: a column and a row make a matrix -------------------------------------------------

BROADCAST = mk.metal_kernel("broadcast_add", ["col", "row"], ["out"], """
    uint j = thread_position_in_grid.x, i = thread_position_in_grid.y;
    uint n = col_shape[0], m = row_shape[1];
    if (i < n && j < m) out[i * m + j] = col[i] + row[j];
""")


@pytest.mark.parametrize("n,m", [(1, 1), (2, 7), (13, 6)])
def test_broadcast(device, rng, n, m):
    col = rng.standard_normal((n, 1)).astype(np.float32)
    row = rng.standard_normal((1, m)).astype(np.float32)
    out = run1(BROADCAST, [col, row], (n, m), grid=(m, n, 1), threadgroup=(4, 4, 1))
    np.testing.assert_array_equal(out, col + row)


# -- threadgroups: the global index rebuilt from group coordinates -------------------------------

# threads_per_threadgroup is the size of *this* group, smaller in a partial last group;
# dispatch_threads_per_threadgroup is the size every full group has.
BLOCKS = mk.metal_kernel("blocks", ["a"], ["out"], """
    uint i = threadgroup_position_in_grid.x * dispatch_threads_per_threadgroup.x + thread_position_in_threadgroup.x;
    if (i < a_shape[0]) out[i] = a[i] + threads_per_threadgroup.x;
""")


@pytest.mark.parametrize("n,tg", [(1, 4), (9, 4), (100, 32), (257, 64)])
def test_threadgroups(device, rng, n, tg):
    a = rng.standard_normal(n).astype(np.float32)
    out = run1(BLOCKS, [a], (n,), grid=(n, 1, 1), threadgroup=(tg, 1, 1))
    i = np.arange(n)
    group_size = np.minimum(min(tg, n), n - i // tg * tg)  # the partial last group is smaller
    np.testing.assert_array_equal(out, a + group_size.astype(np.float32))


BLOCKS2D = mk.metal_kernel("blocks_2d", ["a"], ["out"], """
    uint2 g = threadgroup_position_in_grid.xy, l = thread_position_in_threadgroup.xy;
    uint2 w = dispatch_threads_per_threadgroup.xy;
    uint col = g.x * w.x + l.x, row = g.y * w.y + l.y;
    if (row < a_shape[0] && col < a_shape[1]) out[row * a_shape[1] + col] = a[row * a_shape[1] + col] * 3;
""")


@pytest.mark.parametrize("rows,cols,tg", [(5, 7, (3, 2, 1)), (33, 18, (8, 4, 1))])
def test_threadgroups_2d(device, rng, rows, cols, tg):
    a = rng.standard_normal((rows, cols)).astype(np.float32)
    out = run1(BLOCKS2D, [a], (rows, cols), grid=(cols, rows, 1), threadgroup=tg)
    np.testing.assert_array_equal(out, a * 3)


# -- threadgroup memory: each group reverses its slice through shared memory ---------------------

SHARED = mk.metal_kernel("reverse_blocks", ["a"], ["out"], """
    threadgroup T stage[TPB];
    uint i = thread_position_in_grid.x, l = thread_position_in_threadgroup.x;
    uint n = threads_per_threadgroup.x;  // this group's size: smaller in a partial last group
    stage[l] = a[i];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    out[i] = stage[n - 1 - l];
""")


@pytest.mark.parametrize("n,tpb", [(1, 8), (8, 8), (29, 8), (100, 32)])
def test_threadgroup_memory(device, rng, n, tpb):
    a = rng.integers(-1000, 1000, n).astype(np.int32)
    out = run1(SHARED, [a], (n,), np.int32, grid=(n, 1, 1), threadgroup=(tpb, 1, 1),
               template=[("T", np.int32), ("TPB", tpb)])
    want = np.concatenate([chunk[::-1] for chunk in np.split(a, range(tpb, n, tpb))])
    np.testing.assert_array_equal(out, want)


# -- pooling: sum of a window of the last W elements, through shared memory with a halo ----------

POOL = mk.metal_kernel("pool", ["a"], ["out"], """
    threadgroup float stage[TPB + W - 1];
    uint i = thread_position_in_grid.x, l = thread_position_in_threadgroup.x;
    int n = a_shape[0];
    if (int(i) < n) stage[l + W - 1] = a[i];
    if (l < W - 1) {  // the first threads also load the halo before the group's slice
        int j = int(i) - (W - 1);
        stage[l] = j >= 0 && j < n ? a[j] : 0.0f;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (int(i) < n) {
        float s = 0;
        for (int k = 0; k < W; ++k) s += stage[l + k];
        out[i] = s;
    }
""")


@pytest.mark.parametrize("n,tpb,w", [(1, 8, 3), (10, 8, 3), (37, 8, 3), (50, 16, 5)])
def test_pooling(device, rng, n, tpb, w):
    a = rng.standard_normal(n).astype(np.float32)
    out = run1(POOL, [a], (n,), grid=(n + 3, 1, 1), threadgroup=(tpb, 1, 1), template=[("TPB", tpb), ("W", w)])
    padded = np.concatenate([np.zeros(w - 1, np.float32), a])
    want = np.array([padded[i:i + w].sum() for i in range(n)], np.float32)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)


# -- dot product: a tree reduction per group, one partial sum per group --------------------------

DOT = mk.metal_kernel("dot_partial", ["a", "b"], ["partial"], """
    threadgroup float prod[TPB];
    uint i = thread_position_in_grid.x, l = thread_position_in_threadgroup.x;
    prod[l] = i < a_shape[0] ? a[i] * b[i] : 0.0f;  // a partial last group's missing threads count 0
    for (uint half_ = TPB / 2; half_ > 0; half_ /= 2) {
        threadgroup_barrier(mem_flags::mem_threadgroup);
        if (l < half_ && l + half_ < threads_per_threadgroup.x) prod[l] += prod[l + half_];
    }
    if (l == 0) partial[threadgroup_position_in_grid.x] = prod[0];
""")


@pytest.mark.parametrize("n,tpb", [(1, 8), (8, 8), (45, 16), (1000, 64)])
def test_dot_product(device, rng, n, tpb):
    a = rng.standard_normal(n).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    groups = -(-n // tpb)
    partial = run1(DOT, [a, b], (groups,), grid=(n, 1, 1), threadgroup=(tpb, 1, 1), template=[("TPB", tpb)])
    chunks = [(x * y).astype(np.float64).sum() for x, y in zip(np.split(a, range(tpb, n, tpb)),
                                                              np.split(b, range(tpb, n, tpb)))]
    np.testing.assert_allclose(partial, chunks, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(partial.astype(np.float64).sum(), np.dot(a.astype(np.float64), b), rtol=1e-5,
                               atol=1e-5)


# -- 1-D convolution: the kernel (fewer than 8 taps) arrives in the constant address space -------

CONV = mk.metal_kernel("conv1d", ["a", "taps"], ["out"], """
    threadgroup float stage[TPB + MAXK - 1];
    uint i = thread_position_in_grid.x, l = thread_position_in_threadgroup.x;
    int n = a_shape[0], k = taps_shape[0];
    stage[l] = int(i) < n ? a[i] : 0.0f;
    if (l < MAXK - 1) {  // the slice's tail: the next group's first elements
        uint j = i + dispatch_threads_per_threadgroup.x;
        uint t = l + dispatch_threads_per_threadgroup.x;
        stage[t] = int(j) < n ? a[j] : 0.0f;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (int(i) < n) {
        float s = 0;
        for (int t = 0; t < k; ++t) s += stage[l + t] * taps[t];
        out[i] = s;
    }
""")


@pytest.mark.parametrize("n,k,tpb", [(1, 1, 8), (6, 3, 8), (15, 4, 8), (33, 7, 16)])
def test_conv1d(device, rng, n, k, tpb, capsys):
    a = rng.standard_normal(n).astype(np.float32)
    taps = rng.standard_normal(k).astype(np.float32)
    groups = -(-n // tpb)
    out = run1(CONV, [a, taps], (n,), grid=(groups * tpb, 1, 1), threadgroup=(tpb, 1, 1),
               template=[("TPB", tpb), ("MAXK", 8)], verbose=True)
    assert "const constant float* taps [[buffer(2)]]" in capsys.readouterr().out
    padded = np.concatenate([a, np.zeros(k, np.float32)])
    want = np.array([(padded[i:i + k] * taps).sum() for i in range(n)], np.float32)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)


# -- prefix sum: an inclusive scan of each group's slice, and each group's total ----------------

SCAN = mk.metal_kernel("scan_blocks", ["a"], ["scan", "totals"], """
    threadgroup T buf[2][TPB];
    uint i = thread_position_in_grid.x, l = thread_position_in_threadgroup.x;
    uint n = threads_per_threadgroup.x;
    int src = 0;
    buf[0][l] = a[i];
    for (uint step = 1; step < n; step *= 2) {  // Hillis-Steele, double-buffered
        threadgroup_barrier(mem_flags::mem_threadgroup);
        buf[1 - src][l] = l >= step ? buf[src][l] + buf[src][l - step] : buf[src][l];
        src = 1 - src;
    }
    scan[i] = buf[src][l];
    if (l == n - 1) totals[threadgroup_position_in_grid.x] = buf[src][l];
""")


@pytest.mark.parametrize("n,tpb", [(1, 8), (8, 8), (21, 8), (300, 64)])
def test_prefix_sum(device, rng, n, tpb):
    a = rng.integers(-50, 50, n).astype(np.int32)
    groups = -(-n // tpb)
    scan, totals = SCAN(inputs=[a], output_shapes=[(n,), (groups,)], output_dtypes=[np.int32, np.int32],
                        grid=(n, 1, 1), threadgroup=(tpb, 1, 1), template=[("T", np.int32), ("TPB", tpb)])
    chunks = np.split(a, range(tpb, n, tpb))
    np.testing.assert_array_equal(scan, np.concatenate([np.cumsum(c) for c in chunks]))
    np.testing.assert_array_equal(totals, [c.sum() for c in chunks])


# -- axis sum: one threadgroup per row, a strided loop and a shared reduction --------------------

AXIS_SUM = mk.metal_kernel("axis_sum", ["a"], ["out"], """
    threadgroup float part[TPB];
    uint row = threadgroup_position_in_grid.y, l = thread_position_in_threadgroup.x;
    uint cols = a_shape[a_ndim - 1];
    float s = 0;
    for (uint c = l; c < cols; c += TPB) s += a[row * cols + c];
    part[l] = s;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (l == 0) {
        float t = 0;
        for (uint k = 0; k < TPB; ++k) t += part[k];
        out[row] = t;
    }
""")


@pytest.mark.parametrize("rows,cols,tpb", [(1, 1, 8), (4, 6, 8), (3, 100, 32), (7, 513, 64)])
def test_axis_sum(device, rng, rows, cols, tpb):
    a = rng.standard_normal((rows, cols)).astype(np.float32)
    out = run1(AXIS_SUM, [a], (rows, 1), grid=(tpb, rows, 1), threadgroup=(tpb, 1, 1), template=[("TPB", tpb)])
    np.testing.assert_allclose(out, a.astype(np.float64).sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-5)


# -- matmul: TILE x TILE tiles of both operands staged in threadgroup memory ---------------------

MATMUL = mk.metal_kernel("matmul_tiled", ["A", "B"], ["C"], """
    threadgroup T ta[TILE][TILE];
    threadgroup T tb[TILE][TILE];
    uint col = thread_position_in_grid.x, row = thread_position_in_grid.y;
    uint lx = thread_position_in_threadgroup.x, ly = thread_position_in_threadgroup.y;
    uint M = A_shape[0], K = A_shape[1], N = B_shape[1];
    T acc = 0;
    for (uint k0 = 0; k0 < K; k0 += TILE) {
        ta[ly][lx] = row < M && k0 + lx < K ? A[row * K + k0 + lx] : T(0);
        tb[ly][lx] = k0 + ly < K && col < N ? B[(k0 + ly) * N + col] : T(0);
        threadgroup_barrier(mem_flags::mem_threadgroup);
        for (uint k = 0; k < TILE; ++k) acc += ta[ly][k] * tb[k][lx];
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    if (row < M && col < N) C[row * N + col] = acc;
""")


@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (5, 7, 3), (33, 17, 40)])
def test_matmul(device, rng, m, k, n):
    tile = 8
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    grid = (-(-n // tile) * tile, -(-m // tile) * tile, 1)  # whole tiles: every thread reaches the barriers
    c = run1(MATMUL, [a, b], (m, n), grid=grid, threadgroup=(tile, tile, 1),
             template=[("T", np.float32), ("TILE", tile)])
    np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-5)
