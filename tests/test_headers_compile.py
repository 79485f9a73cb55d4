"""Compile-and-run checks for metalkit's MSL standard library headers.

Small C++ programs include <metal_stdlib> with exactly the flags the package
uses, are linked into shared libraries with the package's own compiler, loaded with ctypes
and compared against numpy / Python references on random data.
"""

import ctypes
import math
import subprocess
from pathlib import Path

import numpy as np
import pytest

from metalkit.msl import toolchain

TC = toolchain.find()
INCLUDE = Path(__file__).resolve().parents[1] / "python" / "metalkit" / "include"
FLAGS = [*toolchain.LANGUAGE_FLAGS, "-O2", "-fPIC", "-I", str(INCLUDE)]
RNG_SEED = 20240531

PRELUDE = r"""
#include <metal_stdlib>
using namespace metal;
#define EXPORT extern "C" __attribute__((visibility("default")))
template <class V, class T> V ld(const T *p) { V v; __builtin_memcpy(&v, p, sizeof(v)); return v; }
template <class V, class T> void st(T *p, const V &v) { __builtin_memcpy(p, &v, sizeof(v)); }
// Appends scalars / vector components to a float output stream.
struct Out {
  float *o;
  int k = 0;
  void operator()(float x) { o[k++] = x; }
  template <class T, int N> void operator()(vec<T, N> v) { for (int i = 0; i < N; ++i) o[k++] = (float)v[i]; }
};
"""

# ---------------------------------------------------------------- core source
SCALARS = [("bool", 1), ("char", 1), ("uchar", 1), ("short", 2), ("ushort", 2), ("int", 4),
           ("uint", 4), ("long", 8), ("ulong", 8), ("half", 2), ("bfloat", 2), ("float", 4)]
LAYOUT_TYPES = []
for _t, _s in SCALARS:
    for _n in (2, 3, 4):
        _vs = (4 if _n == 3 else _n) * _s
        LAYOUT_TYPES.append((f"{_t}{_n}", _vs, _vs))
        LAYOUT_TYPES.append((f"packed_{_t}{_n}", _n * _s, _s))
for _t, _s in (("float", 4), ("half", 2)):
    for _c in (2, 3, 4):
        for _r in (2, 3, 4):
            _cs = (4 if _r == 3 else _r) * _s
            LAYOUT_TYPES.append((f"{_t}{_c}x{_r}", _c * _cs, _cs))

