// Appended to a checked module (check= races, uninit, lockstep): clang's ThreadSanitizer pass
// (-fsanitize=thread at the compiler's core, with no sanitizer runtime linked) turns every
// memory access the optimiser leaves into a call of these functions, which tell metalkit's
// runtime (access_check.h) and, for atomics and memory copies, do the operation. They are not
// instrumented themselves.
#pragma once
// runtime.h arrives with <metal_stdlib>, already expanded above.

#define MK_UNCHECKED extern "C" __attribute__((no_sanitize("thread"), visibility("hidden"), used))

namespace metal {
namespace __mk {
// A plain read or write of [a, a + size) in threadgroup range i of w, recorded here cell by cell
// while each finds nothing (mk_tg_quiet_read/write, which the runtime tries first too): a tile's
// loads before its barrier and reads after. False at the first cell that needs the runtime, which
// then takes the whole access (the cells recorded already show this fiber's: no change).
__attribute__((no_sanitize("thread"), always_inline)) inline bool quiet(const mk_watch* w, unsigned i, mk_u64 a,
                                                                        mk_u64 size, bool write, const void* pc) {
  const mk_running_fiber* f = w->fiber;
  if (!f || !f->running) return false;
  const unsigned at = unsigned(reinterpret_cast<mk_u64>(pc) - 1 - w->code_base);
  const mk_u64 o = a - w->lo[i], end = o + size < w->size[i] ? o + size : w->size[i];
  const unsigned shift = w->shift[i];
  for (mk_u64 k = o >> shift, last = (end + (mk_u64(1) << shift) - 1) >> shift; k < last; ++k) {
    mk_tg_cell* c = &w->cells[i][k];
    if (!(write ? mk_tg_quiet_write(c, f, at) : mk_tg_quiet_read(c, f, at))) return false;
  }
  return true;
}

__attribute__((no_sanitize("thread"), always_inline)) inline void checked(const volatile void* p, mk_u64 size,
                                                                           unsigned flags, const void* pc) {
  typedef __UINTPTR_TYPE__ uptr;
  const uptr a = reinterpret_cast<uptr>(p), fp = reinterpret_cast<uptr>(__builtin_frame_address(0));
  // A checked build runs on fibers' stacks only, with nothing mapped within MK_FIBER_STACK_BYTES
  // above a stack's top: an address that close above this frame is a caller's local variable
  // (a SIMD-group's lanes, say), which no other thread reaches, and needs no check.
  if (a - fp < MK_FIBER_STACK_BYTES) return;
  const mk_runtime* r = rt;
  if (!r) return;  // null while it is being set
  const mk_fiber_arena* arena = r->fiber_arena;
  if (fp - arena->lo >= arena->size) {  // not a stack of the arena (launchers run on the OS thread's)
    r->access(const_cast<const void*>(p), size, flags, pc);
    return;
  }
  // The OS thread's mk_watch, from the top of this stack's slot: an access that starts outside
  // its ranges would find nothing to check in the runtime.
  const uptr slot = fp & ~uptr(2 * MK_FIBER_STACK_BYTES - 1);
  const mk_watch* w = *reinterpret_cast<const mk_watch* const*>(slot + MK_FIBER_STACK_BYTES - MK_WATCH_SLOT);
  if (!w->everything) {
    unsigned i = 0;
    while (i < w->n && a - w->lo[i] >= w->size[i]) ++i;
    if (i == w->n) return;
    if ((flags == 0 || flags == MK_ACCESS_WRITE) && w->cells[i] && quiet(w, i, a, size, flags != 0, pc)) return;
  }
  r->watched_access(w, const_cast<const void*>(p), size, flags, pc);
}
}  // namespace __mk
}  // namespace metal

#define MK_PC __builtin_return_address(0)

MK_UNCHECKED void __tsan_init() {}
MK_UNCHECKED void __tsan_func_entry(void*) {}
MK_UNCHECKED void __tsan_func_exit() {}
MK_UNCHECKED void __tsan_vptr_update(void**, void*) {}
MK_UNCHECKED void __tsan_vptr_read(void**) {}

#define MK_PLAIN_ACCESS(n)                                                                               \
  MK_UNCHECKED void __tsan_read##n(void* p) { metal::__mk::checked(p, n, 0, MK_PC); }                   \
  MK_UNCHECKED void __tsan_write##n(void* p) { metal::__mk::checked(p, n, MK_ACCESS_WRITE, MK_PC); }    \
  MK_UNCHECKED void __tsan_unaligned_read##n(void* p) { metal::__mk::checked(p, n, 0, MK_PC); }         \
  MK_UNCHECKED void __tsan_unaligned_write##n(void* p) { metal::__mk::checked(p, n, MK_ACCESS_WRITE, MK_PC); } \
  MK_UNCHECKED void __tsan_volatile_read##n(void* p) { metal::__mk::checked(p, n, 0, MK_PC); }          \
  MK_UNCHECKED void __tsan_volatile_write##n(void* p) { metal::__mk::checked(p, n, MK_ACCESS_WRITE, MK_PC); }
