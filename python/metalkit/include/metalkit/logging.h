// Shader logging (<metal_logging>, MSL 3.2): os_log, os_log_default and os_log_type.
//
// A call packs its arguments as C varargs would pass them (integers widened, float, half and
// bfloat as double) and hands them, with the format, to the runtime (mk_runtime::log), which
// names the calling thread, keeps the message until the dispatch ends and then gives the
// dispatch's messages in thread order (src/cpu/kernel_log.cpp). Who is calling: a kernel run as
// a loop has its launcher point `mk::loop_thread` at the thread's ids; under fibers the runtime
// knows the thread; a SIMT kernel passes each call a site (msl/simt treats log calls like
// SIMD-group functions), whose exchange holds the lane, and calls a helper that logs lane by
// lane with the lane in mk::simt::log_lane (simt.h invoke_logging).
#pragma once
#pragma clang system_header
#include "ids.h"
#include "runtime.h"
#include "simt.h"
#include "traits.h"

namespace mk {
// Set by a loop launcher (launch.h run_groups) while its group runs, in modules that log; every
// other launcher clears it at each group.
inline thread_local const thread_ids* loop_thread = nullptr;
}  // namespace mk

namespace metal {
enum os_log_type : uint {
  os_log_type_default = 0x00,
  os_log_type_info = 0x01,
  os_log_type_debug = 0x02,
  os_log_type_error = 0x10,
  os_log_type_fault = 0x11,
};

namespace __mk {
template <class T> struct log_value {
  static_assert(!vinfo<T>::is_vec, "os_log: a log function takes scalars (as C varargs do); pass a vector's "
                                   "components one by one (v.x, v.y, ...)");
  static_assert(__is_arithmetic(T) || __is_enum(T) || __is_pointer(T),
                "os_log: a log function takes integers, floating-point values, strings and pointers");
  static __MK_F mk_log_arg get(const T& v) {
    mk_log_arg a{};
    if constexpr (__is_enum(T)) {
      return log_value<__underlying_type(T)>::get((__underlying_type(T))v);
    } else if constexpr (__is_pointer(T)) {
      typedef typename remove_cv<typename remove_pointer<T>::type>::type E;
      if constexpr (__is_same(E, char)) {
        a.kind = MK_LOG_STRING;
        a.s = (const char*)v;
      } else {
        a.kind = MK_LOG_POINTER;
        a.bits = (mk_u64)(__UINTPTR_TYPE__)v;
      }
      a.size = 8;
    } else if constexpr (__is_floating_point(T)) {
      a.kind = MK_LOG_FLOAT;
      if constexpr (sizeof(T) > 4) a.f = (double)v;
      else a.f = (double)(float)v;  // half and bfloat through float (clang has no bfloat -> double)
      a.size = 8;
    } else if constexpr (__is_same(T, bool)) {
      a.kind = MK_LOG_INT;
      a.bits = v ? 1u : 0u;
      a.size = 4;
    } else {
      // Integers narrower than int are promoted to int, as C varargs do.
      a.kind = (T)-1 < (T)0 || sizeof(T) < 4 ? MK_LOG_INT : MK_LOG_UINT;
      a.bits = (T)-1 < (T)0 ? (mk_u64)(long long)v : (mk_u64)v;
      a.size = sizeof(T) < 4 ? 4 : (int)sizeof(T);
    }
    return a;
  }
};
template <class T, unsigned long N> struct log_value<T[N]> : log_value<const T*> {};

template <class T> struct is_site { static constexpr bool value = false; };
template <> struct is_site<site> { static constexpr bool value = true; };

// One call: the arguments as written, then (in a SIMT kernel) the site msl/simt adds.
template <class... A>
__MK_F void log_call(const char* subsystem, const char* category, uint type, const char* format, const A&... a) {
  constexpr int n = (0 + ... + (is_site<A>::value ? 0 : 1));
  mk_log_arg args[n > 0 ? n : 1];
  int i = 0;
  unsigned lane = ~0u;
  auto add = [&](const auto& v) __attribute__((always_inline)) {
    typedef typename remove_cv<typename remove_reference<decltype(v)>::type>::type V;
    if constexpr (is_site<V>::value) {
      if (v.x) lane = v.x->lane;
    } else {
      args[i++] = log_value<V>::get(v);
    }
  };
  (add(a), ...);
  if (lane == ~0u) lane = mk::simt::log_lane;  // inside a helper that logs, called from SIMT code
  unsigned where[6];
  mk_log_call c{subsystem, category, (int)type, format, args, n, nullptr, lane};
  if (const mk::thread_ids* t = mk::loop_thread) {
    where[0] = t->group_pos.x, where[1] = t->group_pos.y, where[2] = t->group_pos.z;
    where[3] = t->pos_in_group.x, where[4] = t->pos_in_group.y, where[5] = t->pos_in_group.z;
    c.where = where;
  }
  rt->log(&c);
}
}  // namespace __mk

// A log with a subsystem and a category (`constant os_log logger("com.example", "kernel");`);
// os_log_default has neither. Each function logs once per thread that calls it.
struct os_log {
  const char* __subsystem;
  const char* __category;
  constexpr os_log(const char* subsystem, const char* category) : __subsystem(subsystem), __category(category) {}
  template <class... A> __MK_F void log_with_type(os_log_type type, const char* format, const A&... a) const {
    __mk::log_call(__subsystem, __category, type, format, a...);
  }
  template <class... A> __MK_F void log(const char* format, const A&... a) const {
    __mk::log_call(__subsystem, __category, os_log_type_default, format, a...);
  }
  template <class... A> __MK_F void log_debug(const char* format, const A&... a) const {
    __mk::log_call(__subsystem, __category, os_log_type_debug, format, a...);
  }
  template <class... A> __MK_F void log_info(const char* format, const A&... a) const {
    __mk::log_call(__subsystem, __category, os_log_type_info, format, a...);
  }
  template <class... A> __MK_F void log_error(const char* format, const A&... a) const {
    __mk::log_call(__subsystem, __category, os_log_type_error, format, a...);
  }
  template <class... A> __MK_F void log_fault(const char* format, const A&... a) const {
    __mk::log_call(__subsystem, __category, os_log_type_fault, format, a...);
  }
};
inline constexpr os_log os_log_default{"", ""};
}  // namespace metal
