#include "access_check.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "access_trace.h"
#include "fault.h"
#include "scheduler.h"

// The threadgroup (linear index + 1; 0: none) that last wrote and last read a byte of a watched
// device buffer, and the instruction (an offset from the module's code; the top bit: atomic).
// r_group's top bit: threadgroups other than r_group read it too. Within one group, as for
// threadgroup memory, the thread and the epoch (a group runs on one OS thread, so its epochs
// compare); r_thread kMany: several of the group's threads read it.
struct mk::AccessReport::Device {
  uintptr_t lo;
  uint64_t size, elem_size, granule;
  std::string name;
  struct Cell {
    uint32_t w_group, r_group, w_pc, r_pc, w_epoch, r_epoch;
    uint16_t w_thread, r_thread;
  };
  Cell* cells;  // mmap'd: zero until touched
};

// Bytes nothing had written when the dispatch began: per granule, the kernel's last write (its
// threadgroup's linear index + 1, 0 if none yet; the thread and the epoch, which compare within
// a threadgroup). Several OS threads write them, so each field is read and written whole.
struct mk::AccessReport::Unwritten {
  uintptr_t lo;
  uint64_t size, offset, elem_size, granule;
  unsigned shift;
  std::string name;
  struct Cell {
    uint32_t group, epoch, thread;
  };
  Cell* cells;  // mmap'd: zero until touched
};

