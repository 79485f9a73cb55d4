// MSL integer functions (<metal_integer>) for char..ulong scalars and
// vectors. Implementations are generic over a scalar E or an ext-vector of E;
// bit tricks run on the unsigned representation so nothing overflows in the
// C++ sense.
#pragma once
#pragma clang system_header
#include "common.h"
#include "limits.h"

namespace metal {
namespace __mk {
// rtype<U, X>: U, or an ext-vector of U with X's lane count.
template <class U, class X> struct rtype { typedef U type; };
template <class U, class T, int N> struct rtype<U, T __attribute__((ext_vector_type(N)))> {
  typedef U type __attribute__((ext_vector_type(N)));
};
template <class T, class X> __MK_F typename rtype<T, X>::type cvt(X x) {
  if constexpr (__is_same(typename rtype<T, X>::type, T)) return (T)x;
  else return __builtin_convertvector(x, typename rtype<T, X>::type);
}
template <class E> using uns = make_unsigned_t<E>;
template <class E> constexpr unsigned width = sizeof(E) * 8;

// Wider type for exact products.
template <class E> using wide = conditional_t<(sizeof(E) < 8), conditional_t<__is_signed(E), long, unsigned long>,
                                              conditional_t<__is_signed(E), __int128, unsigned __int128>>;
template <class E, class X, class F> __MK_F X ilanes(X x, X y, X z, F f) {
  if constexpr (__is_same(X, E)) {
    return f(x, y, z);
  } else {
    for (int i = 0; i < __builtin_vectorelements(X); ++i) x[i] = f(x[i], y[i], z[i]);
    return x;
  }
}
template <class E> __MK_F E mulhi1(E a, E b, E) { return (E)(((wide<E>)a * (wide<E>)b) >> width<E>); }
template <class E> __MK_F E madhi1(E a, E b, E c) { return (E)((uns<E>)mulhi1(a, b, c) + (uns<E>)c); }
template <class E> __MK_F E madsat1(E a, E b, E c) {
  wide<E> r = (wide<E>)a * (wide<E>)b + (wide<E>)c;
  constexpr wide<E> lo = numeric_limits<E>::min(), hi = numeric_limits<E>::max();
  if constexpr (__is_signed(E))
    if (r < lo) return (E)lo;
  return r > hi ? (E)hi : (E)r;
}

struct i_abs {
  template <class E, class X> static __MK_F X op(X x) {
    if constexpr (__is_signed(E)) return __builtin_elementwise_abs(x);
    else return x;
  }
};
struct i_absdiff {
  template <class E, class X> static __MK_F X op(X x, X y) {
    auto a = cvt<uns<E>>(x), b = cvt<uns<E>>(y);
    return cvt<E>(x > y ? cvt<uns<E>>(a - b) : cvt<uns<E>>(b - a));
  }
};
__MK_OP2(i_addsat, __builtin_elementwise_add_sat(x, y))
__MK_OP2(i_subsat, __builtin_elementwise_sub_sat(x, y))
// Halving adds without overflow of the intermediate sum.
__MK_OP2(i_hadd, (X)((x >> 1) + (y >> 1) + (x & y & (X)1)))
__MK_OP2(i_rhadd, (X)((x >> 1) + (y >> 1) + ((x | y) & (X)1)))
__MK_OP1(i_clz, cvt<E>(__builtin_elementwise_clzg(cvt<uns<E>>(x), cvt<uns<E>>((X)width<E>))))
__MK_OP1(i_ctz, cvt<E>(__builtin_elementwise_ctzg(cvt<uns<E>>(x), cvt<uns<E>>((X)width<E>))))
__MK_OP1(i_popcount, cvt<E>(__builtin_elementwise_popcount(cvt<uns<E>>(x))))
__MK_OP1(i_reverse_bits, cvt<E>(__builtin_elementwise_bitreverse(cvt<uns<E>>(x))))
__MK_OP2(i_rotate, cvt<E>(__builtin_elementwise_fshl(cvt<uns<E>>(x), cvt<uns<E>>(x), cvt<uns<E>>(y))))
__MK_OP2(i_max, __builtin_elementwise_max(x, y))
__MK_OP2(i_min, __builtin_elementwise_min(x, y))
__MK_OP3(i_clamp, __builtin_elementwise_min(__builtin_elementwise_max(x, y), z))
__MK_OP3(i_max3, __builtin_elementwise_max(__builtin_elementwise_max(x, y), z))
__MK_OP3(i_min3, __builtin_elementwise_min(__builtin_elementwise_min(x, y), z))
__MK_OP3(i_median3, __builtin_elementwise_max(__builtin_elementwise_min(x, y),
                                              __builtin_elementwise_min(__builtin_elementwise_max(x, y), z)))
__MK_OP2(i_mulhi, ilanes<E>(x, y, y, mulhi1<E>))
__MK_OP3(i_madhi, ilanes<E>(x, y, z, madhi1<E>))
__MK_OP3(i_madsat, ilanes<E>(x, y, z, madsat1<E>))
// 24-bit multiplies (int/uint only): operands use their low 24 bits,
// sign-extended for int; the product wraps.
template <class E, class X> __MK_F auto low24(X x) {
  auto u = cvt<uns<E>>(x);
  if constexpr (__is_signed(E)) return cvt<uns<E>>(cvt<E>(u << 8) >> 8);
  else return u & 0xffffffu;
}
__MK_OP2(i_mul24, cvt<E>(low24<E>(x) * low24<E>(y)))
__MK_OP3(i_mad24, cvt<E>(low24<E>(x) * low24<E>(y) + cvt<uns<E>>(z)))

template <class E, class X> __MK_F X extract_bits(X x, unsigned offset, unsigned bits) {
  typedef uns<E> U;
  constexpr unsigned W = width<E>;
  if (bits == 0) return (X)0;
  auto u = cvt<U>(x);
  if constexpr (__is_signed(E)) {
    // Move the field to the top, then sign-extend it back down.
    auto top = cvt<U>(u << (W - offset - bits));
    return cvt<E>(cvt<E>(top) >> (W - bits));
  } else {
    U mask = bits >= W ? (U)~(U)0 : (U)(((U)1 << bits) - 1);
    return cvt<E>(cvt<U>(u >> offset) & mask);
  }
}
template <class E, class X> __MK_F X insert_bits(X base, X ins, unsigned offset, unsigned bits) {
  typedef uns<E> U;
  typedef typename rtype<U, X>::type UX;
  if (bits == 0) return base;
  U field = bits >= width<E> ? (U)~(U)0 : (U)(((U)1 << bits) - 1);
  UX mask = (UX)(U)(field << offset);
  return cvt<E>((cvt<U>(base) & ~mask) | (cvt<U>(cvt<U>(ins) << offset) & mask));
}
} // namespace __mk
} // namespace metal

