// Apple's internal builtins that real headers call directly (MLX's bfloat math and SIMD-group
// overloads are written with them): __metal_<f>(args..., math mode) is metal::<f>(args...), the
// __metal_simd_* / __metal_quad_* functions are the SIMD-group functions of the same name (the
// caller's site carried through, so a SIMD-group still meets at one call), and the math-mode
// macros name the modes they take. Global, as compiler builtins are.
#pragma once
#pragma clang system_header
#include "math_modes.h"
#include "simd.h"

namespace metal {
namespace __mk {
enum class math_mode { precise, fast };
} // namespace __mk
} // namespace metal
#define __METAL_FAST_MATH__ ::metal::__mk::math_mode::fast
#define __METAL_PRECISE_MATH__ ::metal::__mk::math_mode::precise
#ifdef __FAST_MATH__
#define __METAL_MAYBE_FAST_MATH__ __METAL_FAST_MATH__
#else
#define __METAL_MAYBE_FAST_MATH__ __METAL_PRECISE_MATH__
#endif

#define __MK_BI1(f)                                                            \
  template <class T> __MK_F auto __metal_##f(T x, ::metal::__mk::math_mode = {}) { return ::metal::f(x); }
#define __MK_BI2(f)                                                            \
  template <class T, class U> __MK_F auto __metal_##f(T x, U y, ::metal::__mk::math_mode = {}) { \
    return ::metal::f(x, y);                                                   \
  }
#define __MK_BI3(f)                                                            \
  template <class T, class U, class V>                                         \
  __MK_F auto __metal_##f(T x, U y, V z, ::metal::__mk::math_mode = {}) { return ::metal::f(x, y, z); }
__MK_BI1(fabs) __MK_BI1(acos) __MK_BI1(acosh) __MK_BI1(asin) __MK_BI1(asinh) __MK_BI1(atan) __MK_BI1(atanh)
__MK_BI1(ceil) __MK_BI1(cos) __MK_BI1(cosh) __MK_BI1(cospi) __MK_BI1(exp) __MK_BI1(exp10) __MK_BI1(exp2)
__MK_BI1(floor) __MK_BI1(fract) __MK_BI1(log) __MK_BI1(log10) __MK_BI1(log2) __MK_BI1(rint) __MK_BI1(round)
__MK_BI1(rsqrt) __MK_BI1(sin) __MK_BI1(sinh) __MK_BI1(sinpi) __MK_BI1(sqrt) __MK_BI1(tan) __MK_BI1(tanh)
__MK_BI1(tanpi) __MK_BI1(trunc) __MK_BI1(saturate) __MK_BI1(sign)
__MK_BI2(atan2) __MK_BI2(divide) __MK_BI2(fmax) __MK_BI2(fmin) __MK_BI2(fmod) __MK_BI2(pow) __MK_BI2(powr)
__MK_BI2(nextafter) __MK_BI2(copysign) __MK_BI2(fdim) __MK_BI2(step)
__MK_BI3(fma) __MK_BI3(fmax3) __MK_BI3(fmin3) __MK_BI3(fmedian3) __MK_BI3(clamp) __MK_BI3(mix)
__MK_BI3(smoothstep)
#undef __MK_BI1
#undef __MK_BI2
#undef __MK_BI3
// frexp writes the exponent through a pointer; ldexp takes it by value.
template <class T, class E> __MK_F T __metal_frexp(T x, E *e) { return ::metal::frexp(x, *e); }
template <class T, class K> __MK_F T __metal_ldexp(T x, K k, ::metal::__mk::math_mode = {}) {
  return ::metal::ldexp(x, k);
}

// SIMD-group and quad-group functions: value, then the operands, then the caller's site.
#define __MK_BS1(f)                                                            \
  template <class T> __MK_F T __metal_##f(T data, ::metal::__mk::site s = ::metal::__mk::site::here()) { \
    return ::metal::f(data, s);                                                \
  }
#define __MK_BS2(f)                                                            \
  template <class T>                                                           \
  __MK_F T __metal_##f(T data, ushort arg, ::metal::__mk::site s = ::metal::__mk::site::here()) { \
    return ::metal::f(data, arg, s);                                           \
  }
#define __MK_BSF(f)                                                            \
  template <class T>                                                           \
  __MK_F T __metal_##f(T data, ::metal::__mk::ident<T> fill, ushort delta, ushort modulo,            \
                       ::metal::__mk::site s = ::metal::__mk::site::here()) {  \
    return ::metal::f(data, fill, delta, modulo, s);                           \
  }
// The bitwise reductions take floating values too (MLX's bfloat simd_xor passes a float, and
// Apple's compiler takes it): they combine the bits.
#define __MK_BS_BITS(f)                                                        \
  template <class T> __MK_F T __metal_##f(T data, ::metal::__mk::site s = ::metal::__mk::site::here()) { \
    if constexpr (::metal::__mk::is_fp<T>) {                                   \
      typedef ::metal::conditional_t<sizeof(T) == 4, uint, ushort> U;          \
      return __builtin_bit_cast(T, ::metal::f(__builtin_bit_cast(U, data), s)); \
    } else {                                                                   \
      return ::metal::f(data, s);                                              \
    }                                                                          \
  }
#define __MK_BS_ALL(scope)                                                     \
  __MK_BS1(scope##_sum) __MK_BS1(scope##_product) __MK_BS1(scope##_min) __MK_BS1(scope##_max)           \
  __MK_BS_BITS(scope##_and) __MK_BS_BITS(scope##_or) __MK_BS_BITS(scope##_xor) __MK_BS1(scope##_broadcast_first) \
  __MK_BS1(scope##_prefix_inclusive_sum) __MK_BS1(scope##_prefix_inclusive_product)                     \
  __MK_BS1(scope##_prefix_exclusive_sum) __MK_BS1(scope##_prefix_exclusive_product)                     \
  __MK_BS2(scope##_broadcast) __MK_BS2(scope##_shuffle) __MK_BS2(scope##_shuffle_xor)                   \
  __MK_BS2(scope##_shuffle_up) __MK_BS2(scope##_shuffle_down) __MK_BS2(scope##_shuffle_rotate_up)       \
  __MK_BS2(scope##_shuffle_rotate_down) __MK_BSF(scope##_shuffle_and_fill_up)                           \
  __MK_BSF(scope##_shuffle_and_fill_down)
__MK_BS_ALL(simd)
__MK_BS_ALL(quad)
#undef __MK_BS_ALL
#undef __MK_BS1
#undef __MK_BS2
#undef __MK_BS_BITS
#undef __MK_BSF
__MK_F bool __metal_simd_all(bool expr, ::metal::__mk::site s = ::metal::__mk::site::here()) {
  return ::metal::simd_all(expr, s);
}
__MK_F bool __metal_simd_any(bool expr, ::metal::__mk::site s = ::metal::__mk::site::here()) {
  return ::metal::simd_any(expr, s);
}
__MK_F ::metal::simd_vote __metal_simd_ballot(bool expr, ::metal::__mk::site s = ::metal::__mk::site::here()) {
  return ::metal::simd_ballot(expr, s);
}

// The SIMD width and the caller's lane, in the type of the (unused) argument.
template <class T> __MK_F T __metal_get_simdgroup_size(T) { return T(32); }
template <class T>
__MK_F T __metal_get_thread_index_in_simdgroup(T, ::metal::__mk::site s = ::metal::__mk::site::here()) {
  return T(::metal::__mk::sg_exchange(s).lane());
}
