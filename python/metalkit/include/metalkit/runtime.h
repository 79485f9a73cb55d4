// The module's handle on metalkit's runtime (barriers, SIMD-group
// rendezvous, faults). Set once when the module is loaded.
#pragma once
#pragma clang system_header
#include "abi.h"

namespace metal {
namespace __mk {
inline const mk_runtime* rt = nullptr;

// What the SIMT twin (msl/simt) of one of metalkit's SIMD-group functions returns: there is
// none, the call goes to the function itself. Declared with each function's own parameters, so
// when a library overloads a name (MLX's bfloat simd_sum), overload resolution among the twins
// picks the same function as the call.
struct stdlib_twin {};

// One SIMD-group function call in a SIMT kernel: every active lane contributes its
// value (first pass), then every lane computes its result from all of them (second pass).
struct simt_exchange {
  alignas(16) unsigned char slot[32][MK_SIMD_SLOT];
  unsigned active;        // lanes taking part
  unsigned lane;          // the lane being run
  bool computing;         // second pass: every slot is filled
  bool had_data;          // some lane contributed a value (else the first pass is all there is)
  unsigned cached;        // bit k: cache[k] holds the result of reduction scope k (0: SIMD-group, 1 + q: quad q)
  alignas(16) unsigned char cache[9][32];

  inline __attribute__((always_inline)) void begin(unsigned m) {
    active = m;
    computing = had_data = false;
    cached = 0;
  }
};

template <class T> struct elem_of { using type = T; };
template <class T, unsigned long N> struct elem_of<T[N]> : elem_of<T> {};
// Checked builds (check= races, uninit, lockstep): each thread reaching a kernel-scope
// threadgroup variable names it to the runtime (msl/passes/threadgroup_storage.py).
template <class T> inline void checked_threadgroup(T& v, const char* name, int initialised) {
  rt->threadgroup_variable((const void*)&v, sizeof(T), sizeof(typename elem_of<T>::type), name, initialised);
}
// Checked builds: the guarded storage a kernel-scope threadgroup variable is bound to instead of
// its thread-local `key` (the same for every thread of the group an OS thread runs).
template <class T> inline T& checked_threadgroup_storage(T& key, const char* name) {
  return *(T*)rt->threadgroup_storage((const void*)&key, sizeof(T), alignof(T), sizeof(typename elem_of<T>::type),
                                      name);
}

// The caller's source location, for fault messages and to tell call sites apart. In a kernel
// the front end runs as SIMT (msl/simt), `x` is the SIMD-group's exchange for the call instead.
struct site {
  const char* file;
  int line;
  int column;
  simt_exchange* x = nullptr;
  static constexpr site here(const char* f = __builtin_FILE(), int l = __builtin_LINE(), int c = __builtin_COLUMN()) {
    return {f, l, c, nullptr};
  }
};
}  // namespace __mk
}  // namespace metal
