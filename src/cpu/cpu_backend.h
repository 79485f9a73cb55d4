// The CPU simulator's runtime: loads a module compiled from MSL (it describes
// its own kernels, see metalkit/abi.h) and runs its launchers on the pool.
#pragma once
#include <memory>
#include <string>

#include "../core/backend.h"

namespace mk {

// Loads a compiled module; throws std::runtime_error if it cannot.
std::shared_ptr<LibraryImpl> load_cpu_library(const std::string& path);

// Page-aligned host memory (the CPU backend's device memory), between 4 GiB
// inaccessible guards where address space allows (guarded.h).
std::shared_ptr<Allocation> cpu_allocate(size_t nbytes);

// Memory for checked mode: nbytes (aligned to align) ending right at 64 GiB of
// inaccessible address space and starting above as much, so out-of-bounds access faults.
std::shared_ptr<Allocation> cpu_allocate_guarded(size_t nbytes, size_t align);

}  // namespace mk
