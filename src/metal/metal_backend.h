// The Metal backend as the bindings see it: plain C++, no Objective-C, so it is
// included from .cpp files. Built only on Apple (METALKIT_HAVE_METAL).
// Nothing here touches Python; callers may release the GIL around every call.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "../core/backend.h"
#include "../core/function_constants.h"
#include "../core/reflection.h"

namespace mk {

struct MetalDeviceInfo {
  std::string name;
  uint64_t max_threads_per_threadgroup = 0;
  uint64_t max_threadgroup_memory = 0;
  bool unified_memory = false;
  uint64_t recommended_working_set = 0;
};

// The GPU metalkit uses (created on first use; see metal_device.mm).
MetalDeviceInfo metal_device_info();

// Compiles MSL source whose `#include "..."` files are already inlined (Metal's
// compiler has no include path). Throws CompileFailure with the compiler's log.
// `kernels` is the signature of each kernel as the source declares it. `logging`: the source
// logs (<metal_logging>): MSL 3.2 with shader logging on, where the OS has it (macOS 15).
std::shared_ptr<LibraryImpl> metal_compile(const std::string& source, const std::string& filename,
                                           const std::vector<ConstantArg>& constants, bool fast_math,
                                           const KernelDecls& kernels, bool logging = false);

// Loads a precompiled .metallib. Throws CompileFailure if Metal cannot.
std::shared_ptr<LibraryImpl> metal_load_metallib(const std::string& path, const std::vector<ConstantArg>& constants);

// Device memory the CPU and GPU share; throws std::bad_alloc if Metal has none.
std::shared_ptr<Allocation> metal_allocate(size_t nbytes);

}  // namespace mk
