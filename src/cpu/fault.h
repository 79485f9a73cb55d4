// Faults while a kernel runs: a memory fault (SIGSEGV/SIGBUS) or an integer division trap (SIGFPE) in kernel code,
// a fiber stack overflow, or a fault the runtime finds (divergent barrier).
// Each worker arms a trap around the code it runs; a fault jumps back to it
// and the dispatch raises KernelFault instead of taking the process down.
#pragma once
#include <atomic>
#include <csetjmp>
#include <cstdint>
#include <string>

namespace mk {

struct FaultTrap {
  sigjmp_buf env;
  std::string message;        // a runtime fault's text, set before the jump
  int signal = 0;             // a memory fault: the signal, its si_code and the address
  int code = 0;
  uintptr_t address = 0;
  uintptr_t pc = 0;           // the faulting instruction (0 if unknown)
  // Set while the runtime does an access on the module's behalf (checked builds' atomics): the
  // module's instruction that asked, which a fault in the runtime is reported at.
  uintptr_t on_behalf_of = 0;
  volatile unsigned long long group = ~0ull;  // the threadgroup running, as launchers record it
  bool armed = false;
  // Stopping (stop.h): the dispatch's stop flag, the module's code (where a
  // SIGURG may jump out), and whether the jump was a stop rather than a fault.
  const std::atomic<bool>* stop = nullptr;
  uintptr_t code_lo = 0, code_hi = 0;
  bool stopped = false;
};

// Installs the process-wide SIGSEGV/SIGBUS/SIGFPE handlers once (chaining to the
// previous ones) and gives this thread an alternate signal stack, so a stack
// overflow can be reported.
void prepare_fault_handling();

// The trap of the calling thread while it runs kernel code, or nullptr.
FaultTrap*& current_trap();

// The instruction a signal interrupted, from its saved registers (0 where unknown).
uintptr_t fault_pc(void* uctx);

// Whether addr lies just below the calling thread's own stack (where an overflow lands).
bool below_thread_stack(uintptr_t addr);

// Jumps to the current trap with `message`; must be called on a thread with an armed trap.
[[noreturn]] void raise_fault(const std::string& message);

// Whether the dispatch the calling thread runs was asked to stop; raise_stop()
// then leaves its kernel code as a fault would, but as a stop.
bool stop_requested();
[[noreturn]] void raise_stop();

}  // namespace mk
