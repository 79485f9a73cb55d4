#include "gpu_dispatch.h"

#include <algorithm>

#include "errors.h"

namespace mk {

BufferRoute route_buffer(const ArgSpec& spec, bool in_device_buffer, uintptr_t address, uint64_t nbytes,
                         uint64_t offset, uint64_t page) {
  if (nbytes == 0)
    return spec.writable || placeholder_bytes(spec) >= kInlineBytesLimit ? BufferRoute::Zeroed : BufferRoute::Empty;
  // Only a parameter known to be in the device address space may start anywhere in a buffer.
  const bool offset_ok = spec.space == Space::Device || offset % kConstantOffsetAlignment == 0;
  if (in_device_buffer && offset_ok) return BufferRoute::Bound;
  if (!spec.writable && nbytes < kInlineBytesLimit) return BufferRoute::Bytes;
  // A scalar's bytes live in the call's scratch, gone before a call queued in a
  // batch runs: always copied, never wrapped.
  if (spec.kind == ArgKind::Scalar) return BufferRoute::Stage;
  if (address % page == 0 && nbytes % page == 0) return BufferRoute::Wrap;
  return BufferRoute::Stage;
}

uint64_t placeholder_bytes(const ArgSpec& spec) {
  const uint64_t n = std::max<uint64_t>(spec.value_size(), 16);
  return (n + 15) / 16 * 16;
}

uint64_t staging_capacity(uint64_t nbytes, uint64_t page) {
  if (nbytes > kStagingPowerOfTwoLimit) return (nbytes + page - 1) / page * page;
  uint64_t c = page;
  while (c < nbytes) c <<= 1;
  return c;
}

bool keep_staging(uint64_t capacity, uint64_t pooled_bytes) { return pooled_bytes + capacity <= kStagingPoolBytes; }

Dims3 uniform_threadgroups(const std::string& kernel, const Geometry& g) {
  for (int i = 0; i < 3; ++i)
    if (g.grid.v[i] % g.tg.v[i] != 0)
      throw DispatchError(kernel_prefix(kernel) + "this GPU runs only whole threadgroups, and grid dimension " +
                          std::to_string(i) + " (" + std::to_string(g.grid.v[i]) +
                          " threads) is not a multiple of the threadgroup's " + std::to_string(g.tg.v[i]) +
                          "; pass a grid= rounded up to a multiple of threadgroup= and have the kernel return "
                          "early for threads past the end of the data");
  return g.ngroups;
}

void check_threadgroup_memory(const std::string& kernel, uint64_t dynamic_bytes, uint64_t static_bytes,
                              uint64_t limit) {
  if (dynamic_bytes + static_bytes > limit)
    throw DispatchError(kernel_prefix(kernel) + "it declares " + std::to_string(static_bytes) +
                        " bytes of threadgroup memory and threadgroup_memory= asks for " +
                        std::to_string(dynamic_bytes) + " more, over the " + std::to_string(limit) +
                        " bytes this GPU has per threadgroup; use smaller tiles");
}

std::string gpu_fault_message(const std::string& kernel, const std::string& detail, bool validation_on) {
  std::string msg = kernel_prefix(kernel) + "the GPU stopped with an error: " + detail;
  if (!validation_on)
    msg += ". Set METALKIT_VALIDATE=1 before importing metalkit to have Metal's shader validation report the "
           "out-of-bounds access or other fault";
  return msg + "; arrays the kernel writes may hold partial results";
}

}  // namespace mk
