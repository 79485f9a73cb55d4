// Stopping a dispatch whose threads are inside kernel code. The pool checks the
// dispatch's stop flag between chunks of threadgroups and the scheduler at every
// round of a group's fibers, but a thread in an endless loop reaches neither, so
// the watchdog also sends SIGURG to each thread running one of the dispatch's
// chunks. If the signal lands in the module's own code, the handler jumps to the
// thread's fault trap, as a memory fault does; kernel code holds no lock of the
// runtime, the C library or the loader, so nothing is left locked. Landing
// anywhere else (the runtime, libm, the loader) it does nothing, and the next
// check or the next tick's SIGURG stops the thread. SIGURG is ignored by default
// and seldom used (Go's runtime preempts with it for that reason); one not sent
// by metalkit goes on to the handler that was there before.
#pragma once
#include <atomic>
#include <cstdint>

namespace mk {

// The executable segment of the loaded module holding the code at fn, as
// [*lo, *hi); {0, 0} if unknown (a stuck thread then stops at a check only).
void code_range_of(const void* fn, uintptr_t* lo, uintptr_t* hi);

// While it exists, the calling thread runs kernel code of the dispatch whose
// stop flag is `stop`, and kick_threads_running(stop) reaches it.
class RunningChunk {
 public:
  explicit RunningChunk(const std::atomic<bool>* stop);
  ~RunningChunk();
  RunningChunk(const RunningChunk&) = delete;
  RunningChunk& operator=(const RunningChunk&) = delete;

 private:
  struct KickSlot* slot_;
};

// Sends SIGURG to every thread running a chunk of the dispatch with this stop flag.
void kick_threads_running(const std::atomic<bool>* stop);

}  // namespace mk
