// Built without _FORTIFY_SOURCE semantics for longjmp, as fault.cpp: the jump
// leaves a signal handler, perhaps from a fiber stack.
#undef _FORTIFY_SOURCE
#include "stop.h"

#include <pthread.h>
#include <signal.h>

#include <cstring>
#include <mutex>
#include <new>

#include "fault.h"

#if defined(__APPLE__)
#include <dlfcn.h>
#include <mach-o/getsect.h>
#else
#include <link.h>
#endif

namespace mk {

// A thread that runs kernel code, as the SIGURG handler finds it (by
// pthread_self(), so without touching thread-local storage for a signal that
// may not be ours).
struct KickSlot {
  std::atomic<bool> used{false};
  pthread_t thread{};
  std::atomic<const std::atomic<bool>*> running{nullptr};  // stop flag of the dispatch whose chunk it runs
  std::atomic<unsigned> pending{0};                         // SIGURGs sent to it and not yet handled
};

namespace {

constexpr int kSlots = 256;  // threads running kernels at once; any more stop at checks only
KickSlot g_slots[kSlots];
std::mutex g_slots_lock;  // held to claim, release and kick: a thread with a slot is alive
struct sigaction g_previous_sigurg;

void pass_on(int sig, siginfo_t* info, void* uctx) {
  const struct sigaction& prev = g_previous_sigurg;
  if (prev.sa_flags & SA_SIGINFO)
    prev.sa_sigaction(sig, info, uctx);
  else if (prev.sa_handler != SIG_IGN && prev.sa_handler != SIG_DFL)  // SIGURG's default is to ignore it
    prev.sa_handler(sig);
}

void on_sigurg(int sig, siginfo_t* info, void* uctx) {
  const pthread_t self = pthread_self();
  KickSlot* mine = nullptr;
  for (KickSlot& s : g_slots)
    if (s.used.load(std::memory_order_acquire) && pthread_equal(s.thread, self)) {
      mine = &s;
      break;
    }
  if (!mine || mine->pending.exchange(0) == 0) {
    pass_on(sig, info, uctx);
    return;
  }
  // Ours, so this thread has run kernel code and its trap pointer is allocated.
  FaultTrap* trap = current_trap();
  if (!trap || !trap->armed || !trap->stop || !trap->stop->load(std::memory_order_relaxed)) return;
  const uintptr_t pc = fault_pc(uctx);
  if (pc < trap->code_lo || pc >= trap->code_hi) return;
  trap->armed = false;
  trap->stopped = true;
  siglongjmp(trap->env, 1);
}

KickSlot* claim_slot() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction sa;
    std::memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_sigurg;
    // SA_NODEFER: the jump out skips the return that would unblock SIGURG.
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGURG, &sa, &g_previous_sigurg);
    // A child process has only the thread that forked: the other slots are free, the lock new.
    pthread_atfork(nullptr, nullptr, [] {
      new (&g_slots_lock) std::mutex;
      for (KickSlot& s : g_slots)
        if (!pthread_equal(s.thread, pthread_self())) s.used.store(false);
    });
  });
  std::lock_guard<std::mutex> lk(g_slots_lock);
  for (KickSlot& s : g_slots)
    if (!s.used.load(std::memory_order_relaxed)) {
      s.thread = pthread_self();
      s.pending.store(0);
      s.running.store(nullptr);
      s.used.store(true, std::memory_order_release);
      return &s;
    }
  return nullptr;
}

KickSlot* my_slot() {
  struct Claimed {
    KickSlot* slot = claim_slot();
    ~Claimed() {
      if (!slot) return;
      std::lock_guard<std::mutex> lk(g_slots_lock);
      slot->used.store(false, std::memory_order_release);
    }
  };
  static thread_local Claimed c;
  return c.slot;
}

}  // namespace

void code_range_of(const void* fn, uintptr_t* lo, uintptr_t* hi) {
  *lo = *hi = 0;
#if defined(__APPLE__)
  Dl_info info;
  if (!dladdr(fn, &info) || !info.dli_fbase) return;
  unsigned long size = 0;
  const uint8_t* text = getsegmentdata(static_cast<const struct mach_header_64*>(info.dli_fbase), "__TEXT", &size);
  if (!text) return;
  *lo = reinterpret_cast<uintptr_t>(text);
  *hi = *lo + size;
#else
  struct Find {
    uintptr_t addr, lo, hi;
  } f{reinterpret_cast<uintptr_t>(fn), 0, 0};
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* p) -> int {
        Find& f = *static_cast<Find*>(p);
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const ElfW(Phdr)& ph = info->dlpi_phdr[i];
          const uintptr_t start = info->dlpi_addr + ph.p_vaddr;
          if (ph.p_type == PT_LOAD && (ph.p_flags & PF_X) && f.addr >= start && f.addr < start + ph.p_memsz) {
            f.lo = start;
            f.hi = start + ph.p_memsz;
            return 1;
          }
        }
        return 0;
      },
      &f);
  *lo = f.lo;
  *hi = f.hi;
#endif
}

RunningChunk::RunningChunk(const std::atomic<bool>* stop) : slot_(my_slot()) {
  if (slot_) slot_->running.store(stop, std::memory_order_release);
}

RunningChunk::~RunningChunk() {
  if (slot_) slot_->running.store(nullptr, std::memory_order_release);
}

void kick_threads_running(const std::atomic<bool>* stop) {
  std::lock_guard<std::mutex> lk(g_slots_lock);
  for (KickSlot& s : g_slots)
    if (s.used.load(std::memory_order_relaxed) && s.running.load(std::memory_order_acquire) == stop) {
      s.pending.fetch_add(1);
      pthread_kill(s.thread, SIGURG);
    }
}

}  // namespace mk
