// SIMD-group and quad-group functions (<metal_simdgroup>), written from the
// MSL specification's tables of SIMD-group and quad-group functions.
//
// Every function is a rendezvous of the SIMD-group built on the one runtime
// primitive, rt->simd_exchange: each live lane of the SIMD-group that reaches
// the same call site contributes its value and gets a view of all of them;
// each lane then computes its own result from that view. Semantics, with the
// choices made where Apple's GPUs leave them open:
// - reductions and prefix operations cover active lanes only (lanes that
//   returned early, lanes past the end of a short last SIMD-group, lanes that
//   diverged elsewhere), in the element type (half sums round after every
//   addition). Reductions fold as a GPU's log-step reduction does, a pairwise
//   tree over lane positions (sg_tree); prefix operations fold in lane order.
//   Exclusive prefixes give 0 (sum) / 1 (product) in the first active lane;
// - reading a lane that is inactive or out of range (shuffle_down's upper
//   delta lanes, shuffle_up's lower ones, a lane id >= 32) gives the caller's
//   own value, which is what the spec says for shuffle_up/down;
// - rotations and shuffle_and_fill without a modulo work on all 32 lanes
//   (a short SIMD-group's missing lanes read as above);
// - integer sums and products wrap; min/max of floating types ignore a NaN
//   operand (like fmin/fmax);
// - simd_vote::all()/any() look at the lanes that were active at the ballot.
// A quad is 4 consecutive lanes (lane & ~3 .. +3); quad functions read only
// their quad's slots of the same exchange.
//
// Types: scalars and vectors of char, uchar, short, ushort, int, uint, long,
// ulong, half, bfloat, float (no bool, as in MSL: ballot/all/any take bool);
// simd_and/or/xor take integers only.
#pragma once
#pragma clang system_header
#include "runtime.h"
#include "vec.h"

namespace mk {
namespace simt {
template <class Tag, class R> struct tag;  // simt.h
// A mask that never holds every lane (simt.h's twin_mask): the simdgroup_matrix twins then run
// rolled loops, which keep a small helper's seldom run partial-mask version small (most of the
// compile time of a kernel of many fragment products was there); other twins take the mask.
struct partial_mask {
  unsigned m;
  __MK_F operator unsigned() const { return m; }
};
}
}  // namespace mk

