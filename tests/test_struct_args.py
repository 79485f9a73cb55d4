"""Struct parameters as the kernel declares them (Kernel.args[i].dtype has the MSL layout),
keyword arguments, None for a buffer the kernel does not read, and the hints of argument errors."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import ml_dtypes
import numpy as np
import pytest

import metalkit as mk
from conftest import HEADER, build, child_env

# (struct definitions, parameter type, MSL sizeof, leaves: (MSL expression of s, index path in the numpy value)).
# The sizes are the MSL specification's (float3 and float3x3 columns take 16 bytes, packed_float3 12).
CASES = {
    "scalars_then_float4": ("struct S { float a; uint n; float4 v; };", "S", 32,
                            [("s.a", ("a",)), ("s.n", ("n",))] + [(f"s.v[{i}]", ("v", i)) for i in range(4)]),
    "vectors": ("struct S { half2 h; packed_float3 p; float3 f; bool b; long l; char c; half4 h4; };", "S", 64,
                [("s.h.y", ("h", 1)), ("s.p[0]", ("p", 0)), ("s.p[2]", ("p", 2)), ("s.f.x", ("f", 0)),
                 ("s.f.z", ("f", 2)), ("s.b", ("b",)), ("s.l", ("l",)), ("s.c", ("c",)), ("s.h4.w", ("h4", 3))]),
    "matrices_and_arrays": ("struct S { float4x4 m; float3x3 m3; int arr[3]; float3 v3[2]; packed_float3 pk[2];"
                            " float2x3 m23; };", "S", 224,
                            [("s.m[1][2]", ("m", 1, 2)), ("s.m[3][0]", ("m", 3, 0)), ("s.m3[2][1]", ("m3", 2, 1)),
                             ("s.arr[2]", ("arr", 2)), ("s.v3[1].z", ("v3", 1, 2)), ("s.pk[1][1]", ("pk", 1, 1)),
                             ("s.m23[1][2]", ("m23", 1, 2))]),
    "nested": ("struct In { float a; float4 v; }; struct S { uint k; In in; In many[2]; ushort tail; };", "S", 128,
               [("s.k", ("k",)), ("s.in.a", ("in", "a")), ("s.in.v.w", ("in", "v", 3)),
                ("s.many[1].a", ("many", 1, "a")), ("s.many[1].v.y", ("many", 1, "v", 1)), ("s.tail", ("tail",))]),
    "template_alias": ("template <typename T, int N = 3> struct E { T x[N]; T y; }; using S = E<half>;", "S", 8,
                       [("s.x[0]", ("x", 0)), ("s.x[2]", ("x", 2)), ("s.y", ("y",))]),
    "typedef_c_struct": ("typedef struct { int32_t ne00; uint64_t nb01; float eps; } kargs;", "kargs", 24,
                         [("s.ne00", ("ne00",)), ("s.nb01", ("nb01",)), ("s.eps", ("eps",))]),
    "alignas": ("struct S { float a; alignas(16) float b; short c; };", "S", 32,
                [("s.a", ("a",)), ("s.b", ("b",)), ("s.c", ("c",))]),
    "namespaced": ("namespace geo { struct P { float2 p; int id; }; }", "geo::P", 16,
                   [("s.p.x", ("p", 0)), ("s.p.y", ("p", 1)), ("s.id", ("id",))]),
    "bfloat_and_enum": ("enum class Mode : ushort { A, B }; struct S { bfloat b; Mode m; float x; bfloat2 b2; };",
                        "S", 12, [("s.b", ("b",)), ("ushort(s.m)", ("m",)), ("s.x", ("x",)), ("s.b2.y", ("b2", 1))]),
    "const_members_and_methods": ("struct S { const int M; const int64_t stride; float scale() const { return M * 2.0f; }"
                                  " S(int m) : M(m), stride(0) {} };", "S", 16,
                                  [("s.M", ("M",)), ("s.stride", ("stride",)), ("s.scale()", None)]),
    "packed_pragma": ("#pragma pack(push, 1)\nstruct S { char c; int i; short h; };\n#pragma pack(pop)", "S", 7,
                      [("s.c", ("c",)), ("s.i", ("i",)), ("s.h", ("h",))]),
}


def fill(value: np.ndarray, rng) -> None:
    """Random numbers in every field of a 0-d structured value (small integers, so they read back exactly as floats)."""
    def walk(v):
        dt = v.dtype
        if dt.names:
            for name in dt.names:
                walk(v[name])
        elif dt.subdtype is not None:
            raise AssertionError("subarrays are reached through their fields")
        elif dt == np.bool_:
            v[...] = rng.random(v.shape) < 0.5
        elif dt.kind in "iu":
            lo = 0 if dt.kind == "u" else -100
            v[...] = rng.integers(lo, 100, v.shape)
        else:
            v[...] = rng.integers(-64, 64, v.shape) / 8  # exact in half and bfloat too
    walk(value)


def at(value, path):
    for p in path:
        value = value[p]
    return float(value)


@pytest.mark.parametrize("case", sorted(CASES))
def test_struct_layouts_are_what_the_kernel_reads(device, rng, case):
    decls, type_, size, leaves = CASES[case]
    reads = "\n".join(f"    out[{i}] = float({expr});" for i, (expr, _) in enumerate(leaves))
    lib = build(f"""{decls}
