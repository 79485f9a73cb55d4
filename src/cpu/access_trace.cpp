#include "access_trace.h"

#include <algorithm>
#include <stdexcept>

#include "fault.h"

namespace mk {
namespace {

constexpr unsigned kMaxMemories = 255;  // a record names its memory in a byte

// Memory this OS thread records accesses to. An access within `slack` bytes before or past it
// (and in no other memory) is recorded as out of bounds: under the trace's guarded copies it then
// faults, ending the dispatch with that access as its thread's last record.
struct Range {
  uintptr_t lo;
  uint64_t size, elem_size, slack;
  uint8_t id;
};

struct Log {
  AccessTrace* trace = nullptr;
  std::vector<Range> ranges;
  std::vector<TraceRecord> records;
};

Log& log_of_thread() {
  static thread_local Log l;
  return l;
}

// The armed log of this OS thread, or null: a plain pointer, read on every access (access_check.cpp).
thread_local Log* armed = nullptr;

Range range_of(uintptr_t lo, uint64_t size, uint64_t elem_size, unsigned id) {
  const uint64_t es = elem_size ? elem_size : 1;
  return {lo, size, es, std::max<uint64_t>(size, 16 * es), uint8_t(id)};
}

const Range* find(const Log& l, uintptr_t a) {
  for (const Range& r : l.ranges)
    if (a - r.lo < r.size) return &r;
  for (const Range& r : l.ranges)
    if (a + r.slack - r.lo < r.size + 2 * r.slack) return &r;
  return nullptr;
}

int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

}  // namespace

AccessTrace::AccessTrace(std::string k, std::vector<TracedMemory> buffers, const mk_dispatch& d, uint64_t c)
    : kernel(std::move(k)), cap(c), nbuffers(unsigned(buffers.size())), memories(std::move(buffers)) {
  std::copy(d.grid, d.grid + 3, grid);
  std::copy(d.tg, d.tg + 3, tg);
  std::copy(d.ngroups, d.ngroups + 3, ngroups);
  if (memories.size() > kMaxMemories)
    throw std::runtime_error("metalkit.trace follows at most " + std::to_string(kMaxMemories) + " buffers");
}

unsigned AccessTrace::threadgroup_memory(const std::string& name, uint64_t size, uint64_t elem_size) {
  std::lock_guard<std::mutex> lk(lock_);
  for (size_t i = 0; i < memories.size(); ++i)
    if (memories[i].threadgroup && memories[i].name == name) return unsigned(i);
  if (memories.size() >= kMaxMemories) return kMaxMemories;  // not recorded
  memories.push_back({name, size, elem_size ? elem_size : 1, true, 0});
  return unsigned(memories.size() - 1);
}

TracedMemory AccessTrace::memory(unsigned i) const {
  std::lock_guard<std::mutex> lk(lock_);
  return memories[i];
}

void AccessTrace::merge(std::vector<TraceRecord>& log) {
  std::lock_guard<std::mutex> lk(lock_);
  if (records.size() + log.size() > cap) {
    full = true;
    log.resize(cap - std::min<uint64_t>(cap, records.size()));
  }
  records.insert(records.end(), log.begin(), log.end());
}

std::string AccessTrace::cap_message() const {
  return "metalkit.trace keeps at most " + std::to_string(cap) + " accesses (one per element and thread; "
         "max_accesses=), and the kernel made more: trace a smaller grid";
}

TraceScope::TraceScope(AccessTrace* trace, const std::vector<TracedMemory>& slots) {
  if (!trace) return;
  Log& l = log_of_thread();
  l.trace = trace;
  l.ranges.clear();
  l.records.clear();
  for (unsigned i = 0; i < trace->nbuffers; ++i) {
    const TracedMemory m = trace->memory(i);
    l.ranges.push_back(range_of(m.data, m.size, m.elem_size, i));
  }
  for (const TracedMemory& s : slots) {
    const unsigned id = trace->threadgroup_memory(s.name, s.size, s.elem_size);
    if (id < kMaxMemories) l.ranges.push_back(range_of(s.data, s.size, s.elem_size, id));
  }
  armed = &l;
}

TraceScope::~TraceScope() {
  if (!armed) return;
  armed = nullptr;
  Log& l = log_of_thread();
  l.trace->merge(l.records);
  l.records.clear();
  l.trace = nullptr;
}

void trace_access(uintptr_t addr, uint64_t size, unsigned flags, const RunningFiber& f) {
  Log* l = armed;
  if (!l || !size) return;
  const Range* r = find(*l, addr);
  if (!r) return;
  const int64_t es = int64_t(r->elem_size), off = int64_t(addr - r->lo);
  const int64_t first = floor_div(off, es), last = floor_div(off + int64_t(size) - 1, es);
  const unsigned* n = l->trace->ngroups;
  const uint32_t group = uint32_t(f.pos[0] + uint64_t(n[0]) * (f.pos[1] + uint64_t(n[1]) * f.pos[2]));
  const bool write = flags & MK_ACCESS_WRITE;
  const uint8_t kind = uint8_t((write ? kTraceWrite : 0) | (!write || (flags & MK_ACCESS_UPDATE) ? kTraceRead : 0) |
                               (flags & MK_ACCESS_ATOMIC ? kTraceAtomic : 0));
  for (int64_t e = first; e <= last; ++e) {
    const TraceRecord rec{e, group, uint16_t(f.index), r->id, kind};
    if (!l->records.empty()) {  // a thread touching one element again, as a loop does, is one record
      const TraceRecord& b = l->records.back();
      if (b.element == e && b.group == group && b.thread == rec.thread && b.memory == r->id && b.flags == kind)
        continue;
    }
    l->records.push_back(rec);
  }
  if (l->records.size() > l->trace->cap) raise_fault(l->trace->cap_message());  // merge() marks it full
}

void trace_threadgroup_variable(uintptr_t addr, uint64_t size, uint64_t elem_size, const char* name) {
  Log* l = armed;
  if (!l) return;
  for (const Range& r : l->ranges)
    if (r.lo == addr) return;
  const unsigned id = l->trace->threadgroup_memory(name, size, elem_size);
  if (id < kMaxMemories) l->ranges.push_back(range_of(addr, size, elem_size, id));
}

uint64_t& trace_cap() {
  static thread_local uint64_t cap = uint64_t(1) << 24;
  return cap;
}

std::unique_ptr<AccessTrace>& taken_trace() {
  static thread_local std::unique_ptr<AccessTrace> t;
  return t;
}

}  // namespace mk
