// MSL common functions (<metal_common>): clamp, mix, saturate, sign,
// smoothstep, step; plus the vector max/min/max3/min3/median3/clamp shared by
// floating and integer vectors. Vector forms also accept a scalar where
// OpenCL/GLSL-style gentype/scalar overloads exist (clamp bounds, mix
// weight, step/smoothstep edges, max/min second operand).
#pragma once
#pragma clang system_header
#include "fpbase.h"

namespace metal {
namespace __mk {
template <class X> __MK_F X clamp01(X x) {
  return __builtin_elementwise_min(__builtin_elementwise_max(x, (X)0.0f), (X)1.0f);
}
__MK_OP1(f_saturate, clamp01(x))
// 1, -1, or x itself for +-0; NaN gives 0.
__MK_OP1(f_sign, sel(x > (X)0.0f, (X)1.0f, sel(x < (X)0.0f, (X)-1.0f, sel(x == x, x, (X)0.0f))))
__MK_OP3(f_clamp, __builtin_elementwise_min(__builtin_elementwise_max(x, y), z))
__MK_OP3(f_mix, x + (y - x) * z)
__MK_OP3(f_smoothstep, ([](X t) { return t * t * ((X)3.0f - (X)2.0f * t); }(clamp01((z - x) / (y - x)))))
__MK_OP2(f_step, sel(y < x, (X)0.0f, (X)1.0f))
// Argument i of a vector call: the vector type itself or a scalar.
template <class R, class A> constexpr bool arg_ok = vec_or_scalar<R, A>;
} // namespace __mk

// Vector max/min family (exact in the element type, so no float detour).
template <class A, class B, __mk::req<__mk::is_avec<A> && __mk::arg_ok<A, B>> = 0>
__MK_F __mk::vec_of<A> max(const A &x, const B &y) {
  typedef __mk::vec_of<A> R;
  return R(__mk::raw, __builtin_elementwise_max(R(x).__s, R(y).__s));
}
template <class A, class B, __mk::req<__mk::is_avec<A> && __mk::arg_ok<A, B>> = 0>
__MK_F __mk::vec_of<A> min(const A &x, const B &y) {
  typedef __mk::vec_of<A> R;
  return R(__mk::raw, __builtin_elementwise_min(R(x).__s, R(y).__s));
}
template <class A, class B, class C,
          __mk::req<__mk::is_avec<A> && __mk::arg_ok<A, B> && __mk::arg_ok<A, C>> = 0>
__MK_F __mk::vec_of<A> clamp(const A &x, const B &lo, const C &hi) {
  typedef __mk::vec_of<A> R;
  return R(__mk::raw, __builtin_elementwise_min(__builtin_elementwise_max(R(x).__s, R(lo).__s), R(hi).__s));
}
template <class A, class B, class C,
          __mk::req<__mk::is_avec<A> && __mk::same_vec<A, B> && __mk::same_vec<A, C>> = 0>
__MK_F __mk::vec_of<A> max3(const A &x, const B &y, const C &z) {
  return max(max(x, y), z);
}
template <class A, class B, class C,
          __mk::req<__mk::is_avec<A> && __mk::same_vec<A, B> && __mk::same_vec<A, C>> = 0>
__MK_F __mk::vec_of<A> min3(const A &x, const B &y, const C &z) {
  return min(min(x, y), z);
}
template <class A, class B, class C,
          __mk::req<__mk::is_avec<A> && __mk::same_vec<A, B> && __mk::same_vec<A, C>> = 0>
__MK_F __mk::vec_of<A> median3(const A &x, const B &y, const C &z) {
  return max(min(x, y), min(max(x, y), z));
}

__MK_FPS(__MK_FP3_S, clamp, f_clamp)
__MK_FP1(saturate, f_saturate)
__MK_FP1(sign, f_sign)
__MK_FPS(__MK_FP3_S, mix, f_mix)
__MK_FPS(__MK_FP3_S, smoothstep, f_smoothstep)
__MK_FPS(__MK_FP2_S, step, f_step)

template <class A, class B, class C,
          __mk::req<__mk::is_fvec<A> && __mk::same_vec<A, B> && __mk::arg_ok<A, C>> = 0>
__MK_F __mk::vec_of<A> mix(const A &x, const B &y, const C &a) {
  typedef __mk::vec_of<A> R;
  return __mk::fout<R>(__mk::f_mix::op<__mk::elem_t<A>>(__mk::fin(x), __mk::fin(y), __mk::fin(R(a))));
}
template <class A, class B, class C,
          __mk::req<__mk::is_fvec<C> && __mk::arg_ok<C, A> && __mk::arg_ok<C, B>> = 0>
__MK_F __mk::vec_of<C> smoothstep(const A &e0, const B &e1, const C &x) {
  typedef __mk::vec_of<C> R;
  return __mk::fout<R>(__mk::f_smoothstep::op<__mk::elem_t<C>>(__mk::fin(R(e0)), __mk::fin(R(e1)), __mk::fin(x)));
}
template <class A, class B, __mk::req<__mk::is_fvec<B> && __mk::arg_ok<B, A>> = 0>
__MK_F __mk::vec_of<B> step(const A &edge, const B &x) {
  typedef __mk::vec_of<B> R;
  return __mk::fout<R>(__mk::f_step::op<__mk::elem_t<B>>(__mk::fin(R(edge)), __mk::fin(x)));
}
} // namespace metal
