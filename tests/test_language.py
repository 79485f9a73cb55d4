"""MSL forms the front end handles: templates with host_name, function constants,
namespaces, [[kernel]], macros that generate kernels, columns kept for diagnostics."""
import re

import numpy as np
import pytest

import metalkit as mk
from conftest import HEADER, build
from metalkit.msl.prepass import prepass


def test_template_instantiations_with_host_names(device, rng):
    lib = build("""
    template <typename T>
    kernel void scale(device const T* x [[buffer(0)]], device T* y [[buffer(1)]], constant T& s [[buffer(2)]],
                      uint i [[thread_position_in_grid]]) { y[i] = x[i] * s; }
    template [[host_name("scale_f")]] kernel void scale<float>(device const float*, device float*, constant float&, uint);
    template [[host_name("scale_i")]] [[kernel]] decltype(scale<int>) scale<int>;
    typedef decltype(scale<short>) scale_t;
    #define INSTANTIATE(name, T) template [[host_name(name)]] kernel scale_t scale<T>;
    INSTANTIATE("scale_s", short)
    """)
    assert sorted(lib.kernels) == ["scale_f", "scale_i", "scale_s"]
    x = rng.standard_normal(33).astype(np.float32)
    y = np.zeros_like(x)
    lib.scale_f(x, y, 2.5)
    np.testing.assert_array_equal(y, x * np.float32(2.5))
    xi = rng.integers(-1000, 1000, 33, dtype=np.int32)
    yi = np.zeros_like(xi)
    lib.scale_i(xi, yi, -3)
    np.testing.assert_array_equal(yi, xi * -3)
    xs = rng.integers(-100, 100, 33, dtype=np.int16)
    ys = np.zeros_like(xs)
    lib.scale_s(xs, ys, 7)
    np.testing.assert_array_equal(ys, xs * 7)
    with pytest.raises(mk.ArgumentError, match="dtype int16"):
        lib.scale_s(xi, yi, 7)


def test_function_constants_by_name_and_index(device):
    src = """
    constant int block [[function_constant(0)]];
    constant bool use_bias [[function_constant(1)]];
    constant float bias [[function_constant(2)]];
    constant int block_or_one = is_function_constant_defined(block) ? block : 1;
    kernel void k(device float* x [[buffer(0)]], uint i [[thread_position_in_grid]]) {
        x[i] = float(i * block_or_one) + (use_bias ? bias : 0.0f);
    }"""
    x = np.zeros(5, np.float32)
    build(src, constants={"block": 3, "use_bias": True, 2: 0.5}).k(x)
    assert x.tolist() == [0.5, 3.5, 6.5, 9.5, 12.5]
    build(src, constants={"use_bias": False}).k(x)
    assert x.tolist() == [0, 1, 2, 3, 4]
    with pytest.raises(mk.CompileError, match="no function constant named or numbered 'nope'"):
        build(src, constants={"nope": 1})


def test_kernels_in_namespaces_and_attribute_syntax(device):
    lib = build("""
    namespace ops { namespace detail { inline float twice(float v) { return 2 * v; } }
      [[kernel]] void dbl(device float* x [[buffer(0)]], uint i [[thread_position_in_grid]]) { x[i] = detail::twice(x[i]); }
    }
    namespace { kernel void neg(device float* x [[buffer(0)]], uint i [[thread_position_in_grid]]) { x[i] = -x[i]; } }
    """)
    x = np.arange(4, dtype=np.float32)
    lib.dbl(x)
    lib.neg(x)
    assert x.tolist() == [0, -2, -4, -6]


def test_program_scope_constants_and_helpers(device):
    lib = build("""
    constant float weights[3] = {0.25f, 0.5f, 0.25f};
    static float blur_at(device const float* x, int i, int n) {
        float s = 0;
        for (int k = -1; k <= 1; ++k) s += weights[k + 1] * x[clamp(i + k, 0, n - 1)];
        return s;
    }
    kernel void blur(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                     constant int& n [[buffer(2)]], uint i [[thread_position_in_grid]]) { y[i] = blur_at(x, int(i), n); }
    """)
    x = np.random.default_rng(1).standard_normal(50).astype(np.float32)
    y = np.zeros_like(x)
    lib.blur(x, y, 50)
    xp = np.concatenate([[x[0]], x, [x[-1]]])
    np.testing.assert_allclose(y, 0.25 * xp[:-2] + 0.5 * xp[1:-1] + 0.25 * xp[2:], rtol=1e-6, atol=1e-6)


