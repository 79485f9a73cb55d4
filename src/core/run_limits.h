// What may stop a running dispatch, decided once for every backend: a time
// limit (a call's timeout=, else METALKIT_TIMEOUT) and Ctrl-C (calls from
// Python's main thread), and the KernelFault text when one did.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

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

// A dispatch stopped by Ctrl-C. The bindings let Python's SIGINT handler run
// (KeyboardInterrupt by default); if it does not raise, this is the KernelFault.
struct Interrupted : KernelFault { using KernelFault::KernelFault; };

// The limits of one call. timeout: the call's timeout= (nullopt: METALKIT_TIMEOUT,
// read once; unset or 0 is no limit). Throws ArgumentError for a limit that is not
// a positive number of seconds, and DispatchError for timeout= on a backend that
// defers: a Metal command buffer cannot be stopped once committed, so a limit
// there would be a promise not kept. METALKIT_TIMEOUT is the CPU simulator's
// default only. main_thread: the call comes from Python's main thread (where
// Ctrl-C raises KeyboardInterrupt); a deferring backend is never interrupted.
RunLimits plan_run_limits(const std::string& kernel, std::optional<double> timeout, bool defers, bool main_thread);

// The KernelFault text for a dispatch stopped before it completed: which
// kernel, why (with the limit and where it was set), how far it got.
std::string stop_message(const KernelSpec& spec, const RunLimits& limits, StopReason why, double elapsed,
                         uint64_t groups_done, uint64_t groups_total);

}  // namespace mk
