// SIMD-group matrices (<metal_simdgroup_matrix>): simdgroup_matrix<T, 8, 8>
// for float, half and bfloat, written from the MSL specification's
// SIMD-group matrix functions.
//
// Representation (as on Apple GPUs): the matrix is distributed over the 32
// lanes of the SIMD-group; each lane object holds only its two elements,
// (row, col) and (row, col + 1) with
//   row = (l / 16) * 4 + (l / 2) % 4,   col = ((l / 8) % 2) * 4 + (l % 2) * 2.
// So thread_elements() is a plain reference to the object's own storage and
// writes through it need no bookkeeping. The operations that need other
// lanes' elements are rendezvous of the SIMD-group (simd_exchange), as they
// are collective on the GPU:
// - simdgroup_multiply[_accumulate]: one exchange of the lane's elements of
//   a, b (and c); each lane computes its own two elements of the result;
// - simdgroup_load / simdgroup_store / the diagonal constructor need only the
//   lane's id: an empty exchange tells it, once per object (the id is cached
//   in the object and travels with copies and results, so a loop of loads
//   into the same matrices exchanges once).
// Lanes that are not active (early return, short last SIMD-group) contribute
// zeros to a product; loads and stores touch only the active lanes' elements.
//
// Arithmetic: each result element is computed in float and rounded once to
// the destination type: acc = c; acc = fma(a[r][k], b[k][c], acc), k = 0..7.
// Apple documents neither the order nor the precision of the accumulation
// (float accumulation for half/bfloat is a choice); results may differ from
// a GPU's in the last bits.
// Element types of d, a, b and c may differ (half x float + float, as
// llama.cpp's kernels do).
#pragma once
#pragma clang system_header
#include "runtime.h"
#include "simd.h"
#include "vec.h"

