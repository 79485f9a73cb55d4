// metalkit.trace: which threads read and wrote each element of a dispatch's buffers and
// threadgroup memory. The call runs the checked build where every thread is its own fiber
// (access_check.h), so each access reaches rt_access with its thread known; under kCheckTrace it
// is also appended, one record per element it covers, to its OS thread's log (a TraceScope per
// chunk), and the logs are merged into the dispatch's AccessTrace, which the bindings take once
// the call returns (taken_trace()).
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "metalkit/abi.h"
#include "scheduler.h"

namespace mk {

enum : uint8_t { kTraceRead = 1, kTraceWrite = 2, kTraceAtomic = 4 };

// One element touched by one thread. 16 bytes: a trace of millions of accesses stays small.
struct TraceRecord {
  int64_t element;  // index in the memory; < 0 or >= its length: out of bounds
  uint32_t group;   // the threadgroup, linear (x fastest)
  uint16_t thread;  // the thread in its threadgroup, linear
  uint8_t memory;   // index in AccessTrace::memories
  uint8_t flags;    // kTraceRead | kTraceWrite | kTraceAtomic
};

struct TracedMemory {
  std::string name;
  uint64_t size = 0, elem_size = 1;  // bytes
  bool threadgroup = false;          // one copy per threadgroup
  uintptr_t data = 0;                // buffers: their address (threadgroup memory: per OS thread)
};

// One dispatch's trace: the memories (buffer arguments in order, then threadgroup memory as the
// threads meet it) and the records of every chunk.
class AccessTrace {
 public:
  // `cap`: at most this many records; a bigger trace stops the dispatch with a fault saying so.
  AccessTrace(std::string kernel, std::vector<TracedMemory> buffers, const mk_dispatch& d, uint64_t cap);
  // The index of threadgroup memory `name`, added when first met (every chunk meets the same).
  unsigned threadgroup_memory(const std::string& name, uint64_t size, uint64_t elem_size);
  // Memory i (a copy: other chunks may be adding threadgroup memory meanwhile).
  TracedMemory memory(unsigned i) const;
  void merge(std::vector<TraceRecord>& log);
  std::string cap_message() const;

  std::string kernel;
  uint64_t cap;
  unsigned grid[3], tg[3], ngroups[3];  // as dispatched
  const unsigned nbuffers;  // memories [0, nbuffers) are the buffer arguments
  std::vector<TracedMemory> memories;  // read only once the dispatch is over
  std::vector<TraceRecord> records;
  bool full = false;  // the cap was reached: records are missing

 private:
  mutable std::mutex lock_;
};

// Records this OS thread's accesses into `trace` for one chunk (nothing if null); `slots`: the
// [[threadgroup(i)]] slots' bytes in this thread's arena.
class TraceScope {
 public:
  TraceScope(AccessTrace* trace, const std::vector<TracedMemory>& slots);
  ~TraceScope();
  TraceScope(const TraceScope&) = delete;
  TraceScope& operator=(const TraceScope&) = delete;
};

// Called by rt_access and rt_threadgroup_variable under kCheckTrace.
void trace_access(uintptr_t addr, uint64_t size, unsigned flags, const RunningFiber& f);
void trace_threadgroup_variable(uintptr_t addr, uint64_t size, uint64_t elem_size, const char* name);

// The cap of the next traced dispatch on this OS thread (metalkit.trace's max_accesses).
uint64_t& trace_cap();

// The trace of the last traced dispatch on this OS thread, for the bindings to take.
std::unique_ptr<AccessTrace>& taken_trace();

}  // namespace mk