def test_prepass_keeps_columns():
    text = '# 1 "u.metal"\nkernel void k(device const float* x [[buffer(0)]], uint i [[thread_position_in_grid]]) { x[i]; }\n'
    out = prepass(text, lambda f: f == "u.metal").text.split("\n")[1]
    src = text.split("\n")[1]
    for word in ("void", "float* x", "uint i", "{ x[i]; }"):
        assert out.index(word) == src.index(word), word
    assert "device" not in out and "[[" not in out and "kernel" not in out


def test_constant_reference_parameters_are_restrict():
    """A `constant T&` is bound to the call's own copy, so the kernel may read it once: only it
    gains __restrict (buffers, `device T&` and pointers may alias what the kernel writes)."""
    text = ('# 1 "u.metal"\nkernel void k(device float* x [[buffer(0)]], constant uint& n [[buffer(1)]], '
            'device float& y [[buffer(2)]], constant float* c [[buffer(3)]]) { x[0] = n + y + c[0]; }\n')
    out = " ".join(prepass(text, lambda f: f == "u.metal").text.split())
    assert re.search(r"const uint\s*&\s*__restrict n", out), out
    assert out.count("__restrict") == 1, out


def test_vertex_functions_are_refused(device):
    with pytest.raises(mk.CompileError, match="only kernel functions"):
        mk.compile(HEADER + "vertex float4 v(uint id [[vertex_id]]) { return float4(0); }\n")


def test_unsuffixed_literals_are_float(device):
    lib = build("""
    kernel void k(device float* x [[buffer(0)]], device half* h [[buffer(1)]], uint i [[thread_position_in_grid]]) {
        x[i] = sin(0.5) + max(x[i], 1.5) + 2.5e-1 + 1.;
        h[i] = h[i] * 0.5h;
    }""")
    x = np.array([0.0, 3.0], np.float32)
    h = np.array([4.0, -2.0], np.float16)
    lib.k(x, h)
    np.testing.assert_allclose(x, [np.sin(0.5) + 1.5 + 1.25, np.sin(0.5) + 3.0 + 1.25], rtol=1e-6)
    assert h.tolist() == [2.0, -1.0]


def test_per_kernel_function_constants(device, rng):
    lib = build("""
    constant int mode [[function_constant(0)]];
    constant float scale [[function_constant(1)]];
    kernel void op(device const float* x [[buffer(0)]], device float* y [[buffer(1)]], uint i [[thread_position_in_grid]]) {
        y[i] = mode == 0 ? x[i] * scale : (mode == 1 ? x[i] + scale : -x[i]);
    }""", constants={"mode": 0, "scale": 3.0})
    x = rng.standard_normal(37).astype(np.float32)
    y = np.zeros_like(x)
    lib.op(x, y)
    np.testing.assert_array_equal(y, x * np.float32(3))
    lib.specialize("op", {"mode": 1})(x, y)          # scale stays 3 from the library
    np.testing.assert_array_equal(y, x + np.float32(3))
    lib.specialize("op", {1: 0.5, "mode": 0})(x, y)
    np.testing.assert_array_equal(y, x * np.float32(0.5))
    lib.op(x, y)                                     # the library itself is unchanged
    np.testing.assert_array_equal(y, x * np.float32(3))
    with pytest.raises(KeyError, match="no kernel named 'nope'"):
        lib.specialize("nope", {"mode": 1})


def test_attribute_arguments_are_constant_expressions(device):
    # Libraries number function constants and buffers from macros: BASE + k.
    lib = build("""
    #define CONST_BASE 40
    #define SLOT(k) (2 * (k) - 1)
    constant float gain [[function_constant(CONST_BASE + 2)]];
    constant bool negate [[function_constant(CONST_BASE * 2 + (7 % 4) - 3)]];
    kernel void k(device const float* x [[buffer(SLOT(1))]], device float* y [[buffer(1 << 1)]],
                  uint i [[thread_position_in_grid]]) {
        y[i] = (negate ? -x[i] : x[i]) * gain;
    }""", constants={42: 2.0, 80: True})
    assert [(a.name, a.index) for a in lib.k.args if a.kind == "buffer"] == [("x", 1), ("y", 2)]
    x = np.arange(5, dtype=np.float32)
    y = np.zeros_like(x)
    lib.k(x, y)
    assert y.tolist() == [0, -2, -4, -6, -8]


