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
  kCheckTrace = 64,     // not a check= name: metalkit.trace records who touched each element
  kCheckHazards = kCheckRaces | kCheckUninit | kCheckLockstep,  // what the access checks look for
  kCheckAccesses = kCheckHazards | kCheckTrace,                  // need the instrumented module
  kCheckPerThread = kCheckLockstep | kCheckTrace,                // need every thread as its own fiber
};

// Findings a call reports as warnings (check="warn", and reliance on lockstep), left by the
// dispatch on the OS thread that made it, for the bindings to issue once it returns.
inline std::vector<std::string>& check_warnings() {
  static thread_local std::vector<std::string> w;
  return w;
}

// The checks metalkit.trace adds to the next call on this OS thread (0: none): the trace, and
// guarded copies, so an access past an array is recorded and then ends the dispatch.
inline uint32_t& trace_request() {
  static thread_local uint32_t r = 0;
  return r;
}

}  // namespace mk