CORE = PRELUDE + r"""
static_assert(__is_same(metal::vec<float, 4>, float4) && __is_same(metal::float4, ::float4), "");
static_assert(__is_same(metal::packed_vec<half, 3>, packed_half3), "");
static_assert(__is_same(decltype(half4() * 2.0f), half4), "scalar converts to the element type");
static_assert(__is_same(decltype(float4() < 1), bool4), "comparisons give boolN");
static_assert(__is_same(decltype(float2x3() * float2()), float3), "");
static_assert(__is_same(decltype(float3() * float2x3()), float2), "");
static_assert(__is_same(decltype(float2x3() * float4x2()), float4x3), "");
static_assert(is_floating_point_v<half> && is_floating_point_v<bfloat> && is_integral_v<uint>, "");
static_assert(is_vector_v<float4> && !is_vector_v<float> && vec_elements<int3>::value == 3, "");
static_assert(is_same_v<make_unsigned_t<int4>, uint4> && is_same_v<make_signed_t<uchar>, char>, "");
static_assert(is_same_v<conditional_t<true, int, float>, int> && is_same_v<remove_cv_t<const int>, int>, "");
static_assert(is_same_v<enable_if_t<true, half>, half> && is_same_v<decay_t<const float(&)[3]>, const float *>, "");
static_assert(numeric_limits<half>::digits == 11 && numeric_limits<uint>::max() == 0xffffffffu, "");
constexpr float4 kConst = float4(1, 2, 3, 4);           // constant-initialisable
const float4 kGlobal = float4(1.5f, float2(2, 3), 4);    // `constant float4` after the pre-pass
const float3x3 kMat = float3x3(2.0f);

EXPORT void layout(long *o) {
  const long v[] = {
#define L(T) (long)sizeof(T), (long)alignof(T),
    LAYOUT_LIST
#undef L
  };
  for (unsigned i = 0; i < sizeof(v) / sizeof(v[0]); ++i) o[i] = v[i];
}

EXPORT int ctor_swizzle(const float *in, float *o) {
  Out put{o};
  float4 a(in[0], in[1], in[2], in[3]);
  float s = in[4], t = in[5];
  put(float4(a.xy, s, t));
  put(float4(s));
  put(float4(1, 2u, 3.5, (half)4));
  put(float4(a.zw, a.xy));
  put(float4(a.xyz, s));
  put(float4(s, a.yzw));
  put(float3(s, a.wx));
  put(float2(a.y, t));
  put(a.zyx);
  put(a.wzyx);
  put(a.xxyy);
  put(a.bgra);
  put(a.ra);
  put(a.g);
  put(a.yyyy);
  float4 b = a;
  b.xy = float2(s, t);
  put(b);
  b.zw += 1.0f;
  b.x++;
  ++b.y;
  put(b);
  b.wzyx = b;
  b.rb = float2(7, 8);
  b.a *= 2;
  put(b);
  float3 c;
  c = 5;
  c.zx = a.yw;
  put(c);
  b[2] = s;
  put(b);
  float4 arr[2] = {{1, 2, 3, 4}, {a.x, a.y, a.z, a.w}};
  put(arr[0]);
  put(arr[1]);
  packed_float3 p = a.xyz;
  p.y = t;
  put(float3(p));
  put(p.zyx);
  p += float3(1);
  p.xz = float2(9, 10);
  put(float3(p));
  packed_float4 q(a.w, a.z, a.y, a.x);
  put(q + a);
  put(q * 2.0f);
  put(q.xy);
  bool4 bb = a > s;
  put(float4(bb.wzyx));
  put(kGlobal);
  put(kConst);
  put(kMat[1]);
  int2 i2(7, -3);
  i2.yx = i2;
  put(float2(i2));
  return put.k;
}

EXPORT void convert(const float *in, float *fo, int *io, uint *uo, ushort *ho, ushort *bo, uchar *b8, char *c8) {
  for (int j = 0; j < 4; ++j) {
    float4 f = ld<float4>(in + 4 * j);
    int4 i = int4(f);
    st(io + 4 * j, i);
    st(uo + 4 * j, uint4(i));
    st(ho + 4 * j, as_type<ushort4>(half4(f)));
    st(bo + 4 * j, as_type<ushort4>(bfloat4(f)));
    bool4 b = bool4(f);
    st(b8 + 4 * j, b);
    st(c8 + 4 * j, char4(i));
    st(fo + 12 * j, float4(b));
    st(fo + 12 * j + 4, float4(half4(f)));
    st(fo + 12 * j + 8, static_cast<float4>(i));
  }
}

EXPORT void ops_f(const float *a, const float *b, float *o, uchar *m, int n) {
  for (int i = 0; i < n; i += 4) {
    float4 x = ld<float4>(a + i), y = ld<float4>(b + i);
    float4 r[] = {x + y, x - y, x * y, x / y, -x, x * 2.0f, 3 - x, y / 4};
    for (int k = 0; k < 8; ++k) st(o + 8 * i + 4 * k, r[k]);
    bool4 c[] = {x < y, x >= y, x == x, x != y, x > 0, !(x < y), (x < y) && (y > 0), (x < y) || (y > 0)};
    for (int k = 0; k < 8; ++k) st(m + 8 * i + 4 * k, c[k]);
  }
}

template <class T>
void ops_int(const T *a, const T *b, const T *sh, T *o, int n) {
  typedef vec<T, 4> V;
  for (int i = 0; i < n; i += 4) {
    V x = ld<V>(a + i), y = ld<V>(b + i), s = ld<V>(sh + i);
    V r[] = {x + y, x - y, x * y, x / y, x % y, x & y, x | y, x ^ y, x << s, x >> s, ~x, -x, x * 3 + 1, 7 - x};
    for (int k = 0; k < 14; ++k) st(o + 14 * i + 4 * k, r[k]);
  }
}
EXPORT void ops_int32(const int *a, const int *b, const int *s, int *o, int n) { ops_int(a, b, s, o, n); }
EXPORT void ops_uint32(const uint *a, const uint *b, const uint *s, uint *o, int n) { ops_int(a, b, s, o, n); }
EXPORT void ops_int8(const char *a, const char *b, const char *s, char *o, int n) { ops_int(a, b, s, o, n); }
EXPORT void ops_uint16(const ushort *a, const ushort *b, const ushort *s, ushort *o, int n) { ops_int(a, b, s, o, n); }
EXPORT void ops_int64(const long *a, const long *b, const long *s, long *o, int n) { ops_int(a, b, s, o, n); }

// Division by zero and MIN / -1 must not trap; results are unspecified
// except MIN / -1 == MIN and MIN % -1 == 0 (the wrapped values).
EXPORT void div_edge(int *o, uint *uo, char *co) {
  volatile int z = 0, m1 = -1;
  int4 a(5, -7, INT_MIN, 3);
  st(o, a / int4(z));
  st(o + 4, a % int4(z));
  st(o + 8, int4(INT_MIN) / int4(m1));
  st(o + 12, int4(INT_MIN) % int4(m1));
  st(uo, uint4(9u) / uint4((uint)z));
  st(co, char4((char)-128) / char4((char)m1));
}

EXPORT void half_ops(const half *a, const half *b, const half *c, half *o, int n) {
  for (int i = 0; i < n; i += 4) {
    half4 x = ld<half4>(a + i), y = ld<half4>(b + i), z = ld<half4>(c + i);
    half4 t = x + y;
    st(o + 5 * i, t);
    t = t * z;
    st(o + 5 * i + 4, t);
    t = t - x;
    st(o + 5 * i + 8, t);
    st(o + 5 * i + 12, x / y);
    st(o + 5 * i + 16, x * 0.1f);
  }
}
EXPORT void half_sum(const half *x, half *out, int n) {
  half4 acc = 0;
  half s = 0;
  for (int i = 0; i < n; i += 4) {
    acc += ld<half4>(x + i);
    s += x[i];
  }
  st(out, acc);
  out[4] = s;
}
EXPORT void half_edge(half *o) {
  volatile float big = 2048.0f;
  o[0] = half(big) + half(1);              // 2049 is not a half: ties to even -> 2048
  half4 v = half4(half(big));
  v += 1;
  o[1] = v.x;
  o[2] = half(big) + half(3);              // 2051 -> 2052
  o[3] = (half(big) * half(32)) * half(2); // 131072 overflows half -> inf
  o[4] = 1.5h;
  o[5] = HALF_MAX;
  o[6] = M_PI_H;
}
EXPORT void bf_ops(const bfloat *a, const bfloat *b, bfloat *o, int n) {
  for (int i = 0; i < n; i += 4) {
    bfloat4 x = ld<bfloat4>(a + i), y = ld<bfloat4>(b + i);
    st(o + 3 * i, x + y);
    st(o + 3 * i + 4, x * y);
    st(o + 3 * i + 8, bfloat4(float4(x) / float4(y)));
  }
}

EXPORT int mat(const float *in, float *o) {
  Out put{o};
  float4x4 M, E(in[0], in[1], in[2], in[3], in[4], in[5], in[6], in[7], in[8], in[9], in[10], in[11],
                in[12], in[13], in[14], in[15]);
  for (int c = 0; c < 4; ++c)
    for (int r = 0; r < 4; ++r) M[c][r] = in[4 * c + r];
  float4x4 N(ld<float4>(in + 16), ld<float4>(in + 20), ld<float4>(in + 24), ld<float4>(in + 28));
  float4 v = ld<float4>(in + 32);
  for (int c = 0; c < 4; ++c) put(E[c] - M[c]);
  put(M * v);
  put(v * M);
  float4x4 P = M * N;
  for (int c = 0; c < 4; ++c) put(P[c]);
  float4x4 T = transpose(M);
  for (int c = 0; c < 4; ++c) put(T[c]);
  put(determinant(M));
  float3x3 A(in[0], in[1], in[2], in[3], in[4], in[5], in[6], in[7], in[8]);
  put(determinant(A));
  put(A * v.xyz);
  put(float2x2(in[0], in[1], in[2], in[3]) * v.xy);
  put(determinant(float2x2(in[0], in[1], in[2], in[3])));
  float2x3 B(v.xyz, v.yzw);          // 2 columns of float3
  float3x2 C = transpose(B);
  float3x3 BC = B * C;
  for (int c = 0; c < 3; ++c) put(BC[c]);
  put(B * v.xy);
  put(v.xyz * B);
  float4x4 S = 2 * M + N * 0.5f - M;
  S += N;
  S *= 2.0f;
  for (int c = 0; c < 4; ++c) put(S[c]);
  float3x3 D(3.0f);
  for (int c = 0; c < 3; ++c) put(D[c]);
  half3x3 H(A);
  put(float3(H * half3(v.xyz)));
  put((float)determinant(H));
  return put.k;
}

EXPORT void astype(const float *f, const uint *u, uint *o, float *fo, ushort *ho) {
  for (int i = 0; i < 4; ++i) o[i] = as_type<uint>(f[i]);
  st(o + 4, as_type<uint4>(ld<float4>(f)));
  st(fo, as_type<float4>(ld<uint4>(u)));
  st(ho, as_type<ushort2>(as_type<half2>(u[0])));
  fo[4] = as_type<float>(as_type<int>(f[1]));
}

EXPORT void limits(float *o) {
  float v[] = {FLT_MAX, FLT_MIN, FLT_EPSILON, HALF_MAX, HALF_MIN, HALF_EPSILON, MAXFLOAT, M_PI_F, M_E_F,
               M_SQRT2_F, numeric_limits<float>::max(), numeric_limits<float>::min(), numeric_limits<float>::epsilon(),
               numeric_limits<half>::max(), numeric_limits<half>::min(), numeric_limits<half>::epsilon(),
               numeric_limits<half>::lowest(), numeric_limits<half>::denorm_min(), numeric_limits<bfloat>::max(),
               numeric_limits<bfloat>::epsilon(), numeric_limits<float>::infinity(), (float)INT_MAX, (float)UINT_MAX};
  for (unsigned i = 0; i < sizeof(v) / sizeof(v[0]); ++i) o[i] = v[i];
  o[30] = numeric_limits<float>::quiet_NaN();
}
"""
CORE = CORE.replace("LAYOUT_LIST", " ".join(f"L({t})" for t, _, _ in LAYOUT_TYPES))

