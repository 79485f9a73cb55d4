// Runs the threads of one threadgroup as fibers on the calling OS thread:
// barriers and SIMD-group rendezvous are scheduling points. Implements the
// mk_runtime services a compiled module calls.
#pragma once
#include <cstdint>
#include <string>

#include "metalkit/abi.h"

namespace mk {

// The services handed to every loaded module.
const mk_runtime* cpu_runtime();

// Fibers run in index order, or in an order shuffled from this seed (not 0)
// to expose missing barriers. Set per dispatch by the thread that runs it.
void set_shuffle_seed(uint32_t seed);

// Barriers count SIMD-groups, as on Apple GPUs: one arrives when any of its live threads
// reaches a barrier, at any site. Strict (check=): every live thread of the threadgroup must
// reach the same barrier, else the dispatch faults naming the sites. Set per dispatch.
void set_strict_barriers(bool strict);

// What runs on this OS thread, for the access checks (access_check.h): a thread (`lanes` 1) or
// a SIMT kernel's SIMD-group (`lanes` 32), as the linear index in its group of the (first)
// thread, its threadgroup, and the barrier interval it is in. Epochs grow on each OS thread: each group and each completed barrier
// begins a new one, so an access stamped with an older epoch than the group's first is from
// another group.
struct RunningFiber : mk_running_fiber {
  RunningFiber() : mk_running_fiber{0, 0, 1, {0, 0, 0}, 0, 0, 0} {}
};
const RunningFiber& running_fiber();

// Who runs on this OS thread, for a log call that cannot tell (kernel_log.cpp): the threadgroup's
// position and the thread's position in it. `lane`: a SIMT SIMD-group's lane (~0u: not known, then
// the SIMD-group's first thread is named and *lane_known is false). False if no group runs here.
bool running_thread(unsigned lane, unsigned group[3], unsigned thread[3], bool* lane_known);

// After a fault's jump: the group that faulted, described for the message
// ("threadgroup (1, 0, 0), thread 37 (5, 1, 0)", "" if no fibers ran), and
// the scheduler made ready for the next group. addr: the faulting address, to
// tell a fiber stack overflow from other memory faults.
std::string abandon_group(uintptr_t addr, bool* stack_overflow);

}  // namespace mk