// Scalar forms: templates constrained to the integer types (see fpbase.h for why), with the
// call's type as for the floating functions: another integer type beats int (a literal).
#define __MK_ISC(...) __mk::req<__mk::iscalar_call<__VA_ARGS__>> = 0
#define __MK_I1_S(name, F)                                                     \
  template <class T, __MK_ISC(T)> __MK_F T name(T x) { return __MK_OPC(F, T)(x); }
#define __MK_I2_S(name, F)                                                     \
  template <class A, class B, __MK_ISC(A, B)> __MK_F __MK_FT(A, B) name(A x, B y) { \
    typedef __MK_FT(A, B) T;                                                   \
    return __MK_OPC(F, T)((T)x, (T)y);                                         \
  }
#define __MK_I3_S(name, F)                                                     \
  template <class A, class B, class C, __MK_ISC(A, B, C)> __MK_F __MK_FT(A, B, C) name(A x, B y, C z) { \
    typedef __MK_FT(A, B, C) T;                                                \
    return __MK_OPC(F, T)((T)x, (T)y, (T)z);                                   \
  }
#define __MK_I1(name, F)                                                  \
  __MK_I1_S(name, F)                                                           \
  template <class V, __mk::req<__mk::is_ivec<V>> = 0> __MK_F __mk::vec_of<V> name(const V &x) { \
    typedef __mk::vec_of<V> R;                                                 \
    return R(__mk::raw, __MK_OPC(F, __mk::elem_t<V>)(R(x).__s));               \
  }
#define __MK_I2V(name, F)                                                      \
  template <class A, class B, __mk::req<__mk::ivec_call<A, B>> = 0>            \
  __MK_F __mk::vcall_t<A, B> name(const A &x, const B &y) {                    \
    typedef __mk::vcall_t<A, B> R;                                             \
    return R(__mk::raw, __MK_OPC(F, __mk::elem_t<R>)(R(x).__s, R(y).__s));     \
  }
