// What kernels the front end turns into SIMT code (python/metalkit/msl/simt) run on.
//
// Such a kernel is called once per SIMD-group. Its locals that live across
// statements are `mk::lanes<T>`: one T per lane. Each statement runs for every
// active lane (bit l of the mask `__m`) before the next, so the 32 lanes of a
// SIMD-group are in lockstep as on an Apple GPU. SIMD-group functions are
// called through `invoke`, which gives every active lane a view of all lanes'
// values; threadgroup barriers go through `barrier`, which checks that every
// live lane of the SIMD-group is there and then lets the other SIMD-groups of
// the threadgroup catch up (the runtime runs them as fibers).
#pragma once
#pragma clang system_header
#include "abi.h"
#include "ids.h"
#include "runtime.h"

// Placement new (there is no <new> in an MSL compile).
inline __attribute__((always_inline)) void* operator new(__SIZE_TYPE__, void* p) noexcept { return p; }

namespace mk {
namespace simt {

// ---- per-lane storage ----
// Default-initialises an object in raw lane storage; an array element by element, since its
// elements may have default member initializers. simdgroup_matrix's (its cached lane id) is for
// per-thread code: SIMT code takes the lane from its exchange, so its matrices need none.
template <class T> constexpr bool needs_init = true;
template <class T, int C, int R> constexpr bool needs_init<metal::simdgroup_matrix<T, C, R>> = false;
template <class T> __MK_F void init_default_at(T& x) {
  if constexpr (needs_init<T>) ::new ((void*)&x) T;
}
template <class T, unsigned long N> __MK_F void init_default_at(T (&x)[N]) {
  for (unsigned long i = 0; i < N; ++i) init_default_at(x[i]);
}
template <class T> struct lanes {
  alignas(T) unsigned char __raw[sizeof(T) * 32];
  __MK_F T& operator[](unsigned l) { return reinterpret_cast<T*>(__raw)[l]; }
  template <class... A> __MK_F void set(unsigned l, A&&... a) {
    ::new ((void*)&reinterpret_cast<T*>(__raw)[l]) T(static_cast<A&&>(a)...);
  }
  template <class... A> __MK_F void set_list(unsigned l, A&&... a) {
    ::new ((void*)&reinterpret_cast<T*>(__raw)[l]) T{static_cast<A&&>(a)...};
  }
  __MK_F void init_default(unsigned l) { init_default_at(reinterpret_cast<T*>(__raw)[l]); }
  // Lane l's slot: f() if `on`, else T() for a type that has one. Storing every lane lets later
  // vector loads of the slots take them from the store, which stores under a mask would stall.
  template <class F> __MK_F void set_if(unsigned l, bool on, F&& f) {
    if constexpr (__is_trivially_copyable(T) && __is_constructible(T)) {
      set(l, on ? T(f()) : T());
    } else if (on) {
      set(l, f());
    }
  }
};
// A reference per lane: bound once, then every use goes through it.
template <class T> struct lanes<T&> {
  T* __p[32];
  __MK_F T& operator[](unsigned l) { return *__p[l]; }
  __MK_F void set(unsigned l, T& r) { __p[l] = &r; }
};
// A const reference may bind a temporary: keep the value.
template <class T> struct lanes<const T&> : lanes<const T> {};
template <class T> struct lanes<T&&> : lanes<T> {};
template <class T, unsigned long N> struct lanes<T[N]> {
  alignas(T) unsigned char __raw[sizeof(T) * N * 32];
  typedef T __row[N];
  __MK_F __row& operator[](unsigned l) { return reinterpret_cast<__row*>(__raw)[l]; }
  __MK_F void init_default(unsigned l) { init_default_at((*this)[l]); }
};
// A per-lane array element-major: element i of lane l at i * 32 + l, so one element of every lane
// is a contiguous run (the transform picks it for arrays named only as `a[i]` or `*(a + i)`).
template <class T> struct lane_columns;
template <class T, unsigned long N> struct lane_columns<T[N]> {
  alignas(T) unsigned char __raw[sizeof(T) * N * 32];
  __MK_F T& at(unsigned l, long i) { return reinterpret_cast<T*>(__raw)[i * 32 + l]; }
  __MK_F void init_default(unsigned l) {
    for (unsigned long i = 0; i < N; ++i) init_default_at(at(l, (long)i));
  }
};
// Copies an array value into one lane's array (arrays with initializers).
template <class T, unsigned long N> __MK_F void copy(T (&d)[N], const T (&s)[N]) {
  for (unsigned long i = 0; i < N; ++i) d[i] = s[i];
}
template <class T, unsigned long N, unsigned long M> __MK_F void copy(T (&d)[N][M], const T (&s)[N][M]) {
  for (unsigned long i = 0; i < N; ++i) copy(d[i], s[i]);
}

// The type of `auto x = e;` from decltype((e)).
template <class T> struct decay { typedef T type; };
template <class T> struct decay<T&> : decay<T> {};
template <class T> struct decay<T&&> : decay<T> {};
template <class T> struct decay<const T> : decay<T> {};
template <class T> struct decay<volatile T> : decay<T> {};
template <class T> struct decay<const volatile T> : decay<T> {};
template <class T, unsigned long N> struct decay<T[N]> { typedef T* type; };
template <class T> using auto_t = typename decay<T>::type;
template <class T> struct unref { typedef T type; };
template <class T> struct unref<T&> { typedef T type; };
template <class T> struct unref<T&&> { typedef T type; };
template <class T> using unref_t = typename unref<T>::type;

// The mask of the lanes whose flag is set: one vector compare and move where the target has them.
__MK_F unsigned pack(const bool (&b)[32]) {
  typedef unsigned char bytes32 __attribute__((ext_vector_type(32)));
  typedef bool bits32 __attribute__((ext_vector_type(32)));
  bytes32 v;
  __builtin_memcpy(&v, b, 32);
  return __builtin_bit_cast(unsigned, __builtin_convertvector(v != (unsigned char)0, bits32));
}

// The lanes where a uint position base + lane (no wrap) is below c (`p < c`), or at most c if
// `inclusive`: the first n lanes. `p < c` compares in uint for an integer c of 32 bits or less
// (c converted), in c's type for 64 bits; exact_compare says which types are done here.
template <class E, class C = typename decay<E>::type>
constexpr bool exact_compare = __is_integral(C) && sizeof(C) <= 8;
template <class C> __MK_F unsigned lanes_below(unsigned base, const C& c, bool inclusive) {
  long long d;  // c - base in the comparison's type, kept within [-1, 32]
  if constexpr (sizeof(C) <= 4) {
    d = (long long)(unsigned)c - (long long)base;
  } else if constexpr (__is_signed(C)) {
    const long long v = (long long)c;
    d = v < (long long)base ? -1 : (v - (long long)base > 32 ? 32 : v - (long long)base);
  } else {
    const unsigned long long u = (unsigned long long)c;
    d = u < base ? -1 : (u - base > 32u ? 32 : (long long)(u - base));
  }
  const long long n = inclusive ? d + 1 : d;
  return n <= 0 ? 0u : n >= 32 ? ~0u : (1u << n) - 1u;
}

// The lane where a uint position base + lane (no wrap) equals c (`p == c`), compared as
// lanes_below compares: one bit, or none.
template <class C> __MK_F unsigned lanes_equal(unsigned base, const C& c) {
  unsigned long long d;  // c - base, where c is not below base
  if constexpr (sizeof(C) <= 4) {
    d = unsigned(c) - base;  // wraps past 31 for a c below base: base + 31 does not wrap
  } else if constexpr (__is_signed(C)) {
    if ((long long)c < (long long)base) return 0u;
    d = (unsigned long long)((long long)c - (long long)base);
  } else {
    if ((unsigned long long)c < base) return 0u;
    d = (unsigned long long)c - base;
  }
  return d < 32u ? 1u << d : 0u;
}
// The lanes where a uint position base + lane may equal c: lanes_equal's for an integer c; all 32
// for another type (a float rounds, so several lanes may match), whose lanes the caller tests.
template <class C> __MK_F unsigned eq_lanes(unsigned base, const C& c) {
  if constexpr (exact_compare<C>) return lanes_equal(base, c);
  else return ~0u;
}

// ---- SIMT helper functions ----
// A helper that reaches a SIMD-group function or barrier keeps its definition (for kernels run
// as fibers) and gains a twin declaration, `__mk_simt_<name>`, with the same parameters and this
// return type; Tag::call is the helper as SIMT code, taking per-lane arguments.
template <class Tag, class R> struct tag {
  typedef Tag type;
  typedef R result;
};
// The mask a twin is called with: as it is, or, from a small helper's version for a partial
// mask (`__mk_partial`), marked so (partial_mask, simd.h), since it never holds every lane there.
template <bool Partial> __MK_F auto twin_mask(unsigned m) {
  if constexpr (Partial) return partial_mask{m};
  else return m;
}
template <class R> struct ret_lanes { typedef lanes<R> type; };
template <class R> struct ret_lanes<const R> { typedef lanes<R> type; };
struct none {};
template <> struct ret_lanes<void> { typedef none type; };
template <class R> using ret_lanes_t = typename ret_lanes<R>::type;
// Makes an expression depend on a generic lambda's parameter, so a call of a twin that does not
// exist (the name is a standard SIMD-group function) is a substitution failure, not an error.
struct probe {};
template <class D, class T> __MK_F T&& dep(T&& t) { return static_cast<T&&>(t); }
template <class F, class = void> struct has_twin { static constexpr bool value = false; };
template <class F> struct has_twin<F, decltype((void)(*(F*)nullptr)(probe{}))> { static constexpr bool value = true; };
struct no_twin {};
// The twin a call resolves to is a user helper's (a tag), not one of metalkit's functions.
template <class T> struct twin_of {};
template <class Tag, class R> struct twin_of<tag<Tag, R>> { typedef void type; };

// The I-th of a pack of accessors (each: unsigned lane -> the argument for that lane).
template <unsigned I, class A0, class... A> __MK_F decltype(auto) nth(A0&& a0, A&&... a) {
  if constexpr (I == 0) return static_cast<A0&&>(a0);
  else return nth<I - 1>(static_cast<A&&>(a)...);
}

// ---- integer division ----
// MSL leaves an integer quotient or remainder by 0 undefined, and a GPU computes some value where
// x86 traps. SIMT code runs divisions that the per-thread code's compiler would drop as dead (a
// row index modulo a dimension that is 0 when the row is not used), so every `/` and `%` of a
// SIMT function comes here: by 0 the result is 0, by -1 it wraps (INT_MIN / -1 traps too).
template <class A, class B> __MK_CF auto quot(A a, B b) -> decltype(a / b) {
  typedef decltype(a / b) R;
  if constexpr (__is_integral(R)) {
    if (R(b) == R(0)) return R(0);
    if (R(-1) < R(0) && R(b) == R(-1)) {
      R r;
      __builtin_sub_overflow(R(0), R(a), &r);
      return r;
    }
  }
  return a / b;
}
template <class A, class B> __MK_CF auto rem(A a, B b) -> decltype(a % b) {
  typedef decltype(a % b) R;
  if constexpr (__is_integral(R))
    if (R(b) == R(0) || (R(-1) < R(0) && R(b) == R(-1))) return R(0);
  return a % b;
}
// `a /= b` and `a %= b` the same way (a float, vector or swizzle keeps its own operator).
template <class A, class B> __MK_F decltype(auto) quot_to(A&& a, B b) {
  if constexpr (__is_integral(decltype(a / b))) return a = quot(a, b);
  else return a /= b;
}
template <class A, class B> __MK_F decltype(auto) rem_to(A&& a, B b) {
  if constexpr (__is_integral(decltype(a % b))) return a = rem(a, b);
  else return a %= b;
}

// ---- the SIMD-group being run ----
struct frame {
  unsigned sg;            // SIMD-group index in the threadgroup (the runtime reads it through
                          // current_frame while a split kernel runs: mk_runtime::begin_split_group)
  u3 group_pos, group_size, dispatch_group_size, ngroups, grid, base;
  unsigned nsg;           // SIMD-groups in the threadgroup
  unsigned alive;         // lanes that exist and have not returned from the kernel
  bool fibers;            // SIMD-groups run as fibers: a barrier waits for the others
  void* scheduler;        // what runs them, when fibers (for mk_runtime::simt_barrier)
  metal::__mk::simt_exchange* x;  // the OS thread's (a SIMD-group function call never waits)