def test_function_constant_index_from_a_variable_binds_by_name(device):
    src = """
    constant constexpr int first_index = 3;
    constant int bias [[function_constant(first_index)]];
    kernel void k(device int* y [[buffer(0)]], uint i [[thread_position_in_grid]]) { y[i] = int(i) + bias; }"""
    y = np.zeros(3, np.int32)
    build(src, constants={"bias": 10}).k(y)
    assert y.tolist() == [10, 11, 12]


def test_prepass_constant_expressions():
    from metalkit.msl.consteval import const_int as _const_int
    cases = {"7": 7, "0x1Fu": 31, "010": 8, "(1 + 2) * 3": 9, "-7 / 2": -3, "-7 % 2": -1, "1 << 4 | 1": 17,
             "2 > 1 ? 5 : 6": 5, "10 - 2 - 3": 5, "!0 + ~0": 0, "true && 0": 0}
    assert {e: _const_int(e) for e in cases} == cases
    for bad in ("N + 1", "1 +", "", "1 / 0", "f(2)"):
        with pytest.raises(ValueError):
            _const_int(bad)


def test_loop_hints_naming_macros_compile(device):
    # clang -E leaves #pragma arguments unexpanded; the hint must not become an error.
    lib = build("""
    #define SMALLER(a, b) ((a) < (b) ? (a) : (b))
    #define TERMS 4
    template <int N>
    float partial(device const float* x) {
        float s = 0;
        #pragma unroll (SMALLER(N, 8))
        for (int k = 0; k < N; ++k) s += x[k];
        #pragma unroll(N)
        for (int k = 0; k < N; ++k) s += x[k];
        #pragma clang loop unroll_count(TERMS)
        for (int k = 0; k < N; ++k) s += x[k];
        return s;
    }
    kernel void k(device const float* x [[buffer(0)]], device float* y [[buffer(1)]], uint i [[thread_position_in_grid]]) {
        y[i] = partial<TERMS>(x + 4 * i);
    }""")
    x = np.arange(8, dtype=np.float32)
    y = np.zeros(2, np.float32)
    lib.k(x, y, grid=2)
    assert y.tolist() == [18, 66]


@pytest.mark.parametrize("device", ["cpu"], indirect=True)  # a CPU-backend description of the parameter
def test_void_pointer_buffers_take_bytes(device):
    lib = build("""
    kernel void k(device const void* src [[buffer(0)]], device void* dst [[buffer(1)]], uint i [[thread_position_in_grid]]) {
        ((device float*)dst)[i] = 2 * ((device const float*)src)[i];
    }""")
    assert [(a.name, a.dtype, a.writable) for a in lib.k.args if a.kind == "buffer"] == [
        ("src", np.dtype(np.uint8), False), ("dst", np.dtype(np.uint8), True)]
    x = np.arange(6, dtype=np.float32)
    y = np.zeros_like(x)
    lib.k(x.view(np.uint8), y.view(np.uint8), grid=6)
    assert y.tolist() == [0, 2, 4, 6, 8, 10]


def test_host_names_from_adjacent_string_literals(device):
    lib = build("""
    #define HOST(kind) "negate_" #kind
    template <typename T>
    kernel void negate(device T* x [[buffer(0)]], uint i [[thread_position_in_grid]]) { x[i] = -x[i]; }
    template [[host_name(HOST(f32))]] kernel void negate<float>(device float*, uint);
    """)
    assert lib.kernels == ["negate_f32"]


def test_prepass_builds_only_the_kernels_asked_for():
    text = "\n".join([
        '# 1 "u.metal"',
        "template <typename T> kernel void k(device T* x [[buffer(0)]], uint i [[thread_position_in_grid]]) { x[i] = 1.5; }",
        'template [[host_name("k_f")]] kernel void k<float>(device float*, uint);',
        'template [[host_name("k_i")]] kernel void k<int>(device int*, uint);',
        "kernel void plain(device int* x [[buffer(0)]]) { x[0] = 2.5; }",
        "kernel void other(device int* x [[buffer(0)]]) { x[0] = 3; }",
    ])
    full = prepass(text, lambda f: f == "u.metal")
    assert [k.host_name for k in full.kernels] == ["plain", "other", "k_f", "k_i"]
    some = prepass(text, lambda f: f == "u.metal", only={"k_i", "plain"})
    assert [k.host_name for k in some.kernels] == ["plain", "k_i"]
    lines = some.text.split("\n")
    assert lines[2].strip() == ""                                  # k<float> is not instantiated
    assert "k<int>" in lines[3] and "static constexpr" in lines[3]
    assert "inline" not in lines[4] and lines[5].lstrip().startswith("inline void other")  # not emitted


