// Support for the launchers metalkit generates after a user's kernels: how a
// parameter's C++ type describes itself (mk_arg_info), how builtins are
// computed for each thread, and the loop over a range of threadgroups.
#ifndef METALKIT_LAUNCH_H
#define METALKIT_LAUNCH_H
// Appended to preprocessed source that already holds <metal_stdlib> (forced by -include).
// abi.h arrives with <metal_stdlib> (runtime.h), already expanded above.

namespace mk {

// ---- parameter types of a kernel, from its function pointer ----
template <class... P> struct types {};
template <int I, class L> struct at;
template <class H, class... T> struct at<0, types<H, T...>> { using type = H; };
template <int I, class H, class... T> struct at<I, types<H, T...>> { using type = typename at<I - 1, types<T...>>::type; };
template <class F> struct fn_params;
template <class R, class... P> struct fn_params<R (*)(P...)> { using type = types<P...>; };
template <class R, class... P> struct fn_params<R (*const)(P...)> { using type = types<P...>; };
template <class F, int I> using param_t = typename at<I, typename fn_params<F>::type>::type;

template <class T> struct strip { using type = T; };
template <class T> struct strip<T*> { using type = T; };
template <class T> struct strip<T&> { using type = T; };
template <class T> struct strip<T* const> { using type = T; };
template <class T> struct unconst { using type = T; static constexpr bool is_const = false; };
template <class T> struct unconst<const T> { using type = T; static constexpr bool is_const = true; };
template <class T> struct unconst<volatile T> { using type = T; static constexpr bool is_const = false; };
template <class T> struct unconst<const volatile T> { using type = T; static constexpr bool is_const = true; };

// ---- binding a runtime argument slot to a parameter ----
template <class P> struct bind { static P get(void* p) { return *(P*)p; } };
template <class T> struct bind<T*> { static T* get(void* p) { return (T*)p; } };
template <class T> struct bind<T&> { static T& get(void* p) { return *(T*)p; } };

// ---- element type codes ----
template <class T> struct code { static constexpr int value = MK_T_STRUCT; static constexpr int width = 1; };
#define MK_CODE(T, C) template <> struct code<T> { static constexpr int value = C; static constexpr int width = 1; };
MK_CODE(bool, MK_T_BOOL) MK_CODE(char, MK_T_I8) MK_CODE(signed char, MK_T_I8) MK_CODE(unsigned char, MK_T_U8)
MK_CODE(short, MK_T_I16) MK_CODE(unsigned short, MK_T_U16) MK_CODE(int, MK_T_I32) MK_CODE(unsigned int, MK_T_U32)
MK_CODE(long, MK_T_I64) MK_CODE(unsigned long, MK_T_U64) MK_CODE(long long, MK_T_I64)
MK_CODE(unsigned long long, MK_T_U64) MK_CODE(_Float16, MK_T_F16) MK_CODE(__bf16, MK_T_BF16) MK_CODE(float, MK_T_F32)
#undef MK_CODE
template <class T, int N> struct code<metal::vec<T, N>> { static constexpr int value = code<T>::value; static constexpr int width = N; };
template <class T, int N> struct code<metal::packed_vec<T, N>> { static constexpr int value = code<T>::value; static constexpr int width = N; };
// An atomic<T> in a buffer is a T to the caller: numpy passes plain ints/floats.
template <class T> struct code<metal::atomic<T>> { static constexpr int value = code<T>::value; static constexpr int width = 1; };

// `device void*` (raw memory) is described as bytes.
template <> struct code<void> { static constexpr int value = MK_T_U8; static constexpr int width = 1; };
template <class E> struct layout { static constexpr mk_u64 size = sizeof(E), align = alignof(E); };
template <> struct layout<void> { static constexpr mk_u64 size = 1, align = 1; };

// An enum travels as its underlying integer type.
template <class T, bool = __is_enum(T)> struct plain { using type = T; };
template <class T> struct plain<T, true> { using type = __underlying_type(T); };

// ---- struct layouts ----
// The front end specializes fields<S> for each struct whose members it read
// (msl/passes/structs.py, emitted by codegen); the compiler fills the table. Others
// have no layout (nullptr): their parameters take any bytes of the right size.
template <class T, class = void> struct fields { static constexpr const mk_struct_info* info = nullptr; };
// Makes a non-template struct's table dependent, so it is only instantiated when used.
template <class T, class V> struct dep { using type = T; };

// A member's element and array extents: arrays, metal::array and matrix columns peel off.
template <class T> struct shape {
  using elem = T;
  static constexpr int ndims = 0;
  static constexpr int dim(int) { return 0; }
};
template <class T, int N> struct extents : shape<T> {
  static constexpr int ndims = 1 + shape<T>::ndims;
  static constexpr int dim(int i) { return i == 0 ? N : shape<T>::dim(i - 1); }
};
template <class T, unsigned long N> struct shape<T[N]> : extents<T, int(N)> {};
template <class T, unsigned long N> struct shape<metal::array<T, N>> : extents<T, int(N)> {};
template <class T, int C, int R> struct shape<metal::matrix<T, C, R>> : extents<metal::vec<T, R>, C> {};

template <class E, bool = __is_pointer(E)> struct field_code : code<typename plain<E>::type> {};
template <class E> struct field_code<E, true> { static constexpr int value = MK_T_U64; static constexpr int width = 1; };

template <class F> constexpr mk_field_info field(const char* name, mk_u64 offset) {
  using S = shape<typename unconst<F>::type>;
  using E = typename unconst<typename S::elem>::type;
  if (S::ndims > 4)  // deeper arrays: bytes metalkit does not describe
    return mk_field_info{name, offset, MK_T_STRUCT, 1, sizeof(F), 0, {0, 0, 0, 0}, nullptr};
  constexpr int type = field_code<E>::value;
  return mk_field_info{name, offset, type, field_code<E>::width, sizeof(E), S::ndims,
                       {S::dim(0), S::dim(1), S::dim(2), S::dim(3)},
                       type == MK_T_STRUCT ? fields<E>::info : nullptr};
}

template <class P> constexpr mk_arg_info describe(const char* name, const char* decl, const char* builtin,
                                                  int index, int kind, int space, int array_len = 0) {
  using E = typename unconst<typename strip<P>::type>::type;
  using C = typename plain<E>::type;
  constexpr bool ro = unconst<typename strip<P>::type>::is_const;
  return mk_arg_info{name, decl, builtin, index, kind, code<C>::value, code<C>::width, space,
                     (kind == MK_ARG_BUFFER || kind == MK_ARG_THREADGROUP) && !ro && space != MK_SPACE_CONSTANT,
                     layout<E>::size, layout<E>::align, array_len,
                     code<C>::value == MK_T_STRUCT ? fields<E>::info : nullptr};
}

// The ids shared by every thread of group g; returns the group's (clipped) size.
inline __attribute__((always_inline)) u3 group_ids(const mk_dispatch* d, mk_u64 g, thread_ids& t, u3& base) {
  const unsigned gx = d->ngroups[0], gy = d->ngroups[1];
  ++group_serial;
  loop_thread = nullptr;  // a log call asks the runtime who it is (run_groups sets it for its own)
  simt::log_lane = ~0u;   // left set by a helper that logged, then faulted
  t.ngroups = {d->ngroups[0], d->ngroups[1], d->ngroups[2]};
  t.grid = {d->grid[0], d->grid[1], d->grid[2]};
  t.dispatch_group_size = {d->tg[0], d->tg[1], d->tg[2]};
  t.group_pos = {unsigned(g % gx), unsigned((g / gx) % gy), unsigned(g / (mk_u64(gx) * gy))};
  base = {t.group_pos.x * d->tg[0], t.group_pos.y * d->tg[1], t.group_pos.z * d->tg[2]};
  // Edge groups of a non-uniform grid are clipped, as with dispatchThreads.
  t.group_size = {d->grid[0] - base.x < d->tg[0] ? d->grid[0] - base.x : d->tg[0],
                  d->grid[1] - base.y < d->tg[1] ? d->grid[1] - base.y : d->tg[1],
                  d->grid[2] - base.z < d->tg[2] ? d->grid[2] - base.z : d->tg[2]};
  return t.group_size;
}

// The ids of thread (x, y, z) of the group of `n` threads starting at `base`, in t.
inline __attribute__((always_inline)) void thread_at(thread_ids& t, u3 base, u3 n, unsigned x, unsigned y,
                                                     unsigned z) {
  t.pos_in_group = {x, y, z};
  t.pos_in_grid = {base.x + x, base.y + y, base.z + z};
  t.index_in_group = x + n.x * (y + n.y * z);
}

// Runs every thread of threadgroups [first, last) as a plain loop; used for
// kernels with no barrier and no SIMD-group function, so the compiler can
// vectorise the innermost loop. Logs: the module logs (<metal_logging>), so a log call finds
// the thread's ids through loop_thread (left out otherwise: `t` escaping costs vectorisation).
template <bool Logs = false, class Body>
inline __attribute__((always_inline)) void run_groups(const mk_dispatch* d, mk_u64 first, mk_u64 last,
                                                      volatile mk_u64* at, Body body) {
  for (mk_u64 g = first; g < last; ++g) {
    *at = g;
    thread_ids t;
    u3 base;
    const u3 n = group_ids(d, g, t, base);
    if constexpr (Logs) loop_thread = &t;
    // Bounds, not a test in the loop: one thread (d->only) runs through the same code.
    u3 lo = {0u, 0u, 0u}, hi = n;
    if (d->only != ~0u) {
      lo = {d->only % n.x, (d->only / n.x) % n.y, d->only / (n.x * n.y)};
      hi = {lo.x + 1u, lo.y + 1u, lo.z + 1u};
    }
    for (unsigned z = lo.z; z < hi.z; ++z)
      for (unsigned y = lo.y; y < hi.y; ++y)
        for (unsigned x = lo.x; x < hi.x; ++x) {
          thread_at(t, base, n, x, y, z);
          body(t);
        }
  }
}

// ---- streaming stores ----
// A loop kernel whose last statements store its outputs at the thread's position in the grid,
// `out[id] = v;` (msl/passes/streaming.py), writes a large output past the cache: plain stores
// read each line of it in first, a third more memory traffic for add_arrays. Its threads run with
// each output moved onto a stack window of whole lines, which then goes to memory in aligned
// non-temporal stores. The stores being each thread's last act, no thread can tell they came
// later; other threads could only by racing.
struct unstaged {  // the kernel's own pointer
  template <class P> __attribute__((always_inline)) P operator()(P p, int) const { return p; }
};
template <int K> struct staged {  // output k's window, moved back by the window's first index
  unsigned long at[K];
  template <class P> __attribute__((always_inline)) P operator()(P, int k) const { return (P)at[k]; }
};

template <class I> constexpr mk_u64 index_max() {
  return __is_signed(I) ? (mk_u64(1) << (sizeof(I) * 8 - 1)) - 1 : mk_u64(I(~I(0)));
}
// A number or vector (whose assignment only overwrites; a struct's could read what it replaces)
// of a power-of-two size up to a line.
template <class P> constexpr bool streamable() {
  using T = typename strip<P>::type;
  return __is_pointer(P) && code<typename plain<T>::type>::value != MK_T_STRUCT && __is_trivially_copyable(T) &&
         sizeof(T) <= 64 && (sizeof(T) & (sizeof(T) - 1)) == 0;
}
// Whether a kernel whose outputs are P, indexed by an I, streams them (the module's table says so).
template <class I, class... P> constexpr bool streams() { return __is_integral(I) && (streamable<P>() && ...); }
template <bool Largest, int K> constexpr mk_u64 extreme(const mk_u64 (&v)[K]) {
  mk_u64 m = v[0];
  for (mk_u64 z : v) m = (Largest ? z > m : z < m) ? z : m;
  return m;
}

// E consecutive indices from w0 (where a line starts in every output) of K outputs of `size`
// bytes an element, gathered from index lo up to hi; then written, whole in lines past the
// cache, or in part (the ends of a run of threads) with plain stores.
template <int K, mk_u64 E, mk_u64 L> struct window {
  alignas(64) char stage[K][E * L];  // output k's in its first E * size[k] bytes
  long long w0 = 0, lo = 0, hi = 0;
  __attribute__((always_inline)) void flush(const unsigned long (&addr)[K], const mk_u64 (&size)[K]) {
    typedef long long line __attribute__((vector_size(64), aligned(64)));
    for (int k = 0; k < K; ++k)
      if (lo == w0 && hi == w0 + (long long)E)
        for (mk_u64 c = 0; c < E * size[k] / 64; ++c)
          __builtin_nontemporal_store(((line*)stage[k])[c], (line*)(addr[k] + w0 * size[k]) + c);
      else
        __builtin_memcpy((char*)(addr[k] + lo * size[k]), stage[k] + (lo - w0) * size[k], (hi - lo) * size[k]);
    lo = hi;
  }
};

// Runs threadgroups [first, last) as run_groups does, with the outputs `outs` (pointers indexed by
// the thread's position in the grid, of type I) streamed when the dispatch writes at least
// d->stream_bytes through them and one index starts a line in them all.
template <bool Logs, class I, class Body, class... P>
inline __attribute__((always_inline)) void run_groups_streamed(const mk_dispatch* d, mk_u64 first, mk_u64 last,
                                                               volatile mk_u64* at, Body body, P... outs) {
  auto plain = [&] { run_groups<Logs>(d, first, last, at, [&](const thread_ids& t) __attribute__((always_inline)) {
    body(t, unstaged{});
  }); };
  if constexpr (!streams<I, P...>()) {
    plain();
  } else {
    constexpr int K = sizeof...(P);
    constexpr mk_u64 size[K] = {sizeof(typename strip<P>::type)...};
    constexpr mk_u64 S = extreme<false>(size), L = extreme<true>(size);
    // Whole lines of every output, and 256 bytes or more of the largest (fewer cost more to set up
    // than streaming saves).
    constexpr mk_u64 E = 256 / L > 64 / S ? 256 / L : 64 / S;
    constexpr long long q = 64 / S;  // every q-th index starts a line in every output, if one does
    const unsigned long addr[K] = {(unsigned long)outs...};
    long long phase = q;
    for (long long i = 0; i < q && phase == q; ++i) {
      bool all = true;
      for (int k = 0; k < K; ++k) all = all && (addr[k] + i * size[k]) % 64 == 0;
      if (all) phase = i;
    }
    mk_u64 bytes = 0;
    for (mk_u64 z : size) bytes += z * d->grid[0] * d->grid[1] * d->grid[2];
    if (d->only != ~0u || phase == q || d->grid[0] == 0 || d->grid[0] - 1 > index_max<I>() ||
        bytes < d->stream_bytes) {
      plain();
      return;
    }
    window<K, E, L> w;
    for (mk_u64 g = first; g < last; ++g) {
      *at = g;
      thread_ids t;
      u3 base;
      const u3 n = group_ids(d, g, t, base);
      if constexpr (Logs) loop_thread = &t;
      for (unsigned z = 0; z < n.z; ++z)
        for (unsigned y = 0; y < n.y; ++y) {
          // A row of threads: on from the window's last index (the previous group's row of a
          // one-dimensional grid), else in a new window.
          const long long s = base.x, e = s + n.x;
          if (s != w.hi || w.hi == w.lo) {
            w.flush(addr, size);
            w.w0 = s - ((s - phase) % q + q) % q;
            w.lo = w.hi = s;
          }
          for (long long i = s; i < e;) {
            if (i == w.w0 + (long long)E) {
              w.flush(addr, size);
              w.w0 = w.lo = w.hi = i;
            }
            const long long c = e - i < w.w0 + (long long)E - i ? e - i : w.w0 + (long long)E - i;
            staged<K> st;
            for (int k = 0; k < K; ++k) st.at[k] = (unsigned long)w.stage[k] - (unsigned long)w.w0 * size[k];
            // One vector a step: a window's part left by a group's start or end is often short.
#pragma clang loop interleave_count(1)
            for (long long j = i; j < i + c; ++j) {
              thread_at(t, base, n, unsigned(j - s), y, z);
              body(t, st);
            }
            i += c;
            w.hi = i;
          }
        }
    }
    w.flush(addr, size);
#if defined(__x86_64__)
    __builtin_ia32_sfence();  // non-temporal stores are weakly ordered: all made before the dispatch ends
#else
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
#endif
  }
}

template <class Body> struct fiber_group {
  thread_ids t;
  u3 base;
  Body* body;
};

template <class Body> void fiber_thread(void* p, unsigned i) {
  fiber_group<Body>& c = *static_cast<fiber_group<Body>*>(p);
  thread_ids t = c.t;
  const u3 n = t.group_size;
  t.pos_in_group = {i % n.x, (i / n.x) % n.y, i / (n.x * n.y)};
  t.pos_in_grid = {c.base.x + t.pos_in_group.x, c.base.y + t.pos_in_group.y, c.base.z + t.pos_in_group.z};
  t.index_in_group = i;
  (*c.body)(t);
}

// Runs each threadgroup's threads as fibers (kernels with barriers or
// SIMD-group functions): the runtime schedules them.
template <class Body>
void run_groups_fibers(const mk_dispatch* d, mk_u64 first, mk_u64 last, volatile mk_u64* at, Body body) {
  for (mk_u64 g = first; g < last; ++g) {
    *at = g;
    fiber_group<Body> c;
    c.body = &body;
    const u3 n = group_ids(d, g, c.t, c.base);
    const unsigned pos[3] = {c.t.group_pos.x, c.t.group_pos.y, c.t.group_pos.z}, size[3] = {n.x, n.y, n.z};
    metal::__mk::rt->run_group(fiber_thread<Body>, &c, pos, size);
  }
}

// SIMT kernels (msl/simt): the kernel function runs once per SIMD-group, its lanes in
// lockstep; it finds its SIMD-group in mk::simt::current_frame. Builtins passed to it as
// arguments are lane 0's: the transformed kernel computes the per-lane ones itself.
template <class Body> struct simt_group {
  thread_ids t;
  u3 base;
  Body* body;
  bool fibers;
  metal::__mk::simt_exchange* x;  // the OS thread's
  simt::frame** current;          // the OS thread's mk::simt::current_frame
};

// SIMD-group sg's frame in the threadgroup `t` (lane 0's ids) starting at `base`.
__attribute__((always_inline)) inline void simt_frame(simt::frame& f, const thread_ids& t, u3 base, unsigned sg,
                                                      metal::__mk::simt_exchange* x, void* scheduler) {
  const unsigned n = t.group_size.x * t.group_size.y * t.group_size.z;
  f.group_pos = t.group_pos;
  f.group_size = t.group_size;
  f.dispatch_group_size = t.dispatch_group_size;
  f.ngroups = t.ngroups;
  f.grid = t.grid;
  f.base = base;
  f.sg = sg;
  f.nsg = (n + 31u) / 32u;
  const unsigned lanes = n - sg * 32u < 32u ? n - sg * 32u : 32u;
  f.alive = lanes == 32u ? ~0u : (1u << lanes) - 1u;
  f.fibers = scheduler != nullptr;  // the runtime runs them as fibers when c.fibers and nsg > 1
  f.scheduler = scheduler;
  f.x = x;
  f.region = 0;
  f.split = false;
  f.init_positions();
}

// Lane 0's ids of the SIMD-group whose frame is f.
__attribute__((always_inline)) inline thread_ids simt_lane0(thread_ids t, const simt::frame& f) {
  t.index_in_group = f.sg * 32u;
  t.pos_in_group = f.pos_in_group(0);
  t.pos_in_grid = f.pos_in_grid(0);
  return t;
}

template <class Body> void simt_sg(void* p, unsigned sg, void* scheduler) {
  simt_group<Body>& c = *static_cast<simt_group<Body>*>(p);
  // Aligned, so the kernel's stack arrays below sit the same way whatever called this: where they
  // fell followed the runtime's build, and a vector access that splits a cache line also stalls
  // the loads after it.
  alignas(64) simt::frame f;
  simt_frame(f, c.t, c.base, sg, c.x, scheduler);
  *c.current = &f;
  (*c.body)(simt_lane0(c.t, f));
}

template <class Body>
void run_groups_simt(const mk_dispatch* d, mk_u64 first, mk_u64 last, volatile mk_u64* at, int fibers,
                     Body body) {
  metal::__mk::simt_exchange* const x = &simt::thread_exchange;  // thread-locals: looked up once
  simt::frame** const current = &simt::current_frame;
  for (mk_u64 g = first; g < last; ++g) {
    *at = g;
    simt_group<Body> c;
    c.body = &body;
    c.fibers = fibers != 0;
    c.x = x;
    c.current = current;
    const u3 n = group_ids(d, g, c.t, c.base);
    const unsigned pos[3] = {c.t.group_pos.x, c.t.group_pos.y, c.t.group_pos.z}, size[3] = {n.x, n.y, n.z};
    metal::__mk::rt->run_simt_group(simt_sg<Body>, &c, pos, size, (n.x * n.y * n.z + 31u) / 32u, fibers);
  }
}

// A SIMT kernel split at its barriers into `regions` (msl/simt/fission.py): each region runs for
// every SIMD-group of a threadgroup before the next region starts, which is what the barriers
// between them ask for, so a barrier costs no fiber switch. The kernel is inlined here (the
// front end marks it), and its SIMD-groups run in this loop; the runtime finds the running one
// through current_frame. A SIMD-group's state goes from one region to the next in its frame and
// the kernel's slots.
template <class Body>
void run_groups_simt_regions(const mk_dispatch* d, mk_u64 first, mk_u64 last, volatile mk_u64* at,
                             unsigned regions, Body body) {
  metal::__mk::simt_exchange* const x = &simt::thread_exchange;  // thread-locals: looked up once
  simt::frame** const current = &simt::current_frame;
  alignas(64) simt::frame frames[32];  // a threadgroup holds at most 1024 threads (aligned: simt_sg)
  for (mk_u64 g = first; g < last; ++g) {
    *at = g;
    thread_ids t;
    u3 base;
    const u3 n = group_ids(d, g, t, base);
    const unsigned pos[3] = {t.group_pos.x, t.group_pos.y, t.group_pos.z}, size[3] = {n.x, n.y, n.z};
    const unsigned nsg = (n.x * n.y * n.z + 31u) / 32u;
    *current = nullptr;  // until a SIMD-group runs
    const unsigned* order = metal::__mk::rt->begin_split_group(pos, size, nsg, (const void* const*)current,
                                                               __builtin_offsetof(simt::frame, sg));
    for (unsigned r = 0; r < regions; ++r)
      for (unsigned j = 0; j < nsg; ++j) {
        const unsigned sg = order ? order[j] : j;
        simt::frame& f = frames[sg];
        if (r == 0) {
          simt_frame(f, t, base, sg, x, nullptr);
          f.split = true;
        } else if (!f.alive) {
          continue;  // every lane has returned
        }
        f.region = (unsigned short)r;
        *current = &f;
        body(simt_lane0(t, f));
      }
    metal::__mk::rt->end_split_group();
  }
}

}  // namespace mk

#define MK_EXPORT extern "C" __attribute__((visibility("default")))

MK_EXPORT void metalkit_set_runtime(const mk_runtime* r) { metal::__mk::rt = r; }
#endif