kernel void by_ref(constant {type_}& s [[buffer(0)]], device float* out [[buffer(1)]], uint i [[thread_position_in_grid]]) {{
    if (i) return;
{reads}
    out[{len(leaves)}] = float(sizeof({type_}));
}}
kernel void by_ptr(constant {type_}* p [[buffer(0)]], device float* out [[buffer(1)]], uint i [[thread_position_in_grid]]) {{
    if (i) return;
    constant {type_}& s = *p;
{reads}
}}""")
    dt = lib.by_ref.args[0].dtype
    assert lib.by_ptr.args[0].dtype == dt
    assert dt.itemsize == size
    value = np.zeros((), dt)
    fill(value, rng)
    if case == "const_members_and_methods":
        want_extra = [value["M"] * 2.0]
    out = np.zeros(len(leaves) + 1, np.float32)
    lib.by_ref(value, out, grid=1)
    want = [at(value, path) if path else want_extra.pop() for _, path in leaves]
    np.testing.assert_array_equal(out[:-1], np.float32(want))
    assert out[-1] == size
    out2 = np.zeros(len(leaves), np.float32)
    lib.by_ptr(value[()], out2, grid=1)  # constant S* takes a numpy.void as constant S& does
    np.testing.assert_array_equal(out2, np.float32(want))


def test_float4_struct_is_32_bytes_where_numpy_alignment_gives_24(device):
    lib = build("""struct S { float a; uint n; float4 v; };
    kernel void k(constant S& s [[buffer(0)]], device float* out [[buffer(1)]]) { out[0] = s.v.w; }""")
    dt = lib.k.args[0].dtype
    assert (dt.itemsize, [dt.fields[n][1] for n in dt.names]) == (32, [0, 4, 16])
    naive = np.dtype([("a", "<f4"), ("n", "<u4"), ("v", "<f4", (4,))], align=True)
    assert naive.itemsize == 24
    with pytest.raises(mk.ArgumentError, match=r"parameter 's' .* the kernel's struct is 32 bytes, the dtype given 24; "
                                               r"build them with the kernel's dtype, np.zeros\(\(\), kernel.args\[0\].dtype\)"):
        lib.k(np.zeros((), naive), np.zeros(1, np.float32), grid=1)


@pytest.mark.parametrize("n", [1, 37, 300])
def test_a_struct_with_vector_fields_end_to_end(device, rng, n):
    lib = build("""
    struct Params { float scale; float3 axis; float4 bias; uint2 range; };
    kernel void project(device const float3* x [[buffer(0)]], device float* out [[buffer(1)]],
                        constant Params& p [[buffer(2)]], uint i [[thread_position_in_grid]]) {
        if (i < p.range.x || i >= p.range.y) return;
        out[i] = dot(x[i], p.axis) * p.scale + p.bias[i % 4];
    }""")
    p = np.zeros((), lib.project.args[2].dtype)
    p["scale"] = rng.standard_normal()
    p["axis"] = rng.standard_normal(3)
    p["bias"] = rng.standard_normal(4)
    lo = int(rng.integers(0, n))
    p["range"] = (lo, n)
    x = rng.standard_normal((n, 4)).astype(np.float32)  # float3 elements take 16 bytes
    out = np.full(n, -7, np.float32)
    lib.project(x, out, p, grid=n)
    want = np.full(n, -7, np.float32)
    idx = np.arange(lo, n)
    want[lo:] = x[lo:, :3] @ p["axis"].astype(np.float32) * np.float32(p["scale"]) + p["bias"][idx % 4]
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("n", [0, 1, 65])
def test_struct_arrays_read_and_written(device, rng, n):
    lib = build("""
    struct Particle { float3 pos; float mass; packed_float3 vel; uint id; };
    kernel void step(device Particle* ps [[buffer(0)]], constant float& dt [[buffer(1)]],
                     uint i [[thread_position_in_grid]]) {
        ps[i].pos += float3(ps[i].vel) * dt;
        ps[i].mass *= 0.5f;
        ps[i].id += i;
    }""")
    dt = lib.step.args[0].dtype
    assert dt.itemsize == 48 and dt.fields["vel"][1] == 20 and dt.fields["id"][1] == 32
    ps = np.zeros(n, dt)
    ps["pos"] = rng.standard_normal((n, 3))
    ps["mass"] = rng.random(n)
    ps["vel"] = rng.standard_normal((n, 3))
    ps["id"] = rng.integers(0, 1000, n)
    want = ps.copy()
    want["pos"] += want["vel"] * np.float32(0.25)
    want["mass"] *= 0.5
    want["id"] += np.arange(n, dtype=np.uint32)
    lib.step(ps, 0.25)  # one thread per particle (the default grid)
    for f in dt.names:
        np.testing.assert_allclose(ps[f], want[f], rtol=1e-6)


def test_struct_values_of_another_dtype(device, rng):
    lib = build("""
    struct S { float a; uint n; float2 v; };
    kernel void k(device const S* s [[buffer(0)]], device float* out [[buffer(1)]], uint i [[thread_position_in_grid]]) {
        out[i] = s[i].a * float(s[i].n) + s[i].v.y;
    }
    kernel void w(device S* s [[buffer(0)]], uint i [[thread_position_in_grid]]) { s[i].n = i; }""")
    n = 9
    out = np.zeros(n, np.float32)
    # The same numbers at the same offsets under other names: the same bytes, accepted.
    mine = np.zeros(n, np.dtype([("x", "<f4"), ("count", "<u4"), ("xy", "<f4", (2,))]))
    mine["x"] = rng.standard_normal(n)
    mine["count"] = rng.integers(0, 50, n)
    mine["xy"] = rng.standard_normal((n, 2))
    lib.k(mine, out)
    np.testing.assert_allclose(out, mine["x"] * mine["count"] + mine["xy"][:, 1], rtol=1e-6)
    # Raw bytes of the right size are the caller's to lay out.
    lib.k(mine.view(np.dtype((np.void, 16))), out)
    # Same size, other meaning: refused, and nothing is run.
    floats = np.zeros(n, np.dtype([("a", "<f4"), ("n", "<f4"), ("v", "<f4", (2,))]))
    out[:] = -1
    with pytest.raises(mk.ArgumentError, match=r"parameter 's' .* the kernel reads uint32 at byte 4, where the dtype "
                                               r"given has float32"):
        lib.k(floats, out)
    big_endian = mine.astype(np.dtype([("x", ">f4"), ("count", ">u4"), ("xy", ">f4", (2,))]))
    with pytest.raises(mk.ArgumentError, match=r"reads float32 at byte 0, where the dtype given has float32 \(>f4\)"):
        lib.k(big_endian, out)
    with pytest.raises(mk.ArgumentError, match=r"takes elements of dtype .* got an array of dtype float32; build it "
                                               r"with np.zeros\(n, kernel.args\[0\].dtype\)"):
        lib.k(np.zeros(4 * n, np.float32), out)
    assert np.all(out == -1)
    # A written struct buffer needs an array: a numpy.void is a copy.
    s = np.zeros(n, lib.w.args[0].dtype)
    with pytest.raises(mk.ArgumentError, match=r"may be written by the kernel, and a numpy.void is a copy"):
        lib.w(s[0], grid=1)
    lib.w(s)
    assert s["n"].tolist() == list(range(n))


def test_a_struct_metalkit_cannot_describe_takes_bytes(device, rng):
    lib = build("""
    struct Bits { uint lo : 4; uint hi : 28; };
    kernel void k(constant Bits& b [[buffer(0)]], device uint* out [[buffer(1)]]) { out[0] = b.lo + b.hi * 16u; }""")
    assert lib.k.args[0].dtype is None and lib.k.args[0].elem_size == 4
    v = np.uint32(rng.integers(0, 2**31))
    out = np.zeros(1, np.uint32)
    lib.k(v.tobytes(), out, grid=1)
    assert out[0] == v


def test_keyword_arguments(device, rng):
    lib = build("""
    kernel void axpy(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                     constant float& a [[buffer(2)]], constant uint& n [[buffer(3)]], uint i [[thread_position_in_grid]]) {
        if (i < n) y[i] += a * x[i];
    }""")
    k = lib.axpy
    x = rng.standard_normal(50).astype(np.float32)
    y = rng.standard_normal(50).astype(np.float32)
    want = y.copy()
    want[:37] += np.float32(1.5) * x[:37]
    k(x, n=37, a=1.5, y=y, grid=50)
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6)  # the kernel may fuse a * x + y
    with pytest.raises(mk.ArgumentError, match=r"kernel 'axpy' got two values for parameter 'x' "
                                               r"\(device const float\* x \[\[buffer\(0\)\]\]\): argument 1 and x=; pass it once"):
        k(x, y, 1.0, 3, x=x)
    with pytest.raises(mk.ArgumentError, match=r"kernel 'axpy' has no parameter named 'yy' \(did you mean 'y'\?\); "
                                               r"it takes axpy\(device const float\* x"):
        k(x, yy=y, a=1.0, n=3)
    with pytest.raises(mk.ArgumentError, match=r"kernel 'axpy' is missing 2 arguments for parameter 'a' "
                                               r"\(constant float& a \[\[buffer\(2\)\]\]\), parameter 'n' .*; pass them"):
        k(x, y)
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6)  # nothing ran


def test_a_parameter_named_like_a_call_keyword_is_passed_positionally(device, rng):
    lib = build("""
    kernel void k(device float* grid [[buffer(0)]], uint i [[thread_position_in_grid]]) { grid[i] = float(i); }""")
    g = np.zeros(5, np.float32)
    lib.k(g)
    assert g.tolist() == [0, 1, 2, 3, 4]
    with pytest.raises(mk.DispatchError, match="grid must be an int or a tuple"):
        lib.k(grid=g)  # the call's grid= wins


NONE_SRC = """
constant bool has_bias [[function_constant(0)]];
kernel void f(device const float* x [[buffer(0)]], device const float* bias [[buffer(1)]],
              device float* out [[buffer(2)]], uint i [[thread_position_in_grid]]) {
    out[i] = x[i] * 2.0f + (has_bias ? bias[i] : 0.0f);
}
"""


@pytest.mark.parametrize("check", [False, True])
def test_none_for_a_buffer_the_kernel_does_not_read(device, rng, check):
    k = build(NONE_SRC, constants={"has_bias": False}).f
    x = rng.standard_normal(33).astype(np.float32)
    out = np.zeros_like(x)
    if check and device != "cpu":  # Metal refuses the simulator's option, before binding anything
        with pytest.raises(mk.DispatchError, match="check= and shuffle= are CPU simulator options"):
            k(x, None, out, check=True)
        return
    k(x, None, out, check=check)  # the default grid comes from the arrays given
    np.testing.assert_array_equal(out, x * 2)
    out[:] = 0
    k(x, bias=None, out=out, check=check)
    np.testing.assert_array_equal(out, x * 2)
    with pytest.raises(mk.ArgumentError, match=r"parameter 'n' .* takes a value, not None"):
        build("kernel void g(constant uint& n [[buffer(0)]]) {}").g(None, grid=1)


CHILD = textwrap.dedent("""
    import json, sys, numpy as np, metalkit as mk
    lib = mk.compile("#include <metal_stdlib>\\nusing namespace metal;\\n" + sys.argv[1], constants={"has_bias": True})
    x = np.ones(100, np.float32)
    out = np.zeros_like(x)
    try:
        lib.f(x, None, out, check=sys.argv[2] == "1")
        print(json.dumps({"raised": None}))
    except mk.MetalkitError as e:
        print(json.dumps({"raised": type(e).__name__, "message": str(e), "out": float(out.sum())}))
