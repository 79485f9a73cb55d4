"""MSL as real libraries write it and Apple's compiler takes it: their own overloads in namespace
metal, Apple's internal builtins, half <-> bfloat casts, initialised threadgroup variables, array
parameters, per-instantiation thread limits, function constants without a value."""
import ml_dtypes
import numpy as np
import pytest

import metalkit as mk
from conftest import build

BF16 = ml_dtypes.bfloat16


def test_library_overloads_in_namespace_metal_win(device, rng):
    # A library's non-template overloads for bfloat (Apple's stdlib has no bfloat math) sit beside
    # the stdlib's and are the better match; float and half calls still reach the stdlib.
    lib = build("""
    namespace metal {
    METAL_FUNC bfloat abs(bfloat x) { return bfloat(-2.0f); }                 // marks that it was chosen
    METAL_FUNC bfloat exp(bfloat x) { return bfloat(metal::exp(float(x)) + 1.0f); }
    METAL_FUNC bfloat max(bfloat a, bfloat b) { return bfloat(float(a) + float(b)); }
    METAL_FUNC bfloat simd_sum(bfloat x) { return bfloat(metal::simd_sum(float(x)) * 2.0f); }
    namespace fast { METAL_FUNC bfloat exp(bfloat x) { return bfloat(3.0f); } }
    }
    kernel void k(device const bfloat* b [[buffer(0)]], device const float* f [[buffer(1)]],
                  device const half* h [[buffer(2)]], device float* out [[buffer(3)]],
                  uint i [[thread_position_in_grid]]) {
      out[8 * i + 0] = abs(b[i]);
      out[8 * i + 1] = exp(b[i]);
      out[8 * i + 2] = max(b[i], b[i]);
      out[8 * i + 3] = simd_sum(b[i]);
      out[8 * i + 4] = abs(f[i]) + metal::exp(f[i]);
      out[8 * i + 5] = max(h[i], half(0.25h));
      out[8 * i + 6] = fast::exp(b[i]) + fast::exp(f[i]);
      out[8 * i + 7] = simd_sum(f[i]);
    }""")
    n = 64
    b = rng.standard_normal(n).astype(BF16)
    f = rng.standard_normal(n).astype(np.float32)
    h = rng.standard_normal(n).astype(np.float16)
    out = np.zeros(8 * n, np.float32)
    lib.k(b, f, h, out, grid=n, threadgroup=32)
    o = out.reshape(n, 8)
    bf = b.astype(np.float32)
    np.testing.assert_array_equal(o[:, 0], -2.0)
    np.testing.assert_allclose(o[:, 1], (np.exp(bf) + 1).astype(BF16).astype(np.float32), rtol=1e-2)
    np.testing.assert_array_equal(o[:, 2], (bf + bf).astype(BF16).astype(np.float32))
    sums = np.repeat(bf.reshape(2, 32).sum(1), 32)
    np.testing.assert_allclose(o[:, 3], (sums * 2).astype(BF16).astype(np.float32), rtol=1e-2, atol=1e-2)
    np.testing.assert_allclose(o[:, 4], np.abs(f) + np.exp(f), rtol=1e-5)
    np.testing.assert_array_equal(o[:, 5], np.maximum(h, np.float16(0.25)).astype(np.float32))
    np.testing.assert_allclose(o[:, 6], 3 + np.exp(f), rtol=1e-5)
    np.testing.assert_allclose(o[:, 7], np.repeat(f.reshape(2, 32).sum(1), 32), rtol=1e-5, atol=1e-5)


def test_scalar_math_converts_integer_arguments(device, rng):
    # clamp(x, 0, 1), max(h, 2), fmin(1, x): integers convert to the call's floating type.
    lib = build("""
    kernel void k(device const float* x [[buffer(0)]], device const half* h [[buffer(1)]],
                  device float* out [[buffer(2)]], uint i [[thread_position_in_grid]]) {
      out[3 * i] = clamp(x[i], 0, 1);
      out[3 * i + 1] = max(h[i], 2);
      out[3 * i + 2] = fmin(1, x[i]) + max(int(i), 5);
    }""")
    x = (rng.standard_normal(37) * 2).astype(np.float32)
    h = (rng.standard_normal(37) * 4).astype(np.float16)
    out = np.zeros(3 * 37, np.float32)
    lib.k(x, h, out, grid=37)
    o = out.reshape(37, 3)
    np.testing.assert_array_equal(o[:, 0], np.clip(x, 0, 1))
    np.testing.assert_array_equal(o[:, 1], np.maximum(h, np.float16(2)).astype(np.float32))
    np.testing.assert_array_equal(o[:, 2], np.minimum(1, x) + np.maximum(np.arange(37), 5).astype(np.float32))


