// Encoding and running calls. A MetalBatch is one command buffer with one
// serial compute encoder: a call outside metalkit.batch() is a batch of one,
// encoded, committed and waited for at once; inside a batch every call is
// encoded into the thread's MetalBatch and the block's exit commits and waits
// once (core/batch.h decides when queued work must run first). Nothing is kept
// from one batch to the next (staging buffers go back to a bounded pool), so
// the cost of a call stays flat. Runs without the GIL. Nothing inside an
// @autoreleasepool throws (an exception would skip draining it), so failures
// leave it as values and are raised after.
// Metal APIs: commandBufferWithUnretainedReferences,
// computeCommandEncoderWithDispatchType: with MTLDispatchTypeSerial (macOS
// 10.14; each dispatch runs after the one before it, so a call sees the
// previous calls' writes with no barrier), setComputePipelineState:,
// setBuffer:offset:atIndex:, setBytes:length:atIndex: (copies the bytes when
// called), setThreadgroupMemoryLength:atIndex:, dispatchThreads:threadsPerThreadgroup:
// (macOS 10.13), dispatchThreadgroups:threadsPerThreadgroup:, endEncoding,
// commandBufferWithDescriptor: with retainedReferences NO (macOS 11) and logState (macOS 15),
// addCompletedHandler: and commit (the wait is a core Completion, so Ctrl-C and timeout=
// can end it while the GPU goes on), status, error, GPUStartTime / GPUEndTime (macOS 10.15).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <new>
#include <stdexcept>

#include "../core/errors.h"
#include "../core/gpu_dispatch.h"
#include "metal_internal.h"