namespace metal {
namespace __mk {
__MK_CF unsigned sgm_row(unsigned l) { return (l / 16u) * 4u + (l / 2u) % 4u; }
__MK_CF unsigned sgm_col(unsigned l) { return ((l / 8u) % 2u) * 4u + (l % 2u) * 2u; }
// The lane holding element (r, c); element c & 1 of its pair.
__MK_CF unsigned sgm_lane(unsigned r, unsigned c) {
  return ((c >> 1) & 1u) | ((r & 3u) << 1) | (((c >> 2) & 1u) << 3) | ((r >> 2) << 4);
}
constexpr unsigned char sgm_no_lane = 0xFF;
template <class T> constexpr bool sgm_elem = __is_same(T, float) || __is_same(T, half) || __is_same(T, bfloat);
} // namespace __mk

template <typename T, int Cols, int Rows = Cols> struct simdgroup_matrix {
  static_assert(Cols == 8 && Rows == 8, "simdgroup_matrix: MSL provides 8x8 matrices only");
  static_assert(__mk::sgm_elem<T>, "simdgroup_matrix: the element type must be float, half or bfloat");
  typedef vec<T, 2> __pair;
  __pair __e;                                      // this lane's two elements
  mutable unsigned char __lane = __mk::sgm_no_lane; // this lane's id, once known

  simdgroup_matrix() = default;
  // A diagonal matrix with dval on the diagonal.
  simdgroup_matrix(T dval, __mk::site s = __mk::site::here()) {
    const unsigned l = __lane_id(s), r = __mk::sgm_row(l), c = __mk::sgm_col(l);
    __e = __pair(r == c ? dval : T(0), r == c + 1 ? dval : T(0));
  }

  __MK_F __pair &thread_elements() { return __e; }
  __MK_F const __pair &thread_elements() const { return __e; }

  __MK_F unsigned __lane_id(__mk::site s) const {
    if (__lane == __mk::sgm_no_lane) __lane = (unsigned char)__mk::sg_exchange(s).lane();
    return __lane;
  }
};

typedef simdgroup_matrix<float, 8, 8> simdgroup_float8x8;
typedef simdgroup_matrix<half, 8, 8> simdgroup_half8x8;
typedef simdgroup_matrix<bfloat, 8, 8> simdgroup_bfloat8x8;

// A matrix with every element set to value.
template <typename T, int Cols, int Rows = Cols>
__MK_F simdgroup_matrix<T, Cols, Rows> make_filled_simdgroup_matrix(const __mk::ident<T> value) {
  simdgroup_matrix<T, Cols, Rows> m;
  m.__e = vec<T, 2>(value);
  return m;
}

// Element (r, c) of the matrix is source element (origin.y + r, origin.x + c)
// of a row-major array with elements_per_row elements per row, or
// (origin.y + c, origin.x + r) when transpose_matrix is true.
template <typename T, int Cols, int Rows>
__MK_F void simdgroup_load(simdgroup_matrix<T, Cols, Rows> &d, const T *src, ulong elements_per_row = Cols,
                           ulong2 matrix_origin = ulong2(0), bool transpose_matrix = false,
                           __mk::site s = __mk::site::here()) {
  const unsigned l = d.__lane_id(s), r = __mk::sgm_row(l), c = __mk::sgm_col(l);
  src += matrix_origin.y * elements_per_row + matrix_origin.x;
  for (unsigned j = 0; j < 2; ++j)
    d.__e[j] = transpose_matrix ? src[ulong(c + j) * elements_per_row + r] : src[ulong(r) * elements_per_row + c + j];
}

template <typename T, int Cols, int Rows>
__MK_F void simdgroup_store(const simdgroup_matrix<T, Cols, Rows> &a, T *dst, ulong elements_per_row = Cols,
                            ulong2 matrix_origin = ulong2(0), bool transpose_matrix = false,
                            __mk::site s = __mk::site::here()) {
  const unsigned l = a.__lane_id(s), r = __mk::sgm_row(l), c = __mk::sgm_col(l);
  dst += matrix_origin.y * elements_per_row + matrix_origin.x;
  for (unsigned j = 0; j < 2; ++j) {
    if (transpose_matrix)
      dst[ulong(c + j) * elements_per_row + r] = a.__e[j];
    else
      dst[ulong(r) * elements_per_row + c + j] = a.__e[j];
  }
}

// The same with the site last and no defaults (how a SIMT kernel calls them).
template <typename T, int C, int R>
__MK_F void simdgroup_load(simdgroup_matrix<T, C, R> &d, const T *src, __mk::site s) {
  simdgroup_load(d, src, C, ulong2(0), false, s);
}
template <typename T, int C, int R>
__MK_F void simdgroup_load(simdgroup_matrix<T, C, R> &d, const T *src, ulong epr, __mk::site s) {
  simdgroup_load(d, src, epr, ulong2(0), false, s);
}
template <typename T, int C, int R>
__MK_F void simdgroup_load(simdgroup_matrix<T, C, R> &d, const T *src, ulong epr, ulong2 origin, __mk::site s) {
  simdgroup_load(d, src, epr, origin, false, s);
}
template <typename T, int C, int R>
__MK_F void simdgroup_store(const simdgroup_matrix<T, C, R> &a, T *dst, __mk::site s) {
  simdgroup_store(a, dst, C, ulong2(0), false, s);
}
template <typename T, int C, int R>
__MK_F void simdgroup_store(const simdgroup_matrix<T, C, R> &a, T *dst, ulong epr, __mk::site s) {
  simdgroup_store(a, dst, epr, ulong2(0), false, s);
}
template <typename T, int C, int R>
__MK_F void simdgroup_store(const simdgroup_matrix<T, C, R> &a, T *dst, ulong epr, ulong2 origin, __mk::site s) {
  simdgroup_store(a, dst, epr, origin, false, s);
}

namespace __mk {
template <class A, class B, class C> struct sgm_slot {
  vec<A, 2> a;
  vec<B, 2> b;
  vec<C, 2> c;
};
// d = a * b (+ c): one exchange, then this lane's two elements of d.
template <bool HasC, class D, class A, class B, class C>
__MK_F void sgm_mma(simdgroup_matrix<D, 8, 8> &d, const simdgroup_matrix<A, 8, 8> &a,
                    const simdgroup_matrix<B, 8, 8> &b, const simdgroup_matrix<C, 8, 8> &c, site s) {
  typedef sgm_slot<A, B, C> __slot;
  const sg_view v = sg_exchange(__slot{a.__e, b.__e, c.__e}, s);
  if (!v.ready()) return;  // d may be c: written only once every lane's operands are in
  const unsigned l = v.lane(), r = sgm_row(l), c0 = sgm_col(l);
  float arow[8], bcol[2][8];
  for (unsigned k = 0; k < 8; k += 2) {
    const unsigned la = sgm_lane(r, k);
    const bool on = v.on(la);
    const vec<A, 2> pa = on ? v.get<__slot>(la).a : vec<A, 2>(0);
    arow[k] = float(pa[0]);
    arow[k + 1] = float(pa[1]);
  }
  for (unsigned k = 0; k < 8; ++k) {
    const unsigned lb = sgm_lane(k, c0);
    const vec<B, 2> pb = v.on(lb) ? v.get<__slot>(lb).b : vec<B, 2>(0);
    bcol[0][k] = float(pb[0]);
    bcol[1][k] = float(pb[1]);
  }
  vec<D, 2> out;
  for (unsigned j = 0; j < 2; ++j) {
    float acc = HasC ? float(c.__e[j]) : 0.0f;
    for (unsigned k = 0; k < 8; ++k) acc = __builtin_fmaf(arow[k], bcol[j][k], acc);
    out[j] = D(acc);
  }
  d.__e = out;
  d.__lane = (unsigned char)l;
}
} // namespace __mk

// d = a * b. Element types may differ (e.g. a half matrix times a float one).
template <class D, class A, class B>
__MK_F void simdgroup_multiply(simdgroup_matrix<D, 8, 8> &d, const simdgroup_matrix<A, 8, 8> &a,
                               const simdgroup_matrix<B, 8, 8> &b, __mk::site s = __mk::site::here()) {
  __mk::sgm_mma<false>(d, a, b, a, s);
}
// d = a * b + c (d may be c).
template <class D, class A, class B, class C>
__MK_F void simdgroup_multiply_accumulate(simdgroup_matrix<D, 8, 8> &d, const simdgroup_matrix<A, 8, 8> &a,
                                          const simdgroup_matrix<B, 8, 8> &b, const simdgroup_matrix<C, 8, 8> &c,
                                          __mk::site s = __mk::site::here()) {
  __mk::sgm_mma<true>(d, a, b, c, s);
}

// a * b as an expression: the matrix product (a SIMD-group collective, like simdgroup_multiply).
namespace __mk {
template <class T>
__MK_F simdgroup_matrix<T, 8, 8> sgm_product(const simdgroup_matrix<T, 8, 8> &a, const simdgroup_matrix<T, 8, 8> &b,
                                             site s = site::here()) {
  simdgroup_matrix<T, 8, 8> d;
  sgm_mma<false>(d, a, b, a, s);
  return d;
}
} // namespace __mk
template <class T>
__MK_F simdgroup_matrix<T, 8, 8> operator*(const simdgroup_matrix<T, 8, 8> &a, const simdgroup_matrix<T, 8, 8> &b) {
  return __mk::sgm_product(a, b);
}

} // namespace metal
