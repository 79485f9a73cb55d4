// Device memory: shared-storage buffers numpy views in place, buffers over host
// memory without a copy, and the pool of staging buffers for everything else.
// Metal APIs: newBufferWithLength:options:, newBufferWithBytesNoCopy:length:
// options:deallocator:, contents, length, MTLResourceStorageModeShared (macOS 10.11).
#include <algorithm>
#include <new>

#include "../core/gpu_dispatch.h"
#include "metal_backend.h"
#include "metal_internal.h"

namespace mk {

MetalAllocation::MetalAllocation(id<MTLBuffer> buffer, size_t nbytes) : buffer_(buffer) {
  data_ = buffer.contents;
  size_ = nbytes;
}

std::shared_ptr<Allocation> metal_allocate(size_t nbytes) {
  MetalDevice& dev = metal_device();
  id<MTLBuffer> buffer;
  @autoreleasepool {
    buffer = [dev.device newBufferWithLength:std::max<size_t>(nbytes, 1) options:MTLResourceStorageModeShared];
  }
  if (!buffer) throw std::bad_alloc();
  return std::make_shared<MetalAllocation>(buffer, nbytes);
}

id<MTLBuffer> wrap_host_memory(MetalDevice& dev, void* data, uint64_t nbytes) {
  // No deallocator: the array owns its memory and outlives the dispatch, which waits.
  return [dev.device newBufferWithBytesNoCopy:data length:nbytes options:MTLResourceStorageModeShared deallocator:nil];
}

id<MTLBuffer> StagingPool::acquire(id<MTLDevice> device, uint64_t nbytes, uint64_t page) {
  const uint64_t capacity = staging_capacity(nbytes, page);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = free_.find(capacity);
    if (it != free_.end()) {
      id<MTLBuffer> buffer = it->second;
      free_.erase(it);
      pooled_ -= capacity;
      return buffer;
    }
  }
  return [device newBufferWithLength:capacity options:MTLResourceStorageModeShared];
}

void StagingPool::release(id<MTLBuffer> buffer) {
  const uint64_t capacity = buffer.length;
  std::lock_guard<std::mutex> lock(mutex_);
  if (!keep_staging(capacity, pooled_)) return;
  free_.emplace(capacity, buffer);
  pooled_ += capacity;
}

}  // namespace mk