def test_apples_internal_builtins(device, rng):
    lib = build("""
    #pragma METAL internals : enable
    template <typename T> constexpr constant bool small = _disjunction<is_same<T, half>, is_same<T, bfloat>>::value;
    #pragma METAL internals : disable
    constexpr constant thread_scope scope_system = static_cast<thread_scope>(__METAL_MEMORY_SCOPE_SYSTEM__);
    kernel void k(device const float* x [[buffer(0)]], device float* out [[buffer(1)]],
                  uint i [[thread_position_in_grid]]) {
      float v = x[i];
      out[8 * i + 0] = __metal_fabs(v, __METAL_MAYBE_FAST_MATH__) + __metal_exp(v, __METAL_FAST_MATH__);
      out[8 * i + 1] = __metal_fmin3(v, 0.5f, x[(i + 1) % 64], __METAL_PRECISE_MATH__);
      out[8 * i + 2] = __metal_fmedian3(v, -0.25f, 0.25f, __METAL_MAYBE_FAST_MATH__);
      out[8 * i + 3] = __metal_simd_sum(v);
      out[8 * i + 4] = __metal_simd_shuffle_and_fill_up(v, -v, ushort(3), ushort(8));
      out[8 * i + 5] = float(__metal_get_thread_index_in_simdgroup(ushort()));
      out[8 * i + 6] = float(__metal_get_simdgroup_size(ushort())) + (small<half> && !small<float> ? 1 : 0);
      atomic_thread_fence(mem_flags::mem_device, memory_order_seq_cst, scope_system);
      out[8 * i + 7] = __metal_fma(v, 2.0f, 1.0f);
    }""")
    assert lib.k.execution == "simt"  # the SIMD builtins are SIMD-group functions: lanes in lockstep
    n = 64
    x = rng.standard_normal(n).astype(np.float32)
    out = np.zeros(8 * n, np.float32)
    lib.k(x, out, grid=n, threadgroup=32)
    o = out.reshape(n, 8)
    lane = np.arange(n) % 32
    np.testing.assert_allclose(o[:, 0], np.abs(x) + np.exp(x), rtol=1e-6)
    np.testing.assert_array_equal(o[:, 1], np.minimum(np.minimum(x, 0.5), np.roll(x, -1)))
    np.testing.assert_array_equal(o[:, 2], np.clip(x, -0.25, 0.25))
    np.testing.assert_allclose(o[:, 3], np.repeat(x.reshape(2, 32).sum(1), 32), rtol=1e-5, atol=1e-5)
    # within vectors of 8 lanes: lane j takes j - 3, the first three take the fill (-x) from the end
    j = lane % 8
    src = np.where(j >= 3, np.arange(n) - 3, np.arange(n) - j + (j + 5))
    np.testing.assert_array_equal(o[:, 4], np.where(j >= 3, x[src], -x[src]))
    np.testing.assert_array_equal(o[:, 5], lane)
    np.testing.assert_array_equal(o[:, 6], 33)
    np.testing.assert_allclose(o[:, 7], x * 2 + 1, rtol=1e-6, atol=1e-6)


def test_half_bfloat_conversions(device, rng):
    lib = build("""
    typedef bfloat bf16_t;
    kernel void k(device const half* h [[buffer(0)]], device const bfloat* b [[buffer(1)]],
                  device bfloat* hb [[buffer(2)]], device half* bh [[buffer(3)]], uint i [[thread_position_in_grid]]) {
      hb[3 * i] = static_cast<bfloat>(h[i]);
      hb[3 * i + 1] = bf16_t(h[i]);
      hb[3 * i + 2] = (bfloat)h[i];
      bh[3 * i] = static_cast<half>(b[i]);
      bh[3 * i + 1] = half(b[i]);
      bh[3 * i + 2] = (half)b[i];
    }""")
    n = 41
    h = (rng.standard_normal(n) * 100).astype(np.float16)
    b = (rng.standard_normal(n) * 100).astype(BF16)
    hb = np.zeros(3 * n, BF16)
    bh = np.zeros(3 * n, np.float16)
    lib.k(h, b, hb, bh, grid=n)
    want_hb = h.astype(np.float32).astype(BF16)  # exact in float, then rounded once
    want_bh = b.astype(np.float32).astype(np.float16)
    for j in range(3):
        np.testing.assert_array_equal(hb.reshape(n, 3)[:, j].view(np.uint16), want_hb.view(np.uint16))
        np.testing.assert_array_equal(bh.reshape(n, 3)[:, j].view(np.uint16), want_bh.view(np.uint16))


