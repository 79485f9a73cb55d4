// Atomics (<metal_atomic>), written from the MSL specification's atomic
// functions section. Threadgroups run in parallel on several OS threads, so
// these are real atomics (clang's __atomic builtins) on the object's storage.
//
// atomic<T> has the size and alignment of T: kernels find atomics inside
// device buffers that numpy allocates as plain int/uint/float/... arrays.
// User code passes `device atomic_int*` / `threadgroup atomic_int*`, which
// reach these functions as plain (or volatile) atomic<int>* after the pre-pass.
#pragma once
#pragma clang system_header
#include "barrier.h"
#include "traits.h"

namespace metal {

enum memory_order {
  memory_order_relaxed = __ATOMIC_RELAXED,
  memory_order_acquire = __ATOMIC_ACQUIRE,
  memory_order_release = __ATOMIC_RELEASE,
  memory_order_acq_rel = __ATOMIC_ACQ_REL,
  memory_order_seq_cst = __ATOMIC_SEQ_CST,
};

enum thread_scope {
  thread_scope_thread = 0,
  thread_scope_simdgroup = 1,
  thread_scope_threadgroup = 2,
  thread_scope_device = 3,
  __mk_thread_scope_system = 4,  // so that a library's thread_scope_system converts (below)
};
// Apple's headers name the system scope (memory coherent with the CPU) by this macro; on the CPU
// it is the device scope.
#define __METAL_MEMORY_SCOPE_SYSTEM__ 4

namespace __mk {
template <class T> constexpr bool atomic_elem = __is_same(T, int) || __is_same(T, uint) || __is_same(T, bool) ||
                                                __is_same(T, float) || __is_same(T, long) || __is_same(T, ulong);
template <class T> constexpr bool atomic_int_elem = atomic_elem<T> && __is_integral(T) && !__is_same(T, bool);
// A failure order may not be a release order (C11 rule, same builtins).
__MK_CF int fail_order(memory_order o) {
  return o == memory_order_release ? __ATOMIC_RELAXED : o == memory_order_acq_rel ? __ATOMIC_ACQUIRE : int(o);
}
} // namespace __mk

template <typename T> struct atomic {
  static_assert(__mk::atomic_elem<T>, "MSL atomic types hold int, uint, bool, float, long or ulong");
  T __v; // accessed only through the atomic_*_explicit functions
  atomic() = default;
  atomic(const atomic &) = delete;
  atomic &operator=(const atomic &) = delete;
};
static_assert(sizeof(atomic<int>) == sizeof(int) && alignof(atomic<float>) == alignof(float), "atomic layout");

typedef atomic<int> atomic_int;
typedef atomic<uint> atomic_uint;
typedef atomic<bool> atomic_bool;
typedef atomic<float> atomic_float;
typedef atomic<long> atomic_long;
typedef atomic<ulong> atomic_ulong;

// ---- load, store, exchange, compare-exchange ------------------------------

template <class T>
__MK_F void atomic_store_explicit(volatile atomic<T> *object, __mk::ident<T> desired, memory_order order) {
  T v = desired;
  __atomic_store(&object->__v, &v, order == memory_order_acquire || order == memory_order_acq_rel ? __ATOMIC_SEQ_CST
                                                                                                 : int(order));
}
template <class T> __MK_F T atomic_load_explicit(const volatile atomic<T> *object, memory_order order) {
  T r;
  __atomic_load(&object->__v, &r, order == memory_order_release || order == memory_order_acq_rel ? __ATOMIC_SEQ_CST
                                                                                                : int(order));
  return r;
}
template <class T>
__MK_F T atomic_exchange_explicit(volatile atomic<T> *object, __mk::ident<T> desired, memory_order order) {
  T v = desired, r;
  __atomic_exchange(&object->__v, &v, &r, order);
  return r;
}
// On failure, *expected receives the current value. Never fails spuriously
// here (the weak form may, it need not). MSL has no _strong form.
template <class T>
__MK_F bool atomic_compare_exchange_weak_explicit(volatile atomic<T> *object, __mk::ident<T> *expected,
                                                  __mk::ident<T> desired, memory_order success,
                                                  memory_order failure) {
  return __atomic_compare_exchange(&object->__v, expected, &desired, false, success, __mk::fail_order(failure));
}

// ---- read-modify-write ---------------------------------------------------

namespace __mk {
// Floating-point read-modify-write as a compare-exchange loop.
template <class T, class F> __MK_F T atomic_rmw_cas(volatile T *p, F f, memory_order order) {
  T old, want;
  __atomic_load(p, &old, __ATOMIC_RELAXED);
  do {
    want = f(old);
  } while (!__atomic_compare_exchange(p, &old, &want, true, order, __ATOMIC_RELAXED));
  return old;
}
} // namespace __mk

#define __MK_ATOMIC_RMW(key, builtin, fexpr)                                   \
  template <class T>                                                           \
  __MK_F T atomic_fetch_##key##_explicit(volatile atomic<T> *object, __mk::ident<T> operand, memory_order order) { \
    static_assert(!__is_same(T, bool), "atomic_fetch_" #key "_explicit: not defined for atomic_bool"); \
    if constexpr (__is_floating_point(T)) {                                    \
      return __mk::atomic_rmw_cas(&object->__v, [operand](T x) -> T { return fexpr; }, order); \
    } else {                                                                   \
      return builtin(&object->__v, operand, order);                            \
    }                                                                          \
  }
#define __MK_ATOMIC_BITS(key, builtin)                                         \
  template <class T>                                                           \
  __MK_F T atomic_fetch_##key##_explicit(volatile atomic<T> *object, __mk::ident<T> operand, memory_order order) { \
    static_assert(__mk::atomic_int_elem<T>, "atomic_fetch_" #key "_explicit: needs an integer atomic type"); \
    return builtin(&object->__v, operand, order);                              \
  }
__MK_ATOMIC_RMW(add, __atomic_fetch_add, x + operand)
__MK_ATOMIC_RMW(sub, __atomic_fetch_sub, x - operand)
// min/max of floats: a NaN operand leaves the value unchanged.
__MK_ATOMIC_RMW(min, __atomic_fetch_min, operand < x ? operand : x)
__MK_ATOMIC_RMW(max, __atomic_fetch_max, operand > x ? operand : x)
__MK_ATOMIC_BITS(and, __atomic_fetch_and)
__MK_ATOMIC_BITS(or, __atomic_fetch_or)
__MK_ATOMIC_BITS(xor, __atomic_fetch_xor)
#undef __MK_ATOMIC_RMW
#undef __MK_ATOMIC_BITS

// The 64-bit min/max functions that return nothing (atomic_ulong / atomic_long).
template <class T> __MK_F void atomic_min_explicit(volatile atomic<T> *object, __mk::ident<T> operand, memory_order order) {
  atomic_fetch_min_explicit(object, operand, order);
}
template <class T> __MK_F void atomic_max_explicit(volatile atomic<T> *object, __mk::ident<T> operand, memory_order order) {
  atomic_fetch_max_explicit(object, operand, order);
}

// ---- fences --------------------------------------------------------------

// Threads of one threadgroup share an OS thread (fibers), so only device
// memory shared with other threadgroups needs a hardware fence.
__MK_F void atomic_thread_fence(mem_flags flags, memory_order order, thread_scope scope = thread_scope_device) {
  if (order == memory_order_relaxed) {
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
  } else if (scope >= thread_scope_device && (unsigned(flags) & unsigned(mem_flags::mem_device))) {
    __atomic_thread_fence(order);
  } else {
    __atomic_signal_fence(order);
  }
}

} // namespace metal