MK_PLAIN_ACCESS(1)
MK_PLAIN_ACCESS(2)
MK_PLAIN_ACCESS(4)
MK_PLAIN_ACCESS(8)
MK_PLAIN_ACCESS(16)
#undef MK_PLAIN_ACCESS

MK_UNCHECKED void __tsan_read_range(void* p, unsigned long n) { metal::__mk::checked(p, n, 0, MK_PC); }
MK_UNCHECKED void __tsan_write_range(void* p, unsigned long n) {
  metal::__mk::checked(p, n, MK_ACCESS_WRITE, MK_PC);
}

MK_UNCHECKED void* __tsan_memcpy(void* d, const void* s, unsigned long n) {
  metal::__mk::checked(s, n, 0, MK_PC);
  metal::__mk::checked(d, n, MK_ACCESS_WRITE, MK_PC);
  return __builtin_memcpy(d, s, n);
}
MK_UNCHECKED void* __tsan_memmove(void* d, const void* s, unsigned long n) {
  metal::__mk::checked(s, n, 0, MK_PC);
  metal::__mk::checked(d, n, MK_ACCESS_WRITE, MK_PC);
  return __builtin_memmove(d, s, n);
}
MK_UNCHECKED void* __tsan_memset(void* d, int c, unsigned long n) {
  metal::__mk::checked(d, n, MK_ACCESS_WRITE, MK_PC);
  return __builtin_memset(d, c, n);
}

// Atomics: done by the runtime, which records them (an atomic written here would be instrumented
// again, even in an uninstrumented function).
#define MK_RT_ATOMIC(a, op, v, expected) \
  metal::__mk::rt->atomic((volatile void*)(a), sizeof(*(a)), op, (mk_u64)(v), expected, MK_PC)
#define MK_ATOMIC_RMW(n, T, name, op) \
  MK_UNCHECKED T __tsan_atomic##n##_##name(volatile T* a, T v, int) { return (T)MK_RT_ATOMIC(a, op, v, nullptr); }
#define MK_ATOMICS(n, T)                                                                                \
  MK_UNCHECKED T __tsan_atomic##n##_load(const volatile T* a, int) {                                    \
    return (T)MK_RT_ATOMIC(a, MK_ATOMIC_LOAD, 0, nullptr);                                              \
  }                                                                                                     \
  MK_UNCHECKED void __tsan_atomic##n##_store(volatile T* a, T v, int) {                                 \
    MK_RT_ATOMIC(a, MK_ATOMIC_STORE, v, nullptr);                                                       \
  }                                                                                                     \
  MK_ATOMIC_RMW(n, T, exchange, MK_ATOMIC_EXCHANGE)                                                     \
  MK_ATOMIC_RMW(n, T, fetch_add, MK_ATOMIC_ADD)                                                         \
  MK_ATOMIC_RMW(n, T, fetch_sub, MK_ATOMIC_SUB)                                                         \
  MK_ATOMIC_RMW(n, T, fetch_and, MK_ATOMIC_AND)                                                         \
  MK_ATOMIC_RMW(n, T, fetch_or, MK_ATOMIC_OR)                                                           \
  MK_ATOMIC_RMW(n, T, fetch_xor, MK_ATOMIC_XOR)                                                         \
  MK_ATOMIC_RMW(n, T, fetch_nand, MK_ATOMIC_NAND)                                                       \
  MK_UNCHECKED int __tsan_atomic##n##_compare_exchange_strong(volatile T* a, T* c, T v, int, int) {     \
    mk_u64 e = *c;                                                                                      \
    const int ok = (int)MK_RT_ATOMIC(a, MK_ATOMIC_CAS, v, &e);                                          \
    *c = (T)e;                                                                                          \
    return ok;                                                                                          \
  }                                                                                                     \
  MK_UNCHECKED int __tsan_atomic##n##_compare_exchange_weak(volatile T* a, T* c, T v, int s, int f) {   \
    return __tsan_atomic##n##_compare_exchange_strong(a, c, v, s, f);                                   \
  }                                                                                                     \
  MK_UNCHECKED T __tsan_atomic##n##_compare_exchange_val(volatile T* a, T c, T v, int, int) {           \
    mk_u64 e = c;                                                                                       \
    MK_RT_ATOMIC(a, MK_ATOMIC_CAS, v, &e);                                                              \
    return (T)e;                                                                                        \
  }
MK_ATOMICS(8, unsigned char)
MK_ATOMICS(16, unsigned short)
MK_ATOMICS(32, unsigned int)
MK_ATOMICS(64, unsigned long long)
#undef MK_ATOMICS
#undef MK_ATOMIC_RMW
#undef MK_RT_ATOMIC

// Fences order nothing among fibers that one OS thread runs in turn.
MK_UNCHECKED void __tsan_atomic_thread_fence(int) {}
MK_UNCHECKED void __tsan_atomic_signal_fence(int) {}

#undef MK_PC
#undef MK_UNCHECKED
