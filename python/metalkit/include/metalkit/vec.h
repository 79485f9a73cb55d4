// MSL vector types: metal::vec<T,N> (aligned) and metal::packed_vec<T,N>.
//
// vec stores a clang ext_vector_type so arithmetic compiles to SIMD; its
// size/alignment therefore match MSL (3-component vectors occupy 4 lanes).
// bool lanes are stored as bytes holding 0/1 because clang's bool vectors are
// bit-packed while MSL bool vectors use one byte per component.
// Single components (x, y, r, ...) are union members so they are real
// lvalues; multi-component swizzles are __declspec(property) members
// (requires -fdeclspec) generated in swizzle.h.
#pragma once
#pragma clang system_header
#include "config.h"
#include "scalar.h"
#include "swizzle.h"
#include "traits.h"

namespace metal {
namespace __mk {
struct raw_t {
  explicit constexpr raw_t() = default;
};
constexpr raw_t raw{}; // tag: construct a vec from its raw storage

template <class T> struct lane { typedef T type; };
template <> struct lane<bool> { typedef unsigned char type; };
template <class T> using lane_t = typename lane<T>::type;
template <class T, int N> using ev = lane_t<T> __attribute__((ext_vector_type(N)));

// half <-> bfloat: clang has no direct conversion between the two 16-bit
// formats (a C-style cast is refused, and __builtin_convertvector emits an
// invalid fptrunc that crashes the x86 backend), so go through float, which
// holds both exactly: the result is rounded once, as a direct conversion would be.
template <class T, class U>
constexpr bool fp16_pair = sizeof(T) == 2 && sizeof(U) == 2 && __is_floating_point(T) && __is_floating_point(U) &&
                           !__is_same(T, U);
// The operand of a user's cast to T (the front end wraps them, msl/passes/fp16_casts.py): a
// half to bfloat or bfloat to half goes through float, anything else is passed on as it is.
template <class T, class U> __MK_CF decltype(auto) cast_arg(U &&u) {
  if constexpr (fp16_pair<remove_cv_t<T>, remove_cv_t<remove_reference_t<U>>>) return (float)u;
  else return static_cast<U &&>(u);
}
template <class T, class U> __MK_CF lane_t<T> to_lane(U u) {
  if constexpr (fp16_pair<T, U>) return (T)(float)u;
  else return (lane_t<T>)(T)u;
}

// Comparison masks (lanes of -1/0) to bool lanes (0/1).
template <int N, class M> __MK_CF ev<bool, N> to_bool(M m) { return __builtin_convertvector(-m, ev<bool, N>); }

// Element-type conversion by value; to bool means "!= 0" like scalar C++.
template <class T, int N, class E> __MK_CF ev<T, N> convert(E v) {
  if constexpr (__is_same(T, bool))
    return __builtin_convertvector(-(v != 0), ev<T, N>);
  else if constexpr (fp16_pair<T, __typeof__(v[0])>)
    return __builtin_convertvector(__builtin_convertvector(v, ev<float, N>), ev<T, N>);
  else
    return __builtin_convertvector(v, ev<T, N>);
}

template <class T, int N> __MK_CF ev<T, N> from_lanes(const lane_t<T> *d) {
  if constexpr (N == 2) return ev<T, N>{d[0], d[1]};
  else if constexpr (N == 3) return ev<T, N>{d[0], d[1], d[2]};
  else return ev<T, N>{d[0], d[1], d[2], d[3]};
}

// Integer vector division must not trap (x86 idiv faults on /0 and on
// MIN/-1); MSL leaves those results unspecified, so substitute divisor 1.
template <class T, class E> __MK_CF E safe_divisor(E a, E b) {
  b = (b == 0) ? (E)1 : b;
  if constexpr (__is_signed(T) && !__is_floating_point(T)) {
    constexpr lane_t<T> lo = (lane_t<T>)((lane_t<T>)1 << (sizeof(T) * 8 - 1));
    b = ((a == lo) & (b == -1)) ? (E)1 : b;
  }
  return b;
}
template <class T, class E> __MK_CF E vdiv(E a, E b) {
  if constexpr (__is_floating_point(T)) return a / b;
  else return a / safe_divisor<T>(a, b);
}
template <class T, class E> __MK_CF E vmod(E a, E b) { return a % safe_divisor<T>(a, b); }
// Shift counts are taken modulo the lane width (avoids LLVM poison).
template <class T, class E> __MK_CF E vshl(E a, E b) { return a << (b & (E)(sizeof(T) * 8 - 1)); }
template <class T, class E> __MK_CF E vshr(E a, E b) { return a >> (b & (E)(sizeof(T) * 8 - 1)); }

// Layout bases: storage union per component count.
template <class T, int N> struct vstore;
template <class T> struct vstore<T, 2> {
  union {
    ev<T, 2> __s;
    struct { T x, y; };
    struct { T r, g; };
  };
  vstore() = default;
  __MK_CF vstore(ev<T, 2> v) : __s(v) {}
};
template <class T> struct vstore<T, 3> {
  union {
    ev<T, 3> __s;
    struct { T x, y, z; };
    struct { T r, g, b; };
  };
  vstore() = default;
  __MK_CF vstore(ev<T, 3> v) : __s(v) {}
};
template <class T> struct vstore<T, 4> {
  union {
    ev<T, 4> __s;
    struct { T x, y, z, w; };
    struct { T r, g, b, a; };
  };
  vstore() = default;
  __MK_CF vstore(ev<T, 4> v) : __s(v) {}
};
template <class T, int N> struct pstore;
template <class T> struct pstore<T, 2> {
  union {
    T __e[2];
    struct { T x, y; };
    struct { T r, g; };
  };
};
template <class T> struct pstore<T, 3> {
  union {
    T __e[3];
    struct { T x, y, z; };
    struct { T r, g, b; };
  };
};
template <class T> struct pstore<T, 4> {
  union {
    T __e[4];
    struct { T x, y, z, w; };
    struct { T r, g, b, a; };
  };
};

// Components a constructor argument contributes (<= 0: not allowed).
template <class T, class A, bool = vinfo<A>::is_vec> constexpr int ncomp = __is_arithmetic(A) ? 1 : 0;
template <class T, class A> constexpr int ncomp<T, A, true> = __is_same(elem_t<A>, T) ? vinfo<A>::n : 0;
// float4(v2, 0, 1)-style: >= 2 args, at least one vector, N components.
template <class T, int N, class... A>
constexpr bool mixed_ok = sizeof...(A) >= 2 && !(__is_arithmetic(A) && ...) &&
                          ((ncomp<T, A> > 0) && ...) && (ncomp<T, A> + ... + 0) == N;

template <class T, class A> __MK_CF void put(lane_t<T> *d, int &i, const A &a) {
  if constexpr (__is_arithmetic(A)) {
    d[i++] = to_lane<T>(a);
  } else if constexpr (vinfo<A>::is_vec && __is_same(A, vec_of<A>)) {
    for (int k = 0; k < vinfo<A>::n; ++k) d[i++] = a.__s[k];
  } else {
    for (int k = 0; k < vinfo<A>::n; ++k) d[i++] = to_lane<T>(a.__e[k]);
  }
}
template <class T, int N, class... A> __MK_CF ev<T, N> gather(const A &...a) {
  lane_t<T> d[N] = {};
  int i = 0;
  (put<T>(d, i, a), ...);
  return from_lanes<T, N>(d);
}

// Packed operator overloads apply only when no aligned vec is involved
// (vec's own operators handle vec-with-packed through implicit conversion).
template <class P, class A, class B>
constexpr bool pk_args = (__is_same(A, P) && (__is_same(B, P) || __is_arithmetic(B))) ||
                         (__is_arithmetic(A) && __is_same(B, P));
template <class T, int N, class... A>
constexpr bool pk_ctor = sizeof...(A) == 1 ? (__is_arithmetic(A) && ...)
                                            : __is_constructible(vec<T, N>, const A &...);
} // namespace __mk

#define __MK_VEC_SW(K, n, c)                                                   \
  __MK_F vec<T, K> __g_##n() const { return vec<T, K>(__mk::raw, this->__s.n); } \
  __MK_F void __p_##n(vec<T, K> v) { this->__s.n = v.__s; }                    \
  __declspec(property(get = __g_##n, put = __p_##n)) vec<T, K> n;             \
  __declspec(property(get = __g_##n, put = __p_##n)) vec<T, K> c;

#define __MK_VBIN(op, expr)                                                    \
  friend __MK_CF vec operator op(const vec &a, const vec &b) { return vec(__mk::raw, expr); }
#define __MK_VCMP(op)                                                          \
  friend __MK_CF vec<bool, N> operator op(const vec &a, const vec &b) {        \
    return vec<bool, N>(__mk::raw, __mk::to_bool<N>(a.__s op b.__s));          \
  }
#define __MK_VASSIGN(op)                                                       \
  __MK_CF vec &operator op##=(const vec &o) { return *this = *this op o; }

template <typename T, int N> struct vec : __mk::vstore<T, N> {
  static_assert(N >= 2 && N <= 4, "MSL vectors have 2, 3 or 4 components");
  typedef __mk::ev<T, N> __storage;
  typedef __mk::vstore<T, N> __base;

  vec() = default;
  __MK_CF vec(__mk::raw_t, __storage v) : __base(v) {}
  // Scalar broadcast; implicit, as MSL converts scalars to vectors.
  template <class U, __mk::req<__is_arithmetic(U)> = 0>
  __MK_CF vec(U s) : __base(__storage(__mk::to_lane<T>(s))) {}
  // One scalar per component (any arithmetic types, converted to T).
  template <class... U, __mk::req<sizeof...(U) == N && (__is_arithmetic(U) && ...)> = 0>
  __MK_CF vec(U... s) : __base(__storage{__mk::to_lane<T>(s)...}) {}
  // Fewer scalars than components, as a braced list (uint4 v = {a, b, c}): the rest are zero.
  template <class... U, __mk::req<(sizeof...(U) >= 2 && sizeof...(U) < N) && (__is_arithmetic(U) && ...)> = 0>
  __MK_CF vec(U... s) : __base(__storage{__mk::to_lane<T>(s)...}) {}
  // Scalars and vectors of element type T totalling N components.
  template <class... A, __mk::req<__mk::mixed_ok<T, N, A...>> = 0>
  __MK_CF vec(const A &...a) : __base(__mk::gather<T, N>(a...)) {}
  // Value conversion from another element type; explicit as in MSL.
  template <class U, __mk::req<!__is_same(U, T)> = 0>
  __MK_CF explicit vec(const vec<U, N> &o) : __base(__mk::convert<T, N>(o.__s)) {}
  // packed_vec converts implicitly both ways; from another element type, explicitly.
  __MK_CF vec(const packed_vec<T, N> &p);
  template <class U, __mk::req<!__is_same(U, T)> = 0> __MK_CF explicit vec(const packed_vec<U, N> &p);

  __MK_F T &operator[](int i) { return reinterpret_cast<T *>(this)[i]; }
  __MK_F const T &operator[](int i) const { return reinterpret_cast<const T *>(this)[i]; }

  __MK_SWIZZLES(__MK_VEC_SW)

  __MK_VBIN(+, a.__s + b.__s)
  __MK_VBIN(-, a.__s - b.__s)
  __MK_VBIN(*, a.__s *b.__s)
  __MK_VBIN(/, __mk::vdiv<T>(a.__s, b.__s))
  __MK_VBIN(%, __mk::vmod<T>(a.__s, b.__s))
  __MK_VBIN(&, a.__s &b.__s)
  __MK_VBIN(|, a.__s | b.__s)
  __MK_VBIN(^, a.__s ^ b.__s)
  __MK_VBIN(<<, __mk::vshl<T>(a.__s, b.__s))
  __MK_VBIN(>>, __mk::vshr<T>(a.__s, b.__s))
  __MK_VCMP(==)
  __MK_VCMP(!=)
  __MK_VCMP(<)
  __MK_VCMP(>)
  __MK_VCMP(<=)
  __MK_VCMP(>=)
  // Element-wise, no short circuit (as for MSL vectors).
  friend __MK_CF vec<bool, N> operator&&(const vec &a, const vec &b) {
    return vec<bool, N>(__mk::raw, __mk::to_bool<N>((a.__s != 0) & (b.__s != 0)));
  }
  friend __MK_CF vec<bool, N> operator||(const vec &a, const vec &b) {
    return vec<bool, N>(__mk::raw, __mk::to_bool<N>((a.__s != 0) | (b.__s != 0)));
  }
  friend __MK_CF vec<bool, N> operator!(const vec &a) {
    return vec<bool, N>(__mk::raw, __mk::to_bool<N>(a.__s == 0));
  }
  friend __MK_CF vec operator~(const vec &a) {
    if constexpr (__is_same(T, bool)) return vec(__mk::raw, a.__s ^ 1);
    else return vec(__mk::raw, ~a.__s);
  }
  friend __MK_CF vec operator-(const vec &a) { return vec(__mk::raw, -a.__s); }
  friend __MK_CF vec operator+(const vec &a) { return a; }

  __MK_VASSIGN(+)
  __MK_VASSIGN(-)
  __MK_VASSIGN(*)
  __MK_VASSIGN(/)
  __MK_VASSIGN(%)
  __MK_VASSIGN(&)
  __MK_VASSIGN(|)
  __MK_VASSIGN(^)
  __MK_VASSIGN(<<)
  __MK_VASSIGN(>>)
  __MK_CF vec &operator++() { return *this += 1; }
  __MK_CF vec &operator--() { return *this -= 1; }
  __MK_CF vec operator++(int) { vec t = *this; *this += 1; return t; }
  __MK_CF vec operator--(int) { vec t = *this; *this -= 1; return t; }
};

#define __MK_PK_SW(K, n, c)                                                    \
  __MK_F vec<T, K> __g_##n() const { return vec<T, N>(*this).__g_##n(); }      \
  __MK_F void __p_##n(vec<T, K> v) {                                           \
    vec<T, N> t(*this);                                                        \
    t.__p_##n(v);                                                              \
    *this = t;                                                                 \
  }                                                                            \
  __declspec(property(get = __g_##n, put = __p_##n)) vec<T, K> n;             \
  __declspec(property(get = __g_##n, put = __p_##n)) vec<T, K> c;

#define __MK_PBIN(op)                                                          \
  template <class A, class B, __mk::req<__mk::pk_args<packed_vec, A, B>> = 0>  \
  friend __MK_CF auto operator op(const A &a, const B &b) { return vec<T, N>(a) op vec<T, N>(b); }
#define __MK_PASSIGN(op)                                                       \
  template <class B> __MK_CF packed_vec &operator op##=(const B &o) {          \
    return *this = vec<T, N>(*this) op o;                                      \
  }

// Packed vectors: N*sizeof(T) bytes, aligned like T. Arithmetic happens on
// the aligned vec; results of operators are vec, as they are in MSL.
template <typename T, int N> struct packed_vec : __mk::pstore<T, N> {
  static_assert(N >= 2 && N <= 4, "MSL vectors have 2, 3 or 4 components");
  packed_vec() = default;
  __MK_CF packed_vec(const vec<T, N> &v) {
    for (int i = 0; i < N; ++i) this->__e[i] = (T)v.__s[i];
  }
  template <class... A, __mk::req<__mk::pk_ctor<T, N, A...>> = 0>
  __MK_CF packed_vec(const A &...a) : packed_vec(vec<T, N>(a...)) {}

  __MK_F T &operator[](int i) { return this->__e[i]; }
  __MK_F constexpr const T &operator[](int i) const { return this->__e[i]; }

  __MK_SWIZZLES(__MK_PK_SW)

  __MK_PBIN(+)
  __MK_PBIN(-)
  __MK_PBIN(*)
  __MK_PBIN(/)
  __MK_PBIN(%)
  __MK_PBIN(&)
  __MK_PBIN(|)
  __MK_PBIN(^)
  __MK_PBIN(<<)
  __MK_PBIN(>>)
  __MK_PBIN(==)
  __MK_PBIN(!=)
  __MK_PBIN(<)
  __MK_PBIN(>)
  __MK_PBIN(<=)
  __MK_PBIN(>=)
  __MK_PBIN(&&)
  __MK_PBIN(||)
  friend __MK_CF vec<bool, N> operator!(const packed_vec &a) { return !vec<T, N>(a); }
  friend __MK_CF vec<T, N> operator~(const packed_vec &a) { return ~vec<T, N>(a); }
  friend __MK_CF vec<T, N> operator-(const packed_vec &a) { return -vec<T, N>(a); }
  friend __MK_CF vec<T, N> operator+(const packed_vec &a) { return vec<T, N>(a); }
  __MK_PASSIGN(+)
  __MK_PASSIGN(-)
  __MK_PASSIGN(*)
  __MK_PASSIGN(/)
  __MK_PASSIGN(%)
  __MK_PASSIGN(&)
  __MK_PASSIGN(|)
  __MK_PASSIGN(^)
  __MK_PASSIGN(<<)
  __MK_PASSIGN(>>)
  __MK_CF packed_vec &operator++() { return *this += 1; }
  __MK_CF packed_vec &operator--() { return *this -= 1; }
  __MK_CF packed_vec operator++(int) { packed_vec t = *this; *this += 1; return t; }
  __MK_CF packed_vec operator--(int) { packed_vec t = *this; *this -= 1; return t; }
};

template <typename T, int N>
__MK_CF vec<T, N>::vec(const packed_vec<T, N> &p) : __base(__mk::gather<T, N>(p)) {}
template <typename T, int N>
template <class U, __mk::req<!__is_same(U, T)>>
__MK_CF vec<T, N>::vec(const packed_vec<U, N> &p) : __base(__mk::convert<T, N>(vec<U, N>(p).__s)) {}

#undef __MK_VEC_SW
#undef __MK_PK_SW
#undef __MK_VBIN
#undef __MK_VCMP
#undef __MK_VASSIGN
#undef __MK_PBIN
#undef __MK_PASSIGN

// Reinterpret the bits of x as type To (MSL as_type); sizes must match.
template <typename To, typename From> __MK_CF To as_type(const From &x) {
  static_assert(sizeof(To) == sizeof(From), "as_type: source and destination sizes differ");
  return __builtin_bit_cast(To, x);
}

#define __MK_VTYPES(T, name)                                                   \
  typedef vec<T, 2> name##2;                                                   \
  typedef vec<T, 3> name##3;                                                   \
  typedef vec<T, 4> name##4;                                                   \
  typedef packed_vec<T, 2> packed_##name##2;                                   \
  typedef packed_vec<T, 3> packed_##name##3;                                   \
  typedef packed_vec<T, 4> packed_##name##4;
#define __MK_VTYPES_USE(name)                                                  \
  using metal::name##2;                                                        \
  using metal::name##3;                                                        \
  using metal::name##4;                                                        \
  using metal::packed_##name##2;                                               \
  using metal::packed_##name##3;                                               \
  using metal::packed_##name##4;
#define __MK_ALL_VTYPES(M)                                                     \
  M(bool, bool)                                                                \
  M(char, char)                                                                \
  M(unsigned char, uchar)                                                      \
  M(short, short)                                                              \
  M(unsigned short, ushort)                                                    \
  M(int, int)                                                                  \
  M(unsigned int, uint)                                                        \
  M(long, long)                                                                \
  M(unsigned long, ulong)                                                      \
  M(half, half)                                                                \
  M(bfloat, bfloat)                                                            \
  M(float, float)
#define __MK_VTYPES_USE2(T, name) __MK_VTYPES_USE(name)
__MK_ALL_VTYPES(__MK_VTYPES)
} // namespace metal
// MSL vector type names are also usable without the metal:: prefix.
__MK_ALL_VTYPES(__MK_VTYPES_USE2)
#undef __MK_VTYPES
#undef __MK_VTYPES_USE
#undef __MK_VTYPES_USE2
