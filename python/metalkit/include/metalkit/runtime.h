// The module's handle on metalkit's runtime (barriers, SIMD-group
// rendezvous, faults). Set once when the module is loaded.
#pragma once
#pragma clang system_header
#include "abi.h"

namespace metal {
namespace __mk {
inline const mk_runtime* rt = nullptr;

// The caller's source location, for fault messages and to tell call sites apart.
struct site {
  const char* file;
  int line;
  int column;
  static constexpr site here(const char* f = __builtin_FILE(), int l = __builtin_LINE(), int c = __builtin_COLUMN()) {
    return {f, l, c};
  }
};
}  // namespace __mk
}  // namespace metal
