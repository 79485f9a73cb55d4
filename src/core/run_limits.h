// What may stop a running dispatch, decided once for every backend: a time
// limit (a call's timeout=, else METALKIT_TIMEOUT) and Ctrl-C (calls from
// Python's main thread), and the KernelFault text when one did.
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "arg_spec.h"
#include "errors.h"

namespace mk {

enum class StopReason : int { None = 0, Interrupt = 1, Timeout = 2 };

struct RunLimits {
  double timeout = 0;          // seconds; 0: no limit
  bool from_env = false;       // the limit is METALKIT_TIMEOUT's, not the call's timeout=
  bool interruptible = false;  // Ctrl-C stops it
  uint64_t interrupts = 0;     // interrupts_seen() (watchdog.h) when the call began
};

class Completion;

// A dispatch stopped by Ctrl-C. The bindings let Python's SIGINT handler run
// (KeyboardInterrupt by default); if it does not raise, this is the KernelFault.
// On a GPU only the wait stops: `running` (else null) completes when the GPU is done,
// and what the work uses must stay alive until then.
struct Interrupted : KernelFault {
  using KernelFault::KernelFault;
  std::shared_ptr<Completion> running;
};
// A GPU dispatch whose wait passed its timeout=; the GPU goes on (`running`, as above).
struct GpuTimeout : KernelFault {
  using KernelFault::KernelFault;
  std::shared_ptr<Completion> running;
};

// The end of GPU work a thread waits for. A GPU command buffer cannot be stopped once
// committed, but the wait for it can: the backend's completion handler calls done() (on
// a thread of its own), and wait() returns when it has, or earlier when the call's limits
// say stop. Then the work goes on, and then() keeps what it uses until it completes.
class Completion {
 public:
  using Clock = std::chrono::steady_clock;
  void done();  // runs what then() left, on the calling thread
  bool is_done() const;
  // Waits for done(), looking every 20 ms at the limits: the time limit counted from
  // `start`, and for an interruptible call a Ctrl-C since limits.interrupts. Returns
  // None once done(), else why it stopped waiting.
  StopReason wait(const RunLimits& limits, Clock::time_point start);
  // Runs f when done() is called, or now if it has been.
  void then(std::function<void()> f);

 private:
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  bool done_ = false;
  std::vector<std::function<void()>> then_;
};

// The limits of one call. timeout: the call's timeout= (nullopt: METALKIT_TIMEOUT,
// read once; unset or 0 is no limit). Throws ArgumentError for a limit that is not
// a positive number of seconds. On a backend that defers (Metal) the limits bound
// the wait, not the work (Completion): METALKIT_TIMEOUT is the CPU simulator's
// default only, and a call queued in a metalkit.batch() has no limits of its own.
// main_thread: the call comes from Python's main thread (where Ctrl-C raises
// KeyboardInterrupt).
RunLimits plan_run_limits(const std::string& kernel, std::optional<double> timeout, bool defers, bool main_thread);

// The KernelFault text for a dispatch stopped before it completed: which
// kernel, why (with the limit and where it was set), how far it got.
std::string stop_message(const KernelSpec& spec, const RunLimits& limits, StopReason why, double elapsed,
                         uint64_t groups_done, uint64_t groups_total);
// The same for a GPU dispatch whose wait stopped: the GPU goes on with it.
std::string gpu_stop_message(const KernelSpec& spec, const RunLimits& limits, StopReason why, double elapsed);

}  // namespace mk
