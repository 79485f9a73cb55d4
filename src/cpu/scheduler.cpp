#include "scheduler.h"
#include "kernel_log.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "access_check.h"
#include "fault.h"
#include "fiber.h"
#include "guarded.h"

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

// Whether a waits earlier in the source than b (their file's lines and columns; "min-PC").
bool before(const Fiber& a, const Fiber& b) {
  if (!a.file || !b.file || std::strcmp(a.file, b.file) != 0) return false;
  return a.line < b.line || (a.line == b.line && a.column < b.column);
}

// A thread's side of a SIMD rendezvous.
struct SimdSlot {
  unsigned size = 0;              // bytes contributed
  bool barrier = false;           // a simdgroup_barrier (orders the SIMD-group's memory accesses)
  mk_simd_view view;              // filled when its rendezvous completes
  alignas(16) unsigned char bytes[MK_SIMD_SLOT];
};

// One threadgroup being run. Lives per OS thread; reused group after group.
struct Group {
  FiberStacks stacks{thread_watch()};
  FiberContext main;
  std::vector<Fiber> fibers;
  std::vector<SimdSlot> slots;
  std::vector<unsigned> order;
  std::vector<std::vector<unsigned char>> exchange;  // per SIMD-group: MK_SIMD_SLOT * 32 bytes
  mk_thread_fn fn = nullptr;      // what the fibers run: a thread,
  mk_simt_fn simt_fn = nullptr;   // or a SIMD-group of a SIMT kernel
  void* ctx = nullptr;
  unsigned pos[3] = {0, 0, 0}, size[3] = {1, 1, 1};
  unsigned n = 0, current = 0, live = 0;
  unsigned k = 0;                 // position of `current` in `order` this round
  uint64_t round = 0;             // rounds begun (each shuffles the order anew)
  unsigned at_simd = 0;           // fibers waiting at a SIMD rendezvous
  unsigned lanes = 1;             // threads per fiber: 1, or 32 for the SIMD-groups of a SIMT kernel
  unsigned threads = 0;           // threads in the group
  bool running = false;           // fibers are running
  bool direct = false;            // SIMD-groups of a SIMT kernel run one after another, without fibers
  bool strict = false;            // check=: a barrier not reached by whole SIMD-groups at one site is a fault
  uint32_t shuffle_seed = 0;
  const std::atomic<bool>* stop = nullptr;  // the dispatch's stop flag (stop.h), read once per group
  unsigned parked = 0;            // fibers 0..parked-1 wait at the end of fiber_main's loop (a
                                  // group ended normally): resuming one runs a thread of the next
  std::string fault;              // set by a fiber that asks the scheduler to raise a fault
  RunningFiber now;               // what the access checks read, kept in step (set_current, set_running)
  std::vector<uint32_t> sg_epochs;  // per SIMD-group: simdgroup_barriers completed in this group
  const void* const* split_running = nullptr;  // a split kernel's running SIMD-group's frame,
  unsigned split_sg_offset = 0;                // and where its index is in it (rt_begin_split_group)
};

// Not inlined: callers keep the reference, where an inlined thread_local would be looked up
// again (a __tls_get_addr call in a shared object) after every fiber switch.
[[gnu::noinline]] Group& group() {
  static thread_local Group g;
  return g;
}

// g.current, g.running and g.direct change only here (but for split kernels: rt_begin_split_group),
// so g.now (what the access checks read) stays in step without work per access.
inline void set_current(Group& g, unsigned i) {
  g.current = i;
  g.now.index = i * g.lanes;
  g.now.sg_epoch = g.lanes == 1 && i / 32 < g.sg_epochs.size() ? g.sg_epochs[i / 32] : 0;
}
inline void set_running(Group& g, bool running, bool direct) {
  g.running = running;
  g.direct = direct;
  g.now.running = running || direct;
  g.now.lanes = g.lanes;
  std::copy(g.pos, g.pos + 3, g.now.pos);
}

