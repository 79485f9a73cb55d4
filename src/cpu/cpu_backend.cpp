#include "cpu_backend.h"

#include <dlfcn.h>
#include <sys/mman.h>
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
#include "fault.h"
#include "scheduler.h"
#include "fiber.h"
#include "thread_pool.h"

namespace mk {
namespace {

constexpr size_t kPage = 16384;  // Apple silicon's page size; also fine for x86

class HostAllocation : public Allocation {
 public:
  explicit HostAllocation(size_t nbytes) {
    size_t rounded = (std::max<size_t>(nbytes, 1) + kPage - 1) / kPage * kPage;
    if (posix_memalign(&data_, kPage, rounded) != 0) throw std::bad_alloc();
    size_ = nbytes;
  }
  ~HostAllocation() override { std::free(data_); }
};

// Checked mode: the bytes end right below an inaccessible page (and start above
// one), so an index past either end faults instead of touching other memory.
class GuardedAllocation : public Allocation {
 public:
  GuardedAllocation(size_t nbytes, size_t align) {
    const size_t page = size_t(sysconf(_SC_PAGESIZE));
    pages_ = (std::max<size_t>(nbytes, 1) + page - 1) / page * page;
    total_ = pages_ + 2 * page;
    void* p = mmap(nullptr, total_, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    base_ = static_cast<char*>(p);
    mprotect(base_ + page, pages_, PROT_READ | PROT_WRITE);
    uintptr_t end = reinterpret_cast<uintptr_t>(base_ + page + pages_);
    data_ = reinterpret_cast<void*>((end - nbytes) / align * align);
    size_ = nbytes;
  }
  ~GuardedAllocation() override { munmap(base_, total_); }

 private:
  char* base_;
  size_t pages_, total_;
};

// The module stays loaded while any library or kernel from it is alive.
struct Module {
  void* handle = nullptr;
  const mk_module_info* info = nullptr;
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

// Which argument's memory an address is just outside of, if any ("" if none).
std::string near_argument(const KernelSpec& spec, const Launch& l, uintptr_t addr) {
  constexpr uintptr_t kNear = 1 << 16;
  for (size_t i = 0; i < l.args.size(); ++i) {
    const ArgSpec& a = spec.args[i];
    if (a.kind != ArgKind::Buffer || !l.args[i].data) continue;
    uintptr_t lo = reinterpret_cast<uintptr_t>(l.args[i].data), hi = lo + l.args[i].nbytes;
    const uint64_t n = l.args[i].nbytes / a.elem_size;
    std::string what = "parameter '" + a.name + "' [[buffer(" + std::to_string(a.index) + ")]] of " +
                       std::to_string(n) + " elements";
    if (addr >= hi && addr < hi + kNear)
      return "past the end of " + what + " (element " + std::to_string((addr - lo) / a.elem_size) + ")";
    if (addr < lo && addr + kNear >= lo)
      return "before the start of " + what + " (element -" + std::to_string((lo - addr + a.elem_size - 1) / a.elem_size) + ")";
  }
  return "";
}

// What went wrong in a chunk of groups: the text around the place in the source, which is
// found from the faulting instruction only once the fault is reported.
struct Fault {
  std::string what;    // what happened, and in which threadgroup and thread
  std::string advice;  // what to do ("; check the kernel's bounds")
  uintptr_t pc = 0;    // the faulting instruction, 0 if none (a fault the runtime found names its line)
};

// Runs thread i of group g alone under `trap` (armed here); whether it faulted.
bool alone_faults(mk_launch_fn launch, mk_dispatch d, uint64_t g, unsigned i, FaultTrap& trap) {
  d.only = i;
  if (sigsetjmp(trap.env, 0) != 0) return true;
  trap.armed = true;
  launch(&d, g, g + 1, tg_arena(), &trap.group);
  trap.armed = false;
  return false;
}

// A kernel run as a loop faulted in group g: its threads run again one at a time, through the
// same code, until one faults. Writes of the threads before it happen twice (the outputs of a
// faulted dispatch are partly written in any case). "" if none faults again.
std::string faulting_thread(mk_launch_fn launch, const mk_dispatch& d, uint64_t g, FaultTrap& trap) {
  unsigned n[3];
  for (int k = 0; k < 3; ++k) {
    const uint64_t pos = k == 0 ? g % d.ngroups[0] : k == 1 ? (g / d.ngroups[0]) % d.ngroups[1]
                                                            : g / (uint64_t(d.ngroups[0]) * d.ngroups[1]);
    n[k] = unsigned(std::min<uint64_t>(d.tg[k], d.grid[k] - pos * d.tg[k]));
  }
  FaultTrap again;
  current_trap() = &again;
  for (unsigned i = 0; i < n[0] * n[1] * n[2]; ++i) {
    if (!alone_faults(launch, d, g, i, again)) continue;
    current_trap() = &trap;
    if (again.signal && again.address == trap.address) trap.pc = again.pc;  // one thread, not a vector of them
    return "thread " + std::to_string(i) + " at (" + std::to_string(i % n[0]) + ", " +
           std::to_string((i / n[0]) % n[1]) + ", " + std::to_string(i / (n[0] * n[1])) + ") in its threadgroup";
  }
  current_trap() = &trap;
  return "";
}

// Runs groups [first, last) with this thread's fault trap armed. Returns what
// went wrong, with where (an empty `what` if nothing did).
Fault run_trapped(const mk_kernel_info& k, const mk_dispatch& d, uint64_t first, uint64_t last, uint32_t seed,
                  const KernelSpec& spec, const Launch& l) {
  prepare_fault_handling();
  set_shuffle_seed(seed);
  FaultTrap trap;
  trap.message.reserve(256);
  struct Restore {  // on every way out, an exception included
    FaultTrap* outer = current_trap();
    ~Restore() { current_trap() = outer; }
  } restore;
  current_trap() = &trap;
  Fault f;
  if (sigsetjmp(trap.env, 0) == 0) {
    trap.armed = true;
    k.launch(&d, first, last, tg_arena(), &trap.group);
    trap.armed = false;
    return f;
  }
  bool overflow = false;
  std::string where = abandon_group(trap.address, &overflow);
  if (where.empty() && trap.group < last) {
    where = "threadgroup " + group_at(d, trap.group);
    if (trap.signal && !(k.flags & (MK_KERNEL_NEEDS_FIBERS | MK_KERNEL_SIMT))) {
      const std::string thread = faulting_thread(k.launch, d, trap.group, trap);
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
  f.pc = trap.pc;
  if (overflow) {
    f.what = "stack overflow in " + where;
    f.advice = spec.execution == "loop"
                   ? " (the thread's local variables do not fit on the stack); use smaller per-thread arrays"
                   : " (its threads' local variables do not fit on the stack; a SIMD-group keeps its 32 threads' "
                     "locals together); use smaller per-thread arrays";
    return f;
  }
  char addr[32];
  std::snprintf(addr, sizeof addr, "0x%llx", (unsigned long long)trap.address);
  // x86 reports an aligned vector load or store at a misaligned address as a
  // general-protection fault: no address (SI_KERNEL), not a page fault.
#ifdef SI_KERNEL
  if (trap.signal == SIGSEGV && trap.code == SI_KERNEL) {
    f.what = "misaligned access in " + where;
    f.advice = ": a vector type (float4, half4, ...) read or written at an address that is not a multiple of its "
               "size; cast through a packed_ type or index the vector type itself";
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
  f.advice = arg.empty() ? "; an index is probably out of bounds (check=True or METALKIT_CHECK=1 runs on guarded copies)"
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

class CpuKernel : public KernelImpl {
 public:
  CpuKernel(std::shared_ptr<Module> mod, const mk_kernel_info& k) : mod_(std::move(mod)), info_(k) {
    spec_.name = k.name;
    spec_.max_threads = uint32_t(k.max_threads);
    spec_.needs_fibers = (k.flags & (MK_KERNEL_NEEDS_FIBERS | MK_KERNEL_SIMT)) != 0;
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
    for (size_t i = 0; i < l.args.size(); ++i)
      args[i] = spec_.args[i].kind == ArgKind::Threadgroup ? reinterpret_cast<void*>(uintptr_t(l.args[i].tg_offset))
                                                            : l.args[i].data;
    mk_dispatch d;
    for (int i = 0; i < 3; ++i) {
      d.grid[i] = g.grid.v[i];
      d.tg[i] = g.tg.v[i];
      d.ngroups[i] = g.ngroups.v[i];
    }
    d.args = args;
    d.only = ~0u;
    const uint64_t groups = g.ngroups.product();
    // Enough groups per chunk that a chunk is worth a hand-off (~16k threads).
    const uint64_t per_group = std::max<uint64_t>(1, g.tg.product());
    const uint64_t chunk = std::max<uint64_t>(1, 16384 / per_group);
    std::mutex fault_lock;
    Fault fault;
    std::atomic<bool> failed{false};
    const uint32_t seed = l.shuffle_seed;
    ThreadPool::instance().run(groups, chunk, [&](uint64_t first, uint64_t last) {
      if (failed.load(std::memory_order_relaxed)) return;
      Fault why;
      try {
        why = run_trapped(info_, d, first, last, seed, spec_, l);
      } catch (const std::exception& e) {  // the pool's work must not throw: make it this call's fault
        bool overflow;
        abandon_group(0, &overflow);
        why.what = std::string("the simulator could not run the kernel: ") + e.what();
      }
      if (!why.what.empty()) {
        std::lock_guard<std::mutex> lk(fault_lock);
        if (!failed.exchange(true)) fault = std::move(why);
      }
    });
    last_gpu_time_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!failed) return;
    const std::string line = source_line(fault.pc, info_);
    throw KernelFault("kernel '" + spec_.name + "' (" + spec_.file + ":" + std::to_string(spec_.line) + "): " +
                      fault.what + (line.empty() ? "" : ", at " + line) + fault.advice);
  }

 private:
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
        auto& slot = kernels_[name];
        if (!slot) slot = std::make_shared<CpuKernel>(mod_, mod_->info->kernels[i]);
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
  if (auto set_rt = reinterpret_cast<mk_set_runtime_fn>(dlsym(mod->handle, MK_RUNTIME_SYMBOL))) set_rt(cpu_runtime());
  if (mod->info->abi_version != MK_ABI_VERSION)
    throw std::runtime_error("compiled module " + path + " was built for another metalkit version");
  return std::make_shared<CpuLibrary>(std::move(mod));
}

SourceLocator& source_locator() {
  static SourceLocator locate = nullptr;
  return locate;
}

std::shared_ptr<Allocation> cpu_allocate(size_t nbytes) { return std::make_shared<HostAllocation>(nbytes); }

std::shared_ptr<Allocation> cpu_allocate_guarded(size_t nbytes, size_t align) {
  return std::make_shared<GuardedAllocation>(nbytes, std::max<size_t>(align, 1));
}

}  // namespace mk
