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
// That is the per-lane code, which kernels run as a fiber per thread run (and
// the reference model, execution="threads"). SIMT kernels call the twins at
// the end of this file instead: each operation on the SIMD-group's whole
// matrix at once, with the same results bit for bit.
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
  typedef T __elem;
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
    if (s.x) return s.x->lane;  // SIMT code (mk::simt::lanes leaves the cache uninitialised)
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

namespace __mk {
// Lane l's elements of d, loaded from src (already moved to the matrix origin) as simdgroup_load
// and simdgroup_store describe: element (r, c) is src[r * epr + c], or src[c * epr + r] transposed.
template <typename T>
__MK_F void sgm_load_lane(simdgroup_matrix<T, 8, 8> &d, const T *src, ulong epr, bool tr, unsigned l) {
  const unsigned r = sgm_row(l), c = sgm_col(l);
  for (unsigned j = 0; j < 2; ++j) d.__e[j] = tr ? src[ulong(c + j) * epr + r] : src[ulong(r) * epr + c + j];
}
template <typename T>
__MK_F void sgm_store_lane(const simdgroup_matrix<T, 8, 8> &a, T *dst, ulong epr, bool tr, unsigned l) {
  const unsigned r = sgm_row(l), c = sgm_col(l);
  for (unsigned j = 0; j < 2; ++j) {
    if (tr)
      dst[ulong(c + j) * epr + r] = a.__e[j];
    else
      dst[ulong(r) * epr + c + j] = a.__e[j];
  }
}
} // namespace __mk

// Element (r, c) of the matrix is source element (origin.y + r, origin.x + c)
// of a row-major array with elements_per_row elements per row, or
// (origin.y + c, origin.x + r) when transpose_matrix is true.
template <typename T, int Cols, int Rows>
__MK_F void simdgroup_load(simdgroup_matrix<T, Cols, Rows> &d, const T *src, ulong elements_per_row = Cols,
                           ulong2 matrix_origin = ulong2(0), bool transpose_matrix = false,
                           __mk::site s = __mk::site::here()) {
  src += matrix_origin.y * elements_per_row + matrix_origin.x;
  __mk::sgm_load_lane(d, src, elements_per_row, transpose_matrix, d.__lane_id(s));
}