// The fiber or SIMD-group running now: g.current, or, in a split kernel, what its module says.
unsigned running_unit(const Group& g) {
  const char* frame = g.split_running ? static_cast<const char*>(*g.split_running) : nullptr;
  return frame ? *reinterpret_cast<const unsigned*>(frame + g.split_sg_offset) : g.current;
}

void shuffle_order(Group& g, uint64_t round);
void resolve_strict_barrier(Group& g);

bool stopping(const Group& g) { return g.stop && g.stop->load(std::memory_order_relaxed); }

// The usual end of a round of SIMD-group fibers (SIMT kernels): every live SIMD-group waits at
// a barrier (one site, under check=). Releases them and begins the next round, whose first fiber
// it returns; -1 for anything else (a fault, a divergence, a stop, the end), which the scheduler's
// loop sorts out.
int next_round(Group& g) {
  if (g.lanes == 1 || !g.fault.empty() || stopping(g)) return -1;  // a stop: the scheduler's loop raises it
  const Fiber* lead = nullptr;
  for (unsigned i = 0; i < g.n; ++i) {
    const Fiber& f = g.fibers[i];
    if (f.state == State::Done) continue;
    if (f.state != State::AtBarrier || (g.strict && lead && !f.at(*lead))) return -1;
    if (!lead) lead = &f;
  }
  if (!lead) return -1;
  ++g.now.epoch;
  for (unsigned i = 0; i < g.n; ++i)
    if (g.fibers[i].state == State::AtBarrier) g.fibers[i].state = State::Ready;
  shuffle_order(g, g.round++);
  for (unsigned j = 0; j < g.n; ++j)
    if (g.fibers[g.order[j]].state == State::Ready) return int(j);
  return -1;
}

// Leaves the running fiber for the next ready one this round (or, for SIMD-group fibers, the
// first of the next round), else for the scheduler: one switch per blocked fiber, not two.
void yield_from(Group& g, Fiber& f) {
  for (unsigned j = g.k + 1; j < g.n; ++j) {
    unsigned next = g.order[j];
    if (g.fibers[next].state == State::Ready) {
      g.k = j;
      set_current(g, next);
      fiber_switch(f.ctx, g.fibers[next].ctx);
      return;
    }
  }
  const int j = next_round(g);
  if (j >= 0) {
    g.k = unsigned(j);
    set_current(g, g.order[j]);
    Fiber& next = g.fibers[g.current];
    if (&next != &f) fiber_switch(f.ctx, next.ctx);  // else it goes on at once
    return;
  }
  fiber_switch(f.ctx, g.main);
}

// A fiber runs a thread (or SIMD-group) of one group after another: once its group has ended
// normally, run_fibers resumes it where it yielded, to run a thread of the next group, so a group
// starts without new stack frames.
void fiber_main(void* arg) {
  Group& g = *static_cast<Group*>(arg);
  for (;;) {
    const unsigned i = g.current;  // set by whoever switched here
    if (g.simt_fn)
      g.simt_fn(g.ctx, i, &g);
    else
      g.fn(g.ctx, i);
    g.fibers[i].state = State::Done;
    --g.live;
    yield_from(g, g.fibers[i]);
  }
}

std::string where(const char* file, int line) { return std::string(file ? file : "?") + ":" + std::to_string(line); }

std::string triple(const unsigned* p) {
  return "(" + std::to_string(p[0]) + ", " + std::to_string(p[1]) + ", " + std::to_string(p[2]) + ")";
}

std::string group_name() { return "threadgroup " + triple(group().pos); }

// The threads a fiber (or a directly run SIMD-group) stands for, as in messages.
std::string unit_name(unsigned u) {
  const Group& g = group();
  if (g.lanes == 1) return "thread " + std::to_string(u);
  const unsigned first = u * g.lanes, last = std::min(g.threads, first + g.lanes) - 1;
  return "SIMD-group " + std::to_string(u) + " (threads " + std::to_string(first) + "-" + std::to_string(last) + ")";
}

// Fiber ids as thread ids: each SIMD-group fiber stands for its 32 threads.
std::vector<unsigned> thread_ids(const std::vector<unsigned>& units) {
  const Group& g = group();
  if (g.lanes == 1) return units;
  std::vector<unsigned> out;
  for (unsigned u : units)
    for (unsigned t = u * g.lanes; t < std::min(g.threads, (u + 1) * g.lanes); ++t) out.push_back(t);
  return out;
}

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

