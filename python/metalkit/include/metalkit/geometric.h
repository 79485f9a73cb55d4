// MSL geometric functions (<metal_geometric>) on float/half/bfloat vectors,
// evaluated in float and rounded once to the element type.
#pragma once
#pragma clang system_header
#include "fpbase.h"

namespace metal {
namespace __mk {
template <class X> __MK_F float hsum(X v) {
  float s = v[0];
  for (int i = 1; i < __builtin_vectorelements(X); ++i) s += v[i];
  return s;
}
template <class A, class B> constexpr bool geo2 = is_fvec<A> && same_vec<A, B>;
} // namespace __mk

template <class A, class B, __mk::req<__mk::geo2<A, B>> = 0>
__MK_F __mk::elem_t<A> dot(const A &x, const B &y) {
  return (__mk::elem_t<A>)__mk::hsum(__mk::fin(x) * __mk::fin(y));
}
template <class V, __mk::req<__mk::is_fvec<V>> = 0> __MK_F __mk::elem_t<V> length_squared(const V &x) {
  auto f = __mk::fin(x);
  return (__mk::elem_t<V>)__mk::hsum(f * f);
}
template <class V, __mk::req<__mk::is_fvec<V>> = 0> __MK_F __mk::elem_t<V> length(const V &x) {
  auto f = __mk::fin(x);
  return (__mk::elem_t<V>)__builtin_sqrtf(__mk::hsum(f * f));
}
template <class A, class B, __mk::req<__mk::geo2<A, B>> = 0>
__MK_F __mk::elem_t<A> distance_squared(const A &x, const B &y) {
  auto d = __mk::fin(x) - __mk::fin(y);
  return (__mk::elem_t<A>)__mk::hsum(d * d);
}
template <class A, class B, __mk::req<__mk::geo2<A, B>> = 0>
__MK_F __mk::elem_t<A> distance(const A &x, const B &y) {
  auto d = __mk::fin(x) - __mk::fin(y);
  return (__mk::elem_t<A>)__builtin_sqrtf(__mk::hsum(d * d));
}
template <class V, __mk::req<__mk::is_fvec<V>> = 0> __MK_F __mk::vec_of<V> normalize(const V &x) {
  auto f = __mk::fin(x);
  return __mk::fout<__mk::vec_of<V>>(f * (1.0f / __builtin_sqrtf(__mk::hsum(f * f))));
}
template <class A, class B, __mk::req<__mk::geo2<A, B> && __mk::vinfo<A>::n == 3> = 0>
__MK_F __mk::vec_of<A> cross(const A &x, const B &y) {
  auto a = __mk::fin(x), b = __mk::fin(y);
  auto c = a.yzx * b.zxy - a.zxy * b.yzx;
  return __mk::fout<__mk::vec_of<A>>(c);
}
// reflect(i, n) = i - 2 * dot(n, i) * n
template <class A, class B, __mk::req<__mk::geo2<A, B>> = 0>
__MK_F __mk::vec_of<A> reflect(const A &i, const B &n) {
  auto fi = __mk::fin(i), fn = __mk::fin(n);
  return __mk::fout<__mk::vec_of<A>>(fi - 2.0f * __mk::hsum(fn * fi) * fn);
}
template <class A, class B, __mk::req<__mk::geo2<A, B>> = 0>
__MK_F __mk::vec_of<A> refract(const A &i, const B &n, __mk::ident<__mk::elem_t<A>> eta) {
  auto fi = __mk::fin(i), fn = __mk::fin(n);
  float e = (float)eta, d = __mk::hsum(fn * fi);
  float k = 1.0f - e * e * (1.0f - d * d);
  if (k < 0.0f) return __mk::vec_of<A>(0);
  return __mk::fout<__mk::vec_of<A>>(e * fi - (e * d + __builtin_sqrtf(k)) * fn);
}
// n if dot(nref, i) < 0, else -n
template <class A, class B, class C, __mk::req<__mk::geo2<A, B> && __mk::geo2<A, C>> = 0>
__MK_F __mk::vec_of<A> faceforward(const A &n, const B &i, const C &nref) {
  __mk::vec_of<A> r(n);
  return __mk::hsum(__mk::fin(nref) * __mk::fin(i)) < 0.0f ? r : -r;
}
} // namespace metal