namespace mk {
namespace {

constexpr uint32_t kTop = 0x80000000u;
constexpr uint16_t kMany = 0xFFFF;
constexpr unsigned kSeveral = ~0u;  // a finding's other side: more than one thread, not told apart
constexpr uint64_t kSeveralGroups = ~uint64_t(0);  // the same for threadgroups

constexpr uint16_t kGroupWrite = 0xFFFF;  // an initializer's value: there before any thread runs

// The bytes a shadow cell stands for: the element's size, if a power of two, else the largest
// power of two dividing it, at most 4 (so scalar accesses of a vector's or a struct's parts are
// told apart; accesses of parts of a scalar by different threads are not).
uint64_t granule(uint64_t elem_size) { return std::min<uint64_t>(4, elem_size & (~elem_size + 1)); }

// The last write and the last read of one granule of threadgroup memory (abi.h: a checked
// module reads them too).
using Cell = mk_tg_cell;

struct Memory {
  uintptr_t lo = 0;
  uint64_t size = 0, elem_size = 1, granule = 1;
  unsigned shift = 0;  // log2(granule): an offset's cell, without a division on every access
  std::string name;
  std::vector<Cell> cells;
  uint32_t group_epoch = 0;  // kernel-scope variables: the group that registered it last
};

// mk_watch::everything: always (unarmed, a trace, ranges beyond MK_WATCH_RANGES), or while one
// of State's pending lists waits for the next access to settle it.
constexpr unsigned kAlways = 1, kPending = 2;

// This OS thread's checks, armed by an AccessScope.
struct State {
  State() { watch.state = this; }
  State(const State&) = delete;
  State& operator=(const State&) = delete;
  mk_watch watch = {kAlways, 0, {}, {}, {}, {}, nullptr, 0, nullptr};  // what the module calls rt_access for
  bool on = false;  // armed
  uint32_t checks = 0;
  AccessReport* report = nullptr;
  const RunningFiber* fiber = nullptr;  // the scheduler's, kept in step by it
  std::vector<Memory> memory;
  std::map<std::tuple<int, bool, uintptr_t, uintptr_t>, Finding> found;
  uint64_t accesses = 0;  // rt_access calls: a finding counts accesses, not bytes
  // Two writes race only if they store different values (threads storing the same result, or
  // threadgroups writing an overlapped edge block twice, are harmless): the bytes before the
  // second store, compared once it is done (at this OS thread's next access).
  struct PendingWrite {
    Finding finding;
    uintptr_t addr;
    uint64_t n;
    unsigned char before[8];
    uint64_t serial;
  };
  std::vector<PendingWrite> writes;
  // With every thread its own fiber, a lane can read before the lane of its SIMD-group that
  // writes first on the GPU has run: an uninitialised read is reported once its barrier
  // interval ends, unless its SIMD-group wrote the granule in that interval (then the
  // reliance on lockstep is the finding).
  struct PendingRead {
    Finding finding;
    size_t memory, cell;
    unsigned who;
    uint32_t epoch;
    uint64_t serial;
  };
  std::vector<PendingRead> reads;
  uint32_t reads_epoch = 0;
  // The same for device memory nothing had written (AccessReport::Unwritten): a read is reported
  // once its interval ends unless some thread wrote the granule in it (if another SIMD-group's
  // thread, that is a race, which check="races" reports).
  struct PendingDeviceRead {
    Finding finding;
    size_t range;
    uint64_t granule;
    uint32_t group, epoch, thread;
    uint64_t serial;
  };
  std::vector<PendingDeviceRead> device_reads;
  uint32_t device_reads_epoch = 0;
};

State& state() {
  static thread_local State s;
  return s;
}

// The armed State of this OS thread, or null: read on every access, so a plain pointer, which
// needs no initialisation guard. (The initial-exec model, which would spare the lookup's call,
// finds no room left when Python loads the module after numpy.)
thread_local State* armed = nullptr;

// The ranges rt_access looks in, for the module's filter: threadgroup memory, and the device
// bytes its checks watch. An access outside them would find nothing to do.
void publish(State& s) {
  mk_watch& w = s.watch;
  bool over = false;
  w.n = 0;
  auto add = [&](uintptr_t lo, uint64_t size, Cell* cells, unsigned shift) {
    if (w.n == MK_WATCH_RANGES) {
      over = true;
      return;
    }
    w.lo[w.n] = lo;
    w.size[w.n] = size;
    w.cells[w.n] = cells;
    w.shift[w.n++] = shift;
  };
  for (Memory& m : s.memory) add(m.lo, m.size, m.cells.data(), m.shift);
  if (s.report && (s.checks & kCheckUninit))
    for (const AccessReport::Unwritten& u : s.report->unwritten()) add(u.lo, u.size, nullptr, 0);
  if (s.report && (s.checks & (kCheckRaces | kCheckLockstep)))
    for (const AccessReport::Device& d : s.report->devices()) add(d.lo, d.size, nullptr, 0);
  w.fiber = s.fiber;
  w.code_base = s.report ? s.report->code_base : 0;
  const bool always = over || !s.on || (s.checks & kCheckTrace);
  w.everything = (w.everything & kPending) | (always ? kAlways : 0);
}

// Once State's pending lists are empty, the module may filter again.
void unpend(State& s) {
  if (s.writes.empty() && s.reads.empty() && s.device_reads.empty()) s.watch.everything &= ~kPending;
}

Memory* memory_at(State& s, uintptr_t a) {
  for (Memory& m : s.memory)
    if (a - m.lo < m.size) return &m;
  return nullptr;
}

// `serial`: the access that found it (a finding counts accesses, however many granules they touch).
Finding finding(Hazard kind, bool lockstep, uintptr_t first_pc, uintptr_t second_pc) {
  Finding x;
  x.kind = kind;
  x.lockstep = lockstep;
  x.first_pc = first_pc;
  x.second_pc = second_pc;
  return x;
}

Finding& noted(State& s, const Finding& fresh, uint64_t serial) {
  auto key = std::make_tuple(int(fresh.kind) | int(fresh.between_groups) << 4 | int(fresh.on_device) << 5, fresh.lockstep, fresh.first_pc, fresh.second_pc);
  auto it = s.found.find(key);
  if (it == s.found.end()) it = s.found.emplace(key, fresh).first;
  Finding& x = it->second;
  if (x.last_access != serial) ++x.count;
  x.last_access = serial;
  x.lo = std::min(x.lo, fresh.lo);
  x.hi = std::max(x.hi, fresh.hi);
  return x;
}

// A finding, or for two writes, one to settle once the second is done (State::writes).
void noted_or_pending(State& s, const Finding& x, uintptr_t addr, uint64_t n) {
  if (x.kind != Hazard::WriteAfterWrite || !n) {
    noted(s, x, s.accesses);
    return;
  }
  State::PendingWrite p{x, addr, std::min<uint64_t>(n, 8), {}, s.accesses};
  std::memcpy(p.before, reinterpret_cast<const void*>(addr), p.n);
  s.writes.push_back(p);
  s.watch.everything |= kPending;
}

// A race between threadgroups on a watched device buffer: `other` is the other group's linear index.
[[gnu::noinline, gnu::cold]] void note_device(State& s, const RunningFiber& f, const AccessReport::Device& d,
                                             uint64_t offset, Hazard kind, uint64_t other, uint32_t other_pc,
                                             uint32_t pc, uintptr_t addr = 0, uint64_t bytes = 0) {
  if (!(s.checks & kCheckRaces)) return;
  const unsigned* n = s.report->ngroups;
  Finding x = finding(kind, false, s.report->code_base + (other_pc & ~kTop), s.report->code_base + pc);
  x.between_groups = x.on_device = true;
  x.several_groups = other == kSeveralGroups;
  if (!x.several_groups) {
    x.first_group[0] = unsigned(other % n[0]);
    x.first_group[1] = unsigned(other / n[0] % n[1]);
    x.first_group[2] = unsigned(other / (uint64_t(n[0]) * n[1]));
  }
  std::copy(f.pos, f.pos + 3, x.group);
  x.memory = d.name;
  x.elem_size = d.elem_size;
  x.lo = x.hi = offset;
  noted_or_pending(s, x, addr, bytes);
}

[[gnu::noinline, gnu::cold]] void note(State& s, const RunningFiber& f, const std::string& name, uint64_t elem_size,
                                      uint64_t offset, Hazard kind, unsigned other, uint32_t other_pc, uint32_t pc,
                                      bool on_device = false, uintptr_t addr = 0, uint64_t n = 0);

// The running threadgroup's linear index + 1 (0 means none).
uint32_t linear_group(const AccessReport& r, const RunningFiber& f) {
  const uint64_t linear = f.pos[0] + uint64_t(r.ngroups[0]) * (f.pos[1] + uint64_t(r.ngroups[1]) * f.pos[2]);
  return uint32_t(linear % (kTop - 1)) + 1;
}

[[gnu::noinline]] void device_access(State& s, const RunningFiber& f, AccessReport::Device& d, uint64_t first,
                                   uint64_t last, bool reads, bool write, bool atomic, uint32_t pc) {
  const uint32_t me = linear_group(*s.report, f);
  const uint32_t at = pc | (atomic ? kTop : 0u);
  for (uint64_t k = first; k < last; ++k) {
    AccessReport::Device::Cell& c = d.cells[k];
    const uint64_t o = k * d.granule;
    // Other OS threads run other groups on the same cells: each field is read and written whole.
    const uint32_t w = __atomic_load_n(&c.w_group, __ATOMIC_RELAXED);
    const uint32_t wpc = __atomic_load_n(&c.w_pc, __ATOMIC_RELAXED);
    const bool both_atomic_w = atomic && (wpc & kTop);
    const uint32_t wpc_at = wpc & ~kTop;
    // This group's own earlier write in this epoch, by another thread (a group's cells are only
    // touched by the OS thread running it, so these fields are its own).
    const bool w_here = w == me && c.w_epoch == f.epoch && c.w_thread != f.index && !both_atomic_w;
    if (reads && w && w != me && !both_atomic_w)
      note_device(s, f, d, o, Hazard::ReadAfterWrite, w - 1, wpc, pc);
    if (reads && w_here) note(s, f, d.name, d.elem_size, o, Hazard::ReadAfterWrite, c.w_thread, wpc_at, pc, true);
    if (write) {
      if (w && w != me && !both_atomic_w)
        note_device(s, f, d, o, Hazard::WriteAfterWrite, w - 1, wpc, pc, d.lo + o, d.granule);
      if (w_here)
        note(s, f, d.name, d.elem_size, o, Hazard::WriteAfterWrite, c.w_thread, wpc_at, pc, true, d.lo + o, d.granule);
      const uint32_t r = __atomic_load_n(&c.r_group, __ATOMIC_RELAXED);
      const uint32_t rpc = __atomic_load_n(&c.r_pc, __ATOMIC_RELAXED);
      const uint32_t rg = r & ~kTop;
      const bool both_atomic_r = atomic && (rpc & kTop);
      if (rg && (rg != me || (r & kTop)) && !both_atomic_r)
        note_device(s, f, d, o, Hazard::WriteAfterRead, rg != me ? rg - 1 : kSeveralGroups, rpc, pc);
      if (rg == me && c.r_epoch == f.epoch && c.r_thread != f.index && !both_atomic_r)
        note(s, f, d.name, d.elem_size, o, Hazard::WriteAfterRead, c.r_thread == kMany ? kSeveral : c.r_thread,
             rpc & ~kTop, pc, true);
      __atomic_store_n(&c.w_group, me, __ATOMIC_RELAXED);
      __atomic_store_n(&c.w_pc, at, __ATOMIC_RELAXED);
      c.w_epoch = f.epoch;
      c.w_thread = uint16_t(f.index);
    } else {
      const uint32_t r = __atomic_load_n(&c.r_group, __ATOMIC_RELAXED);
      if (!r || (r & ~kTop) != me || c.r_epoch != f.epoch) {
        if (r && (r & ~kTop) != me) __atomic_store_n(&c.r_group, me | kTop, __ATOMIC_RELAXED);
        else __atomic_store_n(&c.r_group, me | (r & kTop), __ATOMIC_RELAXED);
        __atomic_store_n(&c.r_pc, at, __ATOMIC_RELAXED);
        c.r_epoch = f.epoch;
        c.r_thread = uint16_t(f.index);
      } else if (c.r_thread != f.index) {
        c.r_thread = kMany;
      }
    }
  }
}

void note(State& s, const RunningFiber& f, const std::string& name, uint64_t elem_size, uint64_t offset, Hazard kind,
          unsigned other, uint32_t other_pc, uint32_t pc, bool on_device, uintptr_t addr, uint64_t n) {
  const unsigned me = f.index;
  const bool lockstep = kind != Hazard::Uninitialised && other != kSeveral && other / 32 == me / 32 &&
                        !(kind == Hazard::WriteAfterWrite && other_pc == pc);
  if (lockstep ? !(s.checks & kCheckLockstep) : !(s.checks & (kind == Hazard::Uninitialised ? kCheckUninit : kCheckRaces)))
    return;
  const uintptr_t base = s.report->code_base;
  Finding x = finding(kind, lockstep, other_pc ? base + other_pc : 0, base + pc);
  std::copy(f.pos, f.pos + 3, x.group);
  x.first_thread = other;
  x.second_thread = me;
  x.lanes_known = f.lanes == 1;
  x.memory = name;
  x.on_device = on_device;
  x.elem_size = elem_size;
  x.lo = x.hi = offset;
  noted_or_pending(s, x, addr, n);
}

size_t cells_bytes(uint64_t size, uint64_t granule) {
  return (size + granule - 1) / granule * sizeof(AccessReport::Device::Cell);
}

// The second writes of State::writes are done now: those that changed the bytes are races.
[[gnu::noinline]] void settle_writes(State& s) {
  for (const State::PendingWrite& p : s.writes)
    if (std::memcmp(reinterpret_cast<const void*>(p.addr), p.before, p.n) != 0) noted(s, p.finding, p.serial);
  s.writes.clear();
}

// The barrier interval of State::reads has ended: each read its SIMD-group's own write did not
// follow (which lockstep would have put first, and which is reported as lockstep) was uninitialised.
[[gnu::noinline]] void settle_reads(State& s) {
  for (const State::PendingRead& p : s.reads) {
    const Cell& c = s.memory[p.memory].cells[p.cell];
    // (An atomic update reads too: every one of them read the unset value.)
    const bool lockstep = c.w_epoch == p.epoch && c.w_who != kGroupWrite && c.w_who != p.who &&
                          c.w_who / 32 == p.who / 32 && !c.w_atomic;
    if (!lockstep) noted(s, p.finding, p.serial);
  }
  s.reads.clear();
}

// The interval of State::device_reads has ended: each read its SIMD-group's own write did not
// follow (lockstep would have put the write first) was uninitialised.
[[gnu::noinline]] void settle_device_reads(State& s) {
  for (const State::PendingDeviceRead& p : s.device_reads) {
    const AccessReport::Unwritten::Cell& c = s.report->unwritten()[p.range].cells[p.granule];
    const bool lockstep = __atomic_load_n(&c.group, __ATOMIC_RELAXED) == p.group &&
                          __atomic_load_n(&c.epoch, __ATOMIC_RELAXED) == p.epoch &&
                          __atomic_load_n(&c.thread, __ATOMIC_RELAXED) / 32 == p.thread / 32 &&
                          __atomic_load_n(&c.thread, __ATOMIC_RELAXED) != p.thread;
    if (!lockstep) noted(s, p.finding, p.serial);
  }
  s.device_reads.clear();
}

}  // namespace

AccessReport::AccessReport(std::vector<WatchedBuffer> buffers, std::vector<UnwrittenBytes> unwritten,
                           const unsigned* n, uintptr_t base)
    : code_base(base) {
  std::copy(n, n + 3, ngroups);
  for (UnwrittenBytes& u : unwritten) {
    const uint64_t es = std::max<uint64_t>(1, u.elem_size), g = granule(es);
    const size_t bytes = (u.size + g - 1) / g * sizeof(Unwritten::Cell);
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) continue;  // no address space: these bytes go unchecked
    unwritten_.push_back({u.data, u.size, u.offset, es, g, unsigned(__builtin_ctzll(g)), std::move(u.name),
                          static_cast<Unwritten::Cell*>(p)});
  }
  for (WatchedBuffer& b : buffers) {
    if (!b.size) continue;
    const uint64_t es = std::max<uint64_t>(1, b.elem_size), g = granule(es);
    void* p = mmap(nullptr, cells_bytes(b.size, g), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    if (p == MAP_FAILED) throw std::runtime_error("no address space to watch parameter '" + b.name + "' for check=races (" +
                               std::to_string(cells_bytes(b.size, g)) + " bytes); pass a smaller array, or check "
                               "\"uninit\" alone, which does not watch device memory");
    devices_.push_back({b.data, b.size, es, g, std::move(b.name), static_cast<Device::Cell*>(p)});
  }
}

AccessReport::~AccessReport() {
  for (Device& d : devices_) munmap(d.cells, cells_bytes(d.size, d.granule));
  for (Unwritten& u : unwritten_) munmap(u.cells, (u.size + u.granule - 1) / u.granule * sizeof(Unwritten::Cell));
}

void AccessReport::merge(std::vector<Finding>& found) {
  std::lock_guard<std::mutex> lk(lock_);
  for (Finding& f : found) {
    auto key = std::make_tuple(int(f.kind) | int(f.between_groups) << 4 | int(f.on_device) << 5, f.lockstep, f.first_pc, f.second_pc);
    auto it = found_.find(key);
    if (it == found_.end()) {
      found_.emplace(key, f);
      continue;
    }
    it->second.count += f.count;
    it->second.lo = std::min(it->second.lo, f.lo);
    it->second.hi = std::max(it->second.hi, f.hi);
  }
}

std::vector<Finding> AccessReport::findings() const {
  std::lock_guard<std::mutex> lk(lock_);
  std::vector<Finding> out;
  for (auto& kv : found_) out.push_back(kv.second);
  return out;
}

AccessScope::AccessScope(uint32_t checks, AccessReport* report, std::vector<CheckedMemory> slots) {
  State& s = state();
  s.checks = checks;
  s.report = report;
  s.fiber = &running_fiber();
  // The slots are the same bytes for every group this thread runs: their cells carry over
  // (older epochs mean "not this group"). Kernel-scope variables register as they are reached.
  s.memory.clear();
  for (CheckedMemory& c : slots) {
    Memory m;
    m.lo = c.data;
    m.size = c.size;
    m.elem_size = std::max<uint64_t>(1, c.elem_size);
    m.granule = granule(m.elem_size);
    m.shift = unsigned(__builtin_ctzll(m.granule));
    m.name = std::move(c.name);
    m.cells.resize((c.size + m.granule - 1) / m.granule);
    s.memory.push_back(std::move(m));
  }
  s.on = checks != 0;
  armed = s.on ? &s : nullptr;
  publish(s);
}

AccessScope::~AccessScope() {
  armed = nullptr;
  State& s = state();
  s.on = false;
  s.watch.everything = kAlways;
  settle_writes(s);
  settle_reads(s);
  settle_device_reads(s);
  std::vector<Finding> found;
  for (auto& kv : s.found) found.push_back(kv.second);
  s.found.clear();
  if (s.report && !found.empty()) s.report->merge(found);
  s.checks = 0;
  s.report = nullptr;
  s.memory.clear();
}

namespace {

// A read of granule k of m that no thread of this threadgroup wrote: settled when the interval ends.
[[gnu::noinline, gnu::cold]] void pend_uninitialised(State& s, const RunningFiber& f, const Memory& m, uint64_t k,
                                                    uint32_t at) {
  const uint16_t me = uint16_t(f.index);
  Finding x = finding(Hazard::Uninitialised, false, 0, s.report->code_base + at);
  std::copy(f.pos, f.pos + 3, x.group);
  x.first_thread = x.second_thread = me;
  x.memory = m.name;
  x.elem_size = m.elem_size;
  x.lo = x.hi = k * m.granule;
  s.reads.push_back({x, size_t(&m - s.memory.data()), size_t(k), me, f.epoch, s.accesses});
  s.watch.everything |= kPending;
  s.reads_epoch = f.epoch;
}

// An access of device memory nothing had written when the dispatch began: a read of a granule
// the kernel has not written since is uninitialised.
[[gnu::noinline]] void unwritten_access(State& s, const RunningFiber& f, uintptr_t a, uint64_t size, bool reads,
                                        bool write, uint32_t at) {
  std::vector<AccessReport::Unwritten>& ranges = s.report->unwritten();
  for (size_t r = 0; r < ranges.size(); ++r) {
    AccessReport::Unwritten& u = ranges[r];
    if (a - u.lo >= u.size) continue;
    ++s.accesses;
    const uint64_t o = a - u.lo, first = o >> u.shift;
    const uint64_t last = (std::min<uint64_t>(u.size, o + size) + u.granule - 1) >> u.shift;
    const uint32_t group = linear_group(*s.report, f);
    for (uint64_t k = first; k < last; ++k) {
      AccessReport::Unwritten::Cell& c = u.cells[k];
      if (reads && !__atomic_load_n(&c.group, __ATOMIC_RELAXED)) {
        Finding x = finding(Hazard::Uninitialised, false, 0, s.report->code_base + at);
        std::copy(f.pos, f.pos + 3, x.group);
        x.first_thread = x.second_thread = f.index;
        x.lanes_known = f.lanes == 1;
        x.on_device = true;
        x.memory = u.name;
        x.elem_size = u.elem_size;
        x.lo = x.hi = u.offset + (k << u.shift);
        if (f.lanes == 1) {  // a thread of its own: settled when the interval ends (lockstep)
          s.device_reads.push_back({x, r, k, group, f.epoch, f.index, s.accesses});
          s.watch.everything |= kPending;
          s.device_reads_epoch = f.epoch;
        } else {
          noted(s, x, s.accesses);
        }
      }
      if (write) {
        __atomic_store_n(&c.group, group, __ATOMIC_RELAXED);
        __atomic_store_n(&c.epoch, f.epoch, __ATOMIC_RELAXED);
        __atomic_store_n(&c.thread, uint32_t(f.index), __ATOMIC_RELAXED);
      }
    }
    return;
  }
}

}  // namespace

namespace {

inline void access(State& s, const void* addr, mk_u64 size, unsigned flags, const void* pc) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(addr);
  const RunningFiber& f = *s.fiber;
  if (!f.running) return;
  if (s.checks & kCheckTrace) {
    trace_access(a, size, flags, f);
    if (!(s.checks & kCheckHazards)) return;
  }
  if (!s.writes.empty()) settle_writes(s);
  if (!s.reads.empty() && s.reads_epoch != f.epoch) settle_reads(s);
  if (!s.device_reads.empty() && s.device_reads_epoch != f.epoch) settle_device_reads(s);
  if (s.watch.everything & kPending) unpend(s);
  const bool write = flags & MK_ACCESS_WRITE, atomic = flags & MK_ACCESS_ATOMIC;
  const bool reads = !write || (flags & MK_ACCESS_UPDATE);
  // The call, not the instruction after it, as an offset from the module's code.
  const uint32_t at = uint32_t(reinterpret_cast<uintptr_t>(pc) - 1 - s.report->code_base);
  Memory* m = memory_at(s, a);
  if (!m) {
    if ((s.checks & kCheckUninit) && !s.report->unwritten().empty())
      unwritten_access(s, f, a, size, reads, write, at);
    if (!(s.checks & (kCheckRaces | kCheckLockstep))) return;
    for (AccessReport::Device& d : s.report->devices())
      if (a - d.lo < d.size) {
        ++s.accesses;
        const uint64_t o = a - d.lo;
        const unsigned shift = unsigned(__builtin_ctzll(d.granule));
        device_access(s, f, d, o >> shift, (std::min<uint64_t>(d.size, o + size) + d.granule - 1) >> shift, reads,
                      write, atomic, at);
        return;
      }
    return;  // neither threadgroup memory nor a watched buffer
  }
  ++s.accesses;
  const uint16_t me = uint16_t(f.index);
  const uint64_t g = m->granule, o = a - m->lo;
  const uint64_t first = o >> m->shift, last = (std::min<uint64_t>(m->size, o + size) + g - 1) >> m->shift;
  // Another thread's access of this interval, unless a simdgroup_barrier of their one
  // SIMD-group came between.
  auto unordered = [&](uint32_t epoch, unsigned who, uint32_t sg) {
    return epoch == f.epoch && who != me && (who / 32 != me / 32 || sg == f.sg_epoch);
  };
  for (uint64_t k = first; k < last; ++k) {
    Cell& c = m->cells[k];
    if (!atomic && (write ? !reads && mk_tg_quiet_write(&c, &f, at) : mk_tg_quiet_read(&c, &f, at))) continue;
    const uint64_t byte = k * g;
    const bool written = c.w_epoch >= f.group_epoch;
    if (reads) {
      if (!written && f.lanes == 1 && (s.checks & kCheckUninit)) {  // settled when the interval ends
        pend_uninitialised(s, f, *m, k, at);
      } else if (!written) {
        note(s, f, m->name, m->elem_size, byte, Hazard::Uninitialised, me, 0, at);
      }
      else if (unordered(c.w_epoch, c.w_who, c.w_sg) && c.w_who != kGroupWrite && !(atomic && c.w_atomic))
        note(s, f, m->name, m->elem_size, byte, Hazard::ReadAfterWrite, c.w_who, c.w_pc, at);
    }
    if (write) {
      if (written && unordered(c.w_epoch, c.w_who, c.w_sg) && c.w_who != kGroupWrite && !(atomic && c.w_atomic))
        note(s, f, m->name, m->elem_size, byte, Hazard::WriteAfterWrite, c.w_who, c.w_pc, at, false, m->lo + byte, g);
      if (c.r_epoch == f.epoch && (c.r_who != me || c.r_many) && !(atomic && c.r_atomic) &&
          (c.r_many || unordered(c.r_epoch, c.r_who, c.r_sg)))
        note(s, f, m->name, m->elem_size, byte, Hazard::WriteAfterRead, c.r_who != me ? c.r_who : c.r_other, c.r_pc,
             at);
      c.w_epoch = f.epoch;
      c.w_who = me;
      c.w_atomic = atomic;
      c.w_pc = at;
      c.w_sg = f.sg_epoch;
    } else if (c.r_epoch == f.epoch) {
      if (!c.r_many && c.r_who != me) {
        c.r_many = true;
        c.r_other = me;
      }
      c.r_atomic = c.r_atomic && atomic;
    } else {
      c.r_epoch = f.epoch;
      c.r_who = me;
      c.r_many = false;
      c.r_atomic = atomic;
      c.r_pc = at;
      c.r_sg = f.sg_epoch;
    }
  }
}

}  // namespace