// Threads `missing` of SIMD-group sg went on while the rest of it waits at a barrier (at file:line if given).
std::string diverged(unsigned sg, unsigned missing, const char* file, int line) {
  std::vector<unsigned> lanes;
  for (unsigned l = 0; l < 32; ++l)
    if (missing >> l & 1u) lanes.push_back(sg * 32 + l);
  return "divergent barrier in " + group_name() + ": threads " + thread_list(lanes) + " of SIMD-group " +
         std::to_string(sg) +
         " did not reach this threadgroup_barrier with the rest of their SIMD-group (they took another branch); "
         "every thread of a threadgroup must reach it" + (file ? " at " + where(file, line) : "");
}

// Blocks the running fiber until the scheduler makes it ready again.
void block(Group& g, State s, const char* file, int line, int column) {
  if (!g.running) raise_fault("a barrier or SIMD-group function was called from a kernel run without fibers");
  Fiber& f = g.fibers[g.current];
  f.state = s;
  f.file = file;
  f.line = line;
  f.column = column;
  yield_from(g, f);
}

// Completes one SIMD rendezvous in SIMD-group sg if all its live threads wait; returns whether it did.
// Of several sites, the earliest in the source goes first ("min-PC"): lanes that are behind
// (a loop's next iteration, the other side of a branch) catch up before any lane goes on.
bool resolve_simd(Group& g, unsigned sg) {
  unsigned first = sg * 32, last = std::min(g.n, first + 32);
  int site = -1;
  for (unsigned i = first; i < last; ++i) {
    const Fiber& f = g.fibers[i];
    if (f.state == State::Ready) return false;  // still running towards something
    if (f.state == State::AtSimd &&
        (site < 0 || f.line < g.fibers[site].line ||
         (f.line == g.fibers[site].line && f.column < g.fibers[site].column)))
      site = int(i);
  }
  if (site < 0) return false;
  const Fiber& lead = g.fibers[site];
  // Lanes of this SIMD-group waiting at a threadgroup_barrier before this site took a branch
  // the others skipped. As on the GPU, the others wait for them to come through it (they
  // reconverge) and the SIMD-group counts as arrived at the barrier; under check= it is a
  // divergent barrier.
  unsigned waiting = 0;
  const Fiber* barrier = nullptr;
  for (unsigned i = first; i < last; ++i) {
    const Fiber& f = g.fibers[i];
    if (f.state == State::AtBarrier && before(f, lead)) {
      waiting |= 1u << (i - first);
      barrier = &f;
    }
  }
  if (barrier) {
    if (!g.strict) return false;
    unsigned live = 0;
    for (unsigned i = first; i < last; ++i)
      if (g.fibers[i].state != State::Done) live |= 1u << (i - first);
    raise_fault(diverged(sg, live & ~waiting, barrier->file, barrier->line));
  }
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
  if (g.slots[site].barrier && sg < g.sg_epochs.size()) ++g.sg_epochs[sg];
  return true;
}

// No thread can go on but at a barrier. As on Apple GPUs, a barrier counts SIMD-groups: it
// completes once every SIMD-group with a live thread has one waiting at a barrier, at any site
// (threads that returned take no further part). Each SIMD-group's threads at its earliest
// waiting site go on; its threads at later sites skipped a branch and wait for the rest. Under
// check=, every live thread must wait at one site.
void resolve_barrier(Group& g) {
  if (g.strict) return resolve_strict_barrier(g);
  const unsigned per = g.lanes == 1 ? 32 : 1;  // fibers per SIMD-group
  for (unsigned first = 0; first < g.n; first += per) {
    const unsigned last = std::min(g.n, first + per);
    const Fiber* lead = nullptr;
    bool live = false;
    for (unsigned i = first; i < last; ++i) {
      const Fiber& f = g.fibers[i];
      live = live || f.state != State::Done;
      if (f.state == State::AtBarrier && (!lead || before(f, *lead))) lead = &f;
    }
    if (live && !lead) return;  // a SIMD-group that has not arrived: nothing to release
  }
  ++g.now.epoch;
  for (unsigned first = 0; first < g.n; first += per) {
    const unsigned last = std::min(g.n, first + per);
    const Fiber* lead = nullptr;
    for (unsigned i = first; i < last; ++i)
      if (g.fibers[i].state == State::AtBarrier && (!lead || before(g.fibers[i], *lead))) lead = &g.fibers[i];
    if (!lead) continue;
    const Fiber site = *lead;
    for (unsigned i = first; i < last; ++i)
      if (g.fibers[i].state == State::AtBarrier && g.fibers[i].at(site)) g.fibers[i].state = State::Ready;
  }
}

