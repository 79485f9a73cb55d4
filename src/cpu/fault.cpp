// Built without _FORTIFY_SOURCE semantics for longjmp: the jump may cross from
// a fiber stack or the signal stack back to the worker's own stack.
#undef _FORTIFY_SOURCE
#include "fault.h"

#include <pthread.h>
#include <signal.h>
#if defined(__linux__)
#include <sys/ucontext.h>  // Darwin's signal.h declares ucontext_t itself
#endif

#include <cstdlib>
#include <cstring>
#include <mutex>


namespace mk {
namespace {

struct sigaction previous_segv, previous_bus, previous_fpe;

// Not ours: hand the signal to whoever handled it before us.
void pass_on(int sig, siginfo_t* info, void* uctx) {
  const struct sigaction& prev = sig == SIGSEGV ? previous_segv : sig == SIGBUS ? previous_bus : previous_fpe;
  if (prev.sa_flags & SA_SIGINFO) {
    prev.sa_sigaction(sig, info, uctx);
    return;
  }
  if (prev.sa_handler == SIG_IGN) return;
  if (prev.sa_handler != SIG_DFL) {
    prev.sa_handler(sig);
    return;
  }
  signal(sig, SIG_DFL);
  raise(sig);
}


void handler(int sig, siginfo_t* info, void* uctx) {
  FaultTrap* trap = current_trap();
  if (!trap || !trap->armed) {
    pass_on(sig, info, uctx);
    return;
  }
  // Only async-signal-safe work here: the message is written after the jump.
  trap->armed = false;
  trap->signal = sig;
  trap->code = info->si_code;
  // si_code <= 0: re-raised by a handler installed after ours (Python's
  // faulthandler does this), which lost the faulting address.
  trap->address = info->si_code > 0 ? reinterpret_cast<uintptr_t>(info->si_addr) : 0;
  trap->pc = fault_pc(uctx);
  siglongjmp(trap->env, 1);
}

}  // namespace

uintptr_t fault_pc(void* uctx) {
  const ucontext_t* uc = static_cast<const ucontext_t*>(uctx);
#if defined(__APPLE__) && defined(__aarch64__)
  return uintptr_t(__darwin_arm_thread_state64_get_pc(uc->uc_mcontext->__ss));
#elif defined(__APPLE__) && defined(__x86_64__)
  return uintptr_t(uc->uc_mcontext->__ss.__rip);
#elif defined(__linux__) && defined(__x86_64__)
  return uintptr_t(uc->uc_mcontext.gregs[REG_RIP]);
#elif defined(__linux__) && defined(__aarch64__)
  return uintptr_t(uc->uc_mcontext.pc);
#else
  (void)uc;
  return 0;
#endif
}

bool below_thread_stack(uintptr_t addr) {
  static thread_local uintptr_t lo = [] {
#if defined(__APPLE__)
    // Darwin reports the stack's top (it grows down) and its size.
    const pthread_t self = pthread_self();
    return reinterpret_cast<uintptr_t>(pthread_get_stackaddr_np(self)) - pthread_get_stacksize_np(self);
#else
    pthread_attr_t attr;
    void* base = nullptr;
    size_t size = 0;
    if (pthread_getattr_np(pthread_self(), &attr) == 0) {
      pthread_attr_getstack(&attr, &base, &size);
      pthread_attr_destroy(&attr);
    }
    return reinterpret_cast<uintptr_t>(base);
#endif
  }();
  constexpr uintptr_t kReach = uintptr_t(1) << 20;  // how far below a large frame's probes land
  return lo && addr < lo && addr + kReach >= lo;
}

FaultTrap*& current_trap() {
  static thread_local FaultTrap* trap = nullptr;
  return trap;
}

void prepare_fault_handling() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction sa;
    std::memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = handler;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, &previous_segv);
    sigaction(SIGBUS, &sa, &previous_bus);
    sigaction(SIGFPE, &sa, &previous_fpe);  // x86 traps an integer division by 0; a GPU does not
  });
  // Per thread, freed when the thread ends (Python threads come and go).
  struct AltStack {
    void* mem = nullptr;
    AltStack() {
      stack_t current;
      if (sigaltstack(nullptr, &current) != 0 || !(current.ss_flags & SS_DISABLE)) return;  // one is set already
      stack_t ss;
      ss.ss_size = 64 * 1024;
      ss.ss_sp = mem = std::malloc(ss.ss_size);
      ss.ss_flags = 0;
      if (mem && sigaltstack(&ss, nullptr) != 0) {
        std::free(mem);
        mem = nullptr;
      }
    }
    ~AltStack() {
      if (!mem) return;
      stack_t off;
      off.ss_sp = nullptr;
      off.ss_size = 0;
      off.ss_flags = SS_DISABLE;
      sigaltstack(&off, nullptr);
      std::free(mem);
    }
  };
  static thread_local AltStack alt;
  (void)alt;
}

void raise_fault(const std::string& message) {
  FaultTrap* trap = current_trap();
  trap->armed = false;
  trap->message = message;
  siglongjmp(trap->env, 1);
}

bool stop_requested() {
  const FaultTrap* trap = current_trap();
  return trap && trap->stop && trap->stop->load(std::memory_order_relaxed);
}

void raise_stop() {
  FaultTrap* trap = current_trap();
  trap->armed = false;
  trap->stopped = true;
  siglongjmp(trap->env, 1);
}

}  // namespace mk