def test_explicit_instantiations_of_helpers_are_plain_cpp(device):
    lib = build("""
    template <typename T> T cube(T v) { return v * v * v; }
    template float cube<float>(float);
    template <typename T> struct Acc { T total; };
    template struct Acc<int>;
    kernel void k(device float* x [[buffer(0)]], uint i [[thread_position_in_grid]]) {
        Acc<int> a{int(i)};
        x[i] = cube(x[i]) + float(a.total);
    }""")
    x = np.array([1, 2, 3], np.float32)
    lib.k(x)
    assert x.tolist() == [1, 9, 29]


def test_defines_choose_preprocessor_branches(device, rng):
    src = """
    #if defined(USE_DOUBLE_STEP) && USE_DOUBLE_STEP
    #define STEP 2.0f
    #else
    #define STEP 1.0f
    #endif
    kernel void step(device float* x [[buffer(0)]], uint i [[thread_position_in_grid]]) { x[i] += STEP * SCALE; }
    """
    x = rng.standard_normal(9).astype(np.float32)
    y = x.copy()
    build(src, defines={"SCALE": 3})["step"](y)
    np.testing.assert_array_equal(y, x + 3)
    y = x.copy()
    build(src, defines={"SCALE": "0.5f", "USE_DOUBLE_STEP": True})["step"](y)
    np.testing.assert_array_equal(y, x + 1)
    with pytest.raises(mk.CompileError, match="'2BAD' is not a macro name"):
        build(src, defines={"2BAD": 1})


def test_building_only_some_kernels(device):
    src = """
    kernel void a(device float* x [[buffer(0)]], uint i [[thread_position_in_grid]]) { x[i] = 1; }
    template <typename T> kernel void b(device T* x [[buffer(0)]], uint i [[thread_position_in_grid]]) { x[i] = 2; }
    template [[host_name("b_f")]] kernel void b<float>(device float*, uint);
    template [[host_name("b_i")]] kernel void b<int>(device int*, uint);
    """
    lib = build(src, kernels=["b_i"])
    if device == "cpu":  # Metal compiles the whole source anyway
        assert lib.kernels == ["b_i"]
    x = np.zeros(3, np.int32)
    lib.b_i(x)
    assert x.tolist() == [2, 2, 2]
    with pytest.raises(mk.CompileError, match="kernels=: no kernel named 'nope'"):
        build(src, kernels=["nope"])


def test_pragmas_metal_accepts(device, rng):
    lib = build("""
    #pragma METAL internals : enable
    #pragma clang diagnostic push
    #pragma clang diagnostic ignored "-Wunused-variable"
    kernel void k(device float* x [[buffer(0)]], uint i [[thread_position_in_grid]]) {
        float unused = 1.0f;
        float acc = 0.0f;
        #pragma unroll
        for (int j = 0; j < 4; ++j) acc += x[i] * float(j);
        #pragma clang loop unroll(full)
        for (int j = 0; j < 2; ++j) acc += 1.0f;
        x[i] = acc;
    }
    #pragma clang diagnostic pop
    """)
    x = rng.standard_normal(10).astype(np.float32)
    want = x * 6 + 2
    lib.k(x)
    np.testing.assert_allclose(x, want, rtol=1e-6)


def test_parameters_that_exist_only_with_a_function_constant(device):
    src = """
    constant bool has_bias [[function_constant(0)]];
    kernel void k(device float* x [[buffer(0)]],
                  device const float* bias [[buffer(1), function_constant(has_bias)]],
                  constant float& scale [[buffer(2)]],
                  uint i [[thread_position_in_grid]]) {
        x[i] = x[i] * scale + (has_bias ? bias[i] : 0.0);
    }
    """
    with_bias = build(src, constants={"has_bias": True})
    assert [a.name for a in with_bias.k.args if a.kind != "builtin"] == ["x", "bias", "scale"]
    x = np.arange(4, dtype=np.float32)
    with_bias.k(x, np.full(4, 0.5, np.float32), 2.0)
    np.testing.assert_array_equal(x, np.arange(4) * 2 + 0.5)
    # false (or not given): the parameter is not there and is not bound
    for constants in ({"has_bias": False}, None):
        without = build(src, constants=constants)
        assert [a.name for a in without.k.args if a.kind != "builtin"] == ["x", "scale"]
        x = np.arange(4, dtype=np.float32)
        without.k(x, 3.0)
        np.testing.assert_array_equal(x, np.arange(4) * 3)