void rt_access(const void* addr, mk_u64 size, unsigned flags, const void* pc) {
  if (armed) access(*armed, addr, size, flags, pc);
}

void rt_watched_access(const mk_watch* watch, const void* addr, mk_u64 size, unsigned flags, const void* pc) {
  State& s = *static_cast<State*>(watch->state);
  if (s.on) access(s, addr, size, flags, pc);
}

const mk_watch* thread_watch() { return &state().watch; }

void rt_threadgroup_variable(const void* addr, mk_u64 size, mk_u64 elem_size, const char* name, int initialised) {
  if (!armed) return;
  State& s = *armed;
  const RunningFiber& f = *s.fiber;
  const uintptr_t a = reinterpret_cast<uintptr_t>(addr);
  if (s.checks & kCheckTrace) trace_threadgroup_variable(a, size, elem_size, name);
  Memory* m = memory_at(s, a);
  if (!m) {
    Memory fresh;
    fresh.lo = a;
    fresh.size = size;
    fresh.elem_size = elem_size ? elem_size : 1;
    fresh.granule = granule(fresh.elem_size);
    fresh.shift = unsigned(__builtin_ctzll(fresh.granule));
    fresh.name = name;
    fresh.cells.resize((size + fresh.granule - 1) / fresh.granule);
    s.memory.push_back(std::move(fresh));
    m = &s.memory.back();
    publish(s);
  }
  if (m->group_epoch == f.group_epoch) return;
  m->group_epoch = f.group_epoch;
  if (initialised)
    for (Cell& c : m->cells) {
      c.w_epoch = f.group_epoch;
      c.w_who = kGroupWrite;
      c.w_atomic = false;
      c.w_pc = 0;
    }
}

