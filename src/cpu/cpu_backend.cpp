#include "cpu_backend.h"

#include <dlfcn.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <mutex>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <map>
#include <stdexcept>

#include "../core/errors.h"
#include "../core/watchdog.h"
#include "access_check.h"
#include "access_trace.h"
#include "fault.h"
#include "scheduler.h"
#include "fiber.h"
#include "guarded.h"
#include "kernel_log.h"
#include "stop.h"
#include "streaming.h"
#include "thread_pool.h"

namespace mk {
namespace {

constexpr size_t kPage = 16384;  // Apple silicon's page size; also fine for x86

// Fallback device memory when no guarded reservation can be had (address space exhausted).
class HostAllocation : public Allocation {
 public:
  explicit HostAllocation(size_t nbytes) {
    size_t rounded = (std::max<size_t>(nbytes, 1) + kPage - 1) / kPage * kPage;
    if (posix_memalign(&data_, kPage, rounded) != 0) throw std::bad_alloc();
    size_ = nbytes;
  }
  ~HostAllocation() override { std::free(data_); }
};

// The module stays loaded while any library or kernel from it is alive.
struct Module {
  void* handle = nullptr;
  const mk_module_info* info = nullptr;
  uintptr_t code_lo = 0, code_hi = 0;  // its executable code, where a stop may jump out of (stop.h)
  ~Module() {
    if (handle) dlclose(handle);
  }
};

// Per worker thread: the threadgroup memory of the group it is running.
char* tg_arena() {
  alignas(64) static thread_local char arena[kMaxThreadgroupMemory];
  return arena;
}

std::string group_at(const mk_dispatch& d, uint64_t g) {
  uint64_t gx = d.ngroups[0], gy = d.ngroups[1];
  return "(" + std::to_string(g % gx) + ", " + std::to_string((g / gx) % gy) + ", " + std::to_string(g / (gx * gy)) + ")";
}

std::string element(int64_t bytes, uint64_t elem_size) {
  return bytes >= 0 ? std::to_string(uint64_t(bytes) / elem_size)
                    : "-" + std::to_string((uint64_t(-bytes) + elem_size - 1) / elem_size);
}

std::string stray(const std::string& what, int64_t offset, uint64_t elem_size) {
  return std::string(offset < 0 ? "before the start of " : "past the end of ") + what + " (element " +
         element(offset, elem_size) + ")";
}

// Which argument an address strays from, or "". In the guard of a guarded
// allocation (checked copies, metalkit arrays): the argument in it, however far;
// in checked threadgroup memory: that slot, or that kernel-scope variable of a checked build; otherwise an
// argument within 64 KiB.
std::string near_argument(const KernelSpec& spec, const Launch& l, uintptr_t addr) {
  uintptr_t gdata = 0;
  size_t gsize = 0;
  const bool guarded = guarded_extent(addr, &gdata, &gsize);
  auto nearest = [&](bool in_guard) {
    constexpr uint64_t kNear = 1 << 16;
    std::string best;
    uint64_t best_dist = UINT64_MAX;
    for (size_t i = 0; i < l.args.size(); ++i) {
      const ArgSpec& a = spec.args[i];
      if (a.kind != ArgKind::Buffer || !l.args[i].data) continue;
      const uintptr_t lo = reinterpret_cast<uintptr_t>(l.args[i].data), hi = lo + l.args[i].nbytes;
      if (addr >= lo && addr < hi) continue;
      if (in_guard && (lo < gdata || lo > gdata + gsize)) continue;  // in another allocation
      const uint64_t dist = addr < lo ? lo - addr : addr - hi;
      if ((!in_guard && dist > kNear) || dist >= best_dist) continue;
      best_dist = dist;
      best = stray("parameter '" + a.name + "' [[buffer(" + std::to_string(a.index) + ")]] of " +
                       std::to_string(l.args[i].nbytes / a.elem_size) + " elements",
                   int64_t(addr - lo), a.elem_size);
    }
    return best;
  };
  // A None's checked stand-in (no bytes between guards), or its null pointer near address 0.
  std::string best;
  for (size_t i = 0; i < l.args.size() && best.empty(); ++i) {
    const ArgSpec& a = spec.args[i];
    if (a.kind != ArgKind::Buffer || !l.args[i].none) continue;
    const uintptr_t lo = reinterpret_cast<uintptr_t>(l.args[i].data);
    if (guarded ? lo == gdata : !lo && addr < (uintptr_t(1) << 16))
      best = "through parameter '" + a.name + "' [[buffer(" + std::to_string(a.index) +
             ")]], which the call passed None (element " + element(int64_t(addr - lo), a.elem_size) + ")";
  }
  if (best.empty() && guarded) best = nearest(true);
  int slot;
  int64_t offset;
  if (best.empty() && checked_threadgroup_slot(addr, &slot, &offset)) {
    for (size_t i = 0; i < l.args.size(); ++i) {
      const ArgSpec& a = spec.args[i];
      if (a.kind != ArgKind::Threadgroup || slot-- != 0) continue;
      return stray("threadgroup parameter '" + a.name + "' [[threadgroup(" + std::to_string(a.index) + ")]] of " +
                       std::to_string(l.args[i].nbytes) + " bytes",
                   offset, std::max<uint64_t>(a.elem_size, 1));
    }
  }
  std::string var;
  uint64_t elem = 1, size = 0;
  if (best.empty() && checked_threadgroup_variable_at(addr, &var, &elem, &size, &offset))
    return stray("threadgroup variable '" + var + "' of " + std::to_string(size / elem) + " elements", offset, elem);
  return best.empty() ? nearest(false) : best;
}

// Checked mode's threadgroup slots: sizes, alignments and offsets, in parameter order.
struct CheckedSlots {
  std::vector<size_t> sizes, aligns;
  std::vector<uint64_t> offsets;
};

// What went wrong in a chunk of groups: the text around the place in the source, which is
// found from the faulting instruction only once the fault is reported.
struct Fault {
  std::string what;    // what happened, and in which threadgroup and thread
  std::string advice;  // what to do ("; check the kernel's bounds")
  uintptr_t pc = 0;    // the faulting instruction, 0 if none (a fault the runtime found names its line)
};

// Runs thread i of group g alone under `trap` (armed here); whether it faulted.
bool alone_faults(mk_launch_fn launch, mk_dispatch d, uint64_t g, unsigned i, char* arena, FaultTrap& trap) {
  d.only = i;
  if (sigsetjmp(trap.env, 0) != 0) return true;
  trap.armed = true;
  launch(&d, g, g + 1, arena, &trap.group);
  trap.armed = false;
  return false;
}

// The threads of group g per dimension (an edge group of a non-uniform grid is clipped).
void group_size(const mk_dispatch& d, uint64_t g, unsigned n[3]) {
  for (int k = 0; k < 3; ++k) {
    const uint64_t pos = k == 0 ? g % d.ngroups[0] : k == 1 ? (g / d.ngroups[0]) % d.ngroups[1]
                                                            : g / (uint64_t(d.ngroups[0]) * d.ngroups[1]);
    n[k] = unsigned(std::min<uint64_t>(d.tg[k], d.grid[k] - pos * d.tg[k]));
  }
}

// shuffle= on a kernel run as a loop: each group's threads run one at a time (d.only), in an
// order drawn from the seed and the group, so an order-dependent kernel (an atomic counter
// handing out slots) shows it, as under the scheduler's shuffled fibers. A debug mode: one
// launch per thread.
void run_shuffled(mk_launch_fn launch, mk_dispatch d, uint64_t first, uint64_t last, uint32_t seed, char* arena,
                  volatile mk_u64* at) {
  std::vector<unsigned> order;
  for (uint64_t g = first; g < last; ++g) {
    unsigned n[3];
    group_size(d, g, n);
    order.resize(size_t(n[0]) * n[1] * n[2]);
    for (unsigned i = 0; i < order.size(); ++i) order[i] = i;
    uint64_t s = seed * 0x9E3779B97F4A7C15ull ^ g * 0xBF58476D1CE4E5B9ull;
    for (size_t i = order.size(); i > 1; --i) {
      s ^= s >> 31;
      s *= 0x94D049BB133111EBull;
      s ^= s >> 29;
      std::swap(order[i - 1], order[s % i]);
    }
    for (unsigned i : order) {
      d.only = i;
      launch(&d, g, g + 1, arena, at);
    }
  }
}

// A kernel run as a loop faulted in group g: its threads run again one at a time, through the
// same code, until one faults. Writes of the threads before it happen twice (the outputs of a
// faulted dispatch are partly written in any case). "" if none faults again.
std::string faulting_thread(mk_launch_fn launch, const mk_dispatch& d, uint64_t g, char* arena, FaultTrap& trap) {
  unsigned n[3];
  group_size(d, g, n);
  FaultTrap again;
  again.stop = trap.stop;  // a thread that never ends can still be stopped
  again.code_lo = trap.code_lo;
  again.code_hi = trap.code_hi;
  current_trap() = &again;
  current_log_sink() = nullptr;  // these threads ran (and logged) once already; the chunk ends here
  for (unsigned i = 0; i < n[0] * n[1] * n[2]; ++i) {
    if (!alone_faults(launch, d, g, i, arena, again)) continue;
    if (again.stopped) break;
    current_trap() = &trap;
    if (again.signal && again.address == trap.address) trap.pc = again.pc;  // one thread, not a vector of them
    return "thread " + std::to_string(i) + " at (" + std::to_string(i % n[0]) + ", " +
           std::to_string((i / n[0]) % n[1]) + ", " + std::to_string(i / (n[0] * n[1])) + ") in its threadgroup";
  }
  current_trap() = &trap;
  return "";
}

// How a dispatch is stopped before it completes (stop.h).
struct StopPoint {
  const std::atomic<bool>* flag;
  const Module& mod;
};

// Runs groups [first, last) with this thread's fault trap armed. Returns what
// went wrong, with where (an empty `what` if nothing did); *stopped: the
// dispatch was stopped in them.
Fault run_trapped(const mk_kernel_info& k, const mk_dispatch& d, uint64_t first, uint64_t last, uint32_t seed,
                  const KernelSpec& spec, const Launch& l, const CheckedSlots* checked, AccessReport* report,
                  AccessTrace* trace, const StopPoint& stop, bool* stopped) {
  char* arena = checked ? checked_threadgroup_arena(checked->sizes, checked->offsets) : tg_arena();
  forget_threadgroup_variables();  // a checked build's kernel-scope variables take cells as they are reached
  prepare_fault_handling();
  set_shuffle_seed(seed);
  set_strict_barriers(l.checks & kCheckBarriers);
  std::vector<CheckedMemory> slots;
  if (l.checks & kCheckAccesses)
    for (size_t i = 0; i < spec.args.size(); ++i)
      if (spec.args[i].kind == ArgKind::Threadgroup && l.args[i].nbytes)
        slots.push_back({reinterpret_cast<uintptr_t>(arena) + reinterpret_cast<uintptr_t>(d.args[i]), l.args[i].nbytes,
                         std::max<uint64_t>(1, spec.args[i].elem_size), spec.args[i].name});
  std::vector<TracedMemory> traced_slots;
  if (trace)
    for (const CheckedMemory& c : slots) traced_slots.push_back({c.name, c.size, c.elem_size, true, c.data});
  TraceScope tracing(trace, traced_slots);
  AccessScope scope(l.checks & kCheckAccesses ? l.checks : 0, report, std::move(slots));
  FaultTrap trap;
  trap.message.reserve(256);
  trap.stop = stop.flag;
  trap.code_lo = stop.mod.code_lo;
  trap.code_hi = stop.mod.code_hi;
  RunningChunk running(stop.flag);
  struct Restore {  // on every way out, an exception included
    FaultTrap* outer = current_trap();
    ~Restore() { current_trap() = outer; }
  } restore;
  current_trap() = &trap;
  Fault f;
  if (sigsetjmp(trap.env, 0) == 0) {
    trap.armed = true;
    if (seed && !(k.flags & (MK_KERNEL_NEEDS_FIBERS | MK_KERNEL_SIMT)))
      run_shuffled(k.launch, d, first, last, seed, arena, &trap.group);
    else
      k.launch(&d, first, last, arena, &trap.group);
    trap.armed = false;
    return f;
  }
  bool overflow = false;
  std::string where = abandon_group(trap.address, &overflow);
  if (trap.stopped) {
    *stopped = true;
    return f;
  }
  if (where.empty() && trap.group < last) {
    where = "threadgroup " + group_at(d, trap.group);
    if (trap.signal && !(k.flags & (MK_KERNEL_NEEDS_FIBERS | MK_KERNEL_SIMT))) {
      const std::string thread = faulting_thread(k.launch, d, trap.group, arena, trap);
      if (!thread.empty()) where += ", " + thread;
    }
  }
  if (where.empty() && overflow && trap.group >= last)  // a loop's frame is made before its first thread runs
    where = "threadgroup " + group_at(d, first) + ", as its first thread started";
  if (where.empty())
    where = last - first == 1 ? "threadgroup " + group_at(d, first)
                              : "threadgroups " + group_at(d, first) + " to " + group_at(d, last - 1);
  if (!trap.signal) {
    f.what = trap.message;
    return f;
  }
  const bool in_module = trap.pc >= trap.code_lo && trap.pc < trap.code_hi;
  f.pc = !in_module && trap.on_behalf_of ? trap.on_behalf_of : trap.pc;
  if (overflow) {
    f.what = "stack overflow in " + where;
    f.advice = spec.execution == "loop"
                   ? " (the thread's local variables do not fit on the stack); use smaller per-thread arrays"
                   : " (its threads' local variables do not fit on the stack; a SIMD-group keeps its 32 threads' "
                     "locals together); use smaller per-thread arrays";
    return f;
  }
  if (trap.signal == SIGFPE) {
    f.what = "integer division by zero (or of the most negative value by -1) in " + where;
    f.advice = "; MSL leaves the result undefined (a GPU gives some value, the processor stops): check the divisor";
    return f;
  }
  char addr[32];
  std::snprintf(addr, sizeof addr, "0x%llx", (unsigned long long)trap.address);
  // x86 reports an access at a non-canonical address (beyond the 47 or 56 bits
  // of address space) as a general-protection fault, without the address.
  // (Vector accesses need no alignment here: modules are built with -fmax-type-align.)
#ifdef SI_KERNEL
  if (trap.signal == SIGSEGV && trap.code == SI_KERNEL) {
    f.what = "invalid memory access at an address outside the address space (the processor does not report it), "
             "in " + where;
    f.advice = ": an index or offset is far out of bounds";
    return f;
  }
#endif
  if (trap.code <= 0) {
    f.what = "invalid memory access in " + where;
    f.advice = " (the address is unknown: a SIGSEGV handler installed after metalkit's ran first); an index is "
               "probably out of bounds (check=True runs on guarded copies)";
    return f;
  }
  std::string arg = near_argument(spec, l, trap.address);
  f.what = std::string(trap.signal == SIGBUS ? "bus error" : "invalid memory access") + " at address " + addr +
           (arg.empty() ? "" : ", " + arg) + ", in " + where;
  f.advice = arg.empty()                                   ? "; an index is probably out of bounds (check=True or METALKIT_CHECK=1 runs on guarded copies)"
             : arg.find("passed None") != std::string::npos ? "; pass an array for it if the kernel reads it"
                                                            : "; check the kernel's bounds";
  return f;
}

// "file.metal:12" for a faulting instruction in module code, or "" if not known.
std::string source_line(uintptr_t pc, const mk_kernel_info& k) {
  Dl_info at, mine;
  if (!pc || !source_locator() || !dladdr(reinterpret_cast<void*>(pc), &at) || !at.dli_fname ||
      !dladdr(reinterpret_cast<void*>(k.launch), &mine) || at.dli_fbase != mine.dli_fbase)
    return "";  // not in the kernel's module (a C library call, say)
  return source_locator()(at.dli_fname, pc - reinterpret_cast<uintptr_t>(at.dli_fbase));
}

// A module's struct table as the core's StructLayout (a struct cannot hold itself, so this ends).
std::shared_ptr<const StructLayout> struct_layout(const mk_struct_info* info) {
  if (!info) return nullptr;
  auto out = std::make_shared<StructLayout>();
  out->size = info->size;
  out->align = info->align;
  for (int i = 0; i < info->nfields; ++i) {
    const mk_field_info& f = info->fields[i];
    FieldLayout x;
    x.name = f.name;
    x.offset = f.offset;
    x.type = f.type;
    x.vec_width = f.vec_width;
    x.elem_size = f.elem_size;
    x.dims.assign(f.dims, f.dims + std::min(std::max(f.ndims, 0), 4));
    x.layout = struct_layout(f.layout);
    out->fields.push_back(std::move(x));
  }
  return out;
}

class CpuKernel : public KernelImpl {
 public:
  CpuKernel(std::shared_ptr<Module> mod, const mk_kernel_info& k) : mod_(std::move(mod)), info_(k) {
    spec_.name = k.name;
    spec_.max_threads = uint32_t(k.max_threads);
    spec_.needs_fibers = (k.flags & (MK_KERNEL_NEEDS_FIBERS | MK_KERNEL_SIMT)) != 0;
    spec_.threadgroup_variables = (k.flags & MK_KERNEL_TG_VARIABLES) != 0;
    spec_.execution = k.execution ? k.execution : "loop";
    spec_.file = k.file;
    spec_.line = k.line;
    for (int i = 0; i < k.nargs; ++i) {
      const mk_arg_info& a = k.args[i];
      ArgSpec s;
      s.position = i;
      s.index = a.index;
      s.name = a.name;
      s.decl = a.decl;
      s.builtin = a.builtin;
      s.kind = ArgKind(a.kind);
      s.type = a.type;
      s.vec_width = a.vec_width;
      s.space = Space(a.space);
      s.writable = a.writable != 0;
      s.elem_size = a.elem_size;
      s.elem_align = a.elem_align;
      s.array_len = uint32_t(a.array_len > 0 ? a.array_len : 0);
      s.layout = struct_layout(a.layout);
      spec_.args.push_back(std::move(s));
    }
  }

