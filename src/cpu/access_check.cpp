#include "access_check.h"

#include <algorithm>

#include "scheduler.h"

namespace mk {
namespace {

constexpr uint16_t kGroupWrite = 0xFFFF;  // an initializer's value: there before any thread runs

// The last write and the last read of one byte of threadgroup memory.
struct Cell {
  uint32_t w_epoch = 0, r_epoch = 0;  // 0: never (epochs start at 1)
  uint16_t w_who = 0, r_who = 0;
  uint16_t r_other = 0;               // with r_many: a reader other than r_who
  bool w_atomic = false, r_atomic = false;
  bool r_many = false;                // several threads read it in r_epoch
  uintptr_t w_pc = 0, r_pc = 0;
};

struct Memory {
  uintptr_t lo = 0;
  uint64_t size = 0, elem_size = 1;
  std::string name;
  std::vector<Cell> cells;
  uint32_t group_epoch = 0;  // kernel-scope variables: the group that registered it last
};

// This OS thread's checks, armed by an AccessScope.
struct State {
  uint32_t checks = 0;
  AccessReport* report = nullptr;
  std::vector<Memory> memory;
  std::map<std::tuple<int, bool, uintptr_t, uintptr_t>, Finding> found;
  uint64_t accesses = 0;  // rt_access calls: a finding counts accesses, not bytes
};

State& state() {
  static thread_local State s;
  return s;
}

Memory* memory_at(State& s, uintptr_t a) {
  for (Memory& m : s.memory)
    if (a - m.lo < m.size) return &m;
  return nullptr;
}

void note(State& s, const RunningFiber& f, const Memory& m, uint64_t offset, Hazard kind, unsigned other,
          uintptr_t other_pc, uintptr_t pc) {
  const unsigned me = f.index;
  const bool lockstep = kind != Hazard::Uninitialised && other / 32 == me / 32 &&
                        !(kind == Hazard::WriteAfterWrite && other_pc == pc);
  if (lockstep ? !(s.checks & kCheckLockstep) : !(s.checks & (kind == Hazard::Uninitialised ? kCheckUninit : kCheckRaces)))
    return;
  auto key = std::make_tuple(int(kind), lockstep, other_pc, pc);
  auto it = s.found.find(key);
  if (it == s.found.end()) {
    Finding x{kind, lockstep, other_pc, pc};
    std::copy(f.pos, f.pos + 3, x.group);
    x.first_thread = other;
    x.second_thread = me;
    x.memory = m.name;
    x.elem_size = m.elem_size;
    x.lo = x.hi = offset;
    it = s.found.emplace(key, x).first;
  }
  Finding& x = it->second;
  if (x.last_access != s.accesses) ++x.count;
  x.last_access = s.accesses;
  x.lo = std::min(x.lo, offset);
  x.hi = std::max(x.hi, offset);
}

}  // namespace

void AccessReport::merge(std::vector<Finding>& found) {
  std::lock_guard<std::mutex> lk(lock_);
  for (Finding& f : found) {
    auto key = std::make_tuple(int(f.kind), f.lockstep, f.first_pc, f.second_pc);
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
  // The slots are the same bytes for every group this thread runs: their cells carry over
  // (older epochs mean "not this group"). Kernel-scope variables register as they are reached.
  s.memory.clear();
  for (CheckedMemory& c : slots) {
    Memory m;
    m.lo = c.data;
    m.size = c.size;
    m.elem_size = c.elem_size;
    m.name = std::move(c.name);
    m.cells.resize(c.size);
    s.memory.push_back(std::move(m));
  }
}

AccessScope::~AccessScope() {
  State& s = state();
  std::vector<Finding> found;
  for (auto& kv : s.found) found.push_back(kv.second);
  s.found.clear();
  if (s.report && !found.empty()) s.report->merge(found);
  s.checks = 0;
  s.report = nullptr;
  s.memory.clear();
}

void rt_access(const void* addr, mk_u64 size, unsigned flags, const void* pc) {
  State& s = state();
  if (!s.checks) return;
  const uintptr_t a = reinterpret_cast<uintptr_t>(addr);
  Memory* m = memory_at(s, a);
  if (!m) return;  // not threadgroup memory
  const RunningFiber& f = running_fiber();
  if (!f.running) return;
  ++s.accesses;
  const bool write = flags & MK_ACCESS_WRITE, atomic = flags & MK_ACCESS_ATOMIC;
  const bool reads = !write || (flags & MK_ACCESS_UPDATE);
  const uint16_t me = uint16_t(f.index);
  const uintptr_t at = reinterpret_cast<uintptr_t>(pc) - 1;  // the call, not the instruction after it
  const uint64_t first = a - m->lo, last = std::min<uint64_t>(m->size, first + size);
  for (uint64_t o = first; o < last; ++o) {
    Cell& c = m->cells[o];
    const bool written = c.w_epoch >= f.group_epoch;
    if (reads) {
      if (!written)
        note(s, f, *m, o, Hazard::Uninitialised, me, 0, at);
      else if (c.w_epoch == f.epoch && c.w_who != me && c.w_who != kGroupWrite && !(atomic && c.w_atomic))
        note(s, f, *m, o, Hazard::ReadAfterWrite, c.w_who, c.w_pc, at);
    }
    if (write) {
      if (written && c.w_epoch == f.epoch && c.w_who != me && c.w_who != kGroupWrite && !(atomic && c.w_atomic))
        note(s, f, *m, o, Hazard::WriteAfterWrite, c.w_who, c.w_pc, at);
      if (c.r_epoch == f.epoch && (c.r_who != me || c.r_many) && !(atomic && c.r_atomic))
        note(s, f, *m, o, Hazard::WriteAfterRead, c.r_who != me ? c.r_who : c.r_other, c.r_pc, at);
      c.w_epoch = f.epoch;
      c.w_who = me;
      c.w_atomic = atomic;
      c.w_pc = at;
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
    }
  }
}

void rt_threadgroup_variable(const void* addr, mk_u64 size, mk_u64 elem_size, const char* name, int initialised) {
  State& s = state();
  if (!s.checks) return;
  const RunningFiber& f = running_fiber();
  const uintptr_t a = reinterpret_cast<uintptr_t>(addr);
  Memory* m = memory_at(s, a);
  if (!m) {
    Memory fresh;
    fresh.lo = a;
    fresh.size = size;
    fresh.elem_size = elem_size ? elem_size : 1;
    fresh.name = name;
    fresh.cells.resize(size);
    s.memory.push_back(std::move(fresh));
    m = &s.memory.back();
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
  switch (size) {
    case 1: return atomic_op(static_cast<volatile uint8_t*>(addr), op, uint8_t(value), expected);
    case 2: return atomic_op(static_cast<volatile uint16_t*>(addr), op, uint16_t(value), expected);
    case 4: return atomic_op(static_cast<volatile uint32_t*>(addr), op, uint32_t(value), expected);
    default: return atomic_op(static_cast<volatile uint64_t*>(addr), op, uint64_t(value), expected);
  }
}

std::string describe(const Finding& f, std::string (*line)(uintptr_t pc, const void* ctx), const void* ctx) {
  auto at = [&](uintptr_t pc) {
    std::string l = line(pc, ctx);
    return l.empty() ? std::string("an unknown line") : l;
  };
  auto thread = [&](unsigned t) {
    return "thread " + std::to_string(t) + " (SIMD-group " + std::to_string(t / 32) + ", lane " +
           std::to_string(t % 32) + ")";
  };
  const uint64_t e0 = f.lo / f.elem_size, e1 = f.hi / f.elem_size;
  const std::string where = "threadgroup memory '" + f.memory + "' " +
                            (e0 == e1 ? "element " + std::to_string(e0)
                                      : "elements " + std::to_string(e0) + " to " + std::to_string(e1));
  const std::string group = "threadgroup (" + std::to_string(f.group[0]) + ", " + std::to_string(f.group[1]) + ", " +
                            std::to_string(f.group[2]) + ")";
  const std::string times = f.count == 1 ? "once" : std::to_string(f.count) + " times";
  if (f.kind == Hazard::Uninitialised)
    return "uninitialised read of " + where + " at " + at(f.second_pc) + ", by " + thread(f.second_thread) + " of " +
           group + ": no thread of the threadgroup wrote it before (" + times + ")";
  const char* first = f.kind == Hazard::WriteAfterRead ? "read" : "written";
  const char* second = f.kind == Hazard::ReadAfterWrite ? "read" : "written";
  const char* what = f.kind == Hazard::ReadAfterWrite   ? "a write, then a read"
                     : f.kind == Hazard::WriteAfterRead ? "a read, then a write"
                                                        : "two writes";
  std::string out = std::string(f.lockstep ? "relies on SIMD-group lockstep" : "data race") + " (" + what +
                    ") on " + where + ": " + first + " at " + at(f.first_pc) + " by " + thread(f.first_thread) +
                    ", " + second + " at " + at(f.second_pc) + " by " + thread(f.second_thread) + " of " + group +
                    ", with no threadgroup_barrier between (" + times + ")";
  if (f.lockstep)
    out += "; the GPU runs a SIMD-group's lanes together, so this holds on Apple GPUs, but not where SIMD-groups "
           "do not run in lockstep: put a simdgroup_barrier or threadgroup_barrier between them";
  else
    out += "; put a threadgroup_barrier(mem_flags::mem_threadgroup) between them";
  return out;
}

}  // namespace mk