namespace {

template <class T> mk_u64 atomic_op(volatile T* a, unsigned op, T v, mk_u64* expected) {
  constexpr int order = __ATOMIC_SEQ_CST;  // the strongest order serves every order asked for
  switch (op) {
    case MK_ATOMIC_LOAD: return __atomic_load_n(a, order);
    case MK_ATOMIC_STORE: __atomic_store_n(a, v, order); return 0;
    case MK_ATOMIC_EXCHANGE: return __atomic_exchange_n(a, v, order);
    case MK_ATOMIC_ADD: return __atomic_fetch_add(a, v, order);
    case MK_ATOMIC_SUB: return __atomic_fetch_sub(a, v, order);
    case MK_ATOMIC_AND: return __atomic_fetch_and(a, v, order);
    case MK_ATOMIC_OR: return __atomic_fetch_or(a, v, order);
    case MK_ATOMIC_XOR: return __atomic_fetch_xor(a, v, order);
    case MK_ATOMIC_NAND: return __atomic_fetch_nand(a, v, order);
    default: {
      T e = T(*expected);
      const bool ok = __atomic_compare_exchange_n(a, &e, v, false, order, order);
      *expected = e;
      return ok;
    }
  }
}

}  // namespace

mk_u64 rt_atomic(volatile void* addr, unsigned size, unsigned op, mk_u64 value, mk_u64* expected, const void* pc) {
  const unsigned flags = op == MK_ATOMIC_LOAD    ? MK_ACCESS_ATOMIC
                         : op == MK_ATOMIC_STORE ? MK_ACCESS_ATOMIC | MK_ACCESS_WRITE
                                                 : MK_ACCESS_ATOMIC | MK_ACCESS_WRITE | MK_ACCESS_UPDATE;
  rt_access(const_cast<const void*>(addr), size, flags, pc);
  // A fault in the operation below is the module's: reported at the instruction that asked.
  FaultTrap* trap = current_trap();
  struct Behalf {
    FaultTrap* t;
    ~Behalf() { if (t) t->on_behalf_of = 0; }
  } behalf{trap};
  if (trap) trap->on_behalf_of = reinterpret_cast<uintptr_t>(pc) - 1;
  switch (size) {
    case 1: return atomic_op(static_cast<volatile uint8_t*>(addr), op, uint8_t(value), expected);
    case 2: return atomic_op(static_cast<volatile uint16_t*>(addr), op, uint16_t(value), expected);
    case 4: return atomic_op(static_cast<volatile uint32_t*>(addr), op, uint32_t(value), expected);
    default: return atomic_op(static_cast<volatile uint64_t*>(addr), op, uint64_t(value), expected);
  }
}