""")


@pytest.mark.parametrize("check", [False, True])
def test_a_read_through_none_is_a_kernel_fault_naming_the_parameter(tmp_path, check):
    p = subprocess.run([sys.executable, "-c", CHILD, NONE_SRC, "1" if check else "0"], env=child_env(tmp_path / "cache"),
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr + p.stdout
    got = json.loads(p.stdout.strip().splitlines()[-1])
    assert got["raised"] == "KernelFault", got
    assert "through parameter 'bias' [[buffer(1)]], which the call passed None" in got["message"], got["message"]
    assert "pass an array for it if the kernel reads it" in got["message"]
    if check:
        assert got["out"] == 0  # checked mode runs on copies: nothing comes back after a fault


def test_raw_byte_buffers_suggest_view_not_astype(device, rng):
    lib = build("""
    kernel void twice(device void* raw [[buffer(0)]], uint i [[thread_position_in_grid]]) {
        device float* f = (device float*)raw;
        f[i] *= 2.0f;
    }
    kernel void count(device const char* c [[buffer(0)]], device atomic_uint* n [[buffer(1)]],
                      uint i [[thread_position_in_grid]]) { if (c[i] < 0) atomic_fetch_add_explicit(n, 1u, memory_order_relaxed); }
    """)
    x = rng.standard_normal(16).astype(np.float32)
    with pytest.raises(mk.ArgumentError, match=r"parameter 'raw' \(device void\* raw .* takes elements of dtype uint8, "
                                               r"got an array of dtype float32; pass its bytes with x.view\(np.uint8\) "
                                               r"\(x.astype would convert each value and lose the data\)"):
        lib.twice(x, grid=16)
    want = x * 2
    lib.twice(x.view(np.uint8), grid=16)
    np.testing.assert_array_equal(x, want)
    b = rng.integers(-128, 128, 40).astype(np.int8)
    with pytest.raises(mk.ArgumentError, match=r"x.view\(np.int8\)"):
        lib.count(b.astype(np.int16), np.zeros(1, np.uint32), grid=40)
    n = np.zeros(1, np.uint32)
    lib.count(b, n, grid=40)
    assert n[0] == np.count_nonzero(b < 0)


def test_read_only_array_for_a_non_const_parameter_suggests_const(device):
    lib = build("""kernel void k(device float4* x [[buffer(0)]], device float* y [[buffer(1)]],
                                 uint i [[thread_position_in_grid]]) { y[i] = x[i].x; }""")
    x = np.zeros((4, 4), np.float32)
    x.flags.writeable = False
    with pytest.raises(mk.ArgumentError, match=r"parameter 'x' .* is not declared const, so the kernel may write it, "
                                               r"but the array is read-only; pass a writable copy \(x.copy\(\)\), or "
                                               r"declare it `device const float4\* x` if the kernel does not write it"):
        lib.k(x, np.zeros(4, np.float32))


def test_bfloat_buffers_and_dtype(device, rng):
    lib = build("""kernel void k(device const bfloat* x [[buffer(0)]], device bfloat* y [[buffer(1)]],
                                 uint i [[thread_position_in_grid]]) { y[i] = x[i] * bfloat(3.0f); }""")
    assert lib.k.args[0].dtype == np.dtype(ml_dtypes.bfloat16)
    x = (rng.integers(-100, 100, 77) / 4).astype(ml_dtypes.bfloat16)
    y = np.zeros_like(x)
    lib.k(x, y)
    np.testing.assert_array_equal(y.astype(np.float32), (x.astype(np.float32) * 3).astype(ml_dtypes.bfloat16)
                                  .astype(np.float32))
    with pytest.raises(mk.ArgumentError, match=r"takes elements of dtype bfloat16, got an array of dtype float16"):
        lib.k(x.astype(np.float16), y)


def _member(name, offset, type_, width=1, columns=0, arrays=(), fields=None):
    """A struct member as Metal's reflection reports it (MTLStructMember / MTLArrayType)."""
    return (name, offset, type_, width, columns, False, list(arrays), fields)


