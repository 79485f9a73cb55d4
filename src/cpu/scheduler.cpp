#include "scheduler.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "fault.h"
#include "fiber.h"

namespace mk {
namespace {

enum class State : uint8_t { Ready, AtBarrier, AtSimd, Done };

// What the scheduler scans every round, kept small so a group's fibers share cache lines.
struct Fiber {
  FiberContext ctx;
  State state = State::Ready;
  const char* file = nullptr;     // where it waits
  int line = 0, column = 0;
  bool at(const Fiber& o) const { return line == o.line && column == o.column && file == o.file; }
};

// A thread's side of a SIMD rendezvous.
struct SimdSlot {
  unsigned size = 0;              // bytes contributed
  mk_simd_view view;              // filled when its rendezvous completes
  alignas(16) unsigned char bytes[MK_SIMD_SLOT];
};

// One threadgroup being run. Lives per OS thread; reused group after group.
struct Group {
  FiberStacks stacks;
  FiberContext main;
  std::vector<Fiber> fibers;
  std::vector<SimdSlot> slots;
  std::vector<unsigned> order;
  std::vector<std::vector<unsigned char>> exchange;  // per SIMD-group: MK_SIMD_SLOT * 32 bytes
  mk_thread_fn fn = nullptr;
  void* ctx = nullptr;
  unsigned pos[3] = {0, 0, 0}, size[3] = {1, 1, 1};
  unsigned n = 0, current = 0, live = 0;
  unsigned k = 0;                 // position of `current` in `order` this round
  unsigned at_simd = 0;           // fibers waiting at a SIMD rendezvous
  bool running = false;
  uint32_t shuffle_seed = 0;
  std::string fault;              // set by a fiber that asks the scheduler to raise a fault
};

Group& group() {
  static thread_local Group g;
  return g;
}

// Leaves the running fiber for the next ready one this round, or for the
// scheduler when none is left: one switch per blocked thread, not two.
void yield_from(Group& g, Fiber& f) {
  for (unsigned j = g.k + 1; j < g.n; ++j) {
    unsigned next = g.order[j];
    if (g.fibers[next].state == State::Ready) {
      g.k = j;
      g.current = next;
      fiber_switch(f.ctx, g.fibers[next].ctx);
      return;
    }
  }
  fiber_switch(f.ctx, g.main);
}

void fiber_main(void* arg) {
  Group& g = group();
  unsigned i = unsigned(reinterpret_cast<uintptr_t>(arg));
  g.fn(g.ctx, i);
  g.fibers[i].state = State::Done;
  --g.live;
  yield_from(g, g.fibers[i]);
}

std::string where(const char* file, int line) { return std::string(file ? file : "?") + ":" + std::to_string(line); }

std::string triple(const unsigned* p) {
  return "(" + std::to_string(p[0]) + ", " + std::to_string(p[1]) + ", " + std::to_string(p[2]) + ")";
}

std::string group_name() { return "threadgroup " + triple(group().pos); }

// Threads as "3, 7-9, 12", at most a handful of ranges.
std::string thread_list(const std::vector<unsigned>& ids) {
  std::string out;
  size_t ranges = 0;
  for (size_t i = 0; i < ids.size();) {
    size_t j = i;
    while (j + 1 < ids.size() && ids[j + 1] == ids[j] + 1) ++j;
    if (ranges == 6) return out + ", ...";
    out += (out.empty() ? "" : ", ") + std::to_string(ids[i]) + (j > i ? "-" + std::to_string(ids[j]) : "");
    ++ranges;
    i = j + 1;
  }
  return out;
}

// Blocks the running fiber until the scheduler makes it ready again.
void block(State s, const char* file, int line, int column) {
  Group& g = group();
  if (!g.running) raise_fault("a barrier or SIMD-group function was called from a kernel run without fibers");
  Fiber& f = g.fibers[g.current];
  f.state = s;
  f.file = file;
  f.line = line;
  f.column = column;
  yield_from(g, f);
}

// Completes one SIMD rendezvous in SIMD-group sg if all its live threads wait; returns whether it did.
bool resolve_simd(Group& g, unsigned sg) {
  unsigned first = sg * 32, last = std::min(g.n, first + 32);
  int site = -1;
  for (unsigned i = first; i < last; ++i) {
    State s = g.fibers[i].state;
    if (s == State::Ready) return false;  // still running towards something
    if (s == State::AtSimd && site < 0) site = int(i);
  }
  if (site < 0) return false;
  const Fiber& lead = g.fibers[site];
  unsigned active = 0, size = g.slots[site].size;
  unsigned char* buf = g.exchange[sg].data();
  for (unsigned i = first; i < last; ++i) {
    Fiber& f = g.fibers[i];
    if (f.state != State::AtSimd || !f.at(lead)) continue;
    if (g.slots[i].size != size)
      raise_fault("SIMD-group threads disagree at " + where(f.file, f.line) + " in " + group_name() +
                  ": they exchange values of different sizes");
    std::memcpy(buf + (i - first) * size, g.slots[i].bytes, size);
    active |= 1u << (i - first);
  }
  for (unsigned i = first; i < last; ++i) {
    if (!(active >> (i - first) & 1u)) continue;
    g.slots[i].view = mk_simd_view{buf, size, active, i - first, last - first};
    g.fibers[i].state = State::Ready;
    --g.at_simd;
  }
  return true;
}

// All live threads wait at barriers: release them, or report a divergence.
void resolve_barrier(Group& g) {
  // The common case in one pass: everyone alive waits at the same barrier.
  const Fiber* first = nullptr;
  bool uniform = true;
  for (unsigned i = 0; i < g.n && uniform; ++i) {
    const Fiber& f = g.fibers[i];
    if (f.state == State::AtBarrier) {
      if (!first) first = &f;
      uniform = f.at(*first);
    } else {
      uniform = f.state != State::Done || g.live == 0;
    }
  }
  if (uniform) {
    for (unsigned i = 0; i < g.n; ++i)
      if (g.fibers[i].state == State::AtBarrier) g.fibers[i].state = State::Ready;
    return;
  }
  std::vector<unsigned> waiting, done;
  const Fiber* lead = nullptr;
  for (unsigned i = 0; i < g.n; ++i) {
    const Fiber& f = g.fibers[i];
    if (f.state == State::Done) {
      done.push_back(i);
    } else if (f.state == State::AtBarrier) {
      if (!lead) lead = &f;
      waiting.push_back(i);
    }
  }
  if (waiting.empty()) return;
  std::vector<unsigned> elsewhere;
  for (unsigned i : waiting)
    if (!g.fibers[i].at(*lead)) elsewhere.push_back(i);
  if (!elsewhere.empty()) {
    const Fiber& o = g.fibers[elsewhere[0]];
    raise_fault("divergent barrier in " + group_name() + ": threads wait at different threadgroup_barrier calls, " +
                where(lead->file, lead->line) + " and " + where(o.file, o.line) + " (threads " +
                thread_list(elsewhere) + "); every thread of a threadgroup must reach the same barrier");
  }
  if (!done.empty())
    raise_fault("divergent barrier in " + group_name() + ": threads " + thread_list(waiting) +
                " wait at threadgroup_barrier at " + where(lead->file, lead->line) + " but threads " +
                thread_list(done) + " returned without reaching it; every thread of a threadgroup must reach it");
  for (unsigned i : waiting) g.fibers[i].state = State::Ready;
}

void shuffle_order(Group& g, uint64_t round) {
  uint32_t seed = g.shuffle_seed;
  if (!seed) return;
  const unsigned* p = g.pos;
  uint64_t s = seed * 0x9E3779B97F4A7C15ull ^ (uint64_t(p[0]) << 40 ^ uint64_t(p[1]) << 20 ^ p[2]) ^ round * 0xBF58476D1CE4E5B9ull;
  for (unsigned i = g.n; i > 1; --i) {
    s ^= s >> 31;
    s *= 0x94D049BB133111EBull;
    s ^= s >> 29;
    std::swap(g.order[i - 1], g.order[s % i]);
  }
}

void run_group(mk_thread_fn fn, void* ctx, const unsigned* position, const unsigned* size) {
  Group& g = group();
  const unsigned nthreads = size[0] * size[1] * size[2];
  for (int i = 0; i < 3; ++i) {
    g.pos[i] = position[i];
    g.size[i] = size[i];
  }
  g.fn = fn;
  g.ctx = ctx;
  g.n = nthreads;
  g.live = nthreads;
  g.fault.clear();
  if (g.fibers.size() < nthreads) {
    g.fibers.resize(nthreads);
    g.slots.resize(nthreads);
  }
  g.at_simd = 0;
  g.order.resize(nthreads);
  unsigned nsg = (nthreads + 31) / 32;
  if (g.exchange.size() < nsg) g.exchange.resize(nsg, std::vector<unsigned char>(MK_SIMD_SLOT * 32));
  for (unsigned i = 0; i < nthreads; ++i) {
    g.order[i] = i;
    g.fibers[i].state = State::Ready;
    void* stack = g.stacks.top(i);
    if (!stack)
      raise_fault("cannot map " + std::to_string(nthreads) + " fiber stacks for " + group_name() +
                  " (the system's limit on memory mappings, e.g. vm.max_map_count); use smaller threadgroups");
    fiber_init(g.fibers[i].ctx, stack, FiberStacks::kStackBytes, fiber_main, reinterpret_cast<void*>(uintptr_t(i)));
  }
  g.running = true;
  uint64_t round = 0;
  while (g.live > 0) {
    shuffle_order(g, round++);
    for (unsigned j = 0; j < nthreads; ++j) {
      if (g.fibers[g.order[j]].state != State::Ready) continue;
      g.k = j;
      g.current = g.order[j];
      fiber_switch(g.main, g.fibers[g.current].ctx);  // runs the round's ready fibers in turn
      break;
    }
    if (!g.fault.empty()) {
      g.running = false;
      raise_fault(g.fault);
    }
    if (g.live == 0) break;
    bool progressed = false;
    if (g.at_simd)
      for (unsigned sg = 0; sg < nsg; ++sg) progressed |= resolve_simd(g, sg);
    if (!progressed) resolve_barrier(g);
    if (std::none_of(g.fibers.begin(), g.fibers.begin() + nthreads, [](const Fiber& f) { return f.state == State::Ready; }))
      raise_fault("the threads of " + group_name() + " wait on one another and none can go on (a SIMD-group "
                  "function reached by only some threads of a group that also waits at a barrier)");
  }
  g.running = false;
}

void rt_barrier(const char* file, int line, int column) { block(State::AtBarrier, file, line, column); }

mk_simd_view rt_simd_exchange(const void* value, unsigned size, const char* file, int line, int column) {
  Group& g = group();
  if (size > MK_SIMD_SLOT) raise_fault("a SIMD-group value is larger than 256 bytes");
  if (g.running) {
    SimdSlot& slot = g.slots[g.current];
    std::memcpy(slot.bytes, value, size);
    slot.size = size;
    ++g.at_simd;
  }
  block(State::AtSimd, file, line, column);
  return g.slots[g.current].view;
}

void rt_simd_barrier(const char* file, int line, int column) { rt_simd_exchange(nullptr, 0, file, line, column); }

void rt_fault(const char* message, const char* file, int line) {
  std::string msg = std::string(message) + (file ? " at " + where(file, line) : "");
  Group& g = group();
  if (g.running) {
    // Leave the fiber's stack first: the jump to the trap happens from the scheduler.
    g.fault = msg;
    fiber_switch(g.fibers[g.current].ctx, g.main);
  }
  raise_fault(msg);
}

const mk_runtime runtime = {MK_ABI_VERSION, run_group, rt_barrier, rt_simd_barrier, rt_simd_exchange, rt_fault};

}  // namespace

const mk_runtime* cpu_runtime() { return &runtime; }

void set_shuffle_seed(uint32_t seed) { group().shuffle_seed = seed; }

std::string abandon_group(uintptr_t addr, bool* stack_overflow) {
  Group& g = group();
  *stack_overflow = addr && g.stacks.in_guard(addr);
  if (!g.running) return "";
  g.running = false;
  unsigned i = g.current, x = i % g.size[0], y = (i / g.size[0]) % g.size[1], z = i / (g.size[0] * g.size[1]);
  unsigned local[3] = {x, y, z};
  return group_name() + ", thread " + std::to_string(i) + " at " + triple(local) + " in its threadgroup";
}

}  // namespace mk
