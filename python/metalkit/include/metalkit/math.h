// MSL math functions (<metal_math>) for float, half and bfloat scalars and
// vectors.
#pragma once
#pragma clang system_header
#include "fpbase.h"
#include "limits.h"

namespace metal {
namespace __mk {
// Largest value below 1 in E (fract's upper bound), as float.
template <class E> constexpr float below_one = 1.0f - (float)numeric_limits<E>::epsilon() * 0.5f;

__MK_OP1(f_abs, __builtin_elementwise_abs(x))
__MK_OP1(f_ceil, __builtin_elementwise_ceil(x))
__MK_OP1(f_floor, __builtin_elementwise_floor(x))
__MK_OP1(f_rint, __builtin_elementwise_roundeven(x))
__MK_OP1(f_round, __builtin_elementwise_round(x))
__MK_OP1(f_trunc, __builtin_elementwise_trunc(x))
__MK_OP1(f_fract, __builtin_elementwise_min(x - __builtin_elementwise_floor(x), (X)below_one<E>))
__MK_OP1(f_sqrt, __builtin_elementwise_sqrt(x))
__MK_OP1(f_rsqrt, (X)1.0f / __builtin_elementwise_sqrt(x))
__MK_OP1(f_exp, __builtin_elementwise_exp(x))
__MK_OP1(f_exp2, __builtin_elementwise_exp2(x))
__MK_OP1(f_exp10, __builtin_elementwise_exp10(x))
__MK_OP1(f_log, __builtin_elementwise_log(x))
__MK_OP1(f_log2, __builtin_elementwise_log2(x))
__MK_OP1(f_log10, __builtin_elementwise_log10(x))
__MK_OP1(f_sin, __builtin_elementwise_sin(x))
__MK_OP1(f_cos, __builtin_elementwise_cos(x))
__MK_OP1(f_tan, __builtin_elementwise_tan(x))
__MK_OP1(f_asin, __builtin_elementwise_asin(x))
__MK_OP1(f_acos, __builtin_elementwise_acos(x))
__MK_OP1(f_atan, __builtin_elementwise_atan(x))
__MK_OP1(f_sinh, __builtin_elementwise_sinh(x))
__MK_OP1(f_cosh, __builtin_elementwise_cosh(x))
__MK_OP1(f_tanh, __builtin_elementwise_tanh(x))
__MK_OP1(f_asinh, lanes(x, [](float v) { return __builtin_asinhf(v); }))
__MK_OP1(f_acosh, lanes(x, [](float v) { return __builtin_acoshf(v); }))
__MK_OP1(f_atanh, lanes(x, [](float v) { return __builtin_atanhf(v); }))

// sinpi/cospi/tanpi: reduce to r = x - rint(x) in [-1/2, 1/2] (exact) so
// that integers and half-integers give exact zeros; (-1)^n fixes the sign.
struct f_sinpi {
  template <class E, class X> static __MK_F X op(X x) {
    X n = __builtin_elementwise_roundeven(x), r = x - n;
    X s = __builtin_elementwise_sin(r * (X)3.14159265358979323846f);
    return sel(__builtin_elementwise_fmod(n, (X)2.0f) != 0, -s, s);
  }
};
struct f_cospi {
  template <class E, class X> static __MK_F X op(X x) {
    X n = __builtin_elementwise_roundeven(x), r = x - n;
    X c = __builtin_elementwise_sin(((X)0.5f - __builtin_elementwise_abs(r)) * (X)3.14159265358979323846f);
    return sel(__builtin_elementwise_fmod(n, (X)2.0f) != 0, -c, c);
  }
};
struct f_tanpi {
  template <class E, class X> static __MK_F X op(X x) {
    X r = x - __builtin_elementwise_roundeven(x);
    X s = __builtin_elementwise_sin(r * (X)3.14159265358979323846f);
    X c = __builtin_elementwise_sin(((X)0.5f - __builtin_elementwise_abs(r)) * (X)3.14159265358979323846f);
    return s / c;
  }
};

__MK_OP2(f_atan2, __builtin_elementwise_atan2(x, y))
__MK_OP2(f_fmod, __builtin_elementwise_fmod(x, y))
__MK_OP2(f_pow, __builtin_elementwise_pow(x, y))
// powr is only defined for x >= 0.
__MK_OP2(f_powr, sel(x < (X)0.0f, (X)__builtin_nanf(""), __builtin_elementwise_pow(x, y)))
__MK_OP2(f_copysign, __builtin_elementwise_copysign(x, y))
__MK_OP2(f_divide, x / y)
__MK_OP2(f_fmax, __builtin_elementwise_max(x, y))
__MK_OP2(f_fmin, __builtin_elementwise_min(x, y))
// x - y if x > y, +0 otherwise; NaN in, NaN out.
__MK_OP2(f_fdim, sel((x != x) | (y != y), x + y, sel(x > y, x - y, (X)0.0f)))
__MK_OP3(f_fma, __builtin_elementwise_fma(x, y, z))
__MK_OP3(f_fmax3, __builtin_elementwise_max(__builtin_elementwise_max(x, y), z))
__MK_OP3(f_fmin3, __builtin_elementwise_min(__builtin_elementwise_min(x, y), z))
__MK_OP3(f_fmedian3, __builtin_elementwise_max(__builtin_elementwise_min(x, y),
                                               __builtin_elementwise_min(__builtin_elementwise_max(x, y), z)))

// nextafter must step in the precision of E, so work on E's bit pattern.
template <class E> __MK_F float next_lane(float x, float y) {
  typedef conditional_t<sizeof(E) == 4, unsigned int, unsigned short> U;
  if (x != x || y != y) return x + y;
  if (x == y) return y;
  if (x == 0.0f) return __builtin_copysignf((float)numeric_limits<E>::denorm_min(), y);
  U b = __builtin_bit_cast(U, (E)x);
  b = ((x < y) == (x > 0.0f)) ? (U)(b + 1) : (U)(b - 1);
  return (float)__builtin_bit_cast(E, b);
}
struct f_nextafter {
  template <class E, class X> static __MK_F X op(X x, X y) { return lanes2(x, y, next_lane<E>); }
};

// modf: fractional part with x's sign; +-inf gives +-0.
struct f_modf_frac {
  template <class E, class X> static __MK_F X op(X x, X i) {
    X f = sel(__builtin_elementwise_abs(x) == (X)__builtin_inff(), (X)0.0f, x - i);
    return __builtin_elementwise_copysign(f, x);
  }
};
} // namespace __mk

__MK_FP1(fabs, f_abs)
__MK_FP1(abs, f_abs)
__MK_FP1(ceil, f_ceil)
__MK_FP1(floor, f_floor)
__MK_FP1(rint, f_rint)
__MK_FP1(round, f_round)
__MK_FP1(trunc, f_trunc)
__MK_FP1(fract, f_fract)
__MK_FP1(sqrt, f_sqrt)
__MK_FP1(rsqrt, f_rsqrt)
__MK_FP1(exp, f_exp)
__MK_FP1(exp2, f_exp2)
__MK_FP1(exp10, f_exp10)
__MK_FP1(log, f_log)
__MK_FP1(log2, f_log2)
__MK_FP1(log10, f_log10)
__MK_FP1(sin, f_sin)
__MK_FP1(cos, f_cos)
__MK_FP1(tan, f_tan)
__MK_FP1(asin, f_asin)
__MK_FP1(acos, f_acos)
__MK_FP1(atan, f_atan)
__MK_FP1(sinh, f_sinh)
__MK_FP1(cosh, f_cosh)
__MK_FP1(tanh, f_tanh)
__MK_FP1(asinh, f_asinh)
__MK_FP1(acosh, f_acosh)
__MK_FP1(atanh, f_atanh)
__MK_FP1(sinpi, f_sinpi)
__MK_FP1(cospi, f_cospi)
__MK_FP1(tanpi, f_tanpi)
__MK_FP2(atan2, f_atan2)
__MK_FP2(fmod, f_fmod)
__MK_FP2(pow, f_pow)
__MK_FP2(powr, f_powr)
__MK_FP2(copysign, f_copysign)
__MK_FP2(divide, f_divide)
__MK_FP2(fdim, f_fdim)
__MK_FP2(nextafter, f_nextafter)
__MK_FP2(fmax, f_fmax)
__MK_FP2(fmin, f_fmin)
__MK_FP2_S(max, f_fmax)
__MK_FP2_S(min, f_fmin)
__MK_FP3(fma, f_fma)
__MK_FP3(fmax3, f_fmax3)
__MK_FP3(fmin3, f_fmin3)
__MK_FP3(fmedian3, f_fmedian3)
__MK_FP3_S(max3, f_fmax3)
__MK_FP3_S(min3, f_fmin3)
__MK_FP3_S(median3, f_fmedian3)

// Functions with output arguments or integer operands (templates, as the others).
template <class T, __MK_FSC(T)> __MK_F T sincos(T x, T &cosval) {
  cosval = (T)__builtin_cosf((float)x);
  return (T)__builtin_sinf((float)x);
}
template <class T, __MK_FSC(T)> __MK_F T frexp(T x, int &e) { return (T)__builtin_frexpf((float)x, &e); }
template <class T, __MK_FSC(T)> __MK_F T modf(T x, T &intval) {
  float i = __builtin_truncf((float)x);
  intval = (T)i;
  return (T)__mk::f_modf_frac::op<T>((float)x, i);
}
template <class T, __MK_FSC(T)> __MK_F int ilogb(T x) { return __builtin_ilogbf((float)x); }
template <class T, class K, __mk::req<__mk::fscalar_call<T> && __mk::is_int<K>> = 0>
__MK_F T ldexp(T x, K k) { return (T)__builtin_ldexpf((float)x, (int)k); }

template <class T, int N, __mk::req<__mk::is_fp<T>> = 0>
__MK_F vec<T, N> sincos(const vec<T, N> &x, vec<T, N> &cosval) {
  auto f = __mk::fin(x);
  cosval = __mk::fout<vec<T, N>>(__builtin_elementwise_cos(f));
  return __mk::fout<vec<T, N>>(__builtin_elementwise_sin(f));
}
template <class T, int N, __mk::req<__mk::is_fp<T>> = 0>
__MK_F vec<T, N> frexp(const vec<T, N> &x, vec<int, N> &e) {
  vec<float, N> f(x);
  for (int i = 0; i < N; ++i) f[i] = __builtin_frexpf(f[i], &e[i]);
  return vec<T, N>(f);
}
template <class T, int N, __mk::req<__mk::is_fp<T>> = 0>
__MK_F vec<T, N> modf(const vec<T, N> &x, vec<T, N> &intval) {
  auto f = __mk::fin(x), i = __builtin_elementwise_trunc(f);
  intval = __mk::fout<vec<T, N>>(i);
  return __mk::fout<vec<T, N>>(__mk::f_modf_frac::op<T>(f, i));
}
template <class V, __mk::req<__mk::is_fvec<V>> = 0> __MK_F __mk::iv<V> ilogb(const V &x) {
  __mk::fv<V> f = __mk::fv<V>(__mk::vec_of<V>(x));
  __mk::iv<V> r;
  for (int i = 0; i < __mk::vinfo<V>::n; ++i) r[i] = __builtin_ilogbf(f[i]);
  return r;
}
template <class V, class K,
          __mk::req<__mk::is_fvec<V> && (__is_same(K, __mk::iv<V>) || __is_integral(K))> = 0>
__MK_F __mk::vec_of<V> ldexp(const V &x, const K &k) {
  return __mk::fout<__mk::vec_of<V>>(__builtin_elementwise_ldexp(__mk::fin(x), __mk::iv<V>(k).__s));
}

} // namespace metal