// check=: all live threads wait at barriers, at one site; release them, or report a divergence.
void resolve_strict_barrier(Group& g) {
  const Fiber* lead = nullptr;
  bool same = true;
  for (unsigned i = 0; i < g.n; ++i) {
    const Fiber& f = g.fibers[i];
    if (f.state == State::AtSimd) return;  // a barrier waits for every live thread
    if (f.state != State::AtBarrier) continue;
    if (!lead) lead = &f;
    same = same && f.at(*lead);
  }
  if (!lead) return;
  if (!same) {
    std::vector<unsigned> here, elsewhere;
    const Fiber* other = nullptr;
    for (unsigned i = 0; i < g.n; ++i) {
      const Fiber& f = g.fibers[i];
      if (f.state != State::AtBarrier) continue;
      if (f.at(*lead)) {
        here.push_back(i);
      } else {
        if (!other) other = &f;
        elsewhere.push_back(i);
      }
    }
    raise_fault("divergent barrier in " + group_name() + ": threads wait at different threadgroup_barrier calls, " +
                where(lead->file, lead->line) + " (threads " + thread_list(thread_ids(here)) + ") and " +
                where(other->file, other->line) + " (threads " + thread_list(thread_ids(elsewhere)) +
                "); every thread of a threadgroup must reach the same barrier");
  }
  ++g.now.epoch;
  for (unsigned i = 0; i < g.n; ++i)
    if (g.fibers[i].state == State::AtBarrier) g.fibers[i].state = State::Ready;
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

// Runs n fibers of `lanes` threads each until all return.
void run_fibers(mk_thread_fn fn, mk_simt_fn simt_fn, void* ctx, const unsigned* position, const unsigned* size,
                unsigned n, unsigned lanes) {
  Group& g = group();
  for (int i = 0; i < 3; ++i) {
    g.pos[i] = position[i];
    g.size[i] = size[i];
  }
  g.now.group_epoch = ++g.now.epoch;
  g.fn = fn;
  g.simt_fn = simt_fn;
  g.ctx = ctx;
  g.n = n;
  g.live = n;
  g.lanes = lanes;
  g.threads = size[0] * size[1] * size[2];
  g.fault.clear();
  if (g.fibers.size() < n) {
    g.fibers.resize(n);
    g.slots.resize(n);
  }
  g.at_simd = 0;
  const FaultTrap* trap = current_trap();
  g.stop = trap ? trap->stop : nullptr;
  // Fibers parked by a group that ended normally go on from there; the others (new, or left
  // anywhere by a fault or a stop) start afresh. None counts as parked until this group ends.
  const unsigned parked = g.parked;
  g.parked = 0;
  g.order.resize(n);
  unsigned nsg = (n + 31) / 32;
  g.sg_epochs.assign(lanes == 1 ? nsg : 0, 0);
  if (lanes == 1 && g.exchange.size() < nsg) g.exchange.resize(nsg, std::vector<unsigned char>(MK_SIMD_SLOT * 32));
  for (unsigned i = 0; i < n; ++i) {
    g.order[i] = i;
    g.fibers[i].state = State::Ready;
    if (i < parked) continue;
    void* stack = g.stacks.top(i);
    if (!stack)
      raise_fault("cannot map " + std::to_string(n) + " fiber stacks for " + group_name() +
                  " (the system's limit on memory mappings, e.g. vm.max_map_count); use smaller threadgroups");
    fiber_init(g.fibers[i].ctx, stack, FiberStacks::kStackBytes, fiber_main, &g);
  }
  set_running(g, true, false);
  g.round = 0;
  while (g.live > 0) {
    if (stopping(g)) raise_stop();  // a round ends at barriers: a loop around one stops here
    shuffle_order(g, g.round++);
    for (unsigned j = 0; j < n; ++j) {
      if (g.fibers[g.order[j]].state != State::Ready) continue;
      g.k = j;
      set_current(g, g.order[j]);
      fiber_switch(g.main, g.fibers[g.current].ctx);  // runs the round's ready fibers in turn
      break;
    }
    if (!g.fault.empty()) {
      set_running(g, false, false);
      raise_fault(g.fault);
    }
    if (g.live == 0) break;
    bool progressed = false;
    // One SIMD-group goes on at a time (the first in this round's order that can), so between
    // threadgroup barriers SIMD-groups run one after another as under SIMT, not statement by
    // statement together, which would hide a missing barrier.
    uint64_t tried = 0;
    for (unsigned j = 0; g.at_simd && j < n && !progressed; ++j) {
      const unsigned sg = g.order[j] / 32;
      if (!(tried >> sg & 1u)) progressed = resolve_simd(g, sg);
      tried |= uint64_t(1) << sg;
    }
    if (!progressed) resolve_barrier(g);
    if (std::none_of(g.fibers.begin(), g.fibers.begin() + n, [](const Fiber& f) { return f.state == State::Ready; }))
      raise_fault("the threads of " + group_name() + " wait on one another and none can go on (a SIMD-group "
                  "function reached by only some threads of a group that also waits at a barrier)");
  }
  g.parked = std::max(parked, n);  // every fiber returned to the end of fiber_main's loop
  set_running(g, false, false);
}

void run_group(mk_thread_fn fn, void* ctx, const unsigned* position, const unsigned* size) {
  run_fibers(fn, nullptr, ctx, position, size, size[0] * size[1] * size[2], 1);
}

// Readies a group whose SIMD-groups run one after another, without fibers, on this thread's own
// stack (an overflow there is reported as one too), in the order it returns: shuffled on request.
Group& begin_direct(const unsigned* position, const unsigned* size, unsigned nsg) {
  Group& g = group();
  for (int i = 0; i < 3; ++i) {
    g.pos[i] = position[i];
    g.size[i] = size[i];
  }
  g.n = nsg;
  g.lanes = 32;
  g.threads = size[0] * size[1] * size[2];
  g.order.resize(nsg);
  for (unsigned i = 0; i < nsg; ++i) g.order[i] = i;
  shuffle_order(g, 0);
  g.now.group_epoch = ++g.now.epoch;
  set_running(g, false, true);
  return g;
}

void run_simt_group(mk_simt_fn fn, void* ctx, const unsigned* position, const unsigned* size, unsigned nsg,
                    int fibers) {
  if (fibers > 1 || (fibers && nsg > 1)) return run_fibers(nullptr, fn, ctx, position, size, nsg, 32);
  Group& g = begin_direct(position, size, nsg);  // no barrier to wait at
  for (unsigned j = 0; j < nsg; ++j) {
    if (stop_requested()) raise_stop();
    set_current(g, g.order[j]);
    fn(ctx, g.current, nullptr);
  }
  set_running(g, false, false);
}

// The module of a kernel split at its barriers runs the SIMD-groups itself; *running points to the
// frame of the one it runs (running_unit). Its builds are never checked, so g.now's thread index,
// which only the access checks read, is left as it is.
const unsigned* rt_begin_split_group(const unsigned* position, const unsigned* size, unsigned nsg,
                                     const void* const* running, unsigned sg_offset) {
  Group& g = begin_direct(position, size, nsg);
  g.split_running = running;
  g.split_sg_offset = sg_offset;
  return g.shuffle_seed ? g.order.data() : nullptr;
}

void rt_end_split_group() {
  Group& g = group();
  g.split_running = nullptr;
  set_running(g, false, false);
}

void rt_barrier(const char* file, int line, int column) { block(group(), State::AtBarrier, file, line, column); }

// Called with the scheduler that runs the SIMD-group's fiber, so block's check is moot.
void rt_simt_barrier(void* scheduler, const char* file, int line, int column) {
  Group& g = *static_cast<Group*>(scheduler);
  Fiber& f = g.fibers[g.current];
  f.state = State::AtBarrier;
  f.file = file;
  f.line = line;
  f.column = column;
  yield_from(g, f);
}

mk_simd_view simd_meet(const void* value, unsigned size, bool barrier, const char* file, int line, int column) {
  Group& g = group();
  if (size > MK_SIMD_SLOT) raise_fault("a SIMD-group value is larger than 256 bytes");
  if (g.running) {
    SimdSlot& slot = g.slots[g.current];
    std::memcpy(slot.bytes, value, size);
    slot.size = size;
    slot.barrier = barrier;
    ++g.at_simd;
  }
  block(g, State::AtSimd, file, line, column);
  return g.slots[g.current].view;
}

mk_simd_view rt_simd_exchange(const void* value, unsigned size, const char* file, int line, int column) {
  return simd_meet(value, size, false, file, line, column);
}

void rt_simd_barrier(const char* file, int line, int column) { simd_meet(nullptr, 0, true, file, line, column); }

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

// A SIMT SIMD-group at a barrier with some live lanes masked off: it arrives, as on the GPU;
// under check= that is a divergent barrier.
void rt_simt_diverged(unsigned sg, unsigned missing, const char* file, int line) {
  if (!group().strict) return;
  rt_fault(diverged(sg, missing, nullptr, 0).c_str(), file, line);
}

// A checked build's kernel-scope threadgroup variable: guarded storage (guarded.h).
void* rt_threadgroup_storage(const void* key, mk_u64 size, mk_u64 align, mk_u64 elem_size, const char* name) {
  return checked_threadgroup_variable(key, size, align, elem_size, name);
}

const mk_runtime runtime = {MK_ABI_VERSION,    run_group,      rt_barrier,       rt_simd_barrier,
                            rt_simd_exchange,  rt_fault,       run_simt_group,   rt_simt_diverged,
                            rt_simt_barrier,   rt_access,      rt_threadgroup_variable,
                            rt_atomic,         rt_threadgroup_storage, rt_log,
                            rt_watched_access, fiber_arena(),  rt_begin_split_group,
                            rt_end_split_group};

}  // namespace

