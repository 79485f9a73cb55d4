// The position of a thread in a dispatch, as the builtin parameters see it.
// Shared by the launchers (launch.h) and the SIMT runtime support (simt.h).
#pragma once
#pragma clang system_header
#include "vec.h"

namespace mk {

struct u3 { unsigned x, y, z; };
// Counts the threadgroups this OS thread has started: threadgroup variables with an initializer
// take its value once per group (msl/passes/threadgroup_storage.py).
inline thread_local unsigned long long group_serial = 0;
struct thread_ids {
  u3 pos_in_grid, pos_in_group, group_pos, group_size, dispatch_group_size, ngroups, grid;
  unsigned index_in_group;
};

// Converts a builtin value to the parameter's declared type (uint, ushort, uint2, ushort3, ...).
template <class P> struct builtin_cast {
  static P from(u3 v) { return P(v.x); }
};
template <class T> struct builtin_cast<metal::vec<T, 2>> {
  static metal::vec<T, 2> from(u3 v) { return metal::vec<T, 2>(T(v.x), T(v.y)); }
};
template <class T> struct builtin_cast<metal::vec<T, 3>> {
  static metal::vec<T, 3> from(u3 v) { return metal::vec<T, 3>(T(v.x), T(v.y), T(v.z)); }
};
template <class T> struct builtin_unconst { using type = T; };
template <class T> struct builtin_unconst<const T> { using type = T; };
template <class P> inline __attribute__((always_inline)) P builtin(u3 v) {
  return builtin_cast<typename builtin_unconst<P>::type>::from(v);
}
template <class P> inline __attribute__((always_inline)) P builtin(unsigned v) { return P(v); }

}  // namespace mk