#define __MK_I3V(name, F)                                                      \
  template <class A, class B, class C, __mk::req<__mk::ivec_call<A, B, C>> = 0> \
  __MK_F __mk::vcall_t<A, B, C> name(const A &x, const B &y, const C &z) {     \
    typedef __mk::vcall_t<A, B, C> R;                                          \
    return R(__mk::raw, __MK_OPC(F, __mk::elem_t<R>)(R(x).__s, R(y).__s, R(z).__s)); \
  }

namespace metal {
__MK_I1(abs, i_abs)
__MK_I1(clz, i_clz)
__MK_I1(ctz, i_ctz)
__MK_I1(popcount, i_popcount)
__MK_I1(reverse_bits, i_reverse_bits)
__MK_I2_S(absdiff, i_absdiff)
__MK_I2V(absdiff, i_absdiff)
__MK_I2_S(addsat, i_addsat)
__MK_I2V(addsat, i_addsat)
__MK_I2_S(subsat, i_subsat)
__MK_I2V(subsat, i_subsat)
__MK_I2_S(hadd, i_hadd)
__MK_I2V(hadd, i_hadd)
__MK_I2_S(rhadd, i_rhadd)
__MK_I2V(rhadd, i_rhadd)
__MK_I2_S(rotate, i_rotate)
__MK_I2V(rotate, i_rotate)
__MK_I2_S(mulhi, i_mulhi)
__MK_I2V(mulhi, i_mulhi)
__MK_I3_S(madhi, i_madhi)
__MK_I3V(madhi, i_madhi)
__MK_I3_S(madsat, i_madsat)
__MK_I3V(madsat, i_madsat)
// Scalar forms of the max/min family (vector forms live in common.h).
__MK_I2_S(max, i_max)
__MK_I2_S(min, i_min)
__MK_I3_S(clamp, i_clamp)
__MK_I3_S(max3, i_max3)
__MK_I3_S(min3, i_min3)
__MK_I3_S(median3, i_median3)

template <class T, __mk::req<__mk::iscalar_call<T> && sizeof(T) == 4> = 0> __MK_F T mul24(T x, __mk::ident<T> y) {
  return __mk::i_mul24::op<T>(x, y);
}
template <class T, __mk::req<__mk::iscalar_call<T> && sizeof(T) == 4> = 0>
__MK_F T mad24(T x, __mk::ident<T> y, __mk::ident<T> z) {
  return __mk::i_mad24::op<T>(x, y, z);
}
template <class T, int N, __mk::req<sizeof(T) == 4 && __mk::is_int<T>> = 0>
__MK_F vec<T, N> mul24(const vec<T, N> &x, const vec<T, N> &y) {
  return vec<T, N>(__mk::raw, __mk::i_mul24::op<T>(x.__s, y.__s));
}
template <class T, int N, __mk::req<sizeof(T) == 4 && __mk::is_int<T>> = 0>
__MK_F vec<T, N> mad24(const vec<T, N> &x, const vec<T, N> &y, const vec<T, N> &z) {
  return vec<T, N>(__mk::raw, __mk::i_mad24::op<T>(x.__s, y.__s, z.__s));
}

template <class T, __MK_ISC(T)> __MK_F T extract_bits(T x, uint offset, uint bits) {
  return __mk::extract_bits<T>(x, offset, bits);
}
template <class T, __MK_ISC(T)> __MK_F T insert_bits(T base, __mk::ident<T> insert, uint offset, uint bits) {
  return __mk::insert_bits<T>(base, insert, offset, bits);
}
template <class V, __mk::req<__mk::is_ivec<V>> = 0>
__MK_F __mk::vec_of<V> extract_bits(const V &x, uint offset, uint bits) {
  typedef __mk::vec_of<V> R;
  return R(__mk::raw, __mk::extract_bits<__mk::elem_t<V>>(R(x).__s, offset, bits));
}
template <class A, class B, __mk::req<__mk::is_ivec<A> && __mk::same_vec<A, B>> = 0>
__MK_F __mk::vec_of<A> insert_bits(const A &base, const B &insert, uint offset, uint bits) {
  typedef __mk::vec_of<A> R;
  return R(__mk::raw, __mk::insert_bits<__mk::elem_t<A>>(R(base).__s, R(insert).__s, offset, bits));
}
} // namespace metal
