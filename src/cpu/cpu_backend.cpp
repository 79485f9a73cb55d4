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

// Runs groups [first, last) with this thread's fault trap armed. Returns ""
// or what went wrong, with where.
std::string run_trapped(mk_launch_fn launch, const mk_dispatch& d, uint64_t first, uint64_t last, uint32_t seed,
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
  std::string result;
  if (sigsetjmp(trap.env, 0) == 0) {
    trap.armed = true;
    launch(&d, first, last, tg_arena());
    trap.armed = false;
  } else {
    bool overflow = false;
    std::string where = abandon_group(trap.address, &overflow);
    if (where.empty())
      where = last - first == 1 ? "threadgroup " + group_at(d, first)
                                : "threadgroups " + group_at(d, first) + " to " + group_at(d, last - 1);
    if (!trap.signal) {
      result = trap.message;
    } else if (overflow) {
      result = "stack overflow in " + where +
               " (its threads' local variables do not fit on the stack; a SIMD-group keeps its 32 threads' "
               "locals together); use smaller per-thread arrays";
    } else {
      char addr[32];
      std::snprintf(addr, sizeof addr, "0x%llx", (unsigned long long)trap.address);
      // x86 reports an aligned vector load or store at a misaligned address as a
      // general-protection fault: no address (SI_KERNEL), not a page fault.
#ifdef SI_KERNEL
      if (trap.signal == SIGSEGV && trap.code == SI_KERNEL) {
        return "misaligned access in " + where +
               ": a vector type (float4, half4, ...) read or written at an address that is not a multiple of its "
               "size; cast through a packed_ type or index the vector type itself";
      }
#endif
      if (trap.code <= 0)
        return "invalid memory access in " + where +
               " (the address is unknown: a SIGSEGV handler installed after metalkit's ran first); an index is "
               "probably out of bounds (check=True runs on guarded copies)";
      std::string arg = near_argument(spec, l, trap.address);
      result = std::string(trap.signal == SIGBUS ? "bus error" : "invalid memory access") + " at address " + addr +
               (arg.empty() ? "" : ", " + arg) + ", in " + where +
               (arg.empty() ? "; an index is probably out of bounds (check=True or METALKIT_CHECK=1 runs on guarded copies)"
                            : "; check the kernel's bounds");
    }
  }
  return result;
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
      s.array_len = uint32_t(a.array_len > 0 ? a.array_len : 0);
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
    const uint64_t groups = g.ngroups.product();
    // Enough groups per chunk that a chunk is worth a hand-off (~16k threads).
    const uint64_t per_group = std::max<uint64_t>(1, g.tg.product());
    const uint64_t chunk = std::max<uint64_t>(1, 16384 / per_group);
    mk_launch_fn launch = info_.launch;
    std::mutex fault_lock;
    std::string fault;
    std::atomic<bool> failed{false};
    const uint32_t seed = l.shuffle_seed;
    ThreadPool::instance().run(groups, chunk, [&](uint64_t first, uint64_t last) {
      if (failed.load(std::memory_order_relaxed)) return;
      std::string why;
      try {
        why = run_trapped(launch, d, first, last, seed, spec_, l);
      } catch (const std::exception& e) {  // the pool's work must not throw: make it this call's fault
        bool overflow;
        abandon_group(0, &overflow);
        why = std::string("the simulator could not run the kernel: ") + e.what();
      }
      if (!why.empty()) {
        std::lock_guard<std::mutex> lk(fault_lock);
        if (!failed.exchange(true)) fault = std::move(why);
      }
    });
    last_gpu_time_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (failed) throw KernelFault("kernel '" + spec_.name + "' (" + spec_.file + ":" + std::to_string(spec_.line) +
                                  "): " + fault);
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
        const mk_kernel_info& k = mod_->info->kernels[i];
        if (k.unset_constant && *k.unset_constant)
          throw CompileFailure("kernel '" + name + "' uses function constant '" + k.unset_constant +
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
  if (auto set_rt = reinterpret_cast<mk_set_runtime_fn>(dlsym(mod->handle, MK_RUNTIME_SYMBOL))) set_rt(cpu_runtime());
  if (mod->info->abi_version != MK_ABI_VERSION)
    throw std::runtime_error("compiled module " + path + " was built for another metalkit version");
  return std::make_shared<CpuLibrary>(std::move(mod));
}

std::shared_ptr<Allocation> cpu_allocate(size_t nbytes) { return std::make_shared<HostAllocation>(nbytes); }

std::shared_ptr<Allocation> cpu_allocate_guarded(size_t nbytes, size_t align) {
  return std::make_shared<GuardedAllocation>(nbytes, std::max<size_t>(align, 1));
}

}  // namespace mk
