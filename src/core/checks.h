// The checks a call asks for with check= (or METALKIT_CHECK), as bits of Launch::checks.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace mk {

enum CheckBits : uint32_t {
  kCheckBounds = 1,     // guarded copies and threadgroup slots: an out-of-bounds access faults
  kCheckBarriers = 2,   // every live thread must reach the same threadgroup_barrier
  kCheckRaces = 4,      // data races in threadgroup memory
  kCheckUninit = 8,     // reads of threadgroup memory no thread of the threadgroup wrote
  kCheckLockstep = 16,  // hazards between lanes of one SIMD-group that only lockstep orders
  kCheckWarn = 32,      // findings are warnings, not a KernelFault
  kCheckAccesses = kCheckRaces | kCheckUninit | kCheckLockstep,  // need the instrumented module
};

// Findings a call reports as warnings (check="warn", and reliance on lockstep), left by the
// dispatch on the OS thread that made it, for the bindings to issue once it returns.
inline std::vector<std::string>& check_warnings() {
  static thread_local std::vector<std::string> w;
  return w;
}

}  // namespace mk