  void dispatch(const Launch& l) override {
    auto t0 = std::chrono::steady_clock::now();
    const Geometry& g = l.geometry;
    void* slots[64];
    std::vector<void*> many;
    void** args = slots;
    if (l.args.size() > 64) {
      many.resize(l.args.size());
      args = many.data();
    }
    // Checked mode: each threadgroup slot between guards (guarded.h), not packed in the arena.
    CheckedSlots checked;
    for (size_t i = 0; i < l.args.size(); ++i)
      if ((l.checks & kCheckBounds) && spec_.args[i].kind == ArgKind::Threadgroup) {
        checked.sizes.push_back(l.args[i].nbytes);
        checked.aligns.push_back(spec_.args[i].elem_align);
      }
    checked.offsets = checked_threadgroup_offsets(checked.sizes, checked.aligns);
    const CheckedSlots* slots_checked = checked.sizes.empty() ? nullptr : &checked;
    for (size_t i = 0, k = 0; i < l.args.size(); ++i)
      args[i] = spec_.args[i].kind != ArgKind::Threadgroup ? l.args[i].data
                : slots_checked ? reinterpret_cast<void*>(uintptr_t(checked.offsets[k++]))
                                : reinterpret_cast<void*>(uintptr_t(l.args[i].tg_offset));
    mk_dispatch d;
    for (int i = 0; i < 3; ++i) {
      d.grid[i] = g.grid.v[i];
      d.tg[i] = g.tg.v[i];
      d.ngroups[i] = g.ngroups.v[i];
    }
    d.args = args;
    d.only = ~0u;
    d.stream_bytes = info_.flags & MK_KERNEL_STREAMS ? stream_bytes(spec_.name) : ~uint64_t(0);
    const uint64_t groups = g.ngroups.product();
    // Enough groups per chunk that a chunk is worth a hand-off (~16k threads), yet no fewer
    // chunks than cores while each keeps 4k threads: a matmul of 144 groups of 128 threads was
    // otherwise a chunk of 128 groups and one of 16, one core doing nearly all of it.
    const uint64_t per_group = std::max<uint64_t>(1, g.tg.product());
    const uint64_t cores = ThreadPool::instance().size();
    const uint64_t fewest = std::max<uint64_t>(1, 4096 / per_group), most = std::max<uint64_t>(1, 16384 / per_group);
    const uint64_t chunk = std::max(fewest, std::min(most, (groups + cores - 1) / cores));
    std::mutex fault_lock;
    Fault fault;
    std::atomic<bool> failed{false};
    const uint32_t seed = l.shuffle_seed;
    // The watchdog stops the dispatch by raising its flag (checked between chunks and by the
    // scheduler) and kicking the threads inside its kernel code.
    struct Stopper final : Stoppable {
      std::atomic<bool> flag{false};
      void stop_now() override {
        flag.store(true, std::memory_order_relaxed);
        kick_threads_running(&flag);
      }
    } stopper;
    const StopPoint stop{&stopper.flag, *mod_};
    std::atomic<uint64_t> done{0};  // groups of the chunks that completed
    // Device buffers the kernel may write are watched for races between threadgroups.
    std::vector<WatchedBuffer> watched;
    if (l.checks & (kCheckRaces | kCheckLockstep))
      for (size_t i = 0; i < l.args.size(); ++i)
        if (spec_.args[i].kind == ArgKind::Buffer && spec_.args[i].writable && l.args[i].data && !l.args[i].none)
          watched.push_back({reinterpret_cast<uintptr_t>(l.args[i].data), l.args[i].nbytes,
                             spec_.args[i].elem_size, spec_.args[i].name});
    // check="uninit": device bytes nothing had written (metalkit.empty memory left alone).
    std::vector<UnwrittenBytes> unwritten;
    if (l.checks & kCheckUninit)
      for (size_t i = 0; i < l.args.size(); ++i)
        for (const auto& [offset, length] : l.args[i].unwritten)
          unwritten.push_back({reinterpret_cast<uintptr_t>(l.args[i].data) + offset, length, offset,
                               spec_.args[i].elem_size, spec_.args[i].name});
    AccessReport report(std::move(watched), std::move(unwritten), d.ngroups, mod_->code_lo);
    LogSink log(spec_.name);
    // metalkit.trace: every buffer argument, read-only ones too.
    std::unique_ptr<AccessTrace> trace;
    if (l.checks & kCheckTrace) {
      std::vector<TracedMemory> buffers;
      for (size_t i = 0; i < l.args.size(); ++i)
        if (spec_.args[i].kind == ArgKind::Buffer && l.args[i].data && !l.args[i].none)
          buffers.push_back({spec_.args[i].name, l.args[i].nbytes, std::max<uint64_t>(1, spec_.args[i].elem_size),
                             false, reinterpret_cast<uintptr_t>(l.args[i].data)});
      trace = std::make_unique<AccessTrace>(spec_.name, std::move(buffers), d, trace_cap());
    }
    Watch watch(l.limits, stopper, t0);
    ThreadPool::instance().run(groups, chunk, [&](uint64_t first, uint64_t last) {
      if (failed.load(std::memory_order_relaxed) || stopper.flag.load(std::memory_order_relaxed)) return false;
      Fault why;
      bool stopped = false;
      struct LogScope {  // on every way out
        LogSink* outer = current_log_sink();
        explicit LogScope(LogSink* s) { current_log_sink() = s; }
        ~LogScope() { current_log_sink() = outer; }
      } log_scope(&log);
      try {
        why = run_trapped(info_, d, first, last, seed, spec_, l, slots_checked, &report, trace.get(), stop, &stopped);
      } catch (const std::exception& e) {  // the pool's work must not throw: make it this call's fault
        bool overflow;
        abandon_group(0, &overflow);
        why.what = std::string("the simulator could not run the kernel: ") + e.what();
      }
      if (!why.what.empty()) {
        std::lock_guard<std::mutex> lk(fault_lock);
        if (!failed.exchange(true)) fault = std::move(why);
        return false;
      }
      if (stopped) return false;
      done.fetch_add(last - first, std::memory_order_relaxed);
      return true;
    });
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    last_gpu_time_ = elapsed;
    const uint64_t completed = done.load();
    log.finish(kernel_log());  // a faulted or stopped dispatch's messages too: what led there
    if (trace) {  // for the bindings, whatever happened: a fault is the last thing a trace shows
      taken_trace() = std::move(trace);
      if (!failed && taken_trace()->full)
        throw KernelFault(kernel_label(spec_.name) + " (" + spec_.file + ":" + std::to_string(spec_.line) +
                          "): " + taken_trace()->cap_message());
    }
    if (!failed && stopper.flag.load() && completed < groups) {  // stopped by Ctrl-C or the time limit
      const StopReason why = watch.reason();
      const std::string msg = stop_message(spec_, l.limits, why, elapsed, completed, groups);
      if (why == StopReason::Interrupt) throw Interrupted(msg);
      throw KernelFault(msg);
    }
    if (!failed) return report_findings(report.findings(), l.checks);
    const std::string line = source_line(fault.pc, info_);
    throw KernelFault(kernel_label(spec_.name) + " (" + spec_.file + ":" + std::to_string(spec_.line) + "): " +
                      fault.what + (line.empty() ? "" : ", at " + line) + fault.advice);
  }