std::vector<Reported> by_line(const std::vector<Finding>& found, std::string (*line)(uintptr_t pc, const void* ctx),
                              const void* ctx) {
  std::map<uintptr_t, std::string> lines;
  auto at = [&](uintptr_t pc) -> const std::string& {
    auto it = lines.find(pc);
    if (it == lines.end()) {
      std::string l = pc ? line(pc, ctx) : "";
      it = lines.emplace(pc, l.empty() ? std::string("an unknown line") : l).first;
    }
    return it->second;
  };
  std::vector<Reported> out;
  std::map<std::tuple<int, std::string, std::string>, size_t> seen;
  for (const Finding& f : found) {
    const int kind = int(f.kind) | int(f.between_groups) << 4 | int(f.on_device) << 5 | int(f.lockstep) << 6;
    auto key = std::make_tuple(kind, at(f.first_pc), at(f.second_pc));
    auto it = seen.find(key);
    if (it == seen.end()) {
      seen.emplace(key, out.size());
      out.push_back({f, std::get<1>(key), std::get<2>(key)});
      continue;
    }
    Finding& x = out[it->second].finding;
    x.count += f.count;
    x.lo = std::min(x.lo, f.lo);
    x.hi = std::max(x.hi, f.hi);
  }
  return out;
}

std::string describe(const Reported& r) {
  const Finding& f = r.finding;
  auto thread = [&](unsigned t) {
    if (t == ~0u) return std::string("several threads");
    if (!f.lanes_known) return "SIMD-group " + std::to_string(t / 32);
    return "thread " + std::to_string(t) + " (SIMD-group " + std::to_string(t / 32) + ", lane " +
           std::to_string(t % 32) + ")";
  };
  const uint64_t e0 = f.lo / f.elem_size, e1 = f.hi / f.elem_size;
  const std::string where = std::string(f.on_device ? "device" : "threadgroup") + " memory '" + f.memory + "' " +
                            (e0 == e1 ? "element " + std::to_string(e0)
                                      : "elements " + std::to_string(e0) + " to " + std::to_string(e1));
  const std::string group = "threadgroup (" + std::to_string(f.group[0]) + ", " + std::to_string(f.group[1]) + ", " +
                            std::to_string(f.group[2]) + ")";
  const std::string times = f.count == 1 ? "once" : std::to_string(f.count) + " times";
  if (f.between_groups) {
    const char* first = f.kind == Hazard::WriteAfterRead ? "read" : "written";
    const char* second = f.kind == Hazard::ReadAfterWrite ? "read" : "written";
    const char* what = f.kind == Hazard::ReadAfterWrite   ? "a write, then a read"
                       : f.kind == Hazard::WriteAfterRead ? "a read, then a write"
                                                          : "two writes";
    auto name = [](const unsigned* g) {
      return "threadgroup (" + std::to_string(g[0]) + ", " + std::to_string(g[1]) + ", " + std::to_string(g[2]) + ")";
    };
    return std::string("data race between threadgroups (") + what + ") on device memory '" + f.memory + "' " +
           (e0 == e1 ? "element " + std::to_string(e0)
                     : "elements " + std::to_string(e0) + " to " + std::to_string(e1)) +
           ": " + first + " at " + r.first_line + " by " + (f.several_groups ? std::string("several threadgroups") : name(f.first_group)) + ", " + second + " at " +
           r.second_line + " by " + name(f.group) + " (" + times +
           "); the threadgroups of one dispatch run in no set order: give each its own elements, use atomics, "
           "or split the work into two dispatches";
  }
  const std::string lanes = f.lanes_known ? "" : " (check=\"all\" runs each thread on its own and names them)";
  if (f.kind == Hazard::Uninitialised && f.on_device)
    return "uninitialised read of " + where + " at " + r.second_line + ", by " + thread(f.second_thread) + " of " +
           group + ": its memory came from metalkit.empty and nothing, neither the host nor a kernel, wrote it "
           "before (" + times + ")" + lanes + "; fill it first (metalkit.zeros, or a kernel that writes it), or "
           "read only what was written";
  if (f.kind == Hazard::Uninitialised)
    return "uninitialised read of " + where + " at " + r.second_line + ", by " + thread(f.second_thread) + " of " +
           group + ": no thread of the threadgroup wrote it before (" + times + ")" + lanes;
  const char* first = f.kind == Hazard::WriteAfterRead ? "read" : "written";
  const char* second = f.kind == Hazard::ReadAfterWrite ? "read" : "written";
  const char* what = f.kind == Hazard::ReadAfterWrite   ? "a write, then a read"
                     : f.kind == Hazard::WriteAfterRead ? "a read, then a write"
                                                        : "two writes";
  std::string out = std::string(f.lockstep ? "relies on SIMD-group lockstep" : "data race") + " (" + what +
                    ") on " + where + ": " + first + " at " + r.first_line + " by " + thread(f.first_thread) +
                    ", " + second + " at " + r.second_line + " by " + thread(f.second_thread) + " of " + group +
                    ", with no threadgroup_barrier between (" + times + ")" + lanes;
  if (f.lockstep)
    out += "; the GPU runs a SIMD-group's lanes together, so this holds on Apple GPUs, but not where SIMD-groups "
           "do not run in lockstep: put a simdgroup_barrier or threadgroup_barrier between them";
  else
    out += std::string("; put a threadgroup_barrier(mem_flags::") + (f.on_device ? "mem_device" : "mem_threadgroup") +
           ") between them";
  return out;
}

}  // namespace mk