def test_overloads_on_address_spaces(device):
    # MSL overloads on the address space of `this` and of parameters; the CPU keeps one of each.
    lib = build("""
    struct Acc {
        float v;
        Acc() thread : v(1) {}
        Acc() threadgroup : v(1) {}
        Acc(float x) device : v(x) {}
        Acc(float x) thread : v(x) {}
        float get() thread { return v; }
        float get() device { return v; }
        float get() constant { return v; }
        float twice() const thread { return 2 * v; }
        float twice() const constant { return 2 * v; }
    };
    template <typename T> struct elem {};
    template <typename T> struct elem<thread T*> { typedef T type; };
    template <typename T> struct elem<device T*> { typedef T type; };
    template <typename T> struct elem<threadgroup T*> { typedef T type; };
    void bump(thread float& x) { x += 1; }
    void bump(device float& x) { x += 1; }
    kernel void k(device float* out [[buffer(0)]], uint i [[thread_position_in_grid]]) {
        typename elem<device float*>::type f = 3;
        Acc a(f);
        Acc b;
        bump(out[i]);
        out[i] += a.get() + b.twice();
    }
    """)
    out = np.zeros(3, np.float32)
    lib.k(out)
    np.testing.assert_array_equal(out, [6, 6, 6])


def test_max_threads_attribute_of_a_template_kernel(device):
    lib = build("""
    template <int WM, int WN>
    [[kernel, max_total_threads_per_threadgroup(WM * WN * 32)]]
    void k(device int* out [[buffer(0)]], uint i [[thread_position_in_grid]]) { out[i] = WM * WN; }
    template [[host_name("k22")]] [[kernel]] void k<2, 2>(device int*, uint);
    """)
    out = np.zeros(4, np.int32)
    lib.k22(out)
    assert (out == 4).all()


def test_methods_that_synchronise_run_on_fibers(device, rng):
    lib = build("""
    struct Reducer {
        float total(float v) { return simd_sum(v); }
        void sync() const { threadgroup_barrier(mem_flags::mem_threadgroup); }
    };
    kernel void k(device float* x [[buffer(0)]], threadgroup float* t [[threadgroup(0)]],
                  uint i [[thread_position_in_grid]], uint l [[thread_position_in_threadgroup]]) {
        Reducer r;
        t[l] = x[i];
        r.sync();
        x[i] = r.total(t[(l + 1) % 32]);
    }""")
    x = rng.integers(0, 100, 64).astype(np.float32)
    want = np.repeat(x.reshape(2, 32).sum(1), 32)
    lib.k(x, threadgroup=32, threadgroup_memory={0: 128})
    np.testing.assert_array_equal(x, want)


@pytest.mark.parametrize("snippet,match", [
    ("kernel int k(device float* x [[buffer(0)]]) { return 1; }", "kernel function 'k' must return void"),
])
def test_kernel_rules_metal_enforces(device, snippet, match):
    with pytest.raises(mk.CompileError, match=match):
        build(snippet)


def test_threadgroup_declarations_over_32_kib_are_refused(device):
    ok = """
    kernel void k(device float* x [[buffer(0)]], uint l [[thread_position_in_threadgroup]]) {
        threadgroup float a[4096], b[2048];     // 24 KiB
        threadgroup float4 c[512];              //  8 KiB: 32 KiB in all
        a[l] = b[l] = 1.0f;
        c[l] = float4(a[l]);
        x[l] = c[l].x + b[l];
    }"""
    x = np.zeros(32, np.float32)
    build(ok).k(x, threadgroup=32)
    assert x.tolist() == [2.0] * 32
    with pytest.raises(mk.CompileError, match=r"threadgroup memory declared in this kernel: 32784 bytes, more than "
                                              r"the 32 KiB"):
        build(ok.replace("c[512]", "c[513]"))
    template = """
    template <int N> kernel void t(device float* x [[buffer(0)]], uint l [[thread_position_in_threadgroup]]) {
        threadgroup float tile[N];
        tile[l] = 1.0f;
        x[l] = tile[l];
    }
    template [[host_name("t_small")]] kernel void t<1024>(device float*, uint);
    """
    build(template).t_small(x, threadgroup=32)
    with pytest.raises(mk.CompileError, match="more than the 32 KiB"):
        build(template + 'template [[host_name("t_big")]] kernel void t<9000>(device float*, uint);\n')
