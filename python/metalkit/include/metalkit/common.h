// MSL common functions (<metal_common>): clamp, mix, saturate, sign,
// smoothstep, step; plus the vector max/min/max3/min3/median3/clamp shared by
// floating and integer vectors. Vector forms accept a scalar for any argument:
// MSL converts scalars to vectors implicitly.
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
} // namespace __mk

// Vector max/min family (exact in the element type, so no float detour). Any
// argument may be a scalar, converted to the call's vector type as MSL does.
template <class A, class B, __mk::req<__mk::avec_call<A, B>> = 0>
__MK_F __mk::vcall_t<A, B> max(const A &x, const B &y) {
  typedef __mk::vcall_t<A, B> R;
  return R(__mk::raw, __builtin_elementwise_max(R(x).__s, R(y).__s));
}
template <class A, class B, __mk::req<__mk::avec_call<A, B>> = 0>
__MK_F __mk::vcall_t<A, B> min(const A &x, const B &y) {
  typedef __mk::vcall_t<A, B> R;
  return R(__mk::raw, __builtin_elementwise_min(R(x).__s, R(y).__s));
}
template <class A, class B, class C, __mk::req<__mk::avec_call<A, B, C>> = 0>
__MK_F __mk::vcall_t<A, B, C> clamp(const A &x, const B &lo, const C &hi) {
  typedef __mk::vcall_t<A, B, C> R;
  return R(__mk::raw, __builtin_elementwise_min(__builtin_elementwise_max(R(x).__s, R(lo).__s), R(hi).__s));
}
template <class A, class B, class C, __mk::req<__mk::avec_call<A, B, C>> = 0>
__MK_F __mk::vcall_t<A, B, C> max3(const A &x, const B &y, const C &z) {
  typedef __mk::vcall_t<A, B, C> R;
  return max(max(R(x), R(y)), R(z));
}
template <class A, class B, class C, __mk::req<__mk::avec_call<A, B, C>> = 0>
__MK_F __mk::vcall_t<A, B, C> min3(const A &x, const B &y, const C &z) {
  typedef __mk::vcall_t<A, B, C> R;
  return min(min(R(x), R(y)), R(z));
}
template <class A, class B, class C, __mk::req<__mk::avec_call<A, B, C>> = 0>
__MK_F __mk::vcall_t<A, B, C> median3(const A &x, const B &y, const C &z) {
  typedef __mk::vcall_t<A, B, C> R;
  return max(min(R(x), R(y)), min(max(R(x), R(y)), R(z)));
}

__MK_FP3_S(clamp, f_clamp)
__MK_FP1(saturate, f_saturate)
__MK_FP1(sign, f_sign)
__MK_FP3_S(mix, f_mix)
__MK_FP3_S(smoothstep, f_smoothstep)
__MK_FP2_S(step, f_step)

template <class A, class B, class C, __mk::req<__mk::fvec_call<A, B, C>> = 0>
__MK_F __mk::vcall_t<A, B, C> mix(const A &x, const B &y, const C &a) {
  typedef __mk::vcall_t<A, B, C> R;
  return __mk::fout<R>(__mk::f_mix::op<__mk::elem_t<R>>(__mk::fin(R(x)), __mk::fin(R(y)), __mk::fin(R(a))));
}
template <class A, class B, class C, __mk::req<__mk::fvec_call<A, B, C>> = 0>
__MK_F __mk::vcall_t<A, B, C> smoothstep(const A &e0, const B &e1, const C &x) {
  typedef __mk::vcall_t<A, B, C> R;
  return __mk::fout<R>(__mk::f_smoothstep::op<__mk::elem_t<R>>(__mk::fin(R(e0)), __mk::fin(R(e1)), __mk::fin(R(x))));
}
template <class A, class B, __mk::req<__mk::fvec_call<A, B>> = 0>
__MK_F __mk::vcall_t<A, B> step(const A &edge, const B &x) {
  typedef __mk::vcall_t<A, B> R;
  return __mk::fout<R>(__mk::f_step::op<__mk::elem_t<R>>(__mk::fin(R(edge)), __mk::fin(R(x))));
}
} // namespace metal
