// MSL relational functions (<metal_relational>).
#pragma once
#pragma clang system_header
#include "fpbase.h"
#include "limits.h"

namespace metal {
namespace __mk {
// Classification of float data holding values of type E (exact after
// widening, but "normal" must use E's range).
struct r_isnan { template <class E, class X> static __MK_F auto op(X x) { return x != x; } };
struct r_isinf {
  template <class E, class X> static __MK_F auto op(X x) { return __builtin_elementwise_abs(x) == (X)__builtin_inff(); }
};
struct r_isfinite {
  template <class E, class X> static __MK_F auto op(X x) { return __builtin_elementwise_abs(x) < (X)__builtin_inff(); }
};
struct r_isnormal {
  template <class E, class X> static __MK_F auto op(X x) {
    X a = __builtin_elementwise_abs(x);
    return (a >= (X)(float)numeric_limits<E>::min()) & (a < (X)__builtin_inff());
  }
};
struct r_signbit {
  template <class E, class X> static __MK_F auto op(X x) {
    return __builtin_elementwise_copysign((X)1.0f, x) < (X)0.0f;
  }
};
struct r_isordered { template <class E, class X> static __MK_F auto op(X x, X y) { return (x == x) & (y == y); } };
struct r_isunordered { template <class E, class X> static __MK_F auto op(X x, X y) { return (x != x) | (y != y); } };
} // namespace __mk

__MK_FPB1(isnan, r_isnan)
__MK_FPB1(isinf, r_isinf)
__MK_FPB1(isfinite, r_isfinite)
__MK_FPB1(isnormal, r_isnormal)
__MK_FPB1(signbit, r_signbit)
__MK_FPB2(isordered, r_isordered)
__MK_FPB2(isunordered, r_isunordered)

template <class T, __mk::req<__is_same(T, bool)> = 0> __MK_F bool all(T b) { return b; }
template <class T, __mk::req<__is_same(T, bool)> = 0> __MK_F bool any(T b) { return b; }
template <class V, __mk::req<__mk::is_bvec<V>> = 0> __MK_F bool all(const V &b) {
  __mk::vec_of<V> v(b);
  bool r = true;
  for (int i = 0; i < __mk::vinfo<V>::n; ++i) r &= v[i];
  return r;
}
template <class V, __mk::req<__mk::is_bvec<V>> = 0> __MK_F bool any(const V &b) {
  __mk::vec_of<V> v(b);
  bool r = false;
  for (int i = 0; i < __mk::vinfo<V>::n; ++i) r |= v[i];
  return r;
}

// select(a, b, c): c ? b : a, per component for vectors.
template <class T, __mk::req<__is_arithmetic(T)> = 0> __MK_F T select(T a, T b, bool c) { return c ? b : a; }
template <class A, class B, class C,
          __mk::req<__mk::vinfo<A>::is_vec && __mk::same_vec<A, B> && __mk::is_bvec<C> &&
                    __mk::vinfo<A>::n == __mk::vinfo<C>::n> = 0>
__MK_F __mk::vec_of<A> select(const A &a, const B &b, const C &c) {
  typedef __mk::vec_of<A> R;
  typedef __mk::elem_t<A> T;
  typedef conditional_t<sizeof(T) == 1, signed char,
                        conditional_t<sizeof(T) == 2, short, conditional_t<sizeof(T) == 4, int, long>>>
      M;
  // Widen the 0/1 bool lanes to a mask of the element width for the blend.
  auto m = __builtin_convertvector(__mk::vec_of<C>(c).__s, __mk::ev<M, __mk::vinfo<A>::n>) != 0;
  return R(__mk::raw, m ? R(b).__s : R(a).__s);
}
} // namespace metal
