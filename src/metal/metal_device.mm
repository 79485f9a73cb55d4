// The process's Metal device and command queue, created on first use.
// Metal APIs: MTLCreateSystemDefaultDevice, MTLCopyAllDevices (macOS 10.11),
// newCommandQueue, supportsFamily: with MTLGPUFamilyApple4 / MTLGPUFamilyMac2
// (macOS 10.15), maxThreadgroupMemoryLength (10.13), maxThreadsPerThreadgroup,
// hasUnifiedMemory (10.15), recommendedMaxWorkingSetSize (10.12); for shader logging (macOS 15):
// MTLLogStateDescriptor (bufferSize, level), newLogStateWithDescriptor:error:, addLogHandler:.
//
// Apple's API and shader validation read MTL_DEBUG_LAYER and
// MTL_SHADER_VALIDATION when a device is created; python/metalkit/_validation.py
// sets them from METALKIT_VALIDATE at `import metalkit`, before this module is
// even loaded, so they are in place here.
#include <unistd.h>

#include <cstdlib>
#include <stdexcept>

#include "metal_backend.h"
#include "metal_internal.h"

namespace mk {
namespace {

id<MTLDevice> pick_device() {
  // The default device needs CoreGraphics linked (CMakeLists.txt links it);
  // where it is still nil, any Metal GPU will do.
  id<MTLDevice> device = MTLCreateSystemDefaultDevice();
  if (device) return device;
  NSArray<id<MTLDevice>>* all = MTLCopyAllDevices();
  return all.count > 0 ? [all objectAtIndex:0] : nil;
}

// Shader logging (<metal_logging>, macOS 15): one log state for every command buffer, whose
// handler keeps each message for the call that collects it (collect_metal_logs). A handler
// replaces the system's default one, which would send them to the unified log instead.
void attach_log_state(MetalDevice& dev) {
#if __MAC_OS_X_VERSION_MAX_ALLOWED >= 150000
  // The log buffer: Metal drops what a command buffer logs past it. 1 MiB, the descriptor's
  // default size, holds thousands of messages.
  constexpr long kMetalLogBufferBytes = 1 << 20;
  if (@available(macOS 15.0, *)) {
    MTLLogStateDescriptor* desc = [[MTLLogStateDescriptor alloc] init];
    desc.bufferSize = kMetalLogBufferBytes;
    desc.level = MTLLogLevelDebug;
    NSError* error = nil;
    id<MTLLogState> state = [dev.device newLogStateWithDescriptor:desc error:&error];
    if (!state) return;  // no logging: messages are lost, kernels still run
    MetalDevice* d = &dev;
    [state addLogHandler:^(NSString* subsystem, NSString* category, MTLLogLevel level, NSString* message) {
      KernelLogRecord r;
      r.subsystem = std_string(subsystem);
      r.category = std_string(category);
      r.type = os_log_type_of(long(level));
      r.text = std_string(message);
      std::lock_guard<std::mutex> lk(d->log_mutex);
      if (d->log_pending.size() < kMaxLogMessages) d->log_pending.push_back(std::move(r));
    }];
    dev.log_state = state;
  }
#else
  (void)dev;
#endif
}

MetalDevice* create_device() {
  auto dev = std::make_unique<MetalDevice>();
  @autoreleasepool {
    dev->device = pick_device();
    if (dev->device) {
      dev->queue = [dev->device newCommandQueue];
      dev->nonuniform_threadgroups =
          [dev->device supportsFamily:MTLGPUFamilyApple4] || [dev->device supportsFamily:MTLGPUFamilyMac2];
      dev->max_threadgroup_memory = dev->device.maxThreadgroupMemoryLength;
      attach_log_state(*dev);
    }
  }
  if (!dev->device || !dev->queue)
    throw std::runtime_error("metalkit found no Metal GPU on this Mac; use metalkit.use(\"cpu\") for the CPU simulator");
  const char* validation = std::getenv("MTL_SHADER_VALIDATION");
  dev->validation = validation && std::string(validation) == "1";
  dev->page = uint64_t(getpagesize());
  return dev.release();
}

}  // namespace

MetalDevice& metal_device() {
  // Never destroyed: releasing Metal objects during static teardown at exit is unsafe.
  static MetalDevice* dev = create_device();
  return *dev;
}

void collect_metal_logs(MetalDevice& dev, const std::string& kernel) {
  if (!dev.log_state) return;
  std::vector<KernelLogRecord> drained;
  {
    std::lock_guard<std::mutex> lk(dev.log_mutex);
    drained.swap(dev.log_pending);
  }
  KernelLog& log = kernel_log();
  for (KernelLogRecord& r : drained) {
    r.kernel = kernel;
    log.messages.push_back(std::move(r));
  }
}

MetalDeviceInfo metal_device_info() {
  MetalDevice& dev = metal_device();
  MetalDeviceInfo info;
  @autoreleasepool {
    info.name = std_string(dev.device.name);
    const MTLSize most = dev.device.maxThreadsPerThreadgroup;  // per dimension; x allows the most
    info.max_threads_per_threadgroup = most.width;
    info.max_threadgroup_memory = dev.max_threadgroup_memory;
    info.unified_memory = dev.device.hasUnifiedMemory;
    info.recommended_working_set = dev.device.recommendedMaxWorkingSetSize;
  }
  return info;
}

NSString* ns_string(const std::string& text) { return [NSString stringWithUTF8String:text.c_str()]; }

std::string std_string(NSString* string) { return string ? std::string(string.UTF8String) : std::string(); }

std::string error_text(NSError* error, const std::string& fallback) {
  return error ? std_string(error.localizedDescription) : fallback;
}

}  // namespace mk