template <typename T, int Cols, int Rows>
__MK_F void simdgroup_store(const simdgroup_matrix<T, Cols, Rows> &a, T *dst, ulong elements_per_row = Cols,
                            ulong2 matrix_origin = ulong2(0), bool transpose_matrix = false,
                            __mk::site s = __mk::site::here()) {
  dst += matrix_origin.y * elements_per_row + matrix_origin.x;
  __mk::sgm_store_lane(a, dst, elements_per_row, transpose_matrix, a.__lane_id(s));
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

// ---- SIMT twins (msl/simt) ----
// A SIMT kernel calls these with each lane's arguments (accessors: lane -> argument) and the
// mask of active lanes, so an operation works on the SIMD-group's whole 8x8 matrix at once. A
// product gathers b and c into rows of floats (vectors), reads a's elements where the lanes hold
// them, runs each row's float fma chains in the order above (so bit for bit the per-lane code's
// results) and scatters the rows to d's lanes; inactive lanes' elements count as zeros and keep
// their d. Loads and stores of a whole SIMD-group whose lanes pass the same arguments are row
// copies; anything else (a partial mask, arguments that differ between lanes, a store whose rows
// overlap) runs the per-lane code for each active lane, in lane order.
namespace __mk {
// A matrix as 8 rows of 8 floats (vectors: the product runs a row at a time).
typedef float sgm_row8 __attribute__((ext_vector_type(8)));
typedef float sgm_row2 __attribute__((ext_vector_type(2)));
typedef float sgm_row4 __attribute__((ext_vector_type(4)));
struct sgm_tile {
  sgm_row8 r[8];
};
// Row r's pairs are held by lanes x, x + 1, x + 8 and x + 9 (columns 0, 2, 4, 6).
__MK_CF unsigned sgm_row_lane(unsigned r) { return ((r & 3u) << 1) | ((r >> 2) << 4); }

// The active lanes' elements of acc(l)'s matrices as a float tile; zeros for the other lanes.
// Full: every lane is (m is ~0u).
template <bool Full, class Acc> __MK_F void sgm_gather(sgm_tile &t, Acc &acc, unsigned m) {
  const auto pair = [&](unsigned l) {
    if (!Full && !(m >> l & 1u)) return sgm_row2(0.0f);
    const auto e = acc(l).__e;
    return sgm_row2{float(e[0]), float(e[1])};
  };
  _Pragma("unroll") for (unsigned r = 0; r < 8u; ++r) {
    const unsigned x = sgm_row_lane(r);
    const sgm_row4 lo = __builtin_shufflevector(pair(x), pair(x + 1), 0, 1, 2, 3);
    const sgm_row4 hi = __builtin_shufflevector(pair(x + 8), pair(x + 9), 0, 1, 2, 3);
    t.r[r] = __builtin_shufflevector(lo, hi, 0, 1, 2, 3, 4, 5, 6, 7);
  }
}
// The active lanes' elements of acc(l)'s matrices from a float tile, rounded once.
template <bool Full, class Acc> __MK_F void sgm_scatter(Acc &acc, const sgm_tile &t, unsigned m) {
  typedef typename remove_reference<decltype(acc(0u))>::type::__elem D;
  _Pragma("unroll") for (unsigned l = 0; l < 32u; ++l)
    if (Full || (m >> l & 1u)) {
      const unsigned r = sgm_row(l), c = sgm_col(l);
      acc(l).__e = vec<D, 2>(D(t.r[r][c]), D(t.r[r][c + 1]));
    }
}
// d = a * b (+ c), each element acc = c; acc = fma(a[r][k], b[k][j], acc), k = 0..7; a's elements
// are read where the lanes hold them (each is broadcast to a row of the product).
template <bool HasC, bool Full, class AA>
__MK_F void sgm_tile_mma(sgm_tile &d, AA &a, unsigned m, const sgm_tile &b, const sgm_tile &c) {
  _Pragma("unroll") for (unsigned r = 0; r < 8u; ++r) {
    sgm_row8 acc = HasC ? c.r[r] : sgm_row8(0.0f);
    _Pragma("unroll") for (unsigned k = 0; k < 8u; ++k) {
      const unsigned l = sgm_lane(r, k);
      const float x = Full || (m >> l & 1u) ? float(a(l).__e[k & 1u]) : 0.0f;
      acc = __builtin_elementwise_fma(sgm_row8(x), b.r[k], acc);
    }
    d.r[r] = acc;
  }
}

// The same for a partial mask lane by lane, in rolled loops (small code, for a small helper's
// partial-mask version): lane l's two elements of a * b (+ c) into out[l].
#define __MK_SGM_ROLLED _Pragma("clang loop unroll(disable) vectorize(disable)")
template <bool HasC, class AA, class BA, class CA>
__MK_F void sgm_lanes_mma(float (&out)[32][2], unsigned m, AA &a, BA &b, CA &c) {
  __MK_SGM_ROLLED for (unsigned l = 0; l < 32u; ++l) {
    if (!(m >> l & 1u)) continue;
    const unsigned r = sgm_row(l), c0 = sgm_col(l);
    __MK_SGM_ROLLED for (unsigned j = 0; j < 2u; ++j) {
      float acc = HasC ? float(c(l).__e[j]) : 0.0f;
      __MK_SGM_ROLLED for (unsigned k = 0; k < 8u; ++k) {
        const unsigned la = sgm_lane(r, k), lb = sgm_lane(k, c0 + j);
        const float x = m >> la & 1u ? float(a(la).__e[k & 1u]) : 0.0f;
        const float y = m >> lb & 1u ? float(b(lb).__e[j]) : 0.0f;
        acc = __builtin_fmaf(x, y, acc);
      }
      out[l][j] = acc;
    }
  }
}

template <class X, class... Y> __MK_F X &sgm_first(X &x, Y &...) { return x; }
template <bool HasC> struct sgm_mma_twin {
  template <bool Full, class DA, class AA, class BA, class CA>
  __MK_F static void run(unsigned m, DA &d, AA &a, BA &b, CA &c) {
    sgm_tile tb, tc, td;
    sgm_gather<Full>(tb, b, m);
    if constexpr (HasC) sgm_gather<Full>(tc, c, m);
    sgm_tile_mma<HasC, Full>(td, a, m, tb, tc);
    sgm_scatter<Full>(d, td, m);  // after every read: d may be a, b or c
  }
  template <class F, class Res, class DA, class AA, class BA, class... CA>
  __MK_F static void call(F &, unsigned m, Res *, DA &&d, AA &&a, BA &&b, CA &&...c) {
    auto &cc = sgm_first(c..., a);  // c, or any accessor when there is none
    if (m == ~0u) run<true>(m, d, a, b, cc);
    else run<false>(m, d, a, b, cc);
  }
  template <class F, class Res, class DA, class AA, class BA, class... CA>
  __MK_F static void call(F &, mk::simt::partial_mask p, Res *, DA &&d, AA &&a, BA &&b, CA &&...c) {
    typedef typename remove_reference<decltype(d(0u))>::type::__elem D;
    float out[32][2];
    sgm_lanes_mma<HasC>(out, p.m, a, b, sgm_first(c..., a));
    __MK_SGM_ROLLED for (unsigned l = 0; l < 32u; ++l)  // after every read: d may be a, b or c
      if (p.m >> l & 1u) d(l).__e = vec<D, 2>(D(out[l][0]), D(out[l][1]));
  }
};
struct sgm_product_twin {
  template <bool Full, class Res, class AA, class BA>
  __MK_F static void run(unsigned m, Res *res, AA &a, BA &b) {
    sgm_tile tb, td;
    sgm_gather<Full>(tb, b, m);
    sgm_tile_mma<false, Full>(td, a, m, tb, tb);
    typedef typename remove_reference<decltype(a(0u))>::type::__elem T;
    _Pragma("unroll") for (unsigned l = 0; l < 32u; ++l)
      if (Full || (m >> l & 1u)) {
        simdgroup_matrix<T, 8, 8> x;
        const unsigned r = sgm_row(l), c = sgm_col(l);
        x.__e = vec<T, 2>(T(td.r[r][c]), T(td.r[r][c + 1]));
        res->set(l, x);
      }
  }
  template <class F, class Res, class AA, class BA>
  __MK_F static void call(F &, unsigned m, Res *res, AA &&a, BA &&b) {
    if (m == ~0u) run<true>(m, res, a, b);
    else run<false>(m, res, a, b);
  }
  template <class F, class Res, class AA, class BA>
  __MK_F static void call(F &, mk::simt::partial_mask p, Res *res, AA &&a, BA &&b) {
    typedef typename remove_reference<decltype(a(0u))>::type::__elem T;
    float out[32][2];
    sgm_lanes_mma<false>(out, p.m, a, b, a);
    __MK_SGM_ROLLED for (unsigned l = 0; l < 32u; ++l)
      if (p.m >> l & 1u) {
        simdgroup_matrix<T, 8, 8> x;
        x.__e = vec<T, 2>(T(out[l][0]), T(out[l][1]));
        res->set(l, x);
      }
  }
};

// simdgroup_load / simdgroup_store: each lane's pointer, elements per row, origin and transpose,
// read once per active lane; Store: a store, else a load.
template <bool Store> struct sgm_copy_twin {
  template <class T, class P> __MK_F static void block(T (&t)[8][8], P s, ulong e, bool tr) {
    if (tr) {
      _Pragma("unroll") for (unsigned c = 0; c < 8u; ++c)
        _Pragma("unroll") for (unsigned r = 0; r < 8u; ++r) {
          if constexpr (Store) s[ulong(c) * e + r] = t[r][c];
          else t[r][c] = s[ulong(c) * e + r];
        }
    } else {
      _Pragma("unroll") for (unsigned r = 0; r < 8u; ++r)
        _Pragma("unroll") for (unsigned c = 0; c < 8u; ++c) {
          if constexpr (Store) s[ulong(r) * e + c] = t[r][c];
          else t[r][c] = s[ulong(r) * e + c];
        }
    }
  }
  template <class DA, class PA, class EA, class OA, class TA>
  __MK_F static void run(unsigned m, DA &d, PA &p, EA &epr, OA &org, TA &tr) {
    typedef typename remove_reference<decltype(d(0u))>::type::__elem T;
    typedef conditional_t<Store, T *, const T *> P;
    P ps[32];
    ulong es[32];
    bool ts[32];
    const auto eval = [&](unsigned l) {
      const ulong e = epr(l);
      const ulong2 o = org(l);
      ps[l] = P(p(l)) + (o.y * e + o.x);
      es[l] = e;
      ts[l] = tr(l);
    };
    const auto lane = [&](unsigned l) {
      if constexpr (Store) sgm_store_lane(d(l), ps[l], es[l], ts[l], l);
      else sgm_load_lane(d(l), ps[l], es[l], ts[l], l);
    };
    if (m != ~0u) {
      _Pragma("unroll") for (unsigned l = 0; l < 32u; ++l)
        if (m >> l & 1u) {
          eval(l);
          lane(l);
        }
      return;
    }
    bool same = true;  // clang proves it for arguments that do not depend on the lane
    _Pragma("unroll") for (unsigned l = 0; l < 32u; ++l) {
      eval(l);
      same = same && ps[l] == ps[0] && es[l] == es[0] && ts[l] == ts[0];
    }
    if (same && (!Store || es[0] >= 8u)) {  // one 8x8 block, rows apart (a store's may not overlap)
      T t[8][8];
      if constexpr (Store)
        _Pragma("unroll") for (unsigned l = 0; l < 32u; ++l) {
          const unsigned r = sgm_row(l), c = sgm_col(l);
          t[r][c] = d(l).__e[0];
          t[r][c + 1] = d(l).__e[1];
        }
      block(t, ps[0], es[0], ts[0]);
      if constexpr (!Store)
        _Pragma("unroll") for (unsigned l = 0; l < 32u; ++l) {
          const unsigned r = sgm_row(l), c = sgm_col(l);
          d(l).__e = vec<T, 2>(t[r][c], t[r][c + 1]);
        }
      return;
    }
    _Pragma("unroll") for (unsigned l = 0; l < 32u; ++l) lane(l);
  }
  // A partial mask's copy in a rolled loop (a small helper's partial-mask version).
  template <class DA, class PA, class EA, class OA, class TA>
  __MK_F static void run_rolled(unsigned m, DA &d, PA &p, EA &epr, OA &org, TA &tr) {
    typedef typename remove_reference<decltype(d(0u))>::type::__elem T;
    typedef conditional_t<Store, T *, const T *> P;
    __MK_SGM_ROLLED for (unsigned l = 0; l < 32u; ++l)
      if (m >> l & 1u) {
        const ulong e = epr(l);
        const ulong2 o = org(l);
        const P ptr = P(p(l)) + (o.y * e + o.x);
        if constexpr (Store) sgm_store_lane(d(l), ptr, e, tr(l), l);
        else sgm_load_lane(d(l), ptr, e, tr(l), l);
      }
  }
  template <bool Rolled, class DA, class PA, class EA, class OA, class TA>
  __MK_F static void go(unsigned m, DA &d, PA &p, EA &epr, OA &org, TA &tr) {
    if constexpr (Rolled) run_rolled(m, d, p, epr, org, tr);
    else run(m, d, p, epr, org, tr);
  }
  template <bool Rolled, class DA, class PA, class... R>
  __MK_F static void dispatch(unsigned m, DA &d, PA &p, R &...rest) {
    const auto epr = [](unsigned) { return ulong(8); };
    const auto org = [](unsigned) { return ulong2(0); };
    const auto no = [](unsigned) { return false; };
    if constexpr (sizeof...(R) == 0) go<Rolled>(m, d, p, epr, org, no);
    else if constexpr (sizeof...(R) == 1) go<Rolled>(m, d, p, rest..., org, no);
    else if constexpr (sizeof...(R) == 2) go<Rolled>(m, d, p, rest..., no);
    else go<Rolled>(m, d, p, rest...);
  }
  template <class F, class Res, class DA, class PA, class... R>
  __MK_F static void call(F &, unsigned m, Res *, DA &&d, PA &&p, R &&...rest) {
    dispatch<false>(m, d, p, rest...);
  }
  template <class F, class Res, class DA, class PA, class... R>
  __MK_F static void call(F &, mk::simt::partial_mask pm, Res *, DA &&d, PA &&p, R &&...rest) {
    dispatch<true>(pm.m, d, p, rest...);
  }
};

template <class T, int C, int R>
mk::simt::tag<sgm_product_twin, simdgroup_matrix<T, C, R>>
__mk_simt_sgm_product(const simdgroup_matrix<T, C, R> &a, const simdgroup_matrix<T, C, R> &b);
} // namespace __mk

template <class D, class A, class B>
mk::simt::tag<__mk::sgm_mma_twin<false>, void>
__mk_simt_simdgroup_multiply(simdgroup_matrix<D, 8, 8> &d, const simdgroup_matrix<A, 8, 8> &a,
                             const simdgroup_matrix<B, 8, 8> &b);
template <class D, class A, class B, class C>
mk::simt::tag<__mk::sgm_mma_twin<true>, void>
__mk_simt_simdgroup_multiply_accumulate(simdgroup_matrix<D, 8, 8> &d,
                                        const simdgroup_matrix<A, 8, 8> &a,
                                        const simdgroup_matrix<B, 8, 8> &b,
                                        const simdgroup_matrix<C, 8, 8> &c);
template <typename T, int C, int R>
mk::simt::tag<__mk::sgm_copy_twin<false>, void>
__mk_simt_simdgroup_load(simdgroup_matrix<T, C, R> &d, const T *src, ulong elements_per_row = C,
                         ulong2 matrix_origin = ulong2(0), bool transpose_matrix = false);
template <typename T, int C, int R>
mk::simt::tag<__mk::sgm_copy_twin<true>, void>
__mk_simt_simdgroup_store(const simdgroup_matrix<T, C, R> &a, T *dst, ulong elements_per_row = C,
                          ulong2 matrix_origin = ulong2(0), bool transpose_matrix = false);

} // namespace metal
