// Plumbing shared by the floating-point function headers.
//
// Every float/half/bfloat function is evaluated in float (scalar or float
// ext-vector) and rounded once to the argument type: for half/bfloat that is
// at least as accurate as MSL requires, and x86 has no native half math
// anyway. An implementation is a struct with a static template `op` that
// accepts float or a float ext-vector. The macros below stamp out the MSL
// overload set for it: one template for scalars, constrained to the floating
// types as Apple's are (integer arguments convert: clamp(x, 0, 1)), and one for
// vectors (vec or packed_vec arguments, result vec).
#pragma once
#pragma clang system_header
#include "config.h"
#include "traits.h"
#include "vec.h"

namespace metal {
namespace __mk {
template <class V> using fv = vec<float, vinfo<V>::n>;
template <class V> using bv = vec<bool, vinfo<V>::n>;
template <class V> using iv = vec<int, vinfo<V>::n>;
// To/from float working storage.
template <class V> __MK_F typename fv<V>::__storage fin(const V &x) { return fv<V>(vec_of<V>(x)).__s; }
template <class R, class X> __MK_F R fout(X x) { return R(vec<float, vinfo<R>::n>(raw, x)); }

// Scalar/vector-generic lane helpers over float data.
template <class X> constexpr bool is_sc = __is_same(X, float);
template <class X, class F> __MK_F X lanes(X x, F f) {
  if constexpr (is_sc<X>) {
    return f(x);
  } else {
    for (int i = 0; i < __builtin_vectorelements(X); ++i) x[i] = f(x[i]);
    return x;
  }
}
template <class X, class F> __MK_F X lanes2(X x, X y, F f) {
  if constexpr (is_sc<X>) {
    return f(x, y);
  } else {
    for (int i = 0; i < __builtin_vectorelements(X); ++i) x[i] = f(x[i], y[i]);
    return x;
  }
}
// Lane select that works for scalar and vector conditions alike.
template <class X, class M> __MK_F X sel(M m, X a, X b) { return m ? a : b; }
// Convert a comparison result on float data to bool / boolN.
template <class R, class M> __MK_F R mk_bool(M m) {
  if constexpr (__is_same(R, bool)) return m;
  else return R(raw, to_bool<vinfo<R>::n>(m));
}


// The scalar type a call's arguments agree on (scall_t): a floating type beats integers and double
// (a literal written in C++; MSL's have no double), another integer type beats int (a literal);
// two different floating or integer types agree on none.
struct no_scalar {};
template <class R, class A> struct sc_pick {
  static constexpr bool arith = __is_arithmetic(A) && !__is_same(A, bool);
  static constexpr bool flt = is_fp<A> || __is_same(A, double), rflt = is_fp<R> || __is_same(R, double);
  typedef conditional_t<
      !arith || __is_same(R, no_scalar), no_scalar,
      conditional_t<__is_same(R, void) || __is_same(R, A), A,
                    conditional_t<(rflt && is_int<A>) || (is_fp<R> && __is_same(A, double)), R,
                                  conditional_t<(is_int<R> && flt) || (__is_same(R, double) && is_fp<A>), A,
                                                conditional_t<is_int<R> && is_int<A> && __is_same(R, int), A,
                                                              conditional_t<is_int<R> && __is_same(A, int), R,
                                                                            no_scalar>>>>>>
      type;
};
template <class R, class... A> struct sc_fold { typedef R type; };
template <class R, class H, class... T> struct sc_fold<R, H, T...> : sc_fold<typename sc_pick<R, H>::type, T...> {};
template <class... A> using scall_t = typename sc_fold<void, A...>::type;
template <class... A> constexpr bool fscalar_call = is_fp<scall_t<A...>>;
template <class... A> constexpr bool iscalar_call = is_int<scall_t<A...>>;
} // namespace __mk
} // namespace metal

// Scalar forms are templates constrained to the floating types, as in Apple's headers, so a
// library's own non-template overload (`bfloat abs(bfloat)` in namespace metal) coexists and is the
// better match. The call's type is the one floating type among the arguments; integer arguments
// convert to it (clamp(x, 0, 1)). E = element type.
#define __MK_OPC(F, E) __mk::F::template op<E>
#define __MK_FSC(...) __mk::req<__mk::fscalar_call<__VA_ARGS__>> = 0
#define __MK_FT(...) __mk::scall_t<__VA_ARGS__>

// name(T x) -> T
#define __MK_FP1_S(name, F)                                                    \
  template <class T, __MK_FSC(T)> __MK_F T name(T x) { return (T)__MK_OPC(F, T)((float)x); }