const mk_runtime* cpu_runtime() { return &runtime; }

const RunningFiber& running_fiber() { return group().now; }

bool running_thread(unsigned lane, unsigned group_pos[3], unsigned thread[3], bool* lane_known) {
  Group& g = group();
  if (!g.running && !g.direct) return false;
  *lane_known = g.lanes == 1 || lane < 32;
  const unsigned i = g.lanes == 1 ? g.current : running_unit(g) * 32 + (lane < 32 ? lane : 0);
  thread[0] = i % g.size[0];
  thread[1] = (i / g.size[0]) % g.size[1];
  thread[2] = i / (g.size[0] * g.size[1]);
  std::copy(g.pos, g.pos + 3, group_pos);
  return true;
}

void set_shuffle_seed(uint32_t seed) { group().shuffle_seed = seed; }

void set_strict_barriers(bool strict) { group().strict = strict; }

std::string abandon_group(uintptr_t addr, bool* stack_overflow) {
  Group& g = group();
  *stack_overflow = addr && (g.stacks.in_guard(addr) || below_thread_stack(addr));
  if (!g.running && !g.direct) return "";
  const unsigned unit = running_unit(g);
  g.split_running = nullptr;
  set_running(g, false, false);
  if (g.lanes != 1) return group_name() + ", " + unit_name(unit);
  unsigned i = g.current, x = i % g.size[0], y = (i / g.size[0]) % g.size[1], z = i / (g.size[0] * g.size[1]);
  unsigned local[3] = {x, y, z};
  return group_name() + ", thread " + std::to_string(i) + " at " + triple(local) + " in its threadgroup";
}

}  // namespace mk
