// What a GPU backend decides for each dispatch, kept here so it is written and
// tested once on every platform; the Metal backend only carries it out.
#pragma once
#include <cstdint>
#include <string>

#include "arg_spec.h"
#include "geometry.h"

namespace mk {

// How one buffer or scalar argument reaches the GPU.
enum class BufferRoute {
  Bound,  // it lives in a metalkit buffer: bind that buffer at the array's offset
  Bytes,  // small and read-only: the encoder copies the bytes (setBytes)
  Wrap,   // page-aligned host memory of whole pages (not a scalar): a buffer over it, no copy
  Stage,  // anything else: copied into a pooled buffer, copied back only if writable
  Empty,   // no bytes (None, or an empty array), read-only: placeholder_bytes() zeros by setBytes
  Zeroed,  // no bytes, writable: a zero-filled buffer of placeholder_bytes(), its writes discarded
};

// Metal copies at most this many bytes inline (setBytes:length:atIndex: is for
// data under 4 KB); anything larger needs a buffer.
constexpr uint64_t kInlineBytesLimit = 4096;
// Buffer offsets for the constant address space must be 256-byte aligned on
// macOS; a parameter whose address space is unknown is held to the same rule.
constexpr uint64_t kConstantOffsetAlignment = 256;

// in_device_buffer: the argument's memory is a buffer of this backend (BoundArg::alloc).
// None and an empty array (no bytes) get a placeholder: never nil, which Metal's API
// validation stops at ("missing buffer binding"), and never setBytes for a parameter the
// kernel may write (validation refuses read-only bytes there).
// offset: its byte offset in that buffer. page: the host page size.
BufferRoute route_buffer(const ArgSpec& spec, bool in_device_buffer, uintptr_t address, uint64_t nbytes,
                         uint64_t offset, uint64_t page);

// Bytes of the zeroed placeholder a parameter given no bytes is bound to: its element's
// size (API validation checks that a binding holds the argument's type), at least 16,
// in multiples of 16. A kernel reading it reads zeros.
uint64_t placeholder_bytes(const ArgSpec& spec);

// Staging buffers are pooled by capacity: up to kStagingPowerOfTwoLimit a power of two of
// at least one page, so a few sizes serve most calls and the pool stays small; above it,
// whole pages, so a large copy costs at most a page more than its bytes (a power of two
// could double it, and pass the device's maxBufferLength).
constexpr uint64_t kStagingPowerOfTwoLimit = uint64_t(1) << 20;
uint64_t staging_capacity(uint64_t nbytes, uint64_t page);
// Whether a released staging buffer is kept for reuse; the pool holds at most
// kStagingPoolBytes so memory stays flat however many calls are made.
constexpr uint64_t kStagingPoolBytes = uint64_t(256) << 20;
bool keep_staging(uint64_t capacity, uint64_t pooled_bytes);

// Threadgroups for a device without non-uniform threadgroup sizes, where every
// threadgroup is whole. Extra threads would run past the grid the caller asked
// for (and past the ends of its arrays), so a grid that is not a multiple of
// the threadgroup is refused with DispatchError naming the fix.
Dims3 uniform_threadgroups(const std::string& kernel, const Geometry& g);

// Bytes to reserve for a [[threadgroup(i)]] parameter: Metal takes multiples of 16.
inline uint64_t threadgroup_length(uint64_t nbytes) { return (nbytes + 15) / 16 * 16; }

// Throws DispatchError if the kernel's own threadgroup memory plus the
// threadgroup_memory= sizes exceed what the device has per threadgroup.
void check_threadgroup_memory(const std::string& kernel, uint64_t dynamic_bytes, uint64_t static_bytes,
                              uint64_t limit);

// The KernelFault message for a command buffer the GPU ended in error.
std::string gpu_fault_message(const std::string& kernel, const std::string& detail, bool validation_on);

}  // namespace mk
