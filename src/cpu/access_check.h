// Race and uninitialised-read checks on threadgroup memory (check="races", "uninit",
// "lockstep"). A checked module is built with every memory access instrumented (clang's
// ThreadSanitizer pass, whose callbacks the module forwards to rt_access); every thread is its
// own fiber, so the scheduler knows which one made an access. Each byte of threadgroup memory
// keeps its last write and last read, stamped with the thread and the barrier interval
// ("epoch") they happened in: two accesses of one interval by different threads, one a write,
// not both atomic, are a race; a read of a byte no thread of this threadgroup wrote is
// uninitialised. Device memory the kernel may write keeps, per byte, the threadgroup that last
// wrote and last read it: threadgroups are not ordered within a dispatch, so two of them
// touching one byte, one writing, not both atomically, race. Device memory nothing had written
// when the dispatch began (BoundArg::unwritten) keeps a bit per granule, set when the kernel
// writes it: a read of one still clear is uninitialised. Findings are counted per kind and pair
// of instructions, one report each.
#pragma once
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "../core/checks.h"
#include "metalkit/abi.h"

namespace mk {


enum class Hazard : uint8_t { ReadAfterWrite, WriteAfterRead, WriteAfterWrite, Uninitialised };

// One kind of bug at one pair of instructions (first: the earlier access; 0 for an
// uninitialised read), with where it was first seen and how often.
struct Finding {
  Hazard kind = Hazard::ReadAfterWrite;
  bool lockstep = false;     // both threads in one SIMD-group: ordered on the GPU by lockstep alone
  uintptr_t first_pc = 0, second_pc = 0;
  bool on_device = false;    // device memory (else threadgroup memory)
  bool between_groups = false;  // two threadgroups (first_group: the other one), else two threads of one
  unsigned first_group[3] = {0, 0, 0};
  bool several_groups = false;  // between groups: more than one other group, not told apart
  uint64_t count = 0;         // accesses (an access of several bytes counts once)
  uint64_t last_access = 0;  // which access counted last
  unsigned group[3] = {0, 0, 0};
  unsigned first_thread = 0, second_thread = 0;
  bool lanes_known = true;   // else the threads are SIMD-groups of a SIMT kernel (their first lanes)
  std::string memory;        // the threadgroup parameter or variable
  uint64_t elem_size = 1;
  uint64_t lo = 0, hi = 0;   // byte offsets within it, first seen .. last seen
};

// A device buffer the kernel may write, watched for races between threadgroups.
struct WatchedBuffer {
  uintptr_t data;
  uint64_t size;
  uint64_t elem_size;
  std::string name;
};

// Bytes of a device buffer nothing had written when the dispatch began (check="uninit").
struct UnwrittenBytes {
  uintptr_t data;
  uint64_t size;
  uint64_t offset;  // from the buffer's start
  uint64_t elem_size;
  std::string name;
};

// One dispatch's access checks: the device buffers watched (shared by its chunks) and what the
// chunks found, merged.
class AccessReport {
 public:
  // `code_base`: the module's lowest code address (instructions are kept as 32-bit offsets from it).
  AccessReport(std::vector<WatchedBuffer> buffers, std::vector<UnwrittenBytes> unwritten, const unsigned* ngroups,
               uintptr_t code_base);
  ~AccessReport();
  AccessReport(const AccessReport&) = delete;
  AccessReport& operator=(const AccessReport&) = delete;
  void merge(std::vector<Finding>& found);
  std::vector<Finding> findings() const;

  struct Device;  // a watched buffer and its cells
  std::vector<Device>& devices() { return devices_; }
  struct Unwritten;  // unwritten bytes and their written bits
  std::vector<Unwritten>& unwritten() { return unwritten_; }
  unsigned ngroups[3];
  uintptr_t code_base;

 private:
  std::vector<Device> devices_;
  std::vector<Unwritten> unwritten_;
  mutable std::mutex lock_;
  std::map<std::tuple<int, bool, uintptr_t, uintptr_t>, Finding> found_;
};

// A [[threadgroup(i)]] slot of the running dispatch.
struct CheckedMemory {
  uintptr_t data;
  uint64_t size;
  uint64_t elem_size;
  std::string name;
};

// Arms the checks on this OS thread for one chunk of a dispatch; its findings go to `report`
// when it ends.
class AccessScope {
 public:
  AccessScope(uint32_t checks, AccessReport* report, std::vector<CheckedMemory> slots);
  ~AccessScope();
  AccessScope(const AccessScope&) = delete;
  AccessScope& operator=(const AccessScope&) = delete;
};

// The module's access callbacks (mk_runtime): an access of `size` bytes at `addr` by the
// running thread from the instruction before `pc`; a kernel-scope threadgroup variable reached
// (registered once per threadgroup; `initialised`: it has an initializer, which the threadgroup
// holds before any thread runs).
void rt_access(const void* addr, mk_u64 size, unsigned flags, const void* pc);
// The same from a stack of the fiber arena, which holds its OS thread's `watch` (thread_watch()).
void rt_watched_access(const mk_watch* watch, const void* addr, mk_u64 size, unsigned flags, const void* pc);
const mk_watch* thread_watch();
void rt_threadgroup_variable(const void* addr, mk_u64 size, mk_u64 elem_size, const char* name, int initialised);
mk_u64 rt_atomic(volatile void* addr, unsigned size, unsigned op, mk_u64 value, mk_u64* expected, const void* pc);

// The findings of one dispatch as reported: those at the same pair of source lines (an unrolled
// loop's copies of one access, say) as one, each with its lines ("file:line"; `line` maps an
// instruction to it, "" if unknown).
struct Reported {
  Finding finding;
  std::string first_line, second_line;
};
std::vector<Reported> by_line(const std::vector<Finding>& found, std::string (*line)(uintptr_t pc, const void* ctx),
                              const void* ctx);

// "data race (a write, then a read) on ..." and the rest of one finding's message.
std::string describe(const Reported& r);

}  // namespace mk