#define __MK_FP1(name, F)                                                      \
  __MK_FP1_S(name, F)                                                          \
  template <class V, __mk::req<__mk::is_fvec<V>> = 0>                          \
  __MK_F __mk::vec_of<V> name(const V &x) {                                    \
    return __mk::fout<__mk::vec_of<V>>(__MK_OPC(F, __mk::elem_t<V>)(__mk::fin(x))); \
  }

// name(T x, T y) -> T. In the vector form either argument may be a scalar:
// MSL converts a scalar to a vector implicitly (fmin(1, v), pow(v, 2.0f)).
#define __MK_FP2_S(name, F)                                                    \
  template <class A, class B, __MK_FSC(A, B)> __MK_F __MK_FT(A, B) name(A x, B y) { \
    typedef __MK_FT(A, B) T;                                                   \
    return (T)__MK_OPC(F, T)((float)(T)x, (float)(T)y);                        \
  }
#define __MK_FP2(name, F)                                                      \
  __MK_FP2_S(name, F)                                                          \
  template <class A, class B, __mk::req<__mk::fvec_call<A, B>> = 0>            \
  __MK_F __mk::vcall_t<A, B> name(const A &x, const B &y) {                    \
    typedef __mk::vcall_t<A, B> R;                                             \
    return __mk::fout<R>(__MK_OPC(F, __mk::elem_t<R>)(__mk::fin(R(x)), __mk::fin(R(y)))); \
  }

// name(T x, T y, T z) -> T; vector forms broadcast scalar arguments.
#define __MK_FP3_S(name, F)                                                    \
  template <class A, class B, class C, __MK_FSC(A, B, C)>                      \
  __MK_F __MK_FT(A, B, C) name(A x, B y, C z) {                                \
    typedef __MK_FT(A, B, C) T;                                                \
    return (T)__MK_OPC(F, T)((float)(T)x, (float)(T)y, (float)(T)z);           \
  }
#define __MK_FP3(name, F)                                                      \
  __MK_FP3_S(name, F)                                                          \
  template <class A, class B, class C, __mk::req<__mk::fvec_call<A, B, C>> = 0> \
  __MK_F __mk::vcall_t<A, B, C> name(const A &x, const B &y, const C &z) {     \
    typedef __mk::vcall_t<A, B, C> R;                                          \
    return __mk::fout<R>(__MK_OPC(F, __mk::elem_t<R>)(__mk::fin(R(x)), __mk::fin(R(y)), __mk::fin(R(z)))); \
  }

// name(T x) -> bool / boolN
#define __MK_FPB1(name, F)                                                     \
  template <class T, __MK_FSC(T)> __MK_F bool name(T x) { return __MK_OPC(F, T)((float)x); } \
  template <class V, __mk::req<__mk::is_fvec<V>> = 0>                          \
  __MK_F __mk::bv<V> name(const V &x) {                                        \
    return __mk::mk_bool<__mk::bv<V>>(__MK_OPC(F, __mk::elem_t<V>)(__mk::fin(x))); \
  }
// name(T x, T y) -> bool / boolN
#define __MK_FPB2(name, F)                                                     \
  template <class A, class B, __MK_FSC(A, B)> __MK_F bool name(A x, B y) {     \
    typedef __MK_FT(A, B) T;                                                   \
    return __MK_OPC(F, T)((float)(T)x, (float)(T)y);                           \
  }                                                                            \
  template <class A, class B, __mk::req<__mk::fvec_call<A, B>> = 0>            \
  __MK_F __mk::bv<__mk::vcall_t<A, B>> name(const A &x, const B &y) {          \
    typedef __mk::vcall_t<A, B> R;                                             \
    return __mk::mk_bool<__mk::bv<R>>(__MK_OPC(F, __mk::elem_t<R>)(__mk::fin(R(x)), __mk::fin(R(y)))); \
  }

// Implementation structs: op<E>(float data...) with E the result element type.
#define __MK_OP1(Name, expr)                                                   \
  struct Name {                                                                \
    template <class E, class X> static __MK_F X op(X x) { return expr; }       \
  };
#define __MK_OP2(Name, expr)                                                   \
  struct Name {                                                                \
    template <class E, class X> static __MK_F X op(X x, X y) { return expr; }  \
  };
#define __MK_OP3(Name, expr)                                                   \
  struct Name {                                                                \
    template <class E, class X> static __MK_F X op(X x, X y, X z) { return expr; } \
  };
