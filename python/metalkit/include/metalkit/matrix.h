// MSL matrices: metal::matrix<T, Cols, Rows>, column-major; each column is a
// vec<T, Rows>, so layout matches MSL (float3x3 is three 16-byte columns).
#pragma once
#pragma clang system_header
#include "vec.h"

namespace metal {
namespace __mk {
template <class T, T... I> struct int_seq {};
template <int N> using make_iseq = __make_integer_seq<int_seq, int, N>;
template <class T, int K> struct elems {
  T v[K];
};
template <class T, int R> __MK_CF vec<T, R> diag_col(T d, int i) {
  lane_t<T> a[R] = {};
  a[i] = d;
  return vec<T, R>(raw, from_lanes<T, R>(a));
}
template <class T, int R> __MK_CF vec<T, R> col_at(const T *e) { return vec<T, R>(raw, from_lanes<T, R>(e)); }
template <class V, class T, int R> constexpr bool is_col = vinfo<V>::is_vec && __is_same(vec_of<V>, vec<T, R>);
} // namespace __mk

template <typename T, int C, int R> struct matrix {
  static_assert(C >= 2 && C <= 4 && R >= 2 && R <= 4, "MSL matrices are 2..4 x 2..4");
  vec<T, R> columns[C];

  matrix() = default;
  // Scalar on the diagonal, zeros elsewhere.
  __MK_CF explicit matrix(T d) : matrix(__mk::make_iseq<C>(), d) {}
  // One vector per column.
  template <class... V, __mk::req<sizeof...(V) == C && (__mk::is_col<V, T, R> && ...)> = 0>
  __MK_CF matrix(const V &...c) : columns{vec<T, R>(c)...} {}
  // C*R scalars in column-major order.
  template <class... S, __mk::req<sizeof...(S) == C * R && (__is_arithmetic(S) && ...)> = 0>
  __MK_CF matrix(S... s) : matrix(__mk::make_iseq<C>(), __mk::elems<T, C * R>{{(T)s...}}) {}
  // Element type conversion (explicit).
  template <class U, __mk::req<!__is_same(U, T)> = 0>
  __MK_CF explicit matrix(const matrix<U, C, R> &m) : matrix(__mk::make_iseq<C>(), m) {}

  __MK_F vec<T, R> &operator[](int i) { return columns[i]; }
  __MK_CF const vec<T, R> &operator[](int i) const { return columns[i]; }

  friend __MK_CF matrix operator+(const matrix &a, const matrix &b) {
    matrix r;
    for (int c = 0; c < C; ++c) r.columns[c] = a.columns[c] + b.columns[c];
    return r;
  }
  friend __MK_CF matrix operator-(const matrix &a, const matrix &b) {
    matrix r;
    for (int c = 0; c < C; ++c) r.columns[c] = a.columns[c] - b.columns[c];
    return r;
  }
  friend __MK_CF matrix operator-(const matrix &a) {
    matrix r;
    for (int c = 0; c < C; ++c) r.columns[c] = -a.columns[c];
    return r;
  }
  friend __MK_CF matrix operator*(const matrix &a, T s) {
    matrix r;
    for (int c = 0; c < C; ++c) r.columns[c] = a.columns[c] * s;
    return r;
  }
  friend __MK_CF matrix operator*(T s, const matrix &a) { return a * s; }
  // Matrix / scalar divides each element (real MSL code relies on it).
  friend __MK_CF matrix operator/(const matrix &a, T s) {
    matrix r;
    for (int c = 0; c < C; ++c) r.columns[c] = a.columns[c] / s;
    return r;
  }
  // Matrix * column vector: linear combination of the columns.
  friend __MK_CF vec<T, R> operator*(const matrix &m, const vec<T, C> &v) {
    vec<T, R> r = m.columns[0] * v[0];
    for (int c = 1; c < C; ++c) r += m.columns[c] * v[c];
    return r;
  }
  // Row vector * matrix: dot product with each column.
  friend __MK_CF vec<T, C> operator*(const vec<T, R> &v, const matrix &m) {
    vec<T, C> r;
    for (int c = 0; c < C; ++c) {
      vec<T, R> p = v * m.columns[c];
      T s = p[0];
      for (int i = 1; i < R; ++i) s += p[i];
      r[c] = s;
    }
    return r;
  }
  template <int K> friend __MK_CF matrix<T, K, R> operator*(const matrix &a, const matrix<T, K, C> &b) {
    matrix<T, K, R> r;
    for (int k = 0; k < K; ++k) r.columns[k] = a * b.columns[k];
    return r;
  }
  __MK_CF matrix &operator+=(const matrix &o) { return *this = *this + o; }
  __MK_CF matrix &operator-=(const matrix &o) { return *this = *this - o; }
  __MK_CF matrix &operator*=(T s) { return *this = *this * s; }
  __MK_CF matrix &operator/=(T s) { return *this = *this / s; }
  template <int K, __mk::req<K == C && C == R> = 0> __MK_CF matrix &operator*=(const matrix<T, K, C> &o) {
    return *this = *this * o;
  }

  // Helpers for the constructors above.
  template <int... I>
  __MK_CF matrix(__mk::int_seq<int, I...>, T d) : columns{__mk::diag_col<T, R>(d, I)...} {}
  template <int... I>
  __MK_CF matrix(__mk::int_seq<int, I...>, const __mk::elems<T, C * R> &e)
      : columns{__mk::col_at<T, R>(e.v + I * R)...} {}
  template <class U, int... I>
  __MK_CF matrix(__mk::int_seq<int, I...>, const matrix<U, C, R> &m) : columns{vec<T, R>(m.columns[I])...} {}
};

template <class T, int C, int R> __MK_CF matrix<T, R, C> transpose(const matrix<T, C, R> &m) {
  matrix<T, R, C> t;
  for (int c = 0; c < C; ++c)
    for (int r = 0; r < R; ++r) t.columns[r][c] = m.columns[c][r];
  return t;
}

// Determinants are computed in float and rounded to T.
template <class T> __MK_CF T determinant(const matrix<T, 2, 2> &m) {
  float a = m[0][0], b = m[0][1], c = m[1][0], d = m[1][1];
  return (T)(a * d - b * c);
}
template <class T> __MK_CF T determinant(const matrix<T, 3, 3> &m) {
  float3 a(m[0]), b(m[1]), c(m[2]);
  return (T)(a.x * (b.y * c.z - b.z * c.y) - b.x * (a.y * c.z - a.z * c.y) + c.x * (a.y * b.z - a.z * b.y));
}
template <class T> __MK_CF T determinant(const matrix<T, 4, 4> &m) {
  float e[4][4];
  for (int c = 0; c < 4; ++c)
    for (int r = 0; r < 4; ++r) e[c][r] = (float)m[c][r];
  // Laplace expansion over the first two columns (2x2 minors).
  float s0 = e[0][0] * e[1][1] - e[0][1] * e[1][0], s1 = e[0][0] * e[1][2] - e[0][2] * e[1][0];
  float s2 = e[0][0] * e[1][3] - e[0][3] * e[1][0], s3 = e[0][1] * e[1][2] - e[0][2] * e[1][1];
  float s4 = e[0][1] * e[1][3] - e[0][3] * e[1][1], s5 = e[0][2] * e[1][3] - e[0][3] * e[1][2];
  float c5 = e[2][2] * e[3][3] - e[2][3] * e[3][2], c4 = e[2][1] * e[3][3] - e[2][3] * e[3][1];
  float c3 = e[2][1] * e[3][2] - e[2][2] * e[3][1], c2 = e[2][0] * e[3][3] - e[2][3] * e[3][0];
  float c1 = e[2][0] * e[3][2] - e[2][2] * e[3][0], c0 = e[2][0] * e[3][1] - e[2][1] * e[3][0];
  return (T)(s0 * c5 - s1 * c4 + s2 * c3 + s3 * c2 - s4 * c1 + s5 * c0);
}

#define __MK_MTYPES(T)                                                         \
  typedef matrix<T, 2, 2> T##2x2;                                              \
  typedef matrix<T, 2, 3> T##2x3;                                              \
  typedef matrix<T, 2, 4> T##2x4;                                              \
  typedef matrix<T, 3, 2> T##3x2;                                              \
  typedef matrix<T, 3, 3> T##3x3;                                              \
  typedef matrix<T, 3, 4> T##3x4;                                              \
  typedef matrix<T, 4, 2> T##4x2;                                              \
  typedef matrix<T, 4, 3> T##4x3;                                              \
  typedef matrix<T, 4, 4> T##4x4;
#define __MK_MTYPES_USE(T)                                                     \
  using metal::T##2x2;                                                         \
  using metal::T##2x3;                                                         \
  using metal::T##2x4;                                                         \
  using metal::T##3x2;                                                         \
  using metal::T##3x3;                                                         \
  using metal::T##3x4;                                                         \
  using metal::T##4x2;                                                         \
  using metal::T##4x3;                                                         \
  using metal::T##4x4;
__MK_MTYPES(float)
__MK_MTYPES(half)
} // namespace metal
__MK_MTYPES_USE(float)
__MK_MTYPES_USE(half)
#undef __MK_MTYPES
#undef __MK_MTYPES_USE