@pytest.mark.parametrize("n,tg", [(1, 1), (37, 32), (200, 64)])
def test_threadgroup_variable_with_initializer(device, rng, n, tg):
    # Each threadgroup starts from the initializer's value, however many groups one OS thread runs.
    lib = build("""
    kernel void k(device const float* x [[buffer(0)]], device float* out [[buffer(1)]],
                  uint i [[thread_position_in_grid]], uint t [[thread_position_in_threadgroup]],
                  uint g [[threadgroup_position_in_grid]], uint n [[threads_per_threadgroup]]) {
      threadgroup float acc[2] = {1.5f, -2.0f};
      threadgroup_barrier(mem_flags::mem_threadgroup);
      if (t == 0) acc[0] += float(g);
      threadgroup_barrier(mem_flags::mem_threadgroup);
      out[i] = x[i] * acc[0] + acc[1];
      threadgroup_barrier(mem_flags::mem_threadgroup);
      if (t == n - 1) acc[1] = 1000.0f;  // a later group must not see this
    }""")
    x = rng.standard_normal(n).astype(np.float32)
    out = np.zeros(n, np.float32)
    lib.k(x, out, threadgroup=tg)
    g = np.arange(n) // tg
    np.testing.assert_allclose(out, x * (1.5 + g) - 2.0, rtol=1e-6, atol=1e-5)


def test_array_parameters(device, rng):
    lib = build("""
    kernel void k(device const float* a [[buffer(0)]], device float* out [[buffer(1)]],
                  constant int64_t strides[2] [[buffer(2)]], constant float2 w[3] [[buffer(3)]],
                  uint2 p [[thread_position_in_grid]], uint2 n [[threads_per_grid]]) {
      out[p.y * n.x + p.x] = a[p.y * strides[0] + p.x * strides[1]] * w[2].y + w[1].x;
    }""")
    spec = {a.name: a for a in lib.k.args}
    assert spec["strides"].length == 2 and spec["strides"].kind == "scalar" and spec["w"].length == 3
    a = rng.standard_normal((5, 7)).astype(np.float32)
    out = np.zeros((7, 5), np.float32)
    w = rng.standard_normal((3, 2)).astype(np.float32)
    lib.k(a, out, np.array([1, 7]), w, grid=(5, 7))  # the transpose, through the strides
    np.testing.assert_allclose(out, a.T * w[2, 1] + w[1, 0], rtol=1e-6, atol=1e-6)  # fma or not
    lib.k(a, out, [7, 1], w.tolist(), grid=(7, 5))
    np.testing.assert_allclose(out.reshape(5, 7), a * w[2, 1] + w[1, 0], rtol=1e-6, atol=1e-6)
    before = out.copy()
    for bad, match in [((1,), "array of 2 values, got 1"), ([1, 2, 3], "array of 2 values, got 3"),
                       (3, "array of 2 values; pass a sequence")]:
        with pytest.raises(mk.ArgumentError, match=match):
            lib.k(a, out, bad, w, grid=(7, 5))
    with pytest.raises(mk.ArgumentError, match="'w'"):
        lib.k(a, out, [7, 1], w[:2], grid=(7, 5))
    np.testing.assert_array_equal(out, before)


def test_template_max_threads_per_instantiation(device, rng):
    lib = build("""
    namespace ops {
    template <typename T, int N>
    [[kernel, max_total_threads_per_threadgroup(N * 2)]] void fill(device T* x [[buffer(0)]],
                                                                  uint i [[thread_position_in_grid]]) {
      threadgroup_barrier(mem_flags::mem_none);  // a lockstep kernel, whose body the SIMT pass rewrites
      x[i] = T(N);
    }
    template [[host_name("fill_64")]] [[kernel]] void fill<float, 32>(device float*, uint);
    template [[host_name("fill_256")]] [[kernel]] void fill<int, 128>(device int*, uint);
    }""")
    assert lib.fill_64.max_threads_per_threadgroup == 64
    assert lib.fill_256.max_threads_per_threadgroup == 256
    x = np.zeros(130, np.float32)
    lib.fill_64(x, threadgroup=64)
    np.testing.assert_array_equal(x, 32)
    with pytest.raises(mk.DispatchError, match="at most 64"):
        lib.fill_64(x, threadgroup=65)
    y = np.zeros(300, np.int32)
    lib.fill_256(y, threadgroup=256)
    np.testing.assert_array_equal(y, 128)


