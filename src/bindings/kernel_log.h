// Hands what a call's kernels logged (core/kernel_log.h) to metalkit.kernel_log.deliver.
#pragma once

namespace mk {

// Delivers and clears the calling thread's kernel_log(); needs the GIL. What the handler
// raises propagates (py::error_already_set).
void deliver_kernel_log();

}  // namespace mk
