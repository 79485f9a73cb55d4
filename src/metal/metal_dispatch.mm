// One dispatch: bind the arguments, encode, commit and wait. Nothing is kept
// from one call to the next (staging buffers go back to a bounded pool), so the
// cost of a call stays flat however many calls are made. Runs without the GIL.
// Nothing inside the @autoreleasepool throws (an exception would skip draining
// it), so failures leave it as values and are raised after.
// Metal APIs: commandBufferWithUnretainedReferences, computeCommandEncoder,
// setComputePipelineState:, setBuffer:offset:atIndex:, setBytes:length:atIndex:,
// setThreadgroupMemoryLength:atIndex:, dispatchThreads:threadsPerThreadgroup:
// (macOS 10.13), dispatchThreadgroups:threadsPerThreadgroup:, endEncoding,
// commit, waitUntilCompleted, status, error, GPUStartTime / GPUEndTime (macOS 10.15).
#include <cstring>
#include <new>

#include "../core/errors.h"
#include "../core/gpu_dispatch.h"
#include "metal_internal.h"

namespace mk {
namespace {

MTLSize mtl_size(const Dims3& d) { return MTLSizeMake(d.v[0], d.v[1], d.v[2]); }

// A staging buffer this call uses, and the host memory to copy it back to (null: read-only).
struct Staged {
  id<MTLBuffer> buffer;
  void* host;
  uint64_t nbytes;
};

}  // namespace

void MetalKernel::dispatch(const Launch& launch) {
  const Geometry& g = launch.geometry;
  check_threadgroup_memory(spec_.name, launch.tg_bytes, static_threadgroup_memory_, dev_.max_threadgroup_memory);
  const Dims3 groups = dev_.nonuniform_threadgroups ? g.ngroups : uniform_threadgroups(spec_.name, g);
  static const uint8_t kZeros[16] = {};

  std::vector<Staged> staged;
  bool out_of_memory = false;
  std::string fault;
  double seconds = 0;
  @autoreleasepool {
    // The command buffer does not retain what it uses; these locals do until it completes.
    std::vector<id<MTLBuffer>> wrapped;
    id<MTLCommandBuffer> commands = [dev_.queue commandBufferWithUnretainedReferences];
    id<MTLComputeCommandEncoder> encoder = [commands computeCommandEncoder];
    [encoder setComputePipelineState:pipeline_];
    for (size_t i = 0; i < spec_.args.size() && !out_of_memory; ++i) {
      const ArgSpec& s = spec_.args[i];
      const BoundArg& a = launch.args[i];
      const NSUInteger index = NSUInteger(s.index);
      if (s.kind == ArgKind::Builtin) continue;
      if (s.kind == ArgKind::Threadgroup) {
        [encoder setThreadgroupMemoryLength:threadgroup_length(a.nbytes) atIndex:index];
        continue;
      }
      const auto* own = dynamic_cast<const MetalAllocation*>(a.alloc);
      BufferRoute route =
          route_buffer(s, own != nullptr, reinterpret_cast<uintptr_t>(a.data), a.nbytes, a.offset, dev_.page);
      id<MTLBuffer> buffer = nil;
      if (route == BufferRoute::Wrap) {
        buffer = wrap_host_memory(dev_, a.data, a.nbytes);
        if (buffer)
          wrapped.push_back(buffer);
        else
          route = BufferRoute::Stage;  // Metal declined this memory (read-only pages, say): copy it
      }
      switch (route) {
        case BufferRoute::Bound:
          [encoder setBuffer:own->buffer() offset:a.offset atIndex:index];
          break;
        case BufferRoute::Bytes:
          [encoder setBytes:a.data length:a.nbytes atIndex:index];
          break;
        case BufferRoute::Empty:
          [encoder setBytes:kZeros length:sizeof kZeros atIndex:index];
          break;
        case BufferRoute::Wrap:
          [encoder setBuffer:buffer offset:0 atIndex:index];
          break;
        case BufferRoute::Stage:
          buffer = dev_.staging.acquire(dev_.device, a.nbytes, dev_.page);
          if (!buffer) {
            out_of_memory = true;
            break;
          }
          std::memcpy(buffer.contents, a.data, a.nbytes);
          staged.push_back({buffer, s.writable ? a.data : nullptr, a.nbytes});
          [encoder setBuffer:buffer offset:0 atIndex:index];
          break;
      }
    }
    if (!out_of_memory) {
      if (dev_.nonuniform_threadgroups)
        [encoder dispatchThreads:mtl_size(g.grid) threadsPerThreadgroup:mtl_size(g.tg)];
      else
        [encoder dispatchThreadgroups:mtl_size(groups) threadsPerThreadgroup:mtl_size(g.tg)];
    }
    [encoder endEncoding];
    if (!out_of_memory) {
      [commands commit];
      [commands waitUntilCompleted];
      if (commands.status == MTLCommandBufferStatusError)
        fault = gpu_fault_message(spec_.name, error_text(commands.error, "no description"), dev_.validation);
      else
        seconds = commands.GPUEndTime - commands.GPUStartTime;
    }
  }
  // Results come back only from a dispatch that completed.
  for (Staged& st : staged) {
    if (st.host && !out_of_memory && fault.empty()) std::memcpy(st.host, st.buffer.contents, st.nbytes);
    dev_.staging.release(st.buffer);
  }
  if (out_of_memory) throw std::bad_alloc();
  if (!fault.empty()) throw KernelFault(fault);
  last_time_ = seconds;
}

}  // namespace mk