  u3 pos[32];             // each lane's position in the threadgroup (set by init_positions, which
                          // the launcher calls; only pos[0] when affine)
  bool affine;            // lane l's x position is pos[0].x + l (each row holds whole SIMD-groups)
  unsigned rows;          // 16 or 8: the threadgroup is that wide and lane l is at column l % rows of
                          // row pos[0].y + l / rows (plane pos[0].z); else 0
  unsigned short region;  // of a kernel split at its barriers: the one to run (launch.h)
  bool split;             // run as such a kernel's regions (launch.h run_groups_simt_regions)

  __MK_F unsigned index(unsigned l) const { return sg * 32u + l; }
  // Divides once per SIMD-group, then steps lane by lane.
  __MK_F void init_positions() {
    const unsigned i0 = sg * 32u, nx = group_size.x, ny = group_size.y;
    affine = (ny == 1u && group_size.z == 1u) || nx % 32u == 0u;
    // A SIMD-group of a 16- or 8-wide threadgroup starts a row; it stays in one plane when
    // planes hold whole SIMD-groups (or there is one plane: lanes past the end are not alive).
    rows = !affine && (nx == 16u || nx == 8u) && (group_size.z == 1u || nx * ny % 32u == 0u) ? nx : 0u;
    // Divisions are slow enough to show per SIMD-group: none for a 1D threadgroup.
    u3 p = ny == 1u && group_size.z == 1u ? u3{i0, 0u, 0u} : u3{i0 % nx, (i0 / nx) % ny, i0 / (nx * ny)};
    pos[0] = p;
    if (affine) return;
    for (unsigned l = 0; l < 32u; ++l) {
      pos[l] = p;
      if (++p.x == nx) {
        p.x = 0;
        if (++p.y == ny) {
          p.y = 0;
          ++p.z;
        }
      }
    }
  }
  __MK_F u3 pos_in_group(unsigned l) const { return affine ? u3{pos[0].x + l, pos[0].y, pos[0].z} : pos[l]; }
  __MK_F u3 pos_in_grid(unsigned l) const {
    const u3 p = pos_in_group(l);
    return {base.x + p.x, base.y + p.y, base.z + p.z};
  }
};
// Read once, by the kernel's prologue: later code uses its own reference, so a barrier (where
// other SIMD-groups run on this thread) need not set it again.
inline thread_local frame* current_frame = nullptr;
inline thread_local metal::__mk::simt_exchange thread_exchange;

template <class F, class = void> struct takes_site { static constexpr bool value = false; };
template <class F>
struct takes_site<F, decltype((void)(*(F*)nullptr)(0u, metal::__mk::site{}))> { static constexpr bool value = true; };

// A call of a SIMD-group function (or of a helper that reaches one) by the active lanes m.
// D: the call's result type. twin(probe): the call of the helper's SIMT twin with per-lane
// arguments, if the call resolves to one; siteful(l, site): the call for lane l passing the
// SIMD-group's exchange (metalkit's SIMD-group functions take it); plain(l): the call as written.
// res: where each lane's result goes.
template <class D, class Res, class B, class P, class G>
__MK_F void invoke(frame& f, unsigned m, Res* res, B&& siteful, P&& plain, G&& twin) {
  if constexpr (has_twin<G>::value) {
    twin(probe{});
  } else if constexpr (takes_site<B>::value) {
    metal::__mk::simt_exchange& x = *f.x;
    x.begin(m);
    const metal::__mk::site s{"", 0, 0, &x};
    for (unsigned l = 0; l < 32u; ++l)
      if (m >> l & 1u) {
        x.lane = l;
        if constexpr (__is_same(D, void)) siteful(l, s);
        else res->set(l, siteful(l, s));
      }
    if (!x.had_data) return;
    x.computing = true;
    for (unsigned l = 0; l < 32u; ++l)
      if (m >> l & 1u) {
        x.lane = l;
        if constexpr (__is_same(D, void)) siteful(l, s);
        else res->set(l, siteful(l, s));
      }
  } else {
    for (unsigned l = 0; l < 32u; ++l)
      if (m >> l & 1u) {
        if constexpr (__is_same(D, void)) plain(l);
        else res->set(l, plain(l));
      }
  }
}

// The lane whose call of a helper that logs (<metal_logging>) runs now, for the helper's log
// calls (logging.h); ~0u outside such a call.
inline thread_local unsigned log_lane = ~0u;

// A call of a user helper that logs and reaches no SIMD-group function, by the active lanes m:
// lane by lane, as a region would call it, each call told its lane through log_lane.
template <class D, class Res, class P> __MK_F void invoke_logging(unsigned m, Res* res, P&& plain) {
  unsigned& lane = log_lane;
  for (unsigned l = 0; l < 32u; ++l)
    if (m >> l & 1u) {
      lane = l;
      if constexpr (__is_same(D, void)) plain(l);
      else res->set(l, plain(l));
    }
  lane = ~0u;
}

// threadgroup_barrier: the SIMD-group arrives if any lane is here (as on the GPU; the runtime
// faults under check= unless every live lane is); then the other SIMD-groups of the threadgroup
// run up to a barrier.
// `ends_region`: the barrier ends a region of a kernel split at its barriers, whose launcher runs
// the next region only once every SIMD-group has run this one; any other barrier in such a kernel
// run without fibers would not wait, so it faults (the front end splits no kernel that has one).
__MK_F void barrier(frame& f, unsigned m, const char* file, int line, int column, bool ends_region = false) {
  if (!m) return;
  if (m != f.alive) metal::__mk::rt->simt_diverged(f.sg, f.alive & ~m, file, line);
  if (f.fibers) metal::__mk::rt->simt_barrier(f.scheduler, file, line, column);
  else if (f.split && !ends_region && f.nsg > 1)
    metal::__mk::rt->fault("internal error: a barrier inside a region of a kernel split at its barriers; "
                           "run it with execution=\"fibers\" and report it", file, line);
}

}  // namespace simt
template <class T> using lanes = simt::lanes<T>;
template <class T> using lane_columns = simt::lane_columns<T>;
}  // namespace mk

// The SIMT twin of a function passed as a template argument (a function pointer has no name to
// find its twin by): the front end specialises this for each such function f, with `call`
// declared like f's twin, when F == f (the cast to F's type picks f's overload, and a failed
// cast leaves the specialisation out). Unspecialised, a call through F is a call per lane.
template <bool B> struct __mk_when {};
template <> struct __mk_when<true> { typedef void type; };
template <auto F, class = void> struct __mk_fn_twin {};
