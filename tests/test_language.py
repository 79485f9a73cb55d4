"""MSL forms the front end handles: templates with host_name, function constants,
namespaces, [[kernel]], macros that generate kernels, columns kept for diagnostics."""
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
