#include "run_limits.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "errors.h"
#include "watchdog.h"

namespace mk {
namespace {

std::string seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", s);
  return buf;
}

// METALKIT_TIMEOUT, read once: the limit, or why the value is not one.
struct EnvTimeout {
  double seconds = 0;
  std::string error;
};

const EnvTimeout& env_timeout() {
  static const EnvTimeout e = [] {
    EnvTimeout out;
    const char* v = std::getenv("METALKIT_TIMEOUT");
    if (!v || !*v) return out;
    char* end = nullptr;
    const double x = std::strtod(v, &end);
    if (end == v || *end || !(x >= 0))
      out.error = std::string("METALKIT_TIMEOUT must be a number of seconds (0: no limit), got '") + v + "'";
    else
      out.seconds = std::isinf(x) ? 0 : x;
    return out;
  }();
  return e;
}

}  // namespace

RunLimits plan_run_limits(const std::string& kernel, std::optional<double> timeout, bool defers, bool main_thread) {
  RunLimits l;
  l.interruptible = main_thread;
  if (timeout) {
    if (!(*timeout > 0))
      throw ArgumentError(kernel_prefix(kernel) + "timeout= takes a positive number of seconds, got " +
                          seconds(*timeout) + " (None: METALKIT_TIMEOUT or no limit)");
    l.timeout = std::isinf(*timeout) ? 0 : *timeout;
    return l;
  }
  if (defers) return l;  // METALKIT_TIMEOUT is the CPU simulator's default
  const EnvTimeout& e = env_timeout();
  if (!e.error.empty()) throw ArgumentError(kernel_prefix(kernel) + e.error);
  l.timeout = e.seconds;
  l.from_env = true;
  return l;
}

void Completion::done() {
  std::vector<std::function<void()>> then;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    done_ = true;
    then.swap(then_);
  }
  cv_.notify_all();
  for (auto& f : then) f();
}

bool Completion::is_done() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return done_;
}

StopReason Completion::wait(const RunLimits& limits, Clock::time_point start) {
  const auto deadline = limits.timeout > 0
                            ? start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(limits.timeout))
                            : Clock::time_point::max();
  std::unique_lock<std::mutex> lock(mutex_);
  while (!done_) {
    if (limits.interruptible && interrupts_seen() != limits.interrupts) return StopReason::Interrupt;
    if (Clock::now() >= deadline) return StopReason::Timeout;
    cv_.wait_for(lock, std::chrono::milliseconds(20));
  }
  return StopReason::None;
}

void Completion::then(std::function<void()> f) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!done_) {
      then_.push_back(std::move(f));
      return;
    }
  }
  f();
}

std::string gpu_stop_message(const KernelSpec& spec, const RunLimits& limits, StopReason why, double elapsed) {
  std::string msg = kernel_label(spec.name) + " (" + spec.file + ":" + std::to_string(spec.line) + "): ";
  if (why == StopReason::Timeout)
    msg += "stopped waiting at its time limit of " + seconds(limits.timeout) + " s (timeout=" +
           seconds(limits.timeout) + ")";
  else
    msg += "interrupted (SIGINT) after " + seconds(std::round(elapsed * 100) / 100) + " s";
  msg += "; a GPU cannot stop a command buffer once committed, so it may still be running, and the arrays it "
         "writes may still change until it ends (metalkit keeps them alive until then)";
  if (why == StopReason::Timeout) msg += ". Raise the limit if the kernel is only slow, or check that its loops end";
  return msg;
}

std::string stop_message(const KernelSpec& spec, const RunLimits& limits, StopReason why, double elapsed,
                         uint64_t groups_done, uint64_t groups_total) {
  std::string msg = kernel_label(spec.name) + " (" + spec.file + ":" + std::to_string(spec.line) + "): ";
  if (why == StopReason::Timeout)
    msg += "stopped at its time limit of " + seconds(limits.timeout) + " s (" +
           (limits.from_env ? "METALKIT_TIMEOUT=" : "timeout=") + seconds(limits.timeout) + ")";
  else
    msg += "interrupted (SIGINT) after " + seconds(std::round(elapsed * 100) / 100) + " s";
  msg += " with " + std::to_string(groups_done) + " of " + std::to_string(groups_total) +
         " threadgroups completed; the arrays it writes are partly written";
  if (why == StopReason::Timeout) msg += ". Raise the limit if the kernel is only slow, or check that its loops end";
  return msg;
}

}  // namespace mk
