// Barriers. On the CPU simulator a threadgroup's threads are fibers on one OS
// thread, so a barrier is a scheduling point; memory is already coherent.
#pragma once
#pragma clang system_header
#include "runtime.h"

namespace metal {

enum class mem_flags : unsigned {
  mem_none = 0,
  mem_device = 1,
  mem_threadgroup = 2,
  mem_texture = 4,
  mem_threadgroup_imageblock = 8,
  mem_object_data = 16,
};
constexpr mem_flags operator|(mem_flags a, mem_flags b) { return mem_flags(unsigned(a) | unsigned(b)); }
constexpr mem_flags operator&(mem_flags a, mem_flags b) { return mem_flags(unsigned(a) & unsigned(b)); }

inline void threadgroup_barrier(mem_flags, __mk::site s = __mk::site::here()) { __mk::rt->barrier(s.file, s.line, s.column); }
inline void simdgroup_barrier(mem_flags, __mk::site s = __mk::site::here()) { __mk::rt->simd_barrier(s.file, s.line, s.column); }

namespace __mk {
// Kernels run as per-thread fibers (msl/simt/steps.py): the lanes of a SIMD-group meet between
// evaluating a right-hand side (copied, by value) and storing it, so every lane reads before any
// lane stores.
template <class T> inline __attribute__((always_inline)) T meet(T v, const char* file, int line, int column) {
  rt->simd_barrier(file, line, column);
  return v;
}
}  // namespace __mk

}  // namespace metal
