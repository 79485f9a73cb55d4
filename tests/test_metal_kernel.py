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


# == The interface ==============================================================================

def test_generated_signature(device, rng, capsys):
    k = mk.metal_kernel("sig", ["a", "s", "c"], ["out", "flag"], """
        uint i = thread_position_in_grid.x;
        if (i >= uint(a_shape[a_ndim - 1])) return;
        out[i] = half(T(a[i]) * s + c[i % 3] * N);
        flag[i] = B && a[i] > 0 && threads_per_threadgroup.x == 16;
    """)
    a = rng.standard_normal(20).astype(np.float32)
    out, flag = k(inputs=[a, 0.5, [1, 2, 3]], output_shapes=[(20,), (20,)], output_dtypes=[np.float16, np.bool_],
                  grid=(20, 1, 1), threadgroup=(16, 1, 1), template=[("T", np.float32), ("N", 3), ("B", True)],
                  verbose=True)
    printed = capsys.readouterr().out
    name = "custom_kernel_sig__float_3_1_float_floats_int32_tc_float16_t_bool"
    assert printed.startswith("Generated source code for `sig`:\n```\n#include <metal_stdlib>\n")
    assert printed.endswith("```\n")
    assert f"""
template <typename T, int N, bool B>
[[kernel]] void {name}(
  const device float* a [[buffer(0)]],
  const constant int* a_shape [[buffer(1)]],
  const constant int& a_ndim [[buffer(2)]],
  const constant float& s [[buffer(3)]],
  const constant int32_t* c [[buffer(4)]],
  device float16_t* out [[buffer(5)]],
  device bool* flag [[buffer(6)]],
  uint3 thread_position_in_grid [[thread_position_in_grid]],
  uint3 threads_per_threadgroup [[threads_per_threadgroup]]) {{
""" in printed
    assert (f'template [[host_name("{name}")]] [[kernel]] decltype({name}<float, 3, 1>) {name}<float, 3, 1>;'
            in printed)
    c = np.array([1, 2, 3], np.float32)[np.arange(20) % 3]
    np.testing.assert_array_equal(out, (a * np.float32(0.5) + c * 3).astype(np.float16))
    np.testing.assert_array_equal(flag, (a > 0) & (np.arange(20) < 16))  # the second group has 4 threads
    k(inputs=[a, 0.5, [1, 2, 3]], output_shapes=[(20,), (20,)], output_dtypes=[np.float16, np.bool_],
      grid=(20, 1, 1), threadgroup=(16, 1, 1), template=[("T", np.float32), ("N", 3), ("B", True)])
    assert capsys.readouterr().out == ""