 private:
  // What the access checks found: races and uninitialised reads raise one KernelFault listing
  // them (warnings under check="warn"); reliance on lockstep is always a warning.
  void report_findings(const std::vector<Finding>& found, uint32_t checks) const {
    if (found.empty()) return;
    auto line = [](uintptr_t pc, const void* k) { return source_line(pc, *static_cast<const mk_kernel_info*>(k)); };
    const std::string head = kernel_label(spec_.name) + " (" + spec_.file + ":" + std::to_string(spec_.line) + "): ";
    std::vector<std::string> errors;
    for (const Reported& r : by_line(found, line, &info_)) {
      std::string text = describe(r);
      if (r.finding.lockstep || (checks & kCheckWarn))
        check_warnings().push_back(head + text);
      else
        errors.push_back(std::move(text));
    }
    if (errors.empty()) return;
    std::string msg = head + (errors.size() == 1 ? errors[0] : std::to_string(errors.size()) + " problems found:");
    if (errors.size() > 1)
      for (const std::string& e : errors) msg += "\n- " + e;
    throw KernelFault(msg);
  }

  std::shared_ptr<Module> mod_;
  mk_kernel_info info_;
};

class CpuLibrary : public LibraryImpl {
 public:
  explicit CpuLibrary(std::shared_ptr<Module> mod) : mod_(std::move(mod)) {
  }
  std::vector<std::string> kernel_names() const override {
    std::vector<std::string> names;
    for (int i = 0; i < mod_->info->nkernels; ++i) names.push_back(mod_->info->kernels[i].name);
    return names;
  }
  std::shared_ptr<KernelImpl> kernel(const std::string& name) override {
    for (int i = 0; i < mod_->info->nkernels; ++i)
      if (name == mod_->info->kernels[i].name) {
        const mk_kernel_info& k = mod_->info->kernels[i];
        if (k.unset_constant && *k.unset_constant)
          throw CompileFailure(kernel_label(name) + " uses function constant '" + k.unset_constant +
                               "', which was given no value: pass it in constants= (or Library.specialize), "
                               "or test is_function_constant_defined(" + k.unset_constant + ") before using it");
        auto& slot = kernels_[name];
        if (!slot) slot = std::make_shared<CpuKernel>(mod_, k);
        return slot;
      }
    return nullptr;
  }