namespace mk {
namespace {

MTLSize mtl_size(const Dims3& d) { return MTLSizeMake(d.v[0], d.v[1], d.v[2]); }

// A command buffer that does not retain what it uses, with the device's log state where it has
// one (macOS 15), so what its kernels log reaches collect_metal_logs.
id<MTLCommandBuffer> new_command_buffer(MetalDevice& dev) {
#if __MAC_OS_X_VERSION_MAX_ALLOWED >= 150000
  if (@available(macOS 15.0, *)) {
    if (dev.log_state) {
      MTLCommandBufferDescriptor* desc = [[MTLCommandBufferDescriptor alloc] init];
      desc.retainedReferences = NO;
      desc.logState = dev.log_state;
      return [dev.queue commandBufferWithDescriptor:desc];
    }
  }
#endif
  return [dev.queue commandBufferWithUnretainedReferences];
}

// How one parameter is bound, resolved before anything is encoded.
struct Binding {
  NSUInteger index;
  BufferRoute route;
  id<MTLBuffer> buffer;   // Bound, Wrap, Stage
  uint64_t offset;
  const void* bytes;      // Bytes, Empty
  uint64_t nbytes;        // Bytes, Empty; threadgroup parameters: the length to reserve
  bool threadgroup;
};

}  // namespace

MetalBatch::~MetalBatch() {
  @autoreleasepool {
    if (encoder_) [encoder_ endEncoding];  // never committed: the GPU runs none of it
    encoder_ = nil;
    commands_ = nil;
  }
  release_mappings(0);
}

size_t MetalBatch::map(void* host, uint64_t nbytes, BufferRoute route, bool shared) {
  // Every call of the batch that passes this array range shares one buffer, so a
  // call sees what an earlier one wrote there (must_complete_first allowed the reuse).
  if (shared)
    for (size_t i = 0; i < mappings_.size(); ++i)
      if (mappings_[i].shared && mappings_[i].host == host && mappings_[i].nbytes == nbytes) return i;
  id<MTLBuffer> buffer = nil;
  if (route == BufferRoute::Wrap) {
    buffer = wrap_host_memory(dev_, host, nbytes);
    if (buffer) {
      mappings_.push_back({host, nbytes, buffer, false, shared, false});
      return mappings_.size() - 1;
    }
    // Metal declined this memory (read-only pages, say): copy it.
  }
  buffer = dev_.staging.acquire(dev_.device, nbytes, dev_.page);
  if (!buffer) return SIZE_MAX;
  std::memcpy(buffer.contents, host, nbytes);
  mappings_.push_back({host, nbytes, buffer, true, shared, false});
  return mappings_.size() - 1;
}

size_t MetalBatch::zeroed(uint64_t nbytes) {
  id<MTLBuffer> buffer = dev_.staging.acquire(dev_.device, nbytes, dev_.page);
  if (!buffer) return SIZE_MAX;
  std::memset(buffer.contents, 0, nbytes);
  mappings_.push_back({nullptr, nbytes, buffer, true, false, false});
  return mappings_.size() - 1;
}

void MetalBatch::release_mappings(size_t from) {
  for (size_t i = from; i < mappings_.size(); ++i)
    if (mappings_[i].staged) dev_.staging.release(mappings_[i].buffer);
  mappings_.resize(from);
}

void MetalBatch::encode(const MetalKernel& kernel, const Launch& launch) {
  const KernelSpec& spec = kernel.spec();
  const Geometry& g = launch.geometry;
  check_threadgroup_memory(spec.name, launch.tg_bytes, kernel.static_threadgroup_memory_,
                           dev_.max_threadgroup_memory);
  const Dims3 groups = dev_.nonuniform_threadgroups ? g.ngroups : uniform_threadgroups(spec.name, g);
  static const uint8_t kZeros[kInlineBytesLimit] = {};  // Empty: placeholder_bytes() < kInlineBytesLimit

  const size_t first_new = mappings_.size();
  std::vector<size_t> written;  // mappings this call writes
  bool out_of_memory = false;
  @autoreleasepool {
    std::vector<Binding> bindings;
    for (size_t i = 0; i < spec.args.size() && !out_of_memory; ++i) {
      const ArgSpec& s = spec.args[i];
      const BoundArg& a = launch.args[i];
      if (s.kind == ArgKind::Builtin) continue;
      Binding b{NSUInteger(s.index), BufferRoute::Bound, nil, 0, nullptr, 0, false};
      if (s.kind == ArgKind::Threadgroup) {
        b.threadgroup = true;
        b.nbytes = threadgroup_length(a.nbytes);
        bindings.push_back(b);
        continue;
      }
      const auto* own = dynamic_cast<const MetalAllocation*>(a.alloc);
      b.route = route_buffer(s, own != nullptr, reinterpret_cast<uintptr_t>(a.data), a.nbytes, a.offset, dev_.page);
      switch (b.route) {
        case BufferRoute::Bound:
          b.buffer = own->buffer();
          b.offset = a.offset;
          break;
        case BufferRoute::Bytes:
          b.bytes = a.data;
          b.nbytes = a.nbytes;
          break;
        case BufferRoute::Empty:
          b.bytes = kZeros;
          b.nbytes = placeholder_bytes(s);
          break;
        case BufferRoute::Zeroed: {
          const size_t m = zeroed(placeholder_bytes(s));
          if (m == SIZE_MAX) {
            out_of_memory = true;
            break;
          }
          b.buffer = mappings_[m].buffer;
          break;
        }
        case BufferRoute::Wrap:
        case BufferRoute::Stage: {
          const size_t m = map(a.data, a.nbytes, b.route, s.kind == ArgKind::Buffer);
          if (m == SIZE_MAX) {
            out_of_memory = true;
            break;
          }
          b.buffer = mappings_[m].buffer;
          if (s.writable) written.push_back(m);
          break;
        }
      }
      bindings.push_back(b);
    }
    if (!out_of_memory) {
      if (!commands_) {
        commands_ = new_command_buffer(dev_);
        encoder_ = [commands_ computeCommandEncoderWithDispatchType:MTLDispatchTypeSerial];
      }
      [encoder_ setComputePipelineState:kernel.pipeline_];
      for (const Binding& b : bindings) {
        if (b.threadgroup)
          [encoder_ setThreadgroupMemoryLength:b.nbytes atIndex:b.index];
        else if (b.bytes)
          [encoder_ setBytes:b.bytes length:b.nbytes atIndex:b.index];
        else
          [encoder_ setBuffer:b.buffer offset:b.offset atIndex:b.index];
      }
      if (dev_.nonuniform_threadgroups)
        [encoder_ dispatchThreads:mtl_size(g.grid) threadsPerThreadgroup:mtl_size(g.tg)];
      else
        [encoder_ dispatchThreadgroups:mtl_size(groups) threadsPerThreadgroup:mtl_size(g.tg)];
    }
  }
  if (out_of_memory) {
    release_mappings(first_new);  // this call encoded nothing; earlier calls keep theirs
    throw std::bad_alloc();
  }
  for (size_t m : written)
    if (mappings_[m].staged) mappings_[m].copy_back = true;
  pipelines_.push_back(kernel.pipeline_);
  if (std::find(kernels_.begin(), kernels_.end(), spec.name) == kernels_.end()) kernels_.push_back(spec.name);
}

BatchOutcome MetalBatch::finish_within(const RunLimits& limits, Completion::Clock::time_point start) {
  BatchOutcome out;
  out.validation = dev_.validation;
  id<MTLCommandBuffer> commands = commands_;
  auto completion = std::make_shared<Completion>();
  if (commands) {
    @autoreleasepool {
      [encoder_ endEncoding];
      encoder_ = nil;
      commands_ = nil;
      // Waited for through a handler, not waitUntilCompleted, so Ctrl-C and timeout= can end the wait.
      [commands addCompletedHandler:^(id<MTLCommandBuffer>) {
        completion->done();
      }];
      [commands commit];
    }
    out.stopped = completion->wait(limits, start);
    std::string names;
    for (const std::string& k : kernels_) names += (names.empty() ? "" : ", ") + k;
    collect_metal_logs(dev_, names);  // what Metal has drained by now (the bindings deliver it)
  }
  if (out.stopped != StopReason::None) {
    // The GPU goes on: its staging buffers and pipelines are let go of only when it is done.
    out.running = completion;
    MetalDevice* dev = &dev_;
    auto held = std::make_shared<std::vector<Mapping>>(std::move(mappings_));
    auto pipelines = std::make_shared<std::vector<id<MTLComputePipelineState>>>(std::move(pipelines_));
    mappings_.clear();
    pipelines_.clear();
    completion->then([dev, held, pipelines] {
      for (const Mapping& m : *held)
        if (m.staged) dev->staging.release(m.buffer);
      pipelines->clear();
    });
    return out;
  }
  if (commands) {
    @autoreleasepool {
      if (commands.status == MTLCommandBufferStatusError)
        out.gpu_error = error_text(commands.error, "no description");
      else
        out.seconds = commands.GPUEndTime - commands.GPUStartTime;
    }
  }
  // Results come back only from work that completed.
  for (const Mapping& m : mappings_)
    if (m.copy_back && out.gpu_error.empty()) std::memcpy(m.host, m.buffer.contents, m.nbytes);
  release_mappings(0);
  pipelines_.clear();
  return out;
}

void MetalKernel::dispatch(const Launch& launch) {
  const auto start = Completion::Clock::now();
  MetalBatch batch(dev_);
  batch.encode(*this, launch);
  const BatchOutcome out = batch.finish_within(launch.limits, start);
  if (out.stopped != StopReason::None) {
    const double elapsed = std::chrono::duration<double>(Completion::Clock::now() - start).count();
    const std::string message = gpu_stop_message(spec_, launch.limits, out.stopped, elapsed);
    if (out.stopped == StopReason::Interrupt) {
      Interrupted stop(message);
      stop.running = out.running;
      throw stop;
    }
    GpuTimeout stop(message);
    stop.running = out.running;
    throw stop;
  }
  if (!out.gpu_error.empty()) throw KernelFault(gpu_fault_message(spec_.name, out.gpu_error, out.validation));
  last_gpu_time_ = out.seconds;
}

void MetalKernel::enqueue(const Launch& launch, Batch& batch) {
  if (!batch.encoding) {
    auto fresh = std::make_unique<MetalBatch>(dev_);
    fresh->encode(*this, launch);  // a call that throws leaves the batch as it was
    batch.encoding = std::move(fresh);
    return;
  }
  auto* metal = dynamic_cast<MetalBatch*>(batch.encoding.get());
  if (!metal) throw std::logic_error("metalkit: the batch holds another backend's work; complete it first");
  metal->encode(*this, launch);
}

HostAccess MetalKernel::host_access(const ArgSpec& spec, const BoundArg& arg) const {
  const bool own = dynamic_cast<const MetalAllocation*>(arg.alloc) != nullptr;
  return host_access_for(
      route_buffer(spec, own, reinterpret_cast<uintptr_t>(arg.data), arg.nbytes, arg.offset, dev_.page));
}

}  // namespace mk
