// Plumbing shared by the floating-point function headers.
//
// Every float/half/bfloat function is evaluated in float (scalar or float
// ext-vector) and rounded once to the argument type: for half/bfloat that is
// at least as accurate as MSL requires, and x86 has no native half math
// anyway. An implementation is a struct with a static template `op` that
// accepts float or a float ext-vector. The macros below stamp out the MSL
// overload set for it: non-template scalar overloads (so arguments convert
// implicitly, e.g. clamp(x, 0.0, 1.0)) and one constrained template for
// vectors (vec or packed_vec arguments, result vec).
#pragma once
#pragma clang system_header
#include "config.h"
#include "traits.h"
#include "vec.h"

namespace metal {
// metal::precise:: and metal::fast:: name the same implementations (libm
// accuracy); a using-directive keeps them in sync with every overload.
namespace precise {
using namespace metal;
}
namespace fast {
using namespace metal;
}
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

} // namespace __mk
} // namespace metal

// Scalar overloads for the three floating types; E = element type.
#define __MK_FPS(M, ...) M(float, __VA_ARGS__) M(half, __VA_ARGS__) M(bfloat, __VA_ARGS__)
#define __MK_OPC(F, E) __mk::F::template op<E>

// name(T x) -> T
#define __MK_FP1_S(T, name, F)                                                 \
  __MK_F T name(T x) { return (T)__MK_OPC(F, T)((float)x); }
#define __MK_FP1(name, F)                                                      \
  __MK_FPS(__MK_FP1_S, name, F)                                                \
  template <class V, __mk::req<__mk::is_fvec<V>> = 0>                          \
  __MK_F __mk::vec_of<V> name(const V &x) {                                    \
    return __mk::fout<__mk::vec_of<V>>(__MK_OPC(F, __mk::elem_t<V>)(__mk::fin(x))); \
  }

// name(T x, T y) -> T. In the vector form either argument may be a scalar:
// MSL converts a scalar to a vector implicitly (fmin(1, v), pow(v, 2.0f)).
#define __MK_FP2_S(T, name, F)                                                 \
  __MK_F T name(T x, T y) { return (T)__MK_OPC(F, T)((float)x, (float)y); }
#define __MK_FP2(name, F)                                                      \
  __MK_FPS(__MK_FP2_S, name, F)                                                \
  template <class A, class B, __mk::req<__mk::fvec_call<A, B>> = 0>            \
  __MK_F __mk::vcall_t<A, B> name(const A &x, const B &y) {                    \
    typedef __mk::vcall_t<A, B> R;                                             \
    return __mk::fout<R>(__MK_OPC(F, __mk::elem_t<R>)(__mk::fin(R(x)), __mk::fin(R(y)))); \
  }

// name(T x, T y, T z) -> T; vector forms broadcast scalar arguments.
#define __MK_FP3_S(T, name, F)                                                 \
  __MK_F T name(T x, T y, T z) { return (T)__MK_OPC(F, T)((float)x, (float)y, (float)z); }
#define __MK_FP3(name, F)                                                      \
  __MK_FPS(__MK_FP3_S, name, F)                                                \
  template <class A, class B, class C, __mk::req<__mk::fvec_call<A, B, C>> = 0> \
  __MK_F __mk::vcall_t<A, B, C> name(const A &x, const B &y, const C &z) {     \
    typedef __mk::vcall_t<A, B, C> R;                                          \
    return __mk::fout<R>(__MK_OPC(F, __mk::elem_t<R>)(__mk::fin(R(x)), __mk::fin(R(y)), __mk::fin(R(z)))); \
  }

// name(T x) -> bool / boolN
#define __MK_FPB1_S(T, name, F)                                                \
  __MK_F bool name(T x) { return __MK_OPC(F, T)((float)x); }
#define __MK_FPB1(name, F)                                                     \
  __MK_FPS(__MK_FPB1_S, name, F)                                               \
  template <class V, __mk::req<__mk::is_fvec<V>> = 0>                          \
  __MK_F __mk::bv<V> name(const V &x) {                                        \
    return __mk::mk_bool<__mk::bv<V>>(__MK_OPC(F, __mk::elem_t<V>)(__mk::fin(x))); \
  }
// name(T x, T y) -> bool / boolN
#define __MK_FPB2_S(T, name, F)                                                \
  __MK_F bool name(T x, T y) { return __MK_OPC(F, T)((float)x, (float)y); }
#define __MK_FPB2(name, F)                                                     \
  __MK_FPS(__MK_FPB2_S, name, F)                                               \
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