namespace metal {
namespace __mk {
template <class T> struct sg_type {
  static constexpr bool num = is_int<T> || is_fp<T>;
  static constexpr bool integral = is_int<T>;
};
template <class T, int N> struct sg_type<vec<T, N>> : sg_type<T> {};

#define __MK_SG_NUM(T, fn)                                                     \
  static_assert(__mk::sg_type<T>::num, fn ": the value must be a scalar or vector of an integer, half, bfloat or float type")
// MSL has no bool shuffles or broadcasts (code for Apple GPUs converts to ushort).
#define __MK_SG_MOVE(T, fn)                                                    \
  static_assert(__mk::sg_type<T>::num, fn ": the value must be a scalar or vector of an integer, half, bfloat or "  \
                                          "float type (MSL has no bool form: convert to ushort and back)")
#define __MK_SG_INT(T, fn)                                                     \
  static_assert(__mk::sg_type<T>::integral, fn ": the value must be a scalar or vector of an integer type")

// The result of one rendezvous, as the calling lane sees it.
struct sg_view {
  mk_simd_view w;
  simt_exchange *x = nullptr;  // a SIMT kernel's exchange (else the fiber runtime's rendezvous)
  __MK_F unsigned lane() const { return w.lane; }
  __MK_F unsigned active() const { return w.active; }
  __MK_F bool on(unsigned i) const { return i < 32u && ((w.active >> i) & 1u); }
  // Whether other lanes' values are here: a SIMT kernel's first pass only collects them,
  // so a function writing through an output parameter waits for the second.
  __MK_F bool ready() const { return !x || x->computing; }
  template <class T> __MK_F T get(unsigned i) const {
    T r;
    __builtin_memcpy((void *)&r, w.values + i * w.stride, sizeof(T));
    return r;
  }
  // Lane src's value, or own if src is not an active lane (undefined on a GPU).
  template <class T> __MK_F T read(unsigned src, const T &own) const { return on(src) ? get<T>(src) : own; }
};

// A SIMT kernel's exchange: the first pass stores the lane's value, the second reads all of them.
__MK_F sg_view simt_view(simt_exchange *x, const void *v, unsigned size) {
  if (!x->computing && size) {
    __builtin_memcpy(x->slot[x->lane], v, size);
    x->had_data = true;
  }
  return sg_view{mk_simd_view{&x->slot[0][0], MK_SIMD_SLOT, x->active, x->lane, 32u}, x};
}

template <class T> __MK_F sg_view sg_exchange(const T &v, site s) {
  static_assert(sizeof(T) <= MK_SIMD_SLOT, "SIMD-group value too large");
  if (s.x) return simt_view(s.x, (const void *)&v, sizeof(T));
  return sg_view{rt->simd_exchange((const void *)&v, sizeof(T), s.file, s.line, s.column)};
}
__MK_F sg_view sg_exchange(site s) {
  if (s.x) return simt_view(s.x, nullptr, 0);
  return sg_view{rt->simd_exchange(nullptr, 0, s.file, s.line, s.column)};
}

template <class T> struct sg_pair {
  T data, fill;
};

// Element-wise binary operations (vectors lane by lane).
template <class T, class F> __MK_F T ew(const T &a, const T &b, F f) {
  if constexpr (vinfo<T>::is_vec) {
    T r;
    for (int i = 0; i < vinfo<T>::n; ++i) r[i] = f(a[i], b[i]);
    return r;
  } else {
    return f(a, b);
  }
}
// Integer sums and products wrap (as on the GPU), computed unsigned so C++
// signed overflow never happens.
template <class E> using wrap_t = conditional_t<(sizeof(E) > 4), ulong, uint>;
struct op_sum {
  template <class T> __MK_F T operator()(const T &a, const T &b) const {
    return ew(a, b, [](auto x, auto y) {
      typedef decltype(x) E;
      if constexpr (is_int<E>) return E(wrap_t<E>(x) + wrap_t<E>(y));
      else return E(x + y);
    });
  }
};
struct op_product {
  template <class T> __MK_F T operator()(const T &a, const T &b) const {
    return ew(a, b, [](auto x, auto y) {
      typedef decltype(x) E;
      if constexpr (is_int<E>) return E(wrap_t<E>(x) * wrap_t<E>(y));
      else return E(x * y);
    });
  }
};
struct op_and {
  template <class T> __MK_F T operator()(const T &a, const T &b) const { return T(a & b); }
};
struct op_or {
  template <class T> __MK_F T operator()(const T &a, const T &b) const { return T(a | b); }
};
struct op_xor {
  template <class T> __MK_F T operator()(const T &a, const T &b) const { return T(a ^ b); }
};
struct op_min {
  template <class T> __MK_F T operator()(const T &a, const T &b) const {
    return ew(a, b, [](auto x, auto y) { return (y < x || x != x) ? y : x; });
  }
};
struct op_max {
  template <class T> __MK_F T operator()(const T &a, const T &b) const {
    return ew(a, b, [](auto x, auto y) { return (x < y || x != x) ? y : x; });
  }
};

// Folds the values of the lanes in mask, in lane order; empty gives init. The prefix
// operations' order.
template <class T, class Op> __MK_F T sg_fold(const sg_view &v, unsigned mask, const T &init, Op op) {
  if (!mask) return init;
  T r = v.get<T>(unsigned(__builtin_ctz(mask)));
  for (mask &= mask - 1; mask; mask &= mask - 1) r = op(r, v.get<T>(unsigned(__builtin_ctz(mask))));
  return r;
}
// The reductions' order: a pairwise tree over the n lanes from b, as a GPU reduces in log2(n)
// steps. Adjacent lanes first (lower lane on the left), then pairs of pairs, so a simd_sum's
// first two levels are its quads' quad_sum. A lane not in `present` (inactive, or past a short
// SIMD-group's end) passes its partner's value up unchanged. At least one lane is present;
// v[i] of the others is never read.
template <class T, class Op> __MK_F T sg_tree(T *v, unsigned present, unsigned b, unsigned n, Op op) {
  for (unsigned s = 1; s < n; s <<= 1)
    for (unsigned i = b; i < b + n; i += 2 * s)
      if (present >> (i + s) & 1u) {
        v[i] = (present >> i & 1u) ? op(v[i], v[i + s]) : v[i + s];
        present |= 1u << i;
      }
  return v[b];
}
// sg_tree of n lanes all present, v[0..n): each level into a new array, which stays in
// registers (sg_tree's in-place updates went through memory).
template <unsigned n, class T, class Op> __MK_F T sg_tree_full(const T *v, Op op) {
  if constexpr (n == 1) {
    return v[0];
  } else {
    T w[n / 2];
    for (unsigned i = 0; i < n / 2; ++i) w[i] = op(v[2 * i], v[2 * i + 1]);
    return sg_tree_full<n / 2>(w, op);
  }
}
// sg_tree over the exchange's values of the lanes in mask (not empty), within the scope from b.
template <class T, class Op> __MK_F T sg_tree_of(const sg_view &v, unsigned mask, unsigned b, unsigned n, Op op) {
  T vals[32];
  for (unsigned k = mask; k; k &= k - 1) vals[__builtin_ctz(k)] = v.get<T>(unsigned(__builtin_ctz(k)));
  return sg_tree(vals, mask, b, n, op);
}

// Lanes of the caller's scope: the whole SIMD-group, or its quad.
__MK_F unsigned scope_mask(unsigned lane, bool quad) { return quad ? 0xFu << (lane & ~3u) : 0xFFFFFFFFu; }
// Scope lanes up to and including the caller (inclusive) or before it.
__MK_F unsigned upto(unsigned lane, bool inclusive) { return inclusive ? (2u << lane) - 1u : (1u << lane) - 1u; }

template <class Op, bool Quad, class T> __MK_F T sg_reduce(const T &x, site s) {
  sg_view v = sg_exchange(x, s);
  if (!v.ready()) return x;  // a SIMT kernel's first pass: only collecting
  const unsigned m = v.active() & scope_mask(v.lane(), Quad);
  const unsigned b = Quad ? v.lane() & ~3u : 0u, n = Quad ? 4u : 32u;
  if (!v.x || sizeof(T) > sizeof(v.x->cache[0])) return sg_tree_of<T>(v, m, b, n, Op());
  // A SIMT kernel asks once per lane: fold once per scope.
  const unsigned k = Quad ? 1u + (v.lane() >> 2) : 0u;
  T r;
  if (v.x->cached >> k & 1u) {
    __builtin_memcpy((void *)&r, v.x->cache[k], sizeof(T));
  } else {
    r = sg_tree_of<T>(v, m, b, n, Op());
    __builtin_memcpy(v.x->cache[k], (const void *)&r, sizeof(T));
    v.x->cached |= 1u << k;
  }
  return r;
}
// A SIMT kernel's reduction, called through its twin (below) by msl/simt with each lane's
// argument: every active lane's value is read once and each scope is folded once, in sg_reduce's
// tree, so the results are the same; a whole SIMD-group's values load as vectors, where the
// exchange's two passes call the function per lane.
template <class Op, bool Quad, class T> struct sg_reduce_twin {
  template <class F, class Res, class A> __MK_F static void call(F &, unsigned m, Res *res, A &&arg) {
    // Every slot is stored (inactive lanes' arguments are not read, and their results never
    // are): loads of the slots are then served from the stores, which stores under a mask stall.
    // Whole lines: a vector store straddling two, read back in parts, took up to a third longer
    // depending on where the stack happened to put the array.
    alignas(64) T v[32];
    for (unsigned l = 0; l < 32u; ++l) v[l] = (m >> l & 1u) ? T(arg(l)) : T();
    constexpr unsigned n = Quad ? 4u : 32u;
    for (unsigned b = 0; b < 32u; b += n) {
      const unsigned full = Quad ? 0xFu << b : ~0u, mb = m & full;
      if (!mb) continue;
      const T r = mb == full ? sg_tree_full<n>(v + b, Op()) : sg_tree(v, mb, b, n, Op());
      for (unsigned l = b; l < b + n; ++l) res->set(l, r);
    }
  }
};
// The twin a reduction declares: sg_reduce_twin for the types it takes, else none (the call
// goes to the function itself, which reports the type).
template <class Op, bool Quad, class T>
using reduce_twin_t = conditional_t<sg_type<T>::num, mk::simt::tag<sg_reduce_twin<Op, Quad, T>, T>, stdlib_twin>;

template <class Op, bool Quad, bool Inclusive, int Identity, class T> __MK_F T sg_prefix(const T &x, site s) {
  sg_view v = sg_exchange(x, s);
  if (!v.ready()) return x;
  unsigned m = v.active() & scope_mask(v.lane(), Quad) & upto(v.lane(), Inclusive);
  return sg_fold(v, m, T(Identity), Op());
}

// Data movement. `Quad`: lane ids are quad lane ids within the caller's quad.
enum class mv { index, x0r, up, down, rot_up, rot_down };
template <bool Quad, mv K, class T> __MK_F T sg_move(const T &x, unsigned arg, site s) {
  sg_view v = sg_exchange(x, s);
  if (!v.ready()) return x;
  const unsigned n = Quad ? 4u : 32u, l = v.lane() & (n - 1u), base = v.lane() - l;
  unsigned src; // position within the scope; >= n means "none"
  switch (K) {
  case mv::index: src = arg; break;
  case mv::x0r: src = l ^ arg; break;
  case mv::up: src = arg <= l ? l - arg : n; break;
  case mv::down: src = l + arg; break;
  case mv::rot_up: src = (l + n - (arg & (n - 1u))) & (n - 1u); break;
  default: src = (l + arg) & (n - 1u); break;
  }
  return src < n ? v.read(base + src, x) : x;
}
// shuffle_and_fill: vectors of `modulo` lanes; lanes shifted past a vector's
// end take filling_data from the other end of the same vector.
template <bool Quad, bool Up, class T>
__MK_F T sg_fill(const T &data, const T &fill, unsigned delta, unsigned modulo, site s) {
  sg_view v = sg_exchange(sg_pair<T>{data, fill}, s);
  if (!v.ready()) return data;
  const unsigned n = Quad ? 4u : 32u, l = v.lane() & (n - 1u);
  const unsigned m = modulo && modulo <= n ? modulo : n;
  const unsigned j = l % m, vbase = v.lane() - j;
  bool from_fill;
  unsigned src;
  if (Up) {
    from_fill = j < delta;
    src = from_fill ? (j + m - delta % m) % m : j - delta;
  } else {
    from_fill = j + delta >= m;
    src = (j + delta) % m;
  }
  if (!v.on(vbase + src)) return data;
  sg_pair<T> p = v.get<sg_pair<T>>(vbase + src);
  return from_fill ? p.fill : p.data;
}
} // namespace __mk

// ---- ballots -------------------------------------------------------------

// A ballot of the SIMD-group: bit i is lane i's expr (0 for inactive lanes).
// The lanes that were active at the ballot are kept in the upper 32 bits of
// the storage (SIMD width is 32) so all() and any() can look only at them;
// conversion to vote_t gives the ballot bits alone.
class simd_vote {
public:
  typedef ulong vote_t;
  explicit constexpr simd_vote(vote_t v = 0) : __bits((v & 0xFFFFFFFFul) | 0xFFFFFFFF00000000ul) {}
  explicit constexpr operator vote_t() const { return __bits & 0xFFFFFFFFul; }
  // True if expr was true in every lane active at the ballot.
  constexpr bool all() const { return (__bits & (__bits >> 32)) == (__bits >> 32); }
  // True if expr was true in some active lane.
  constexpr bool any() const { return (__bits & (__bits >> 32) & 0xFFFFFFFFul) != 0; }
  static constexpr simd_vote __make(unsigned bits, unsigned active) {
    simd_vote r;
    r.__bits = ulong(bits & active) | (ulong(active) << 32);
    return r;
  }

private:
  vote_t __bits;
};

// A ballot of the caller's quad: bit i is quad lane i's expr.
class quad_vote {
public:
  typedef ushort vote_t;
  explicit constexpr quad_vote(vote_t v = 0) : __bits(ushort((v & 0xFu) | 0xF0u)) {}
  explicit constexpr operator vote_t() const { return vote_t(__bits & 0xFu); }
  constexpr bool all() const { return ((__bits & (__bits >> 4)) & 0xFu) == ((__bits >> 4) & 0xFu); }
  constexpr bool any() const { return (__bits & (__bits >> 4) & 0xFu) != 0; }
  static constexpr quad_vote __make(unsigned bits, unsigned active) {
    quad_vote r;
    r.__bits = ushort((bits & active & 0xFu) | ((active & 0xFu) << 4));
    return r;
  }

private:
  vote_t __bits;
};

namespace __mk {
// Bits of the lanes (of the scope) whose expr is true, and the active ones,
// shifted so the scope's first lane is bit 0.
struct sg_votes {
  unsigned bits, active, lane;
};
template <bool Quad> __MK_F sg_votes sg_ballot(bool expr, site s) {
  sg_view v = sg_exchange(expr, s);
  if (!v.ready()) return {0u, 0u, v.lane()};
  unsigned bits = 0;
  for (unsigned m = v.active(); m; m &= m - 1) {
    unsigned i = unsigned(__builtin_ctz(m));
    bits |= unsigned(v.get<bool>(i)) << i;
  }
  unsigned act = v.active();
  if (Quad) {
    unsigned sh = v.lane() & ~3u;
    return {(bits >> sh) & 0xFu, (act >> sh) & 0xFu, v.lane() & 3u};
  }
  return {bits, act, v.lane()};
}
} // namespace __mk

// ---- SIMD-group functions --------------------------------------------------

// The shuffles and broadcasts, for SIMD-groups (quad = false) and quad-groups.
#define __MK_SG_MOVE_FN(name, quad, kind, arg)                                            \
  template <class T> __mk::stdlib_twin __mk_simt_##name(T data, ushort arg);              \
  template <class T> __MK_F T name(T data, ushort arg, __mk::site s = __mk::site::here()) { \
    __MK_SG_MOVE(T, #name);                                                               \
    return __mk::sg_move<quad, __mk::mv::kind>(data, arg, s);                             \
  }
// shuffle_and_fill_up/down, without a modulo (the whole group) and with one.
#define __MK_SG_FILL_FNS(name, quad, up, width)                                                        \
  template <class T> __mk::stdlib_twin __mk_simt_##name(T data, __mk::ident<T> filling_data, ushort delta);   \
  template <class T>                                                                                   \
  __mk::stdlib_twin __mk_simt_##name(T data, __mk::ident<T> filling_data, ushort delta, ushort modulo);    \
  template <class T>                                                                                   \
  __MK_F T name(T data, __mk::ident<T> filling_data, ushort delta, __mk::site s = __mk::site::here()) { \
    __MK_SG_MOVE(T, #name);                                                                            \
    return __mk::sg_fill<quad, up>(data, filling_data, delta, width, s);                               \
  }                                                                                                    \
  template <class T>                                                                                   \
  __MK_F T name(T data, __mk::ident<T> filling_data, ushort delta, ushort modulo,                      \
                __mk::site s = __mk::site::here()) {                                                   \
    __MK_SG_MOVE(T, #name);                                                                            \
    return __mk::sg_fill<quad, up>(data, filling_data, delta, modulo, s);                              \
  }

__MK_F simd_vote simd_ballot(bool expr, __mk::site s = __mk::site::here()) {
  __mk::sg_votes b = __mk::sg_ballot<false>(expr, s);
  return simd_vote::__make(b.bits, b.active);
}
__MK_F simd_vote simd_active_threads_mask(__mk::site s = __mk::site::here()) {
  __mk::sg_view v = __mk::sg_exchange(s);
  return simd_vote::__make(v.active(), v.active());
}
__MK_F bool simd_all(bool expr, __mk::site s = __mk::site::here()) {
  __mk::sg_votes b = __mk::sg_ballot<false>(expr, s);
  return b.bits == b.active;
}
__MK_F bool simd_any(bool expr, __mk::site s = __mk::site::here()) {
  return __mk::sg_ballot<false>(expr, s).bits != 0;
}
__MK_F bool simd_is_first(__mk::site s = __mk::site::here()) {
  __mk::sg_view v = __mk::sg_exchange(s);
  return v.lane() == unsigned(__builtin_ctz(v.active()));
}
// Helper threads exist only in fragment functions.
__MK_F bool simd_is_helper_thread() { return false; }

__MK_SG_MOVE_FN(simd_broadcast, false, index, broadcast_lane_id)
template <class T> __mk::stdlib_twin __mk_simt_simd_broadcast_first(T data);
template <class T> __MK_F T simd_broadcast_first(T data, __mk::site s = __mk::site::here()) {
  __MK_SG_MOVE(T, "simd_broadcast_first");
  __mk::sg_view v = __mk::sg_exchange(data, s);
  return v.get<T>(unsigned(__builtin_ctz(v.active())));
}
__MK_SG_MOVE_FN(simd_shuffle, false, index, simd_lane_id)
__MK_SG_MOVE_FN(simd_shuffle_xor, false, x0r, mask)
__MK_SG_MOVE_FN(simd_shuffle_up, false, up, delta)
__MK_SG_MOVE_FN(simd_shuffle_down, false, down, delta)
__MK_SG_MOVE_FN(simd_shuffle_rotate_up, false, rot_up, delta)
__MK_SG_MOVE_FN(simd_shuffle_rotate_down, false, rot_down, delta)
__MK_SG_FILL_FNS(simd_shuffle_and_fill_up, false, true, 32u)
__MK_SG_FILL_FNS(simd_shuffle_and_fill_down, false, false, 32u)

#define __MK_SG_RED(name, op, check, quad)                                     \
  template <class T> __mk::reduce_twin_t<__mk::op, quad, T> __mk_simt_##name(T data); \
  template <class T> __MK_F T name(T data, __mk::site s = __mk::site::here()) { \
    check(T, #name);                                                           \
    return __mk::sg_reduce<__mk::op, quad>(data, s);                           \
  }
#define __MK_SG_PRE(name, op, inclusive, identity, quad)                       \
  template <class T> __mk::stdlib_twin __mk_simt_##name(T data);               \
  template <class T> __MK_F T name(T data, __mk::site s = __mk::site::here()) { \
    __MK_SG_NUM(T, #name);                                                     \
    return __mk::sg_prefix<__mk::op, quad, inclusive, identity>(data, s);      \
  }
__MK_SG_RED(simd_sum, op_sum, __MK_SG_NUM, false)
__MK_SG_RED(simd_product, op_product, __MK_SG_NUM, false)
__MK_SG_RED(simd_min, op_min, __MK_SG_NUM, false)
__MK_SG_RED(simd_max, op_max, __MK_SG_NUM, false)
__MK_SG_RED(simd_and, op_and, __MK_SG_INT, false)
__MK_SG_RED(simd_or, op_or, __MK_SG_INT, false)
__MK_SG_RED(simd_xor, op_xor, __MK_SG_INT, false)
__MK_SG_PRE(simd_prefix_inclusive_sum, op_sum, true, 0, false)
__MK_SG_PRE(simd_prefix_inclusive_product, op_product, true, 1, false)
__MK_SG_PRE(simd_prefix_exclusive_sum, op_sum, false, 0, false)
__MK_SG_PRE(simd_prefix_exclusive_product, op_product, false, 1, false)

// ---- quad-group functions --------------------------------------------------

__MK_F quad_vote quad_ballot(bool expr, __mk::site s = __mk::site::here()) {
  __mk::sg_votes b = __mk::sg_ballot<true>(expr, s);
  return quad_vote::__make(b.bits, b.active);
}
__MK_F quad_vote quad_active_threads_mask(__mk::site s = __mk::site::here()) {
  __mk::sg_votes b = __mk::sg_ballot<true>(true, s);
  return quad_vote::__make(b.active, b.active);
}
__MK_F bool quad_all(bool expr, __mk::site s = __mk::site::here()) {
  __mk::sg_votes b = __mk::sg_ballot<true>(expr, s);
  return b.bits == b.active;
}
__MK_F bool quad_any(bool expr, __mk::site s = __mk::site::here()) {
  return __mk::sg_ballot<true>(expr, s).bits != 0;
}
__MK_F bool quad_is_first(__mk::site s = __mk::site::here()) {
  __mk::sg_votes b = __mk::sg_ballot<true>(true, s);
  return b.lane == unsigned(__builtin_ctz(b.active));
}
__MK_F bool quad_is_helper_thread() { return false; }

__MK_SG_MOVE_FN(quad_broadcast, true, index, broadcast_lane_id)
template <class T> __mk::stdlib_twin __mk_simt_quad_broadcast_first(T data);
template <class T> __MK_F T quad_broadcast_first(T data, __mk::site s = __mk::site::here()) {
  __MK_SG_MOVE(T, "quad_broadcast_first");
  __mk::sg_view v = __mk::sg_exchange(data, s);
  unsigned q = v.active() & __mk::scope_mask(v.lane(), true);
  return v.get<T>(unsigned(__builtin_ctz(q)));
}
__MK_SG_MOVE_FN(quad_shuffle, true, index, quad_lane_id)
__MK_SG_MOVE_FN(quad_shuffle_xor, true, x0r, mask)
__MK_SG_MOVE_FN(quad_shuffle_up, true, up, delta)
__MK_SG_MOVE_FN(quad_shuffle_down, true, down, delta)
__MK_SG_MOVE_FN(quad_shuffle_rotate_up, true, rot_up, delta)
__MK_SG_MOVE_FN(quad_shuffle_rotate_down, true, rot_down, delta)
__MK_SG_FILL_FNS(quad_shuffle_and_fill_up, true, true, 4u)
__MK_SG_FILL_FNS(quad_shuffle_and_fill_down, true, false, 4u)

__MK_SG_RED(quad_sum, op_sum, __MK_SG_NUM, true)
__MK_SG_RED(quad_product, op_product, __MK_SG_NUM, true)
__MK_SG_RED(quad_min, op_min, __MK_SG_NUM, true)
__MK_SG_RED(quad_max, op_max, __MK_SG_NUM, true)
__MK_SG_RED(quad_and, op_and, __MK_SG_INT, true)
__MK_SG_RED(quad_or, op_or, __MK_SG_INT, true)
__MK_SG_RED(quad_xor, op_xor, __MK_SG_INT, true)
__MK_SG_PRE(quad_prefix_inclusive_sum, op_sum, true, 0, true)
__MK_SG_PRE(quad_prefix_inclusive_product, op_product, true, 1, true)
__MK_SG_PRE(quad_prefix_exclusive_sum, op_sum, false, 0, true)
__MK_SG_PRE(quad_prefix_exclusive_product, op_product, false, 1, true)

#undef __MK_SG_RED
#undef __MK_SG_PRE
#undef __MK_SG_NUM
#undef __MK_SG_MOVE
#undef __MK_SG_INT
} // namespace metal