def test_function_constant_without_a_value(device, rng):
    src = """
    constant float gain [[function_constant(0)]];
    constant bool use_bias [[function_constant(1)]];
    constant int offset [[function_constant(2)]];
    float scaled(float v) { return v * gain; }
    kernel void uses(device float* x [[buffer(0)]], uint i [[thread_position_in_grid]]) { x[i] = scaled(x[i]); }
    kernel void guarded(device float* x [[buffer(0)]], device const float* b [[buffer(1), function_constant(use_bias)]],
                        uint i [[thread_position_in_grid]]) {
      if (is_function_constant_defined(offset)) x[i] += offset;
      x[i] += use_bias ? b[i] : 0.0f;
    }"""
    lib = build(src)
    assert "uses" in lib and sorted(lib.kernels) == ["guarded", "uses"]
    with pytest.raises(mk.CompileError, match="kernel 'uses' uses function constant 'gain', which was given no value"):
        lib.uses
    x = rng.standard_normal(9).astype(np.float32)
    y = x.copy()
    lib.guarded(y)  # offset tested before use, use_bias makes a parameter optional: both fine unset
    np.testing.assert_array_equal(y, x)
    lib.specialize("uses", {"gain": 3.0})(y)
    np.testing.assert_allclose(y, x * 3, rtol=1e-6)
    b = rng.standard_normal(9).astype(np.float32)
    with_bias = build(src, constants={"use_bias": True, "offset": 2})
    z = x.copy()
    with_bias.guarded(z, b)
    np.testing.assert_allclose(z, x + 2 + b, rtol=1e-6, atol=1e-6)


def test_errors_inside_the_stdlib_point_at_the_users_line(device):
    with pytest.raises(mk.CompileError) as e:
        build("""
    kernel void k(device bool* x [[buffer(0)]], uint i [[thread_position_in_grid]]) {
      x[i] = simd_shuffle(x[i], 0);
    }""", filename="shuffle.metal")
    assert e.value.filename == "shuffle.metal" and e.value.lineno == 5
    assert "simd_shuffle(x[i], 0)" in e.value.text and "MSL has no bool form" in str(e.value)
    assert "reached from this line" in str(e.value)


def test_library_helper_shapes_in_lockstep_kernels(device, rng):
    # Shapes real libraries' SIMD-group helpers have: methods after a static method, an unnamed
    # enable_if template parameter, a constexpr local set by a constexpr function, a braced
    # vector with fewer values than components.
    lib = build("""
    template <int B> constexpr int pack_of() { return 32 / B; }
    struct Sum {
      static float combine(float a, float b) { return a + b; }
      float scan(float x) thread {
        for (int d = 1; d < 32; d *= 2) x = combine(x, simd_shuffle_and_fill_up(x, 0.0f, ushort(d)));
        return x;
      }
      float exclusive(float x) thread { return simd_shuffle_and_fill_up(scan(x), 0.0f, ushort(1)); }
    };
    template <typename T, metal::enable_if_t<sizeof(T) == 4, bool> = true>
    T group_total(T v) { return simd_sum(v); }
    kernel void k(device const float* x [[buffer(0)]], device float* out [[buffer(1)]],
                  uint i [[thread_position_in_grid]]) {
      constexpr int per = pack_of<8>();
      uint4 z = {1u, 2u, 3u};
      Sum op;
      out[3 * i] = op.exclusive(x[i]);
      out[3 * i + 1] = group_total(x[i]) * per;
      out[3 * i + 2] = float(z.x + z.y + z.z + z.w);
    }""")
    assert lib.k.execution == "simt"
    n = 64
    x = rng.standard_normal(n).astype(np.float32)
    out = np.zeros(3 * n, np.float32)
    lib.k(x, out, grid=n, threadgroup=32)
    o = out.reshape(n, 3)
    g = x.reshape(2, 32)
    excl = np.concatenate([np.zeros((2, 1), np.float32), np.cumsum(g, 1)[:, :-1]], 1).reshape(-1)
    np.testing.assert_allclose(o[:, 0], excl, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(o[:, 1], np.repeat(g.sum(1), 32) * 4, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(o[:, 2], 6)