# ---------------------------------------------------------------- math source
PI = math.pi
F64 = np.float64
# name: (arity, numpy reference on float64, argument ranges)
MATH = {
    "fabs": (1, np.abs, [(-10, 10)]),
    "abs": (1, np.abs, [(-10, 10)]),
    "ceil": (1, np.ceil, [(-10, 10)]),
    "floor": (1, np.floor, [(-10, 10)]),
    "round": (1, lambda x: np.copysign(np.floor(np.abs(x) + 0.5), x), [(-10, 10)]),
    "rint": (1, np.rint, [(-10, 10)]),
    "trunc": (1, np.trunc, [(-10, 10)]),
    "fract": (1, lambda x: x - np.floor(x), [(-10, 10)]),
    "sqrt": (1, np.sqrt, [(0, 100)]),
    "rsqrt": (1, lambda x: 1 / np.sqrt(x), [(0.01, 100)]),
    "exp": (1, np.exp, [(-5, 5)]),
    "exp2": (1, np.exp2, [(-5, 5)]),
    "exp10": (1, lambda x: 10.0 ** x, [(-3, 3)]),
    "log": (1, np.log, [(0.01, 100)]),
    "log2": (1, np.log2, [(0.01, 100)]),
    "log10": (1, np.log10, [(0.01, 100)]),
    "sin": (1, np.sin, [(-6, 6)]),
    "cos": (1, np.cos, [(-6, 6)]),
    "tan": (1, np.tan, [(-1.2, 1.2)]),
    "asin": (1, np.arcsin, [(-1, 1)]),
    "acos": (1, np.arccos, [(-1, 1)]),
    "atan": (1, np.arctan, [(-10, 10)]),
    "sinh": (1, np.sinh, [(-4, 4)]),
    "cosh": (1, np.cosh, [(-4, 4)]),
    "tanh": (1, np.tanh, [(-4, 4)]),
    "asinh": (1, np.arcsinh, [(-10, 10)]),
    "acosh": (1, np.arccosh, [(1, 10)]),
    "atanh": (1, np.arctanh, [(-0.9, 0.9)]),
    "sinpi": (1, lambda x: np.sin(PI * x), [(-4, 4)]),
    "cospi": (1, lambda x: np.cos(PI * x), [(-4, 4)]),
    "tanpi": (1, lambda x: np.tan(PI * x), [(-0.4, 0.4)]),
    "saturate": (1, lambda x: np.clip(x, 0, 1), [(-2, 2)]),
    "sign": (1, np.sign, [(-2, 2)]),
    "atan2": (2, np.arctan2, [(-5, 5), (-5, 5)]),
    "fmod": (2, np.fmod, [(-10, 10), (0.5, 3)]),
    "pow": (2, np.power, [(0.1, 5), (-3, 3)]),
    "powr": (2, np.power, [(0.1, 5), (-3, 3)]),
    "copysign": (2, np.copysign, [(-5, 5), (-5, 5)]),
    "divide": (2, np.divide, [(-5, 5), (0.5, 4)]),
    "fdim": (2, lambda x, y: np.maximum(x - y, 0), [(-5, 5), (-5, 5)]),
    "fmax": (2, np.fmax, [(-5, 5), (-5, 5)]),
    "fmin": (2, np.fmin, [(-5, 5), (-5, 5)]),
    "max": (2, np.fmax, [(-5, 5), (-5, 5)]),
    "min": (2, np.fmin, [(-5, 5), (-5, 5)]),
    "step": (2, lambda e, x: np.where(x < e, 0.0, 1.0), [(-1, 1), (-1, 1)]),
    "fma": (3, lambda x, y, z: x * y + z, [(-3, 3), (-3, 3), (-3, 3)]),
    "fmax3": (3, lambda x, y, z: np.maximum(np.maximum(x, y), z), [(-3, 3)] * 3),
    "fmin3": (3, lambda x, y, z: np.minimum(np.minimum(x, y), z), [(-3, 3)] * 3),
    "fmedian3": (3, lambda x, y, z: np.median(np.stack([x, y, z]), axis=0), [(-3, 3)] * 3),
    "median3": (3, lambda x, y, z: np.median(np.stack([x, y, z]), axis=0), [(-3, 3)] * 3),
    "clamp": (3, lambda x, lo, hi: np.minimum(np.maximum(x, lo), hi), [(-3, 3), (-2, -1), (1, 2)]),
    "mix": (3, lambda x, y, a: x + (y - x) * a, [(-3, 3), (-3, 3), (0, 1)]),
    "smoothstep": (3, lambda e0, e1, x: (lambda t: t * t * (3 - 2 * t))(np.clip((x - e0) / (e1 - e0), 0, 1)),
                   [(-2, -0.5), (0.5, 2), (-3, 3)]),
}


def _math_source():
    lines = [PRELUDE]
    for name, (ar, _, _) in MATH.items():
        p = ", ".join(f"const float *x{k}" for k in range(ar))
        hp = ", ".join(f"const half *h{k}" for k in range(ar))
        va = ", ".join(f"ld<float4>(x{k} + i)" for k in range(ar))
        sa = ", ".join(f"x{k}[i]" for k in range(ar))
        ha = ", ".join(f"ld<half4>(h{k} + i)" for k in range(ar))
        hs = ", ".join(f"h{k}[i]" for k in range(ar))
        lines.append(
            f"EXPORT void m_{name}({p}, {hp}, float *o, half *ho, int n) {{\n"
            f"  for (int i = 0; i < n; i += 4) {{ st(o + i, {name}({va})); st(ho + i, {name}({ha})); }}\n"
            f"  for (int i = 0; i < n; ++i) {{ o[n + i] = {name}({sa}); ho[n + i] = {name}({hs}); }}\n}}")
    lines.append(r"""
// Vector/scalar mixes MSL accepts (OpenCL-style broadcast forms).
EXPORT void m_mixed(const float *x, float *o) {
  Out put{o};
  float4 v = ld<float4>(x);
  half4 h = half4(v);
  put(max(v, 0.5f)); put(min(v, 0)); put(clamp(v, -0.5f, 0.5)); put(mix(v, -v, 0.25f));
  put(step(0.1f, v)); put(smoothstep(-1.0f, 1.0f, v)); put(fmax(v, 0.0f)); put(float4(clamp(h, 0.0h, 1.0h)));
  put(clamp(x[0], 0.0, 1.0)); put(max(x[1], 0.0)); put(float4(max(h, 0.25f)));
  packed_float4 p = v;
  put(max(p, v)); put(sin(p)); put(dot(p, v));
  // A scalar in any argument position converts to the call's vector type.
  put(fmin(1, v)); put(fmax(0, fmin(1, v * 0.5f + 0.5f))); put(max(0.25f, v)); put(pow(2.0f, v));
  put(fma(v, 2.0f, 1)); put(clamp(0.5f, v, 1.0f)); put(mix(0.0f, v, 0.5f)); put(float4(min(3, int4(1, 5, -2, 3))));
  // Explicit element-type conversions from packed vectors, and between half and bfloat.
  packed_char4 pc(-3, 0, 5, 127);
  put(float4(pc)); put(float2(packed_uchar2(200, 7)));
  put(float4(half4(bfloat4(v)))); put(float4(bfloat4(half4(v)))); put(float4(bfloat4(h.x)));
  put(float2(half2x2(matrix<bfloat, 2, 2>(bfloat2(v.xy), bfloat2(v.zw)))[1]));
  // A matrix divided by a scalar, element by element.
  float2x2 md = float2x2(v.xy, v.zw) / 4.0f;
  md /= 0.5f;
  put(md[0]); put(md[1]);
}
EXPORT void m_out(const float *x, float *o, int *io) {
  Out put{o};
  for (int i = 0; i < 8; i += 4) {
    float4 v = ld<float4>(x + i), c, ip;
    int4 e;
    put(sincos(v, c)); put(c);
    put(frexp(v, e)); st(io + i, e);
    put(modf(v, ip)); put(ip);
    st(io + 8 + i, ilogb(v));
    put(ldexp(v, int4(1, -2, 3, 0))); put(ldexp(v, 2));
    float s = x[i], cs, ips;
    int es;
    put(sincos(s, cs)); put(cs); put(frexp(s, es)); io[16 + i / 4] = es; put(modf(s, ips)); put(ips);
    half hc;
    put((float)sincos((half)s, hc)); put((float)hc);
  }
}
EXPORT void m_next(const float *x, const float *y, float *o, half *ho, int n) {
  for (int i = 0; i < n; i += 4) {
    st(o + i, nextafter(ld<float4>(x + i), ld<float4>(y + i)));
    st(ho + i, nextafter(half4(ld<float4>(x + i)), half4(ld<float4>(y + i))));
  }
}
EXPORT void m_class(const float *x, uchar *o, int n) {
  for (int i = 0; i < n; i += 4) {
    float4 v = ld<float4>(x + i);
    half4 h = half4(v);
    st(o + 8 * i, isnan(v)); st(o + 8 * i + 4, isinf(v)); st(o + 8 * i + 8, isfinite(v));
    st(o + 8 * i + 12, isnormal(v)); st(o + 8 * i + 16, signbit(v)); st(o + 8 * i + 20, isnormal(h));
    st(o + 8 * i + 24, isunordered(v, v.yxwz)); st(o + 8 * i + 28, bool4(all(v > 0), any(v > 0), isnan(v.x), isnormal(h.y)));
  }
}
EXPORT int m_geo(const float *x, float *o) {
  Out put{o};
  float4 a = ld<float4>(x), b = ld<float4>(x + 4);
  float3 p = a.xyz, q = b.xyz, n = normalize(b.yzx);
  put(dot(a, b)); put(length(a)); put(length_squared(a)); put(distance(a, b)); put(distance_squared(a, b));
  put(normalize(a)); put(cross(p, q)); put(reflect(p, n)); put(refract(p, n, 0.7f)); put(refract(p, n, 3.0f));
  put(faceforward(p, q, n)); put(faceforward(p, q, -n));
  put((float)dot(half3(p), half3(q))); put(float3(normalize(half3(p))));
  put(select(a, b, a < b)); put(select(x[0], x[1], true));
  return put.k;
}
EXPORT int m_pack(const float *x, uint *u, float *o) {
  Out put{o};
  float4 v = ld<float4>(x);
  u[0] = pack_float_to_unorm4x8(v); u[1] = pack_float_to_snorm4x8(v); u[2] = pack_float_to_unorm2x16(v.xy);
  u[3] = pack_float_to_snorm2x16(v.zw); u[4] = pack_float_to_unorm10a2(v); u[5] = pack_float_to_unorm565(v.xyz);
  u[6] = pack_half_to_unorm4x8(half4(v));
  put(unpack_unorm4x8_to_float(u[0])); put(unpack_snorm4x8_to_float(u[1])); put(unpack_unorm2x16_to_float(u[2]));
  put(unpack_snorm2x16_to_float(u[3])); put(unpack_unorm10a2_to_float(u[4])); put(unpack_unorm565_to_float((ushort)u[5]));
  put(float4(unpack_unorm4x8_to_half(u[6])));
  return put.k;
}
EXPORT void m_precise(const float *x, float *o) {
  float4 v = ld<float4>(x);
  st(o, precise::sin(v) - metal::sin(v));
  st(o + 4, fast::exp(v) - exp(v));
  o[8] = precise::clamp(x[0], 0.0f, 1.0f) - clamp(x[0], 0.0f, 1.0f);
}
""")
    return "\n".join(lines)


