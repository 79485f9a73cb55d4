#include "run_limits.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

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
  l.interruptible = main_thread && !defers;
  if (timeout) {
    if (!(*timeout > 0))
      throw ArgumentError("kernel '" + kernel + "': timeout= takes a positive number of seconds, got " +
                          seconds(*timeout) + " (None: METALKIT_TIMEOUT or no limit)");
    if (defers)
      throw DispatchError("kernel '" + kernel + "': timeout= is a CPU simulator option: a Metal command buffer "
                          "cannot be stopped once committed, so the limit could not be kept");
    l.timeout = std::isinf(*timeout) ? 0 : *timeout;
    return l;
  }
  if (defers) return l;  // METALKIT_TIMEOUT is the CPU simulator's default
  const EnvTimeout& e = env_timeout();
  if (!e.error.empty()) throw ArgumentError("kernel '" + kernel + "': " + e.error);
  l.timeout = e.seconds;
  l.from_env = true;
  return l;
}

std::string stop_message(const KernelSpec& spec, const RunLimits& limits, StopReason why, double elapsed,
                         uint64_t groups_done, uint64_t groups_total) {
  std::string msg = "kernel '" + spec.name + "' (" + spec.file + ":" + std::to_string(spec.line) + "): ";
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