# Offsets as the MSL specification lays these structs out (Apple's compiler reports them per member).
REFLECTED = {
    "vectors": ([_member("h", 0, "half", 2), _member("p", 4, "float", 3), _member("f", 16, "float", 3),
                 _member("b", 32, "bool"), _member("l", 40, "long"), _member("c", 48, "char"),
                 _member("h4", 56, "half", 4)], 64, 16),
    "matrices_and_arrays": ([_member("m", 0, "float", 4, 4), _member("m3", 64, "float", 3, 3),
                             _member("arr", 112, "int", arrays=[(3, 4)]),
                             _member("v3", 128, "float", 3, arrays=[(2, 16)]),
                             _member("pk", 160, "float", 3, arrays=[(2, 12)]),
                             _member("m23", 192, "float", 3, 2)], 224, 16),
    "nested": ([_member("k", 0, "uint"), _member("in", 16, "struct", fields=[_member("a", 0, "float"),
                                                                             _member("v", 16, "float", 4)]),
                _member("many", 48, "struct", arrays=[(2, 32)],
                        fields=[_member("a", 0, "float"), _member("v", 16, "float", 4)]),
                _member("tail", 112, "ushort")], 128, 16),
}


@pytest.mark.parametrize("case", sorted(REFLECTED))
def test_metal_reflection_gives_the_layout_the_cpu_compiler_gives(case):
    decls, type_, size, _ = CASES[case]
    mk.use("cpu")
    cpu = build(f"{decls}\nkernel void k(constant {type_}& s [[buffer(0)]]) {{}}").k.args[0].dtype
    members, size, align = REFLECTED[case]
    from metalkit import _core
    assert _core.metal_rules.struct_dtype(members, size, align) == cpu


def test_the_layout_helpers_examples():
    import doctest
    from metalkit import _structs
    result = doctest.testmod(_structs)
    assert result.attempted >= 3 and result.failed == 0