# ------------------------------------------------------------- integer source
INT_TYPES = {  # name: (bits, signed, numpy dtype)
    "char": (8, True, np.int8), "uchar": (8, False, np.uint8), "short": (16, True, np.int16),
    "ushort": (16, False, np.uint16), "int": (32, True, np.int32), "uint": (32, False, np.uint32),
    "long": (64, True, np.int64), "ulong": (64, False, np.uint64),
}
INT_FUNCS = {  # name: arity
    "abs": 1, "clz": 1, "ctz": 1, "popcount": 1, "reverse_bits": 1,
    "absdiff": 2, "addsat": 2, "subsat": 2, "hadd": 2, "rhadd": 2, "rotate": 2, "mulhi": 2, "max": 2, "min": 2,
    "madhi": 3, "madsat": 3, "clamp": 3, "max3": 3, "min3": 3, "median3": 3,
}


def _int_source():
    lines = [PRELUDE]
    for t in INT_TYPES:
        for name, ar in INT_FUNCS.items():
            p = ", ".join(f"const {t} *x{k}" for k in range(ar))
            va = ", ".join(f"ld<{t}4>(x{k} + i)" for k in range(ar))
            sa = ", ".join(f"x{k}[i]" for k in range(ar))
            lines.append(
                f"EXPORT void i_{name}_{t}({p}, {t} *o, int n) {{\n"
                f"  for (int i = 0; i < n; i += 4) st(o + i, {name}({va}));\n"
                f"  for (int i = 0; i < n; ++i) o[n + i] = {name}({sa});\n}}")
        lines.append(
            f"EXPORT void i_bits_{t}(const {t} *x, const {t} *y, const uint *off, const uint *bits, {t} *o, int n) {{\n"
            f"  for (int i = 0; i < n; ++i) {{\n"
            f"    o[i] = extract_bits(x[i], off[i], bits[i]);\n"
            f"    o[n + i] = insert_bits(x[i], y[i], off[i], bits[i]);\n"
            f"    o[2 * n + i] = extract_bits({t}2(x[i]), off[i], bits[i]).y;\n"
            f"    o[3 * n + i] = insert_bits({t}4(x[i]), {t}4(y[i]), off[i], bits[i]).w;\n  }}\n}}")
    lines.append(r"""
EXPORT void i_24(const int *a, const int *b, const int *c, int *o, uint *uo, int n) {
  for (int i = 0; i < n; i += 4) {
    int4 x = ld<int4>(a + i), y = ld<int4>(b + i), z = ld<int4>(c + i);
    st(o + i, mul24(x, y));
    st(o + n + i, mad24(x, y, z));
    st(uo + i, mul24(uint4(x), uint4(y)));
  }
  for (int i = 0; i < n; ++i) o[2 * n + i] = mad24(a[i], b[i], c[i]);
}
""")
    return "\n".join(lines)


# -------------------------------------------------------- expected failures
FAIL_SNIPPETS = {
    "component_beyond_n": "float2 v = 1; float f = v.z; (void)f;",
    "swizzle_beyond_n": "float2 v = 1; float2 w = v.xz; (void)w;",
    "duplicate_write": "float4 v = 1; v.xx = float2(1, 2);",
    "mixed_element_types": "float4 a = 1; int4 b = 1; auto c = a + b; (void)c;",
    "implicit_vector_conversion": "float4 a = int4(1); (void)a;",
    "wrong_component_count": "float3 a = float4(1); (void)a;",
    "as_type_size_mismatch": "float f = as_type<float>(short(1)); (void)f;",
    "ambiguous_half_float_max": "half h = 1; auto m = max(h, 1.0f); (void)m;",
    "implicit_packed_element_conversion": "packed_char4 p(1, 2, 3, 4); float4 a = p; (void)a;",
}
OK_SNIPPET = "float2 v = 1; float f = v.y; float2 w = v.yx; float4 u = float4(w, f, 1); (void)u;"


