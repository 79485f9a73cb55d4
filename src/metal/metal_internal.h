// Objective-C++ shared by the Metal backend's .mm files (never included from
// .cpp). Builds with the macOS 14 SDK (Xcode 15) or later; runs on macOS 10.15+
// (the deployment target in pyproject.toml): newer APIs are behind @available.
#pragma once
#import <Foundation/Foundation.h>
#import <Metal/Metal.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "../core/backend.h"
#include "../core/batch.h"
#include "../core/kernel_log.h"
#include "../core/reflection.h"

#if __MAC_OS_X_VERSION_MAX_ALLOWED < 140000
#error "metalkit's Metal backend needs the macOS 14 SDK (Xcode 15) or later"
#endif

namespace mk {

// Released staging buffers, reused by capacity (staging_capacity, keep_staging).
class StagingPool {
 public:
  // nil if Metal has no memory for it.
  id<MTLBuffer> acquire(id<MTLDevice> device, uint64_t nbytes, uint64_t page);
  void release(id<MTLBuffer> buffer);

 private:
  std::mutex mutex_;
  std::multimap<uint64_t, id<MTLBuffer>> free_;
  uint64_t pooled_ = 0;
};

// The process's one GPU and command queue, and what dispatches need to know of it.
struct MetalDevice {
  id<MTLDevice> device;
  id<MTLCommandQueue> queue;
  bool nonuniform_threadgroups = false;  // dispatchThreads:threadsPerThreadgroup: is allowed
  bool validation = false;               // shader validation was on when the device was made
  uint64_t max_threadgroup_memory = 0;
  uint64_t page = 0;                     // host page size, for no-copy buffers
  StagingPool staging;
  // Shader logging (macOS 15): the MTLLogState every command buffer gets, nil where the OS has
  // none, and the messages its handler received that no call has collected yet.
  id log_state = nil;
  std::mutex log_mutex;
  std::vector<KernelLogRecord> log_pending;
};

// Moves the messages Metal has drained so far into the calling thread's kernel_log(), named
// after `kernel` (the kernels of the command buffer: Metal says neither kernel nor thread).
void collect_metal_logs(MetalDevice& dev, const std::string& kernel);

// Created on first use and kept for the life of the process.
MetalDevice& metal_device();

// A shared-storage MTLBuffer; numpy views its contents.
class MetalAllocation : public Allocation {
 public:
  MetalAllocation(id<MTLBuffer> buffer, size_t nbytes);
  id<MTLBuffer> buffer() const { return buffer_; }

 private:
  id<MTLBuffer> buffer_;
};

// A buffer over page-aligned host memory of whole pages, without a copy; nil if Metal declines.
id<MTLBuffer> wrap_host_memory(MetalDevice& dev, void* data, uint64_t nbytes);

// Strings in and out. Text from Python is valid UTF-8 (pybind11 encodes it strictly).
NSString* ns_string(const std::string& s);
std::string std_string(NSString* s);
// An NSError's description, or `fallback` when there is no error object.
std::string error_text(NSError* error, const std::string& fallback);

// The mk_type and vector width of a Metal data type; MK_T_STRUCT (width 1) for
// structs, matrices, arrays and anything else metalkit passes as raw bytes.
void element_type(MTLDataType type, int* mk_type, int* vec_width);

class MetalKernel;

// One command buffer and its compute encoder, filled by one or more calls (a
// metalkit.batch(), or a single call outside one) and waited for once. The
// command buffer does not retain what it uses (commandBufferWithUnretainedReferences),
// so this object holds every buffer and pipeline it encoded until finish();
// the bindings keep the arrays behind them alive. Destroyed unfinished, it ends
// its encoder and never commits: nothing runs.
class MetalBatch : public BatchEncoding {
 public:
  explicit MetalBatch(MetalDevice& dev) : dev_(dev) {}
  ~MetalBatch() override;
  // Validates, binds every argument (throwing std::bad_alloc or DispatchError
  // before anything is encoded), then encodes one dispatch.
  void encode(const MetalKernel& kernel, const Launch& launch);
  BatchOutcome finish() override { return finish_within(RunLimits{}, Completion::Clock::now()); }
  // finish(), but the wait stops when `limits` say (Completion::wait): the outcome then
  // says why, nothing is copied back, and the buffers stay held until the GPU is done.
  BatchOutcome finish_within(const RunLimits& limits, Completion::Clock::time_point start);

 private:
  // A host range given a buffer for the whole batch (route Wrap or Stage).
  struct Mapping {
    void* host;
    uint64_t nbytes;
    id<MTLBuffer> buffer;
    bool staged;     // a pooled copy (else a no-copy buffer over the host memory)
    bool shared;     // an array's range, reused by later calls (a scalar's copy is its call's alone)
    bool copy_back;  // staged and written by some call: copied to host at completion
  };
  // Index in mappings_ of the buffer for this host range: for an array, the one
  // an earlier call of the batch made for exactly that range, else a new one (a
  // staged one is filled now); SIZE_MAX if Metal has no memory for it.
  size_t map(void* host, uint64_t nbytes, BufferRoute route, bool shared);
  // Index in mappings_ of a fresh zero-filled staging buffer of nbytes (route Zeroed),
  // never copied back; SIZE_MAX if Metal has no memory for it.
  size_t zeroed(uint64_t nbytes);
  void release_mappings(size_t from);  // staging buffers go back to the pool

  MetalDevice& dev_;
  id<MTLCommandBuffer> commands_;
  id<MTLComputeCommandEncoder> encoder_;
  std::vector<Mapping> mappings_;
  std::vector<id<MTLComputePipelineState>> pipelines_;
  std::vector<std::string> kernels_;  // the kernels encoded, each once: who the drained log messages are from
};

class MetalKernel : public KernelImpl {
 public:
  MetalKernel(MetalDevice& dev, id<MTLComputePipelineState> pipeline, KernelSpec spec);
  void dispatch(const Launch& launch) override;  // metal_dispatch.mm: a batch of one call
  // Arrays in metalkit buffers are bound in place (BoundArg::alloc / offset).
  bool wants_allocations() const override { return true; }
  bool defers() const override { return true; }
  void enqueue(const Launch& launch, Batch& batch) override;
  HostAccess host_access(const ArgSpec& spec, const BoundArg& arg) const override;

 private:
  friend class MetalBatch;
  MetalDevice& dev_;
  id<MTLComputePipelineState> pipeline_;
  uint64_t static_threadgroup_memory_;
};

// The pipeline and KernelSpec of a (specialized) kernel function; throws CompileFailure.
std::shared_ptr<KernelImpl> make_metal_kernel(MetalDevice& dev, id<MTLFunction> function, const std::string& name,
                                              const KernelDecl* declared, const std::string& file);

}  // namespace mk
