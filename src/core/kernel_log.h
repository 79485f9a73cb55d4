// Messages kernels log (<metal_logging>'s os_log), as a dispatch hands them to the bindings.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace mk {

// One message. The CPU simulator knows who logged it; Metal does not say (thread_known false,
// group and thread zero). lane_known false: a SIMT SIMD-group's lane was not known (a log call
// inside a helper function), so `thread` is the SIMD-group's first thread.
struct KernelLogRecord {
  std::string kernel;
  unsigned group[3] = {0, 0, 0};   // threadgroup_position_in_grid
  unsigned thread[3] = {0, 0, 0};  // thread_position_in_threadgroup
  bool thread_known = false;
  bool lane_known = true;
  int type = 0;                    // os_log_type: 0 default, 1 info, 2 debug, 16 error, 17 fault
  std::string subsystem, category, text;
};

// What the dispatches a Python call made logged, left on the OS thread that made the call for
// the bindings to deliver once it returns (as check_warnings() holds a call's warnings).
struct KernelLog {
  std::vector<KernelLogRecord> messages;
  std::string dropped_kernel;  // the last kernel that dropped messages, and how many it dropped
  uint64_t dropped = 0;
  uint64_t limit = 0;          // the limit it hit
};
inline KernelLog& kernel_log() {
  static thread_local KernelLog log;
  return log;
}

// The most messages one dispatch keeps: the first ones in thread order (threadgroups in
// linear order, then threads in theirs, then each thread's in program order); later ones are
// counted and dropped, as a full Metal log buffer drops them.
constexpr uint64_t kMaxLogMessages = 65536;

// The os_log_type of a message Metal's log handler reports at MTLLogLevel `level` (Undefined 0,
// Debug 1, Info 2, Notice 3, Error 4, Fault 5): the level the kernel logged it at.
inline int os_log_type_of(long level) {
  switch (level) {
    case 1: return 2;    // log_debug
    case 2: return 1;    // log_info
    case 4: return 16;   // log_error
    case 5: return 17;   // log_fault
    default: return 0;   // log: Notice, the unified log's default level
  }
}

}  // namespace mk