def _cmd(src, out, link):
    if link:
        head = [TC.path, "c++", "-nostdlib++"] if TC.kind == "zig" else [TC.path]
        return [*head, *FLAGS, "-shared", src, "-o", out]
    return [*([TC.path, "clang"] if TC.kind == "zig" else [TC.path]), *FLAGS, "-fsyntax-only", src]


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    d = tmp_path_factory.mktemp("mkhdr")
    jobs = {}
    for name, src in (("core", CORE), ("math", _math_source()), ("int", _int_source())):
        (d / f"{name}.cpp").write_text(src)
        jobs[name] = subprocess.Popen(_cmd(str(d / f"{name}.cpp"), str(d / f"lib{name}.so"), True),
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    snippets = dict(FAIL_SNIPPETS, ok=OK_SNIPPET)
    for name, body in snippets.items():
        (d / f"f_{name}.cpp").write_text(f"#include <metal_stdlib>\nusing namespace metal;\nvoid f() {{ {body} }}\n")
        jobs["f_" + name] = subprocess.Popen(_cmd(str(d / f"f_{name}.cpp"), None, False),
                                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    res = {}
    for name, p in jobs.items():
        out, _ = p.communicate(timeout=300)
        res[name] = (p.returncode, out)
    libs = {}
    for name in ("core", "math", "int"):
        rc, out = res[name]
        assert rc == 0, f"{name} failed to compile:\n{out[:4000]}"
        assert "warning" not in out, out[:4000]
        libs[name] = ctypes.CDLL(str(d / f"lib{name}.so"))
    return libs, res


def _ptr(a):
    return ctypes.c_void_p(a.ctypes.data)


def call(lib, fname, *args):
    conv = [_ptr(a) if isinstance(a, np.ndarray) else ctypes.c_int(a) for a in args]
    return getattr(lib, fname)(*conv)


@pytest.fixture
def rng():
    return np.random.default_rng(RNG_SEED)


def bf16_bits(f32):
    """Round float32 values to bfloat16 (nearest even), return the bits."""
    b = np.asarray(f32, np.float32).view(np.uint32).astype(np.uint64)
    return ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(np.uint16)


def bf16_value(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32)


# ===================================================================== tests
def test_layout(build):
    libs, _ = build
    o = np.zeros(2 * len(LAYOUT_TYPES), np.int64)
    call(libs["core"], "layout", o)
    got = {t: (o[2 * i], o[2 * i + 1]) for i, (t, _, _) in enumerate(LAYOUT_TYPES)}
    want = {t: (s, a) for t, s, a in LAYOUT_TYPES}
    assert got == want


def test_constructors_and_swizzles(build, rng):
    libs, _ = build
    inp = rng.uniform(-10, 10, 8).astype(np.float32)
    o = np.zeros(256, np.float32)
    k = call(libs["core"], "ctor_swizzle", inp, o)
    a0, a1, a2, a3, s, t = [float(v) for v in inp[:6]]
    a = [a0, a1, a2, a3]
    exp = []
    exp += [a0, a1, s, t] + [s] * 4 + [1, 2, 3.5, 4] + [a2, a3, a0, a1] + [a0, a1, a2, s] + [s, a1, a2, a3]
    exp += [s, a3, a0] + [a1, t]
    exp += [a2, a1, a0] + [a3, a2, a1, a0] + [a0, a0, a1, a1] + [a2, a1, a0, a3] + [a0, a3] + [a1] + [a1] * 4
    b = [s, t, a2, a3]
    exp += b
    b = [b[0] + 1, b[1] + 1, b[2] + 1, b[3] + 1]
    exp += b
    b = b[::-1]
    b[0], b[2] = 7, 8
    b[3] *= 2
    exp += b
    exp += [a3, 5, a1]
    b[2] = s
    exp += b
    exp += [1, 2, 3, 4] + a
    p = [a0, t, a2]
    exp += p + p[::-1]
    p = [9, p[1] + 1, 10]
    exp += p
    q = [a3, a2, a1, a0]
    exp += [q[i] + a[i] for i in range(4)] + [2 * v for v in q] + q[:2]
    exp += [float(v > s) for v in a[::-1]]
    exp += [1.5, 2, 3, 4] + [1, 2, 3, 4] + [0, 2, 0]
    exp += [-3, 7]
    assert k == len(exp)
    np.testing.assert_array_equal(o[:k], np.array(exp, np.float32))


def test_conversions(build, rng):
    libs, _ = build
    f = rng.uniform(-200, 200, 16).astype(np.float32)
    f[[1, 6, 11]] = 0.0
    f[3] = -0.75
    fo = np.zeros(48, np.float32)
    io, uo = np.zeros(16, np.int32), np.zeros(16, np.uint32)
    ho, bo = np.zeros(16, np.uint16), np.zeros(16, np.uint16)
    b8, c8 = np.zeros(16, np.uint8), np.zeros(16, np.int8)
    call(libs["core"], "convert", f, fo, io, uo, ho, bo, b8, c8)
    ti = np.trunc(f).astype(np.int32)
    np.testing.assert_array_equal(io, ti)
    np.testing.assert_array_equal(uo, ti.astype(np.int64) % 2**32)
    np.testing.assert_array_equal(ho, f.astype(np.float16).view(np.uint16))
    np.testing.assert_array_equal(bo, bf16_bits(f))
    np.testing.assert_array_equal(b8, (f != 0).astype(np.uint8))
    np.testing.assert_array_equal(c8, ((ti.astype(np.int64) + 128) % 256 - 128).astype(np.int8))
    fo = fo.reshape(4, 3, 4)
    np.testing.assert_array_equal(fo[:, 0].ravel(), (f != 0).astype(np.float32))
    np.testing.assert_array_equal(fo[:, 1].ravel(), f.astype(np.float16).astype(np.float32))
    np.testing.assert_array_equal(fo[:, 2].ravel(), ti.astype(np.float32))


def test_float_vector_ops(build, rng):
    libs, _ = build
    n = 64
    a = rng.uniform(-10, 10, n).astype(np.float32)
    b = rng.uniform(-10, 10, n).astype(np.float32)
    b[np.abs(b) < 0.1] = 1.0
    a[5], b[5] = 3.0, 3.0  # equality case
    o, m = np.zeros(8 * n, np.float32), np.zeros(8 * n, np.uint8)
    call(libs["core"], "ops_f", a, b, o, m, n)
    o, m = o.reshape(n // 4, 8, 4), m.reshape(n // 4, 8, 4)
    A, B = a.reshape(-1, 4), b.reshape(-1, 4)
    for k, r in enumerate([A + B, A - B, A * B, A / B, -A, A * 2, 3 - A, B / 4]):
        np.testing.assert_array_equal(o[:, k], r.astype(np.float32))
    for k, r in enumerate([A < B, A >= B, A == A, A != B, A > 0, ~(A < B), (A < B) & (B > 0), (A < B) | (B > 0)]):
        np.testing.assert_array_equal(m[:, k], r.astype(np.uint8))


def _wrap(x, bits, signed):
    x = np.asarray(x, dtype=object) % (1 << bits)
    if signed:
        x = np.where(x >= 1 << (bits - 1), x - (1 << bits), x)
    return x


@pytest.mark.parametrize("fname,dtype", [("ops_int32", np.int32), ("ops_uint32", np.uint32), ("ops_int8", np.int8),
                                         ("ops_uint16", np.uint16), ("ops_int64", np.int64)])
def test_integer_vector_ops(build, rng, fname, dtype):
    libs, _ = build
    info = np.iinfo(dtype)
    bits, signed = info.bits, info.min < 0
    n = 64
    a = rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)
    b = rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)
    b[b == 0] = 3
    if signed:
        b[(a == info.min) & (b == -1)] = 5
    s = rng.integers(0, bits, n).astype(dtype)
    o = np.zeros(14 * n, dtype)
    call(libs["core"], fname, a, b, s, o, n)
    o = o.reshape(n // 4, 14, 4)
    A = a.astype(object).reshape(-1, 4)
    B = b.astype(object).reshape(-1, 4)
    S = s.astype(object).reshape(-1, 4)
    q = np.vectorize(lambda x, y: abs(x) // abs(y) * (1 if (x < 0) == (y < 0) else -1))(A, B)
    ua = A % (1 << bits)
    shr = np.vectorize(lambda x, k: x >> k)(A, S)  # arithmetic for signed (Python ints)
    exp = [A + B, A - B, A * B, q, A - B * q, A & B, A | B, A ^ B, np.vectorize(lambda x, k: x << k)(ua, S),
           shr, ~A, -A, A * 3 + 1, 7 - A]
    for k, r in enumerate(exp):
        np.testing.assert_array_equal(o[:, k].astype(object), _wrap(r, bits, signed), err_msg=f"op #{k}")


def test_integer_division_edge_cases_do_not_trap(build):
    libs, _ = build
    o, uo, co = np.zeros(16, np.int32), np.zeros(4, np.uint32), np.zeros(4, np.int8)
    call(libs["core"], "div_edge", o, uo, co)
    assert (o[8:12] == np.iinfo(np.int32).min).all()
    assert (o[12:16] == 0).all()
    assert (co == -128).all()


def test_half_rounds_every_operation(build, rng):
    libs, _ = build
    n = 256
    a, b, c = (rng.uniform(-60, 60, n).astype(np.float16) for _ in range(3))
    b[np.abs(b) < 0.5] = np.float16(1.5)
    o = np.zeros(5 * n, np.float16)
    call(libs["core"], "half_ops", a, b, c, o, n)
    o = o.reshape(n // 4, 5, 4)
    A, B, C = (x.reshape(-1, 4) for x in (a, b, c))
    t1 = A + B
    t2 = t1 * C
    t3 = t2 - A
    exp = [t1, t2, t3, A / B, A * np.float16(0.1)]  # the float scalar becomes a half first
    for k, r in enumerate(exp):
        np.testing.assert_array_equal(o[:, k], r, err_msg=f"op #{k}")
    # Sequential accumulation: every += rounds to half (error grows vs float).
    x = rng.uniform(0, 4, 4000).astype(np.float16)
    out = np.zeros(5, np.float16)
    call(libs["core"], "half_sum", x, out, 4000)
    acc = np.zeros(4, np.float16)
    for i in range(0, 4000, 4):
        acc = acc + x[i:i + 4]
    np.testing.assert_array_equal(out[:4], acc)
    assert out[4] == acc[0]
    assert abs(float(acc[0]) - float(x[0::4].astype(np.float64).sum())) > 1  # rounding really happened
    e = np.zeros(7, np.float16)
    call(libs["core"], "half_edge", e)
    assert e[0] == 2048 and e[1] == 2048 and e[2] == 2052 and np.isinf(e[3])
    assert e[4] == 1.5 and e[5] == 65504 and e[6] == np.float16(math.pi)


def test_bfloat_ops(build, rng):
    libs, _ = build
    n = 64
    a = bf16_value(bf16_bits(rng.uniform(1, 2, n)))
    b = bf16_value(bf16_bits(rng.uniform(1, 2, n)))
    o = np.zeros(3 * n, np.uint16)
    call(libs["core"], "bf_ops", bf16_bits(a), bf16_bits(b), o, n)
    o = o.reshape(n // 4, 3, 4)
    A, B = a.reshape(-1, 4), b.reshape(-1, 4)
    np.testing.assert_array_equal(o[:, 0], bf16_bits(A + B))
    np.testing.assert_array_equal(o[:, 1], bf16_bits(A * B))
    np.testing.assert_array_equal(o[:, 2], bf16_bits(A / B))


def test_matrices(build, rng):
    libs, _ = build
    inp = rng.uniform(-3, 3, 40).astype(np.float32)
    o = np.zeros(256, np.float32)
    k = call(libs["core"], "mat", inp, o)
    x = inp.astype(np.float64)
    M = x[:16].reshape(4, 4).T  # column-major storage
    N = x[16:32].reshape(4, 4).T
    v = x[32:36]
    A = x[:9].reshape(3, 3).T
    M2 = x[:4].reshape(2, 2).T
    B = np.stack([v[:3], v[1:4]], axis=1)  # 3 rows x 2 columns
    C = B.T
    S = 2 * (2 * M + N * 0.5 - M + N)
    H = A.astype(np.float16).astype(np.float64)
    exp = [np.zeros(16), M @ v, v @ M, (M @ N).T.ravel(), M.ravel(), [np.linalg.det(M)], [np.linalg.det(A)],
           A @ v[:3], M2 @ v[:2], [np.linalg.det(M2)], (B @ C).T.ravel(), B @ v[:2], v[:3] @ B, S.T.ravel(),
           3 * np.eye(3).ravel(), H @ v[:3].astype(np.float16), [np.linalg.det(H)]]
    exp = np.concatenate([np.ravel(e) for e in exp])
    assert k == len(exp)
    np.testing.assert_allclose(o[:k - 4], exp[:-4], rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(o[k - 4:k], exp[-4:], rtol=2e-2, atol=5e-2)  # half matrix


def test_as_type(build, rng):
    libs, _ = build
    f = rng.uniform(-5, 5, 4).astype(np.float32)
    u = rng.integers(0, 2**32, 4, dtype=np.uint64).astype(np.uint32)
    o, fo, ho = np.zeros(8, np.uint32), np.zeros(5, np.float32), np.zeros(2, np.uint16)
    call(libs["core"], "astype", f, u, o, fo, ho)
    np.testing.assert_array_equal(o[:4], f.view(np.uint32))
    np.testing.assert_array_equal(o[4:], f.view(np.uint32))
    np.testing.assert_array_equal(fo[:4].view(np.uint32), u)
    np.testing.assert_array_equal(ho, u[:1].view(np.uint16))
    assert fo[4] == f[1]


def test_limits_and_constants(build):
    libs, _ = build
    o = np.zeros(31, np.float32)
    call(libs["core"], "limits", o)
    f32, f16 = np.finfo(np.float32), np.finfo(np.float16)
    exp = [f32.max, f32.tiny, f32.eps, 65504, f16.tiny, f16.eps, f32.max, np.float32(math.pi), np.float32(math.e),
           np.float32(math.sqrt(2)), f32.max, f32.tiny, f32.eps, 65504, f16.tiny, f16.eps, -65504, 2.0**-24,
           float(bf16_value(np.array([0x7F7F], np.uint16))[0]), 2.0**-7, np.inf, 2.0**31, 2.0**32]
    np.testing.assert_array_equal(o[:len(exp)], np.array(exp, np.float32))
    assert np.isnan(o[30])


def test_math_functions(build, rng):
    libs, _ = build
    n = 64
    for name, (ar, ref, ranges) in MATH.items():
        xs = [rng.uniform(lo, hi, n).astype(np.float32) for lo, hi in ranges]
        if name in ("round", "rint", "fract", "ceil", "floor", "trunc"):
            xs[0][:8] = [-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.0, -0.0]
        if name in ("sinpi", "cospi"):
            xs[0][:6] = [0.5, 1.0, -1.5, 2.0, 0.25, 3.5]
        hs = [x.astype(np.float16) for x in xs]
        o, ho = np.zeros(2 * n, np.float32), np.zeros(2 * n, np.float16)
        call(libs["math"], f"m_{name}", *xs, *hs, o, ho, n)
        want = ref(*[x.astype(F64) for x in xs])
        tol = dict(rtol=2e-6, atol=2e-6) if name not in ("tan", "tanpi", "exp10", "pow", "powr", "cosh", "sinh") \
            else dict(rtol=1e-5, atol=1e-5)
        if name == "fract":  # MSL clamps to the largest float below 1
            want = np.minimum(want, 1 - 2.0**-24)
        np.testing.assert_allclose(o[:n], want, **tol, err_msg=f"{name} (float4)")
        np.testing.assert_allclose(o[n:], want, **tol, err_msg=f"{name} (float)")
        hwant = ref(*[h.astype(F64) for h in hs])
        if name == "fract":
            hwant = np.minimum(hwant, 1 - 2.0**-11)
        hwant = hwant.astype(np.float16).astype(F64)  # correctly rounded result
        for part, sl in (("half4", slice(0, n)), ("half", slice(n, 2 * n))):
            got = ho[sl].astype(F64)
            np.testing.assert_allclose(got, hwant, rtol=2e-3, atol=2e-3, err_msg=f"{name} ({part})")
    # Exact cases: rounding functions are exact, sinpi/cospi exact at (half-)integers.
    x = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.0, -0.0] * 8, np.float32)
    o, ho = np.zeros(2 * n, np.float32), np.zeros(2 * n, np.float16)
    call(libs["math"], "m_round", x, x.astype(np.float16), o, ho, n)
    assert list(o[:8]) == [-3, -2, -1, 1, 2, 3, 3, 0]
    call(libs["math"], "m_rint", x, x.astype(np.float16), o, ho, n)
    assert list(o[:8]) == [-2, -2, -0, 0, 2, 2, 3, 0]
    x = np.array([0.5, 1.0, -1.5, 2.0] * 16, np.float32)
    call(libs["math"], "m_cospi", x, x.astype(np.float16), o, ho, n)
    assert list(o[:4]) == [0, -1, 0, 1]
    call(libs["math"], "m_sinpi", x, x.astype(np.float16), o, ho, n)
    assert list(o[:4]) == [1, 0, 1, 0]


def test_math_mixed_and_out_params(build, rng):
    libs, _ = build
    x = rng.uniform(-2, 2, 8).astype(np.float32)
    o = np.zeros(160, np.float32)
    call(libs["math"], "m_mixed", x, o)
    v = x[:4].astype(F64)
    h = x[:4].astype(np.float16).astype(F64)
    t = np.clip((v + 1) / 2, 0, 1)
    exp = [np.maximum(v, 0.5), np.minimum(v, 0), np.clip(v, -0.5, 0.5), v + (-v - v) * 0.25, (v >= 0.1) * 1.0,
           t * t * (3 - 2 * t), np.maximum(v, 0), np.clip(h, 0, 1), [min(max(v[0], 0), 1)], [max(v[1], 0)],
           np.maximum(h, 0.25), v, np.sin(v), [v @ v]]
    bf = bf16_value(bf16_bits(x[:4])).astype(F64)
    exp += [np.minimum(1, v), np.clip(v * 0.5 + 0.5, 0, 1), np.maximum(0.25, v), 2.0 ** v, v * 2 + 1,
            np.clip(0.5, v, 1), v * 0.5, [1, 3, -2, 3], [-3, 0, 5, 127], [200, 7],
            bf.astype(np.float16), bf16_value(bf16_bits(h.astype(np.float32))),
            [bf16_value(bf16_bits(np.float32(h[0])))] * 4, bf[2:].astype(np.float16), v / 2]
    exp = np.concatenate([np.ravel(e) for e in exp])
    np.testing.assert_allclose(o[:len(exp)], exp, rtol=1e-6, atol=1e-6)

    x = rng.uniform(-50, 50, 8).astype(np.float32)
    x[1] = 0.0
    o, io = np.zeros(128, np.float32), np.zeros(24, np.int32)
    call(libs["math"], "m_out", x, o, io)
    x64 = x.astype(F64)
    k = 0
    for i in (0, 4):
        v = x64[i:i + 4]
        m, e = np.frexp(v)
        fr, ip = np.modf(v)
        exp = [np.sin(v), np.cos(v), m, fr, ip, np.ldexp(v, [1, -2, 3, 0]), v * 4]
        s = x64[i]
        ms, es = math.frexp(s)
        exp += [[math.sin(s)], [math.cos(s)], [ms], [math.modf(s)[0]], [math.trunc(s)]]
        hs = float(np.float16(s))
        exp += [[math.sin(hs)], [math.cos(hs)]]
        exp = np.concatenate([np.ravel(q) for q in exp])
        tol = np.r_[np.full(len(exp) - 2, 2e-6), [2e-3, 2e-3]]
        assert np.all(np.abs(o[k:k + len(exp)] - exp) <= tol * (1 + np.abs(exp))), (i, o[k:k + len(exp)], exp)
        k += len(exp)
        np.testing.assert_array_equal(io[i:i + 4], e)
        ilogb = np.where(v == 0, io[8 + i:12 + i], np.floor(np.log2(np.abs(np.where(v == 0, 1, v)))))
        np.testing.assert_array_equal(io[8 + i:12 + i], ilogb)
        assert io[16 + i // 4] == es


def test_nextafter_and_classification(build, rng):
    libs, _ = build
    n = 64
    x = rng.uniform(-10, 10, n).astype(np.float32)
    y = rng.uniform(-10, 10, n).astype(np.float32)
    x[:4], y[:4] = [0.0, 1.0, -2.0, 5.0], [1.0, 1.0, -3.0, 5.0]
    o, ho = np.zeros(n, np.float32), np.zeros(n, np.float16)
    call(libs["math"], "m_next", x, y, o, ho, n)
    np.testing.assert_array_equal(o, np.nextafter(x, y))
    np.testing.assert_array_equal(ho, np.nextafter(x.astype(np.float16), y.astype(np.float16)))

    v = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-40, 3e-5, -1.0, 70000.0, 1.0, 2.0, -np.nan,
                  5e-8, 1e38, -1e-3, 0.5], np.float32)
    o = np.zeros(8 * 16, np.uint8)
    call(libs["math"], "m_class", v, o, 16)
    o = o.reshape(4, 8, 4)
    V = v.reshape(4, 4)
    with np.errstate(over="ignore"):  # 70000 and 1e38 overflow half on purpose
        h = V.astype(np.float16)
    np.testing.assert_array_equal(o[:, 0], np.isnan(V))
    np.testing.assert_array_equal(o[:, 1], np.isinf(V))
    np.testing.assert_array_equal(o[:, 2], np.isfinite(V))
    np.testing.assert_array_equal(o[:, 3], np.isfinite(V) & (np.abs(V) >= np.finfo(np.float32).tiny))
    np.testing.assert_array_equal(o[:, 4], np.signbit(V))
    np.testing.assert_array_equal(o[:, 5], np.isfinite(h) & (np.abs(h) >= np.finfo(np.float16).tiny))
    np.testing.assert_array_equal(o[:, 6], np.isnan(V) | np.isnan(V[:, [1, 0, 3, 2]]))
    np.testing.assert_array_equal(o[:, 7, 0], (V > 0).all(axis=1))
    np.testing.assert_array_equal(o[:, 7, 1], (V > 0).any(axis=1))


def test_geometric_select_pack(build, rng):
    libs, _ = build
    x = rng.uniform(-2, 2, 8).astype(np.float32)
    o = np.zeros(96, np.float32)
    k = call(libs["math"], "m_geo", x, o)
    a, b = x[:4].astype(F64), x[4:].astype(F64)
    p, q = a[:3], b[:3]
    nn = b[[1, 2, 0]] / np.linalg.norm(b[:3])

    def refract(i, n_, eta):
        d = n_ @ i
        kk = 1 - eta * eta * (1 - d * d)
        return np.zeros(3) if kk < 0 else eta * i - (eta * d + np.sqrt(kk)) * n_

    hp, hq = p.astype(np.float16).astype(F64), q.astype(np.float16).astype(F64)
    exp = [[a @ b], [np.linalg.norm(a)], [a @ a], [np.linalg.norm(a - b)], [(a - b) @ (a - b)], a / np.linalg.norm(a),
           np.cross(p, q), p - 2 * (nn @ p) * nn, refract(p, nn, 0.7), refract(p, nn, 3.0),
           p if nn @ q < 0 else -p, p if -nn @ q < 0 else -p, [hp @ hq], hp / np.linalg.norm(hp),
           np.where(a < b, b, a), [x[1]]]
    exp = np.concatenate([np.ravel(e) for e in exp])
    assert k == len(exp)
    np.testing.assert_allclose(o[:k], exp, rtol=1e-5, atol=3e-3)

    v = np.array([0.2, -0.7, 1.3, 0.5], np.float32)
    u, o = np.zeros(7, np.uint32), np.zeros(32, np.float32)
    k = call(libs["math"], "m_pack", v, u, o)
    un = np.clip(v, 0, 1)
    sn = np.clip(v, -1, 1)
    bytes_u = np.rint(un * 255).astype(np.uint32)
    bytes_s = (np.rint(sn * 127).astype(np.int32) & 0xFF).astype(np.uint32)
    assert u[0] == sum(int(c) << (8 * i) for i, c in enumerate(bytes_u))
    assert u[1] == sum(int(c) << (8 * i) for i, c in enumerate(bytes_s))
    assert u[2] == int(np.rint(un[0] * 65535)) | int(np.rint(un[1] * 65535)) << 16
    assert u[3] == (int(np.rint(sn[2] * 32767)) & 0xFFFF) | (int(np.rint(sn[3] * 32767)) & 0xFFFF) << 16
    assert u[6] == u[0]
    exp = np.concatenate([bytes_u / 255, np.maximum(-1, ((bytes_s.astype(np.int64) + 128) % 256 - 128) / 127)])
    np.testing.assert_allclose(o[:8], exp, rtol=1e-6)
    np.testing.assert_allclose(o[8:19], np.r_[un[:2], sn[2:], un[:3], np.round(un[3] * 3) / 3,
                                              un[0], un[1], un[2]], atol=2e-2)
    np.testing.assert_allclose(o[19:23], bytes_u / 255, atol=1e-3)
    assert k == 23

    o = np.zeros(9, np.float32)
    call(libs["math"], "m_precise", x, o)
    assert np.all(o == 0)


def _int_ref(name, bits, signed, *args):
    mask = (1 << bits) - 1
    lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, mask)

    def u(v):
        return v & mask

    def one(*a):
        x = a[0]
        if name == "abs":
            return abs(x)
        if name == "clz":
            return bits - u(x).bit_length()
        if name == "ctz":
            return bits if u(x) == 0 else (u(x) & -u(x)).bit_length() - 1
        if name == "popcount":
            return bin(u(x)).count("1")
        if name == "reverse_bits":
            return int(format(u(x), f"0{bits}b")[::-1], 2)
        y = a[1]
        if name == "absdiff":
            return abs(x - y)
        if name == "addsat":
            return min(max(x + y, lo), hi)
        if name == "subsat":
            return min(max(x - y, lo), hi)
        if name == "hadd":
            return (x + y) >> 1
        if name == "rhadd":
            return (x + y + 1) >> 1
        if name == "rotate":
            r = u(y) % bits
            return ((u(x) << r) | (u(x) >> (bits - r))) & mask
        if name == "mulhi":
            return (x * y) >> bits
        if name == "max":
            return max(x, y)
        if name == "min":
            return min(x, y)
        z = a[2]
        if name == "madhi":
            return ((x * y) >> bits) + z
        if name == "madsat":
            return min(max(x * y + z, lo), hi)
        if name == "clamp":
            return min(max(x, y), z)
        if name == "max3":
            return max(x, y, z)
        if name == "min3":
            return min(x, y, z)
        if name == "median3":
            return sorted([x, y, z])[1]
        raise KeyError(name)

    return _wrap([one(*t) for t in zip(*[list(map(int, a)) for a in args])], bits, signed)


def test_integer_functions(build, rng):
    libs, _ = build
    n = 32
    for t, (bits, signed, dt) in INT_TYPES.items():
        info = np.iinfo(dt)
        for name, ar in INT_FUNCS.items():
            xs = [rng.integers(info.min, info.max, n, dtype=dt, endpoint=True) for _ in range(ar)]
            xs[0][:4] = [0, info.max, info.min, 1]
            if name == "clamp":  # needs lo <= hi
                xs[1], xs[2] = np.minimum(xs[1], xs[2]), np.maximum(xs[1], xs[2])
            o = np.zeros(2 * n, dt)
            call(libs["int"], f"i_{name}_{t}", *xs, o, n)
            want = _int_ref(name, bits, signed, *xs).astype(object)
            np.testing.assert_array_equal(o[:n].astype(object), want, err_msg=f"{name}({t}4)")
            np.testing.assert_array_equal(o[n:].astype(object), want, err_msg=f"{name}({t})")
        # extract_bits / insert_bits with random fields (offset + bits <= width)
        x = rng.integers(info.min, info.max, n, dtype=dt, endpoint=True)
        y = rng.integers(info.min, info.max, n, dtype=dt, endpoint=True)
        nb = rng.integers(0, bits + 1, n).astype(np.uint32)
        nb[:2] = [bits, 0]
        off = np.array([rng.integers(0, bits - b + 1) for b in nb], np.uint32)
        o = np.zeros(4 * n, dt)
        call(libs["int"], f"i_bits_{t}", x, y, off, nb, o, n)
        ext, ins = [], []
        for xi, yi, oi, bi in zip(map(int, x), map(int, y), map(int, off), map(int, nb)):
            fm = (1 << bi) - 1
            f = ((xi & ((1 << bits) - 1)) >> oi) & fm
            if signed and bi and f >> (bi - 1):
                f -= 1 << bi
            ext.append(f)
            ins.append((xi & ~(fm << oi)) | ((yi << oi) & (fm << oi)))
        ext, ins = _wrap(ext, bits, signed), _wrap(ins, bits, signed)
        for k, w in enumerate([ext, ins, ext, ins]):
            np.testing.assert_array_equal(o[k * n:(k + 1) * n].astype(object), w, err_msg=f"bits #{k} ({t})")

    # 24-bit multiplies on operands that fit in 24 bits.
    a = rng.integers(-(1 << 23), 1 << 23, n, dtype=np.int32)
    b = rng.integers(-(1 << 23), 1 << 23, n, dtype=np.int32)
    c = rng.integers(-(1 << 30), 1 << 30, n, dtype=np.int32)
    o, uo = np.zeros(3 * n, np.int32), np.zeros(n, np.uint32)
    call(libs["int"], "i_24", a, b, c, o, uo, n)
    A, B, C = (v.astype(object) for v in (a, b, c))
    np.testing.assert_array_equal(o[:n].astype(object), _wrap(A * B, 32, True))
    np.testing.assert_array_equal(o[n:2 * n].astype(object), _wrap(A * B + C, 32, True))
    np.testing.assert_array_equal(o[2 * n:].astype(object), _wrap(A * B + C, 32, True))
    ua, ub = (v.astype(np.int64) & 0xFFFFFF for v in (a, b))
    np.testing.assert_array_equal(uo.astype(object), _wrap(ua.astype(object) * ub.astype(object), 32, False))


def test_expected_compile_failures(build):
    _, res = build
    rc, out = res["f_ok"]
    assert rc == 0, out
    for name in FAIL_SNIPPETS:
        rc, out = res["f_" + name]
        assert rc != 0, f"{name} should not compile"
        assert "error" in out


# -- metal::array, metal::uniform, names the standard library leaves to users ----------------

def test_array_and_uniform_types(device):
    import metalkit as mk
    lib = mk.compile("""
    #include <metal_stdlib>
    #include <metal_array>
    #include <metal_uniform>
    using namespace metal;
    array<int, 2> divmod(int a, int b) { return {a / b, a % b}; }
    kernel void k(device int* out [[buffer(0)]], constant int& n [[buffer(1)]],
                  uint i [[thread_position_in_grid]]) {
        array<int, 2> q = divmod(int(i) + 7, 3);
        const uniform<int> total = make_uniform(n);
        const uniform<int> half_total = total / make_uniform(2);  // uniform op uniform: uniform
        int mixed = half_total + int(i);                          // with a plain int: a plain int
        out[i] = q[0] * 100 + q[1] * 10 + int(q.size()) + (q.empty() ? 1000 : 0) + mixed * 10000;
    }""")
    out = np.zeros(5, np.int32)
    lib.k(out, 8)
    i = np.arange(5)
    np.testing.assert_array_equal(out, (i + 7) // 3 * 100 + (i + 7) % 3 * 10 + 2 + (4 + i) * 10000)


def test_library_may_define_trait_names_metal_lacks(device):
    # MSL's <metal_type_traits> has no is_empty or void_t: code defines its own in namespace metal.
    import metalkit as mk
    lib = mk.compile("""
    #include <metal_stdlib>
    namespace metal {
    template <typename T> struct is_empty : bool_constant<__is_empty(T)> {};
    template <typename... Ts> struct make_void { typedef void type; };
    template <typename... Ts> using void_t = typename make_void<Ts...>::type;
    }
    struct Nothing {};
    static_assert(metal::is_empty<Nothing>::value && !metal::is_empty<int>::value, "");
    static_assert(metal::is_same_v<metal::remove_addrspace_t<device float>, float>, "");
    kernel void k(device int* out [[buffer(0)]]) { out[0] = metal::is_empty<Nothing>::value; }
    """)
    out = np.zeros(1, np.int32)
    lib.k(out, grid=1)
    assert out[0] == 1