def test_scalar_inputs_take_mlx_types(device, rng, capsys):
    k = mk.metal_kernel("scalars", ["x", "n", "f", "b", "big", "h"], ["out"], """
        uint i = thread_position_in_grid.x;
        out[i] = b ? x[i] * f + n + float(big - 1099511627776) + float(h) : 0.0f;
    """)
    x = rng.standard_normal(9).astype(np.float32)
    out = run1(k, [x, 3, 0.25, True, 2**40 + 5, np.array(1.5, np.float16)], (9,), grid=(9, 1, 1),
               threadgroup=(32, 1, 1), verbose=True)
    printed = capsys.readouterr().out
    for decl in ["const device float* x [[buffer(0)]]", "const constant int32_t& n [[buffer(1)]]",
                 "const constant float& f [[buffer(2)]]", "const constant bool& b [[buffer(3)]]",
                 "const constant int64_t& big [[buffer(4)]]", "const constant float16_t& h [[buffer(5)]]"]:
        assert decl in printed
    np.testing.assert_allclose(out, x * 0.25 + 3 + 5 + 1.5, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("view", ["rows_cols", "transposed_3d", "broadcast", "reversed"])
@pytest.mark.parametrize("contiguous", [True, False])
def test_shape_strides_ndim(device, rng, view, contiguous):
    base = rng.standard_normal((7, 10, 3)).astype(np.float32)
    a = {"rows_cols": base[1::2, ::3, 1],                 # strides (60, 9) elements
         "transposed_3d": base.transpose(2, 0, 1)[:, 1:, ::2],
         "broadcast": np.broadcast_to(base[0, :, 0], (4, 10)),  # stride 0 along the first axis
         "reversed": base[::-1, ::2, 0]}[view]          # negative strides: always copied
    k = mk.metal_kernel(f"strided_{contiguous}", ["a"], ["out", "info"], """
        uint elem = thread_position_in_grid.x;
        out[elem] = a[elem_to_loc(elem, a_shape, a_strides, a_ndim)];
        if (elem == 0) {
            info[0] = a_ndim;
            for (int d = 0; d < a_ndim; ++d) { info[1 + d] = a_shape[d]; info[4 + d] = a_strides[d]; }
        }
    """, ensure_row_contiguous=contiguous)
    out, info = k(inputs=[a], output_shapes=[a.shape, (7,)], output_dtypes=[np.float32, np.int64],
                  grid=(a.size, 1, 1), threadgroup=(64, 1, 1), init_value=-1)
    np.testing.assert_array_equal(out, a)
    nd = a.ndim
    dense = np.cumprod((a.shape[1:] + (1,))[::-1])[::-1] if nd > 1 else [1]
    real = [s // 4 for s in a.strides]
    in_place = not contiguous and view != "reversed"
    assert info[0] == nd and list(info[1:1 + nd]) == list(a.shape)
    assert list(info[4:4 + nd]) == (real if in_place else list(dense))
    assert (info[1 + nd:4] == -1).all() and (info[4 + nd:] == -1).all()


def test_template_kinds(device, rng):
    k = mk.metal_kernel("templated", ["a"], ["out"], """
        uint i = thread_position_in_grid.x;
        out[i] = B ? T(a[i] * N) : T(N);
    """)
    for t, n, b in [(np.float32, 3, True), (np.int32, -2, False), (np.dtype(np.float16), 5, True),
                    (np.uint8, 7, np.bool_(True)), (np.int64, np.int64(-9), False)]:
        dt = np.dtype(t)
        a = (rng.standard_normal(13) * 10).astype(dt) if dt.kind == "f" else rng.integers(0, 30, 13).astype(dt)
        out = run1(k, [a], (13,), dt, grid=(13, 1, 1), threadgroup=(8, 1, 1), template=[("T", t), ("N", n), ("B", b)])
        want = (a * dt.type(n)).astype(dt) if b else np.full(13, n, dt)
        np.testing.assert_array_equal(out, want, err_msg=str((t, n, b)))


def test_atomic_outputs_with_init_value(device, rng):
    k = mk.metal_kernel("histogram", ["v", "w"], ["counts", "total"], """
        uint i = thread_position_in_grid.x;
        if (i < v_shape[0]) {
            atomic_fetch_add_explicit(&counts[v[i]], 1u, memory_order_relaxed);
            atomic_fetch_add_explicit(&total[0], w[i], memory_order_relaxed);
        }
    """, atomic_outputs=True)
    for n, bins, init in [(1, 1, 0), (1000, 17, 0), (333, 5, 4)]:
        v = rng.integers(0, bins, n).astype(np.int32)
        w = rng.standard_normal(n).astype(np.float32)
        counts, total = k(inputs=[v, w], output_shapes=[(bins,), (1,)], output_dtypes=[np.uint32, np.float32],
                          grid=(n + 7, 1, 1), threadgroup=(64, 1, 1), init_value=init)
        np.testing.assert_array_equal(counts, np.bincount(v, minlength=bins) + init)
        np.testing.assert_allclose(total[0], w.astype(np.float64).sum() + init, rtol=1e-4, atol=1e-4)


def test_init_value_fills_what_the_kernel_leaves(device, rng):
    k = mk.metal_kernel("evens", ["a"], ["f", "i"], """
        uint j = thread_position_in_grid.x;
        if (j % 2 == 0) { f[j] = a[j]; i[j] = int(a[j] * 100); }
    """)
    a = rng.standard_normal(11).astype(np.float32)
    f, i = k(inputs=[a], output_shapes=[(11,), (11,)], output_dtypes=[np.float32, np.int32], grid=(11, 1, 1),
             threadgroup=(4, 1, 1), init_value=3.0)
    np.testing.assert_array_equal(f[::2], a[::2])
    np.testing.assert_array_equal(f[1::2], np.float32(3))
    np.testing.assert_array_equal(i[::2], (a[::2] * 100).astype(np.int32))
    np.testing.assert_array_equal(i[1::2], 3)


def test_header_helpers(device, rng):
    k = mk.metal_kernel("with_header", ["a"], ["out"], """
        uint i = thread_position_in_grid.x;
        out[i] = cube(a[i]) + OFFSET;
    """, header="""
constant float OFFSET = 0.5f;
template <typename U> inline U cube(U x) { return x * x * x; }
""")
    a = rng.standard_normal(30).astype(np.float32)
    out = run1(k, [a], (30,), grid=(30, 1, 1), threadgroup=(16, 1, 1))
    np.testing.assert_allclose(out, a * a * a + np.float32(0.5), rtol=1e-6, atol=1e-6)


def test_multiple_outputs(device, rng):
    k = mk.metal_kernel("minmax", ["a", "b"], ["lo", "hi", "first"], """
        uint i = thread_position_in_grid.x;
        lo[i] = min(a[i], b[i]);
        hi[i] = max(a[i], b[i]);
        first[i] = a[i] < b[i];
    """)
    a = rng.standard_normal((3, 7)).astype(np.float32)
    b = rng.standard_normal((3, 7)).astype(np.float32)
    lo, hi, first = k(inputs=[a, b], output_shapes=[a.shape, a.shape, a.shape],
                      output_dtypes=[np.float32, np.float32, np.bool_], grid=(21, 1, 1), threadgroup=(8, 1, 1))
    assert lo.shape == hi.shape == first.shape == (3, 7) and first.dtype == np.bool_
    np.testing.assert_array_equal(lo, np.minimum(a, b))
    np.testing.assert_array_equal(hi, np.maximum(a, b))
    np.testing.assert_array_equal(first, a < b)


def test_bfloat16_inputs(device, rng):
    import ml_dtypes  # a test dependency (pip install .[test])
    k = mk.metal_kernel("bf16_twice", ["a"], ["out"], """
        uint i = thread_position_in_grid.x;
        out[i] = float(a[i]) * 2;
    """)
    a = rng.standard_normal(40).astype(ml_dtypes.bfloat16)
    out = run1(k, [a], (40,), grid=(40, 1, 1), threadgroup=(32, 1, 1))
    np.testing.assert_array_equal(out, a.astype(np.float32) * 2)


BUILTIN_NAMES = [
    "thread_position_in_grid", "thread_position_in_threadgroup", "threadgroup_position_in_grid",
    "threads_per_threadgroup", "dispatch_threads_per_threadgroup", "threadgroups_per_grid", "threads_per_grid",
    "grid_size", "grid_origin", "thread_index_in_threadgroup", "thread_execution_width", "threads_per_simdgroup",
    "thread_index_in_simdgroup", "simdgroup_index_in_threadgroup", "simdgroups_per_threadgroup",
    "dispatch_simdgroups_per_threadgroup", "thread_index_in_quadgroup", "quadgroup_index_in_threadgroup",
    "quadgroups_per_threadgroup", "dispatch_quadgroups_per_threadgroup",
]
VECTOR_BUILTINS = 9  # the first nine are uint3


def test_every_builtin(device):
    lines = ["uint3 p = thread_position_in_grid, g = threads_per_grid;",
             "device uint* o = out + (p.x + g.x * (p.y + g.y * p.z)) * 38;"]
    col = 0
    for j, b in enumerate(BUILTIN_NAMES):
        for c in ("xyz" if j < VECTOR_BUILTINS else [None]):
            lines.append(f"o[{col}] = {b}{'.' + c if c else ''};")
            col += 1
    assert col == 38
    k = mk.metal_kernel("builtins", [], ["out"], "\n".join(lines))
    grid, tg = (5, 3, 2), (4, 4, 1)  # the threadgroup is clipped to the grid: (4, 3, 1)
    n = int(np.prod(grid))
    out = run1(k, [], (n, 38), np.uint32, grid=grid, threadgroup=tg, init_value=12345)

    t = np.array([4, 3, 1])
    gr = np.array(grid)
    z, y, x = np.meshgrid(*(np.arange(d) for d in grid[::-1]), indexing="ij")
    pos = np.stack([x, y, z], -1).reshape(-1, 3)
    group, local = pos // t, pos % t
    size = np.minimum(t, gr - group * t)
    index = local[:, 0] + size[:, 0] * (local[:, 1] + size[:, 1] * local[:, 2])
    full = lambda v: np.broadcast_to(v, pos.shape)
    col1 = lambda v: np.broadcast_to(np.asarray(v), (n,))[:, None]
    want = np.concatenate([
        pos, local, group, size, full(t), full(-(-gr // t)), full(gr), full(gr), full(0),
        col1(index), col1(32), col1(32), col1(index % 32), col1(index // 32), col1((size.prod(1) + 31) // 32),
        col1((t.prod() + 31) // 32), col1(index % 4), col1(index // 4), col1((size.prod(1) + 3) // 4),
        col1((t.prod() + 3) // 4)], 1)
    np.testing.assert_array_equal(out, want)


def test_compiled_once_per_generated_source(device, rng, monkeypatch):
    import metalkit.library
    calls = []
    real = metalkit.library.compile

    def counting(source, **kw):
        calls.append(source)
        return real(source, **kw)
    monkeypatch.setattr(metalkit.library, "compile", counting)
    k = mk.metal_kernel("cached_neg", ["a"], ["out"], "uint i = thread_position_in_grid.x; out[i] = -a[i];")
    for dtype, compiles in [(np.float32, 1), (np.float32, 1), (np.int32, 2), (np.float32, 2), (np.int32, 2)]:
        a = (rng.standard_normal(10) * 100).astype(dtype)
        out = run1(k, [a], (10,), dtype, grid=(10, 1, 1), threadgroup=(32, 1, 1))
        np.testing.assert_array_equal(out, -a)
        assert len(calls) == compiles


# -- errors --------------------------------------------------------------------------------------

def test_kernel_definition_errors():
    src = "out[0] = 1;"
    cases = [
        (dict(name="my-kernel"), "name must be a C identifier"),
        (dict(input_names=["a b"]), "input_names holds 'a b'"),
        (dict(input_names=["a", "a"]), "input_names names 'a' twice"),
        (dict(output_names=[]), "output_names is empty"),
        (dict(input_names=["out"]), "'out' is both an input and an output name"),
        (dict(input_names="a"), "input_names must be a list"),
        (dict(source=b"out[0] = 1;"), "source must be MSL text"),
    ]
    for change, text in cases:
        kw = {**dict(name="k", input_names=["a"], output_names=["out"], source=src), **change}
        with pytest.raises(mk.ArgumentError, match="metal_kernel") as e:
            mk.metal_kernel(**kw)
        assert text in str(e.value), (change, str(e.value))


ERR = mk.metal_kernel("err", ["a", "b"], ["out"], "uint i = thread_position_in_grid.x; out[i] = a[i] + b[i];")


@pytest.mark.parametrize("change,error,text", [
    (dict(inputs=[np.ones(4, np.float32)]), mk.ArgumentError, "got 1 inputs for 2 input names (a, b)"),
    (dict(inputs=np.ones((2, 4), np.float32)), mk.ArgumentError, "inputs must be a list"),
    (dict(output_shapes=[(4,), (4,)]), mk.ArgumentError, "got 2 output_shapes for 1 output names (out)"),
    (dict(output_dtypes=[]), mk.ArgumentError, "got 0 output_dtypes for 1 output names (out)"),
    (dict(output_shapes=[(4, -1)]), mk.ArgumentError, "sizes cannot be negative"),
    (dict(output_dtypes=[np.float64]), mk.ArgumentError, "output 'out' has dtype float64"),
    (dict(output_dtypes=["nonsense"]), mk.ArgumentError, "not a numpy dtype"),
    (dict(inputs=[np.ones(4), np.ones(4, np.float32)]), mk.ArgumentError, "a.astype(np.float32)"),
    (dict(inputs=[np.ones(4, np.complex64), np.ones(4, np.float32)]), mk.ArgumentError,
     "real and imaginary parts"),
    (dict(inputs=[np.ones(4, ">f4"), np.ones(4, np.float32)]), mk.ArgumentError, "native byte order"),
    (dict(inputs=[np.ones(4, np.float32), [object()]]), mk.ArgumentError, "input 'b' (list) is not numbers"),
    (dict(inputs=[np.ones(4, np.float32), 2**70]), mk.ArgumentError, "input 'b' (int) is not numbers"),
    (dict(inputs=[np.ones(4, np.float32), [[1], [2, 3]]]), mk.ArgumentError, "input 'b' cannot be made an array"),
    (dict(template=[("T", "float32")]), mk.ArgumentError, "must be a numpy dtype (np.float32), an int or a bool"),
    (dict(template=[("T", 1.5)]), mk.ArgumentError, "template argument 'T' is 1.5"),
    (dict(template=[("T", np.float64)]), mk.ArgumentError, "template argument 'T' is float64"),
    (dict(template=[("1T", np.float32)]), mk.ArgumentError, "not a (name, value) pair"),
    (dict(template=[("N", 2**40)]), mk.ArgumentError, "outside an int's range"),
    (dict(init_value="zero"), mk.ArgumentError, "init_value must be a number"),
    (dict(init_value=-1, output_dtypes=[np.uint32]), mk.ArgumentError, "init_value -1 is not a value output 'out'"),
    (dict(init_value=0.5, output_dtypes=[np.int32]), mk.ArgumentError, "init_value 0.5 is not a value output 'out'"),
    (dict(grid=(4, 1)), mk.DispatchError, "grid must be a tuple of 3 ints"),
    (dict(grid=4), mk.DispatchError, "a 1-D grid of n is (n, 1, 1)"),
    (dict(threadgroup=(0, 1, 1)), mk.DispatchError, "threadgroup (0, 1, 1) has a dimension outside 1.."),
    (dict(threadgroup=(2048, 1, 1)), mk.DispatchError, "allows at most"),
])
def test_call_errors(device, change, error, text):
    a = np.arange(4, dtype=np.float32)
    kw = dict(inputs=[a, a], output_shapes=[(4,)], output_dtypes=[np.float32], grid=(4, 1, 1),
              threadgroup=(4, 1, 1))
    kw.update(change)
    with pytest.raises(error) as e:
        ERR(**kw)
    assert "metal_kernel 'err'" in str(e.value) and text in str(e.value), str(e.value)
    np.testing.assert_array_equal(a, np.arange(4))  # the caller's data is left as it was


def test_compile_error_in_the_body_names_the_kernel_and_the_bodys_line(device):
    k = mk.metal_kernel("broken", ["a"], ["out"], "uint i = thread_position_in_grid.x;\nout[i] = a[i] + oops;")
    with pytest.raises(mk.CompileError) as e:
        run1(k, [np.ones(4, np.float32)], (4,), grid=(4, 1, 1), threadgroup=(4, 1, 1))
    err = e.value
    assert (err.filename, err.lineno, err.offset) == ("broken source", 2, 17)
    assert err.text.strip() == "out[i] = a[i] + oops;"
    assert str(err).startswith("broken source:2:17: metal_kernel 'broken': use of undeclared identifier 'oops'")
    assert "verbose=True" not in str(err) and "broken.metal" not in str(err)
    quoted = err.log.splitlines()
    at = next(i for i, line in enumerate(quoted) if line.startswith("broken source:2:17: error:"))
    assert quoted[at + 1].split("|")[0].strip() == "2" and "a[i] + oops;" in quoted[at + 1]


def test_compile_error_in_the_header_names_the_headers_line(device):
    k = mk.metal_kernel("hdr", ["a"], ["out"], "out[0] = twice(a[0]);",
                        header="// helpers\nfloat twice(float x) { return x + y; }\n")
    with pytest.raises(mk.CompileError) as e:
        run1(k, [np.ones(4, np.float32)], (4,), grid=(1, 1, 1), threadgroup=(1, 1, 1))
    assert (e.value.filename, e.value.lineno) == ("hdr header", 2)
    assert e.value.text.strip() == "float twice(float x) { return x + y; }"
    assert "metal_kernel 'hdr'" in str(e.value)


def test_compile_error_in_the_generated_signature_points_to_verbose(device):
    # An input named as an MSL type: the generated parameter does not compile.
    k = mk.metal_kernel("sig", ["float"], ["out"], "out[0] = 1;")
    with pytest.raises(mk.CompileError) as e:
        run1(k, [np.ones(4, np.float32)], (4,), grid=(1, 1, 1), threadgroup=(1, 1, 1))
    assert e.value.filename == "sig.metal" and "verbose=True" in str(e.value)
    assert "metal_kernel 'sig'" in str(e.value)


OOB = mk.metal_kernel("oob", ["a"], ["out"], """uint i = thread_position_in_grid.x;
out[i * 4096] = a[i];""")


@pytest.mark.parametrize("device", ["cpu"], indirect=True)  # the CPU simulator's options
def test_debug_keywords_reach_the_kernel_and_faults_use_the_users_names(device, rng):
    a = rng.standard_normal(8).astype(np.float32)
    with pytest.raises(mk.KernelFault) as e:
        run1(OOB, [a], (8,), grid=(8, 1, 1), threadgroup=(8, 1, 1), check=True)
    msg = str(e.value)
    assert msg.startswith("metal_kernel 'oob': ") and "parameter 'out'" in msg and "oob source:2" in msg, msg
    assert "custom_kernel_" not in msg and "oob.metal" not in msg
    with pytest.raises(mk.ArgumentError, match="metal_kernel 'oob': shuffle= takes an int seed"):
        run1(OOB, [a], (8,), grid=(8, 1, 1), threadgroup=(8, 1, 1), shuffle="yes")

    spin = mk.metal_kernel("spin", ["flag"], ["out"], "while (flag[0] == 0) {}\nout[0] = 1;")
    with pytest.raises(mk.KernelFault, match=r"^metal_kernel 'spin': stopped at its time limit of 0\.2 s"):
        run1(spin, [np.zeros(8, np.int32)], (1,), np.int32, grid=(1, 1, 1), threadgroup=(1, 1, 1), timeout=0.2)

    take = mk.metal_kernel("take", ["n"], ["next", "order"], """uint i = thread_position_in_grid.x;
uint slot = atomic_fetch_add_explicit(&next[0], 1u, memory_order_relaxed);
atomic_store_explicit(&order[slot], i, memory_order_relaxed);""", atomic_outputs=True)
    def order(seed):
        return take(inputs=[64], output_shapes=[(1,), (64,)], output_dtypes=[np.uint32, np.uint32], init_value=0,
                    grid=(64, 1, 1), threadgroup=(64, 1, 1), shuffle=seed)[1]
    assert order(0).tolist() == list(range(64))
    seed = int(rng.integers(1, 2**31))
    shuffled = order(seed)
    assert sorted(shuffled.tolist()) == list(range(64)) and shuffled.tolist() != list(range(64))


def test_shape_of_a_scalar_input_is_not_declared(device):
    # As in MLX: a 0-d input has no name_shape parameter, so a body using one does not compile.
    k = mk.metal_kernel("scalar_shape", ["s"], ["out"], "out[0] = s_shape[0];")
    with pytest.raises(mk.CompileError, match="s_shape"):
        run1(k, [2.0], (1,), grid=(1, 1, 1), threadgroup=(1, 1, 1))
