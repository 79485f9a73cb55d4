"""simdgroup_matrix operations against numpy, under every execution model, bit for bit alike.

SIMT kernels run each operation on the SIMD-group's whole 8x8 matrix at once (the twins in
include/metalkit/simdgroup_matrix.h); the reference model ("threads") runs the per-lane code, each
lane computing its own two elements. Every kernel here runs under "auto" (SIMT), "fibers" and
"threads", and the three must write the same bits. Lane l holds elements (row, col) and
(row, col + 1) with row = (l / 16) * 4 + (l / 2) % 4, col = ((l / 8) % 2) * 4 + (l % 2) * 2, as on
Apple GPUs. Products accumulate each element in float, a then b in k order, rounded once to the
destination type, so values on a coarse grid give exact results that numpy's float64 matches.
"""
from __future__ import annotations

import functools
import re

import ml_dtypes
import numpy as np
import pytest

import metalkit as mk
from conftest import build

BF16 = ml_dtypes.bfloat16
DTYPES = {"float": np.float32, "half": np.float16, "bfloat": BF16}
MODELS = ["auto", "fibers", "threads"]

LANE = np.arange(32)
ROW = (LANE // 16) * 4 + (LANE // 2) % 4
COL = ((LANE // 8) % 2) * 4 + (LANE % 2) * 2

pytestmark = pytest.mark.skipif(mk.device().backend != "cpu",
                                reason="execution models are the CPU simulator's")


@functools.lru_cache(maxsize=None)
def lib(src: str, model: str) -> mk.Library:
    return build(src, filename="sgmm.metal", execution=model)


def run_models(src: str, kernel: str, outputs: list[np.ndarray], *args, **launch
               ) -> list[np.ndarray]:
    """Runs `kernel` under each model on copies of `outputs` (passed first, then args); checks the
    models wrote the same bits and that SIMT ran as SIMT; returns the "auto" outputs."""
    results = {}
    for model in MODELS:
        k = getattr(lib(src, model), kernel)
        if model == "auto":
            assert k.execution == "simt", (k.execution, k.execution_reason)
        outs = [o.copy() for o in outputs]
        k(*outs, *args, **launch)
        results[model] = outs
    for model in MODELS[1:]:
        for i, (a, b) in enumerate(zip(results["auto"], results[model])):
            assert a.tobytes() == b.tobytes(), f"output {i}: auto and {model} differ"
    return results["auto"]


def grid_values(rng, shape, dtype) -> np.ndarray:
    """Halves in [-2, 2]: products of two and sums of eight of them plus one are exact in bfloat."""
    return (rng.integers(-4, 5, shape) / 2).astype(dtype)


def block_index(epr: int, ox: int, oy: int, transpose: bool) -> np.ndarray:
    """Flat index of element (r, c) of the 8x8 matrix at origin (ox, oy) of a row-major array."""
    r, c = np.arange(8)[:, None], np.arange(8)[None, :]
    return (oy + (c if transpose else r)) * epr + ox + (r if transpose else c)


# ---- loads and stores ------------------------------------------------------------------------

COPY = """
// p and q: elements per row, origin x and y, transpose of the load and of the store.
kernel void copy(device T* dst [[buffer(0)]], device const T* src [[buffer(1)]],
                 constant uint4& p [[buffer(2)]], constant uint4& q [[buffer(3)]]) {
    simdgroup_matrix<T, 8, 8> m;
    simdgroup_load(m, src, p.x, ulong2(p.y, p.z), p.w != 0);
    simdgroup_store(m, dst, q.x, ulong2(q.y, q.z), q.w != 0);
}
// The shorter forms: default elements per row (8), origin (0, 0) and no transpose.
kernel void copy_defaults(device T* d0 [[buffer(0)]], device T* d1 [[buffer(1)]],
                          device T* d2 [[buffer(2)]], device T* d3 [[buffer(3)]],
                          device const T* src [[buffer(4)]]) {
    simdgroup_matrix<T, 8, 8> a, b, c;
    simdgroup_load(a, src);
    simdgroup_load(b, src, 16);
    simdgroup_load(c, src, 16, ulong2(5, 1));
    simdgroup_store(a, d0);
    simdgroup_store(b, d1, 8);
    simdgroup_store(c, d2, 12, ulong2(2, 3));
    simdgroup_store(c, d3, 8, 0, true);
}
"""

LOADS = [(8, 0, 0, False), (13, 3, 2, False), (13, 3, 2, True), (20, 12, 5, True), (9, 1, 0, False)]
STORES = [(8, 0, 0, False), (11, 3, 1, False), (11, 2, 3, True), (16, 8, 0, True)]


@pytest.mark.parametrize("t", DTYPES)
@pytest.mark.parametrize("load", LOADS)
@pytest.mark.parametrize("store", STORES)
def test_load_and_store_with_strides_origins_and_transposes(rng, t, load, store):
    src_text = COPY.replace("T", t)
    src = rng.standard_normal(20 * 14).astype(DTYPES[t])
    dst = np.full(11 * 12 + 8, 7, DTYPES[t])  # untouched elements keep their 7
    (got,) = run_models(src_text, "copy", [dst], src, np.array(load, np.uint32),
                        np.array(store, np.uint32), grid=32, threadgroup=32)
    want = dst.copy()
    want[block_index(*store)] = src[block_index(*load)]
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("t", DTYPES)
def test_load_and_store_default_arguments(rng, t):
    src = rng.standard_normal(16 * 9).astype(DTYPES[t])
    outs = [np.zeros(n, DTYPES[t]) for n in (64, 64, 12 * 11, 64)]
    d0, d1, d2, d3 = run_models(COPY.replace("T", t), "copy_defaults", outs, src, grid=32,
                                threadgroup=32)
    np.testing.assert_array_equal(d0, src[:64])
    np.testing.assert_array_equal(d1.reshape(8, 8), src.reshape(9, 16)[:8, :8])
    want = np.zeros(12 * 11, DTYPES[t])
    want[block_index(12, 2, 3, False)] = src[block_index(16, 5, 1, False)]
    np.testing.assert_array_equal(d2, want)
    np.testing.assert_array_equal(d3.reshape(8, 8), src[block_index(16, 5, 1, False)].T)


def test_a_store_whose_rows_overlap_writes_lane_by_lane(rng):
    """4 elements per row: rows overlap, and the last lane (in lane order) to write one wins."""
    src = rng.standard_normal(64).astype(np.float32)
    dst = np.zeros(40, np.float32)
    (got,) = run_models(COPY.replace("T", "float"), "copy", [dst], src,
                        np.array((8, 0, 0, 0), np.uint32), np.array((4, 0, 0, 0), np.uint32),
                        grid=32, threadgroup=32)
    m, want = src.reshape(8, 8), dst.copy()
    for l in range(32):
        want[ROW[l] * 4 + COL[l]:ROW[l] * 4 + COL[l] + 2] = m[ROW[l], COL[l]:COL[l] + 2]
    np.testing.assert_array_equal(got, want)


# ---- fragments: thread_elements(), make_filled, the diagonal ------------------------------------

FRAGMENTS = """
kernel void fragments(device T* o [[buffer(0)]], device T* w [[buffer(1)]],
                      device T* f [[buffer(2)]], device T* g [[buffer(3)]],
                      device const T* m [[buffer(4)]],
                      uint lane [[thread_index_in_simdgroup]]) {
    simdgroup_matrix<T, 8, 8> M;
    simdgroup_load(M, m);
    vec<T, 2> e = M.thread_elements();          // each lane's own two elements
    o[lane * 2] = e[0];
    o[lane * 2 + 1] = e[1];
    simdgroup_matrix<T, 8, 8> W = make_filled_simdgroup_matrix<T, 8, 8>(T(-1));
    W.thread_elements()[0] = T(lane * 2);
    W.thread_elements()[1] = T(lane * 2 + 1);
    simdgroup_store(W, w);
    simdgroup_store(make_filled_simdgroup_matrix<T, 8, 8>(T(1.5f)), f);
    simdgroup_matrix<T, 8, 8> D(T(3));
    simdgroup_store(D, g);
}
"""


@pytest.mark.parametrize("t", DTYPES)
def test_thread_elements_are_apples_fragment_layout(rng, t):
    dt = DTYPES[t]
    m = rng.standard_normal((8, 8)).astype(dt)
    outs = [np.zeros(64, dt), np.zeros((8, 8), dt), np.zeros((8, 8), dt), np.full((8, 8), 5, dt)]
    o, w, f, g = run_models(FRAGMENTS.replace("T", t), "fragments", outs, m, grid=32,
                            threadgroup=32)
    o = o.reshape(32, 2)
    np.testing.assert_array_equal(o[:, 0], m[ROW, COL])
    np.testing.assert_array_equal(o[:, 1], m[ROW, COL + 1])
    want = np.zeros((8, 8), dt)
    want[ROW, COL], want[ROW, COL + 1] = LANE * 2, LANE * 2 + 1
    np.testing.assert_array_equal(w, want)
    np.testing.assert_array_equal(f, np.full((8, 8), 1.5, dt))
    np.testing.assert_array_equal(g, np.eye(8, dtype=dt) * 3)


# ---- products -----------------------------------------------------------------------------------

MMA = """
kernel void mma(device D* d [[buffer(0)]], device D* e [[buffer(1)]], device D* f [[buffer(2)]],
                device D* g [[buffer(3)]], device const A* a [[buffer(4)]],
                device const B* b [[buffer(5)]], device const C* c [[buffer(6)]],
                uint lane [[thread_index_in_simdgroup]]) {
    simdgroup_matrix<A, 8, 8> ma;
    simdgroup_matrix<B, 8, 8> mb;
    simdgroup_matrix<C, 8, 8> mc;
    simdgroup_matrix<D, 8, 8> md;
    simdgroup_load(ma, a);
    simdgroup_load(mb, b, 8, 0, true);           // b's transpose
    simdgroup_load(mc, c);
    simdgroup_multiply_accumulate(md, ma, mb, mc);
    simdgroup_store(md, d);
    simdgroup_multiply(md, ma, mb);
    simdgroup_store(md, e);
    simdgroup_multiply_accumulate(md, ma, mb, md);   // d is c: all read before any is written
    simdgroup_store(md, f);
    // fragments in, fragments out (as MLX and tinygrad use them)
    simdgroup_matrix<A, 8, 8> fa;
    simdgroup_matrix<B, 8, 8> fb;
    simdgroup_matrix<D, 8, 8> fd;
    fa.thread_elements() = ma.thread_elements();
    fb.thread_elements()[0] = mb.thread_elements()[0];
    fb.thread_elements()[1] = mb.thread_elements()[1];
    simdgroup_multiply(fd, fa, fb);
    vec<D, 2> out = fd.thread_elements();
    uint r = (lane / 16) * 4 + (lane / 2) % 4, col = ((lane / 8) % 2) * 4 + (lane % 2) * 2;
    g[r * 8 + col] = out[0];
    g[r * 8 + col + 1] = out[1];
}
"""

# (d, a, b, c) element types: one type, and the mixed accumulations llama.cpp, MLX and tinygrad use
MIXED = [("float",) * 4, ("half",) * 4, ("bfloat",) * 4, ("float", "half", "float", "float"),
         ("float", "float", "half", "float"), ("float", "half", "half", "float"),
         ("float", "bfloat", "bfloat", "float"), ("half", "half", "half", "float"),
         ("half", "float", "float", "half")]


def mma_source(d: str, a: str, b: str, c: str) -> str:
    """MMA with its element types: A, B, C and D stand before `*`, `,` or `>`."""
    names = {"A": a, "B": b, "C": c, "D": d}
    return re.sub(r"\b([ABCD])\b(?=[*,>])", lambda m: names[m.group(1)], MMA)


@pytest.mark.parametrize("types", MIXED, ids=lambda t: "x".join(t))
def test_products_of_every_element_type(rng, types):
    d, a, b, c = types
    ma, mb, mc = (grid_values(rng, (8, 8), DTYPES[x]) for x in (a, b, c))
    outs = [np.zeros((8, 8), DTYPES[d]) for _ in range(4)]
    gd, ge, gf, gg = run_models(mma_source(*types), "mma", outs, ma, mb, mc, grid=32,
                                threadgroup=32)
    a64, b64, c64 = (x.astype(np.float64) for x in (ma, mb.T, mc))
    ab = a64 @ b64
    np.testing.assert_array_equal(gd, (ab + c64).astype(DTYPES[d]))
    np.testing.assert_array_equal(ge, ab.astype(DTYPES[d]))
    ab_d = ab.astype(DTYPES[d]).astype(np.float64)  # d after the multiply, then d += a * b
    np.testing.assert_array_equal(gf, (ab + ab_d).astype(DTYPES[d]))
    np.testing.assert_array_equal(gg, ab.astype(DTYPES[d]))


@pytest.mark.parametrize("types", MIXED, ids=lambda t: "x".join(t))
def test_products_of_random_values_round_once(rng, types):
    """Random values: every model the same bits, each element within the bound of 8 float fmas and
    one rounding to the destination type (unit roundoffs 2^-24 and eps / 2) of numpy's."""
    d, a, b, c = types
    ma, mb, mc = (rng.standard_normal((8, 8)).astype(DTYPES[x]) for x in (a, b, c))
    outs = [np.zeros((8, 8), DTYPES[d]) for _ in range(4)]
    gd, ge, _, _ = run_models(mma_source(*types), "mma", outs, ma, mb, mc, grid=32, threadgroup=32)
    a64, b64, c64 = (x.astype(np.float64) for x in (ma, mb.T, mc))
    u = 8 * 2.0 ** -24 + float(np.finfo(DTYPES[d]).eps) / 2
    products = np.abs(a64) @ np.abs(b64)
    assert np.all(np.abs(gd.astype(np.float64) - (a64 @ b64 + c64)) <= u * (products + np.abs(c64)))
    assert np.all(np.abs(ge.astype(np.float64) - a64 @ b64) <= u * products)


PRODUCT = """
kernel void product(device T* out [[buffer(0)]], device const T* x [[buffer(1)]],
                    device const T* y [[buffer(2)]]) {
    simdgroup_matrix<T, 8, 8> X, Y;
    simdgroup_load(X, x);
    simdgroup_load(Y, y);
    simdgroup_matrix<T, 8, 8> Z = (X * Y) * X;   // `*` of two matrices is their product
    simdgroup_store(Z, out);
}
"""


@pytest.mark.parametrize("t", DTYPES)
def test_the_product_operator(rng, t):
    dt = DTYPES[t]
    x, y = ((rng.integers(-2, 3, (8, 8)) / 2).astype(dt) for _ in range(2))
    (out,) = run_models(PRODUCT.replace("T", t), "product", [np.zeros((8, 8), dt)], x, y, grid=32,
                        threadgroup=32)
    x64, y64 = x.astype(np.float64), y.astype(np.float64)
    np.testing.assert_array_equal(out, ((x64 @ y64).astype(dt).astype(np.float64) @ x64).astype(dt))


# ---- lanes that take no part, and arguments that differ between lanes ----------------------------

PARTIAL = """
// Lanes not in `live` return first: they give zeros to the product; loads and stores touch only
// the elements of the lanes that remain.
kernel void partial(device float* d [[buffer(0)]], device const float* a [[buffer(1)]],
                    device const float* b [[buffer(2)]], device const float* c [[buffer(3)]],
                    constant uint& live [[buffer(4)]], uint lane [[thread_index_in_simdgroup]]) {
    if (!(live >> lane & 1u)) return;
    simdgroup_float8x8 ma, mb, mc;
    simdgroup_load(ma, a);
    simdgroup_load(mb, b);
    simdgroup_load(mc, c);
    simdgroup_multiply_accumulate(mc, ma, mb, mc);
    simdgroup_store(mc, d);
}
// Each lane its own source: odd lanes load from the second matrix, and transposed; then lanes 16
// and up (rows 4 to 7) from the second, as it is.
kernel void per_lane(device float* d [[buffer(0)]], device float* e [[buffer(1)]],
                     device const float* a [[buffer(2)]], uint lane [[thread_index_in_simdgroup]]) {
    simdgroup_float8x8 m;
    simdgroup_load(m, a + (lane & 1u) * 64, 8, 0, (lane & 1u) != 0);
    simdgroup_store(m, d);
    simdgroup_load(m, a + (lane / 16) * 64);
    simdgroup_store(m, e);
}
"""


@pytest.mark.parametrize("live", [0xFFFFFFFF, 0x0000FFFF, 0x12345678, 0x80000001])
def test_lanes_that_returned_give_zeros_and_touch_nothing(rng, live):
    on = (live >> LANE & 1).astype(bool)
    a, b, c = (rng.integers(-4, 5, (8, 8)).astype(np.float32) for _ in range(3))
    d = np.full((8, 8), 9, np.float32)
    (got,) = run_models(PARTIAL, "partial", [d], a, b, c, np.uint32(live), grid=32, threadgroup=32)
    held = np.zeros((8, 8), bool)  # elements the live lanes hold
    held[ROW[on], COL[on]] = held[ROW[on], COL[on] + 1] = True
    want = np.where(held, np.where(held, a, 0) @ np.where(held, b, 0) + c, 9)
    np.testing.assert_array_equal(got, want)


def test_a_short_simdgroup_reads_and_writes_only_its_lanes_rows(rng):
    """16 threads hold rows 0 to 3: four rows of source and destination, guarded (check=True) so an
    access to rows 4 to 7 faults."""
    a, b, c = (rng.integers(-4, 5, (4, 8)).astype(np.float32) for _ in range(3))
    d = np.zeros((4, 8), np.float32)
    for model in MODELS:
        out = d.copy()
        lib(PARTIAL, model).partial(out, a, b, c, np.uint32(0xFFFFFFFF), grid=16, threadgroup=16,
                                    check=True)
        pad = lambda x: np.vstack([x, np.zeros((4, 8), np.float32)])  # noqa: E731
        np.testing.assert_array_equal(out, (pad(a) @ pad(b))[:4] + c)


def test_arguments_that_differ_between_lanes(rng):
    a = rng.standard_normal(128).astype(np.float32)
    outs = [np.zeros((8, 8), np.float32), np.zeros((8, 8), np.float32)]
    d, e = run_models(PARTIAL, "per_lane", outs, a, grid=32, threadgroup=32)
    first, second = a[:64].reshape(8, 8), a[64:].reshape(8, 8)
    odd = (np.arange(8)[None, :] // 2 % 2).astype(bool).repeat(8, 0)  # columns odd lanes hold
    np.testing.assert_array_equal(d, np.where(odd, second.T, first))
    np.testing.assert_array_equal(e, np.vstack([first[:4], second[4:]]))


WRAPPER = """
// A fragment wrapper as tinygrad renders one: each lane's fragments in, its fragment of the result
// out. Its SIMT twin has a version for a full mask; lanes not in `live` return first.
float2 wmma(float2 a, float2 b, float2 c) {
    simdgroup_float8x8 A, B, C;
    A.thread_elements()[0] = a[0]; B.thread_elements()[0] = b[0]; C.thread_elements()[0] = c[0];
    A.thread_elements()[1] = a[1]; B.thread_elements()[1] = b[1]; C.thread_elements()[1] = c[1];
    simdgroup_multiply_accumulate(C, A, B, C);
    return float2(C.thread_elements()[0], C.thread_elements()[1]);
}
kernel void wrapped(device float* d [[buffer(0)]], device const float* a [[buffer(1)]],
                    device const float* b [[buffer(2)]], device const float* c [[buffer(3)]],
                    constant uint& live [[buffer(4)]], uint lane [[thread_index_in_simdgroup]]) {
    if (!(live >> lane & 1u)) return;
    uint i = ((lane / 16) * 4 + (lane / 2) % 4) * 8 + ((lane / 8) % 2) * 4 + (lane % 2) * 2;
    float2 out = wmma(float2(a[i], a[i + 1]), float2(b[i], b[i + 1]), float2(c[i], c[i + 1]));
    d[i] = out[0];
    d[i + 1] = out[1];
}
// Loads (transposed when lane 0 returned), the product operator, a product and a store inside a
// wrapper: under a partial mask, its twin's operations run lane by lane in rolled loops.
void ops(device float* d, device const float* a, device const float* b, bool tr) {
    simdgroup_float8x8 A, B;
    simdgroup_load(A, a, 8, ulong2(0), tr);
    simdgroup_load(B, b);
    simdgroup_float8x8 P = A * B;
    simdgroup_multiply(A, P, B);
    simdgroup_store(A, d);
}
kernel void wrapped_ops(device float* d [[buffer(0)]], device const float* a [[buffer(1)]],
                        device const float* b [[buffer(2)]], constant uint& live [[buffer(3)]],
                        uint lane [[thread_index_in_simdgroup]]) {
    if (!(live >> lane & 1u)) return;
    ops(d, a, b, (live & 1u) == 0u);
}
"""


@pytest.mark.parametrize("live", [0xFFFFFFFF, 0x0F0F0F0F])
def test_a_fragment_wrapper_under_a_full_and_a_partial_mask(rng, live):
    on = (live >> LANE & 1).astype(bool)
    a, b, c = (rng.integers(-4, 5, (8, 8)).astype(np.float32) for _ in range(3))
    d = np.full((8, 8), 9, np.float32)
    (got,) = run_models(WRAPPER, "wrapped", [d], a, b, c, np.uint32(live), grid=32, threadgroup=32)
    held = np.zeros((8, 8), bool)
    held[ROW[on], COL[on]] = held[ROW[on], COL[on] + 1] = True
    want = np.where(held, a, 0) @ np.where(held, b, 0) + c
    np.testing.assert_array_equal(got, np.where(held, want, 9))


@pytest.mark.parametrize("live", [0xFFFFFFFF, 0x0F0F0F0F, 0x7FFFFFFE])
def test_loads_products_and_stores_in_a_wrapper_under_a_partial_mask(rng, live):
    on = (live >> LANE & 1).astype(bool)
    a, b = (rng.integers(-4, 5, (8, 8)).astype(np.float32) for _ in range(2))
    d = np.full((8, 8), 9, np.float32)
    (got,) = run_models(WRAPPER, "wrapped_ops", [d], a, b, np.uint32(live), grid=32, threadgroup=32)
    held = np.zeros((8, 8), bool)
    held[ROW[on], COL[on]] = held[ROW[on], COL[on] + 1] = True
    h = lambda x: np.where(held, x, 0)  # noqa: E731 (the elements the live lanes hold)
    want = h(h(a.T if live & 1 == 0 else a) @ h(b)) @ h(b)
    np.testing.assert_array_equal(got, np.where(held, want, 9))


# ---- staged through threadgroup memory, partial tiles at the edges ------------------------------

TILED = """
// C = A @ B for any sizes: 2 x 2 SIMD-groups of 8 x 8 tiles per threadgroup; each step stages a
// 16 x 8 block of A and an 8 x 16 block of B (zeros past the edges) in threadgroup memory.
kernel void tiled(device float* C [[buffer(0)]], device const T* A [[buffer(1)]],
                  device const T* B [[buffer(2)]], constant uint3& mkn [[buffer(3)]],
                  uint2 tg [[threadgroup_position_in_grid]], uint t [[thread_index_in_threadgroup]],
                  uint sg [[simdgroup_index_in_threadgroup]]) {
    threadgroup T sa[16 * 8];
    threadgroup T sb[8 * 16];
    threadgroup float sc[16 * 16];
    const uint M = mkn.x, K = mkn.y, N = mkn.z, r0 = tg.y * 16, c0 = tg.x * 16;
    simdgroup_float8x8 acc = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
    for (uint k0 = 0; k0 < K; k0 += 8) {
        uint r = t / 8, k = t % 8;                         // A[r0 + r][k0 + k], stored transposed
        sa[k * 16 + r] = r0 + r < M && k0 + k < K ? A[(r0 + r) * K + k0 + k] : T(0);
        uint kb = t / 16, cb = t % 16;
        sb[kb * 16 + cb] = k0 + kb < K && c0 + cb < N ? B[(k0 + kb) * N + c0 + cb] : T(0);
        threadgroup_barrier(mem_flags::mem_threadgroup);
        simdgroup_matrix<T, 8, 8> a, b;
        simdgroup_load(a, sa, 16, ulong2((sg / 2) * 8, 0), true);
        simdgroup_load(b, sb, 16, ulong2((sg % 2) * 8, 0));
        simdgroup_multiply_accumulate(acc, a, b, acc);
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    simdgroup_store(acc, sc, 16, ulong2((sg % 2) * 8, (sg / 2) * 8));
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint i = t; i < 256; i += 128)
        if (r0 + i / 16 < M && c0 + i % 16 < N) C[(r0 + i / 16) * N + c0 + i % 16] = sc[i];
}
"""


@pytest.mark.parametrize("t", ["float", "half"])
@pytest.mark.parametrize("m,k,n", [(16, 8, 16), (13, 21, 30), (40, 7, 9)])
def test_tiles_staged_in_threadgroup_memory_with_partial_tiles_at_the_edges(rng, t, m, k, n):
    a = grid_values(rng, (m, k), DTYPES[t])
    b = grid_values(rng, (k, n), DTYPES[t])
    c = np.full((m, n), np.nan, np.float32)
    (got,) = run_models(TILED.replace("T", t), "tiled", [c], a, b, np.array([m, k, n], np.uint32),
                        threadgroups=(-(-n // 16), -(-m // 16)), threadgroup=128)
    np.testing.assert_array_equal(got, a.astype(np.float64) @ b.astype(np.float64))


# ---- the access checks still see the loads from threadgroup memory ----------------------------

RACE = """
kernel void staged(device float* out [[buffer(0)]], device const float* in [[buffer(1)]],
                   uint t [[thread_index_in_threadgroup]],
                   uint sg [[simdgroup_index_in_threadgroup]]) {
    threadgroup float s[64];
    if (sg == 1) { s[t - 32] = in[t - 32]; s[t] = in[t]; }   // SIMD-group 1 stages the tile
    BARRIER
    if (sg == 0) {
        simdgroup_float8x8 m;
        simdgroup_load(m, s);                                 // load
        simdgroup_store(m, out);
    }
}
"""


def test_a_tile_loaded_from_threadgroup_memory_without_a_barrier_is_a_race(rng):
    x = rng.standard_normal(64).astype(np.float32)
    src = RACE.replace("BARRIER", "")
    k = build(src, filename="staged.metal").staged
    assert k.execution == "simt"
    with pytest.raises(mk.KernelFault) as e:
        k(np.zeros(64, np.float32), x, grid=64, threadgroup=64, check="races")
    # the load's line: 1-based, after HEADER's two
    load = 3 + next(i for i, line in enumerate(src.splitlines()) if "// load" in line)
    assert re.search(r"data race \(a (read|write), then a (read|write)\) on threadgroup memory 's' "
                     rf"elements 0 to 63: .*read at staged.metal:{load} by SIMD-group 0",
                     str(e.value)), str(e.value)
    fixed = build(RACE.replace("BARRIER", "threadgroup_barrier(mem_flags::mem_threadgroup);"),
                  filename="staged.metal").staged
    out = np.zeros(64, np.float32)
    fixed(out, x, grid=64, threadgroup=64, check="races")
    np.testing.assert_array_equal(out, x)
