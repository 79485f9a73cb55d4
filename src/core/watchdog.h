// The watchdog: one thread that, while dispatches run, asks each to stop once
// its time limit has passed or, for an interruptible one, once SIGINT has
// arrived. It looks every 20 ms, and once a second when nothing has been
// watched for two seconds. Watching a dispatch costs its thread a store and a
// compare-and-swap.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>

#include "run_limits.h"

namespace mk {

// How the watchdog stops a dispatch: called on the watchdog's thread every
// tick from the first that finds a reason until the dispatch ends, so a thread
// that missed one request gets the next.
class Stoppable {
 public:
  virtual void stop_now() = 0;

 protected:
  ~Stoppable() = default;
};

// Watches the calling thread's dispatch while it exists (nothing to do, and no
// cost, without a time limit or Ctrl-C to watch for). A Watch nested in another
// on the same thread is not watched.
class Watch {
 public:
  using Clock = std::chrono::steady_clock;
  Watch(const RunLimits& limits, Stoppable& target, Clock::time_point start);
  ~Watch();  // waits if the watchdog is asking the dispatch to stop at this moment
  Watch(const Watch&) = delete;
  Watch& operator=(const Watch&) = delete;
  // Why the watchdog asked the dispatch to stop (None: it did not).
  StopReason reason() const { return StopReason(reason_.load(std::memory_order_acquire)); }

 private:
  friend struct Watchdog;
  const RunLimits& limits_;
  Stoppable& target_;
  Clock::time_point deadline_ = Clock::time_point::max();
  std::atomic<int> reason_{0};
  struct WatchSlot* slot_ = nullptr;
};

// Ctrl-C. metalkit's SIGINT handler counts the signal, then runs the handler it
// replaced (Python's, which makes the main thread raise KeyboardInterrupt once
// it runs Python code again). Installed when the module loads and, when Python
// replaced it (signal.signal), again by the watchdog while the main thread is
// inside a watched dispatch, so never while Python changes it. Never installed
// over SIG_IGN or SIG_DFL: an ignored Ctrl-C stays ignored.
uint64_t interrupts_seen();
// Installs the handler if SIGINT's is another function. Call with the GIL held.
void watch_interrupts();

}  // namespace mk