 private:
  std::shared_ptr<Module> mod_;
  std::map<std::string, std::shared_ptr<KernelImpl>> kernels_;
};

}  // namespace

std::shared_ptr<LibraryImpl> load_cpu_library(const std::string& path) {
  auto mod = std::make_shared<Module>();
  mod->handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!mod->handle) throw std::runtime_error(std::string("cannot load compiled module: ") + dlerror());
  auto fn = reinterpret_cast<mk_module_fn>(dlsym(mod->handle, MK_MODULE_SYMBOL));
  if (!fn) throw std::runtime_error("compiled module " + path + " has no " MK_MODULE_SYMBOL);
  mod->info = fn();
  code_range_of(reinterpret_cast<const void*>(fn), &mod->code_lo, &mod->code_hi);
  if (auto set_rt = reinterpret_cast<mk_set_runtime_fn>(dlsym(mod->handle, MK_RUNTIME_SYMBOL))) set_rt(cpu_runtime());
  if (mod->info->abi_version != MK_ABI_VERSION)
    throw std::runtime_error("compiled module " + path + " was built for another metalkit version");
  return std::make_shared<CpuLibrary>(std::move(mod));
}

SourceLocator& source_locator() {
  static SourceLocator locate = nullptr;
  return locate;
}

std::shared_ptr<Allocation> cpu_allocate(size_t nbytes) {
  // Where address space is limited (ulimit -v), smaller guards; once it or the
  // mappings run out, memory without guards.
  for (size_t guard : {kHostGuard, size_t(16) << 20}) {
    try {
      return std::make_shared<GuardedAllocation>(nbytes, kPage, guard, false);
    } catch (const std::bad_alloc&) {
    }
  }
  return std::make_shared<HostAllocation>(nbytes);
}

std::shared_ptr<Allocation> cpu_allocate_guarded(size_t nbytes, size_t align) {
  return std::make_shared<GuardedAllocation>(nbytes, std::max<size_t>(align, 1), check_guard(), true);
}

}  // namespace mk
