"""Binding Python values to kernel parameters: arrays of every element type,
scalars with range checks, vectors, structs, staging of foreign layouts."""
import numpy as np
import pytest

import metalkit as mk
from conftest import build

TYPES = [  # MSL type, numpy dtype
    ("char", np.int8), ("uchar", np.uint8), ("short", np.int16), ("ushort", np.uint16),
    ("int", np.int32), ("uint", np.uint32), ("long", np.int64), ("ulong", np.uint64),
    ("float", np.float32), ("half", np.float16),
]


def random_of(rng, dtype, n):
    dt = np.dtype(dtype)
    if dt.kind == "f":
        return rng.uniform(-100, 100, n).astype(dt)
    info = np.iinfo(dt)
    return rng.integers(info.min // 4, info.max // 4, n, dtype=dt, endpoint=True)


@pytest.mark.parametrize("msl,dtype", TYPES)
def test_buffer_and_scalar_of_every_type(device, rng, msl, dtype):
    lib = build(f"""
    kernel void axpy(device const {msl}* x [[buffer(0)]], device {msl}* y [[buffer(1)]],
                     constant {msl}& a [[buffer(2)]], uint i [[thread_position_in_grid]]) {{
        y[i] = {msl}(a * x[i] + y[i]);
    }}""")
    n = 257
    x, y = random_of(rng, dtype, n), random_of(rng, dtype, n)
    a = 3 if np.dtype(dtype).kind in "iu" else 1.5
    want = (np.asarray(a, dtype) * x + y).astype(dtype)
    lib.axpy(x, y, a)
    if np.dtype(dtype) == np.float16:
        np.testing.assert_allclose(y.astype(np.float32), want.astype(np.float32), rtol=2e-3, atol=0.1)
    elif np.dtype(dtype) == np.float32:  # a*x+y may be fused into one fma, as GPUs do
        np.testing.assert_allclose(y, want, rtol=1e-6, atol=1e-5)
    else:
        np.testing.assert_array_equal(y, want)


def test_bool_buffers_and_scalars(device, rng):
    lib = build("""
    kernel void pick(device const bool* m [[buffer(0)]], device int* out [[buffer(1)]],
                     constant bool& flip [[buffer(2)]], uint i [[thread_position_in_grid]]) {
        out[i] = (m[i] != flip) ? 1 : -1;
    }""")
    m = rng.random(100) < 0.5
    out = np.zeros(100, np.int32)
    lib.pick(m, out, True)
    np.testing.assert_array_equal(out, np.where(m != True, 1, -1))  # noqa: E712
    with pytest.raises(mk.ArgumentError, match="takes a bool"):
        lib.pick(m, out, 1)


def test_bfloat_buffers(device, rng):
    import ml_dtypes  # a dependency of metalkit's
    lib = build("""
    kernel void twice(device const bfloat* x [[buffer(0)]], device float* y [[buffer(1)]],
                      uint i [[thread_position_in_grid]]) { y[i] = float(x[i]) * 2.0f; }""")
    x = rng.standard_normal(64).astype(ml_dtypes.bfloat16)
    y = np.zeros(64, np.float32)
    lib.twice(x, y)
    np.testing.assert_array_equal(y, x.astype(np.float32) * 2)


def test_scalar_range_and_type_checks(device):
    lib = build("""
    kernel void put(device uchar* out [[buffer(0)]], constant uchar& v [[buffer(1)]],
                    constant half& h [[buffer(2)]], uint i [[thread_position_in_grid]]) { out[i] = v + uchar(h); }""")
    out = np.zeros(4, np.uint8)
    lib.put(out, 200, 7.0)
    assert out.tolist() == [207] * 4
    lib.put(out, np.uint8(3), np.float16(2.0))
    assert out.tolist() == [5] * 4
    with pytest.raises(mk.ArgumentError, match=r"kernel 'put': parameter 'v' .* out of range for uchar \[0, 255\]"):
        lib.put(out, 256, 1.0)
    with pytest.raises(mk.ArgumentError, match="out of range for uchar"):
        lib.put(out, -1, 1.0)
    with pytest.raises(mk.ArgumentError, match="takes an integer, got float"):
        lib.put(out, 2.5, 1.0)
    with pytest.raises(mk.ArgumentError, match="out of range for half"):
        lib.put(out, 1, 70000.0)
    assert out.tolist() == [5] * 4  # failed calls left the data alone


def test_64bit_scalar_limits(device):
    lib = build("""
    kernel void put(device ulong* a [[buffer(0)]], device long* b [[buffer(1)]],
                    constant ulong& u [[buffer(2)]], constant long& s [[buffer(3)]], uint i [[thread_position_in_grid]]) {
        a[i] = u; b[i] = s;
    }""")
    a, b = np.zeros(2, np.uint64), np.zeros(2, np.int64)
    lib.put(a, b, 2**64 - 1, -2**63)
    assert a.tolist() == [2**64 - 1] * 2 and b.tolist() == [-2**63] * 2
    with pytest.raises(mk.ArgumentError, match="out of range for ulong"):
        lib.put(a, b, 2**64, 0)
    with pytest.raises(mk.ArgumentError, match="out of range for long"):
        lib.put(a, b, 0, 2**63)


def test_vector_elements_count_in_vectors(device, rng):
    lib = build("""
    kernel void norm2(device const float4* v [[buffer(0)]], device float* out [[buffer(1)]],
                      constant float4& w [[buffer(2)]], uint i [[thread_position_in_grid]]) {
        float4 p = v[i] * w;
        out[i] = p.x + p.y + p.z + p.w;
    }
    kernel void scale4(device float4* v [[buffer(0)]], uint i [[thread_position_in_grid]]) { v[i] = v[i].wzyx * 2.0f; }
    """)
    v = rng.standard_normal(64).astype(np.float32)
    out = np.zeros(16, np.float32)
    w = np.array([1, -2, 3, 0.5], np.float32)
    lib.norm2(v, out, w)
    np.testing.assert_allclose(out, (v.reshape(16, 4) * w).sum(1), rtol=1e-5, atol=1e-5)
    lib.norm2(v, out, (1.0, -2.0, 3.0, 0.5))
    np.testing.assert_allclose(out, (v.reshape(16, 4) * w).sum(1), rtol=1e-5, atol=1e-5)
    before = v.copy()
    lib.scale4(v)  # default grid: 64 floats are 16 float4s
    np.testing.assert_array_equal(v.reshape(16, 4), before.reshape(16, 4)[:, ::-1] * 2)
    with pytest.raises(mk.ArgumentError, match="takes 4 values, got 3"):
        lib.norm2(v, out, (1.0, 2.0, 3.0))


def test_struct_parameters(device, rng):
    lib = build("""
    struct Params { float scale; int offset; uint count; float bias; };
    struct Particle { float2 pos; float mass; int id; };
    kernel void apply(device const Particle* ps [[buffer(0)]], device float* out [[buffer(1)]],
                      constant Params& p [[buffer(2)]], uint i [[thread_position_in_grid]]) {
        if (i >= p.count) return;
        Particle q = ps[i];
        out[i] = (q.pos.x + q.pos.y) * q.mass * p.scale + float(q.id + p.offset) + p.bias;
    }""")
    params_t = np.dtype([("scale", "f4"), ("offset", "i4"), ("count", "u4"), ("bias", "f4")], align=True)
    particle_t = np.dtype([("pos", "f4", 2), ("mass", "f4"), ("id", "i4")], align=True)
    n = 50
    ps = np.zeros(n, particle_t)
    ps["pos"] = rng.standard_normal((n, 2))
    ps["mass"] = rng.random(n)
    ps["id"] = rng.integers(0, 100, n)
    p = np.array((1.5, -3, 40, 0.25), params_t)[()]
    out = np.zeros(n, np.float32)
    lib.apply(ps, out, p)
    want = (ps["pos"].sum(1) * ps["mass"] * 1.5 + (ps["id"] - 3) + 0.25).astype(np.float32)
    np.testing.assert_allclose(out[:40], want[:40], rtol=1e-5)
    assert np.all(out[40:] == 0)
    lib.apply(ps, out, p.tobytes())
    with pytest.raises(mk.ArgumentError, match="struct of 16 bytes but got 12 bytes"):
        lib.apply(ps, out, b"\0" * 12)
    with pytest.raises(mk.ArgumentError, match=r"takes elements of dtype \[\('pos'.*got an array of dtype float32; "
                                                r"build it with np.zeros\(n, kernel.args\[0\].dtype\)"):
        lib.apply(np.zeros(n, np.float32), out, p)


def test_non_contiguous_and_misaligned_arrays_are_staged(device, rng):
    lib = build("""
    kernel void inc(device const float4* a [[buffer(0)]], device float4* b [[buffer(1)]],
                    uint i [[thread_position_in_grid]]) { b[i] = a[i] + 1.0f; }""")
    base = rng.standard_normal(4 * 40 + 1).astype(np.float32)
    a = base[1:]  # contiguous but only 4-byte aligned: a float4 needs 16
    big = rng.standard_normal((40, 8)).astype(np.float32)
    b = big[:, ::2]  # strided view: written through staging and copied back
    keep = big[:, 1::2].copy()
    lib.inc(a, b)
    np.testing.assert_array_equal(b.reshape(40, 4), a.reshape(40, 4) + 1)
    np.testing.assert_array_equal(big[:, 1::2], keep)


def test_readonly_array_for_a_written_parameter(device):
    lib = build("""
    kernel void w(device float* x [[buffer(0)]], uint i [[thread_position_in_grid]]) { x[i] = 1; }
    kernel void r(device const float* x [[buffer(0)]], device float* y [[buffer(1)]], uint i [[thread_position_in_grid]]) { y[i] = x[i]; }
    """)
    x = np.arange(4, dtype=np.float32)
    x.flags.writeable = False
    with pytest.raises(mk.ArgumentError, match=r"kernel 'w': parameter 'x' .* read-only; pass a writable copy "
                                               r"\(x.copy\(\)\), or declare it `device const float\* x`"):
        lib.w(x)
    y = np.zeros(4, np.float32)
    lib.r(x, y)  # read-only arrays are fine for const parameters
    assert y.tolist() == [0, 1, 2, 3]


def test_buffer_order_follows_indices_and_implicit_indices(device):
    lib = build("""
    kernel void k(device float* out [[buffer(2)]], device const float* a [[buffer(0)]],
                  constant float& s [[buffer(1)]], uint i [[thread_position_in_grid]]) { out[i] = a[i] * s; }
    kernel void implicit(device const float* a, device float* out, constant float& s, uint i [[thread_position_in_grid]]) {
        out[i] = a[i] + s;
    }""")
    a = np.arange(5, dtype=np.float32)
    out = np.zeros(5, np.float32)
    lib.k(a, 2.0, out)
    assert out.tolist() == [0, 2, 4, 6, 8]
    assert [(s.name, s.index, s.kind) for s in lib.k.args if s.kind != "builtin"] == [
        ("out", 2, "buffer"), ("a", 0, "buffer"), ("s", 1, "scalar")]
    lib.implicit(a, out, 10.0)
    assert out.tolist() == [10, 11, 12, 13, 14]
    assert [s.index for s in lib.implicit.args] == [0, 1, 2, -1]


def test_argspec_description(device):
    lib = build("""
    kernel void k(device const half4* a [[buffer(0)]], device float* out [[buffer(1)]],
                  constant int& n [[buffer(2)]], uint i [[thread_position_in_grid]]) { out[i] = float(a[i].x) + n; }""")
    a, out, n, i = lib.k.args
    assert (a.kind, a.dtype, a.msl_type, a.vec_width, a.writable, a.elem_size) == ("buffer", np.float16, "half", 4, False, 8)
    assert (out.writable, out.dtype) == (True, np.float32)
    assert (n.kind, n.dtype) == ("scalar", np.int32)
    assert (i.kind, i.builtin) == ("builtin", "thread_position_in_grid")
    assert lib.k.max_threads_per_threadgroup >= 256 and lib.k.simd_width == 32


def test_enum_parameters_and_enum_fields(device, rng):
    lib = build("""
    enum class Op : ushort { add = 0, mul = 1, neg = 2 };
    enum Flags : uint { none = 0, square = 4 };
    struct Config { Op op; Flags flags; float k; };
    kernel void apply(device float* x [[buffer(0)]], constant Op& op [[buffer(1)]],
                      constant Config& cfg [[buffer(2)]], uint i [[thread_position_in_grid]]) {
        float v = op == Op::add ? x[i] + cfg.k : (op == Op::mul ? x[i] * cfg.k : -x[i]);
        x[i] = (cfg.flags & square) ? v * v : v;
    }""")
    op_arg = lib.apply.args[1]
    assert (op_arg.kind, op_arg.dtype, op_arg.msl_type) == ("scalar", np.uint16, "ushort")
    config = np.dtype([("op", "u2"), ("flags", "u4"), ("k", "f4")], align=True)
    x = rng.standard_normal(16).astype(np.float32)
    y = x.copy()
    lib.apply(y, 1, np.array((0, 4, 2.0), config)[()])
    np.testing.assert_allclose(y, (x * 2) ** 2, rtol=1e-6)
    with pytest.raises(mk.ArgumentError, match="out of range for ushort"):
        lib.apply(y, -1, np.array((0, 0, 1.0), config)[()])


def test_scalars_keep_their_alignment(device):
    lib = build("""
    struct alignas(32) Wide { float v[8]; };
    kernel void al(device long4* y [[buffer(0)]], constant float& a [[buffer(1)]], constant long4& q [[buffer(2)]],
                   constant Wide& w [[buffer(3)]], device float* z [[buffer(4)]], uint i [[thread_position_in_grid]]) {
        y[i] = q * long(a);
        for (int k = 0; k < 8; ++k) z[k] = w.v[k];
    }""")
    y = np.zeros(4, np.int64)
    z = np.zeros(8, np.float32)
    w = np.arange(8, dtype=np.float32) * 1.5
    lib.al(y, 2.0, (1, -2, 3, -4), w, z, grid=1)
    assert y.tolist() == [2, -4, 6, -8] and z.tolist() == w.tolist()


def test_object_arrays_and_float_overflow_are_refused(device):
    lib = build("""
    struct P { float a; uint b; };
    kernel void sp(device P* x [[buffer(0)]], constant float& f [[buffer(1)]], uint i [[thread_position_in_grid]]) {
        x[i].a = f;
    }""")
    objects = np.array([(None,), (None,)], dtype=[("o", "O")])
    with pytest.raises(mk.ArgumentError, match="cannot take an array holding Python objects"):
        lib.sp(objects, 1.0)
    good = np.zeros(2, np.dtype([("a", "f4"), ("b", "u4")]))
    for big in (3.4028235e38 * 1.00000008, 1e39, -1e300):
        with pytest.raises(mk.ArgumentError, match="out of range for float"):
            lib.sp(good, big)
    lib.sp(good, 3.4028234e38)
    assert good["a"][0] == np.float32(3.4028234e38)
    lib.sp(good, float("inf"))  # infinities and NaNs are values, not overflows
    assert np.isinf(good["a"][0])
