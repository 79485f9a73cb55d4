// The interfaces a backend implements. Everything a backend receives has
// already been matched and validated above it; it only runs the request.
#pragma once
#include <atomic>
#include <cstddef>
#include <memory>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "arg_spec.h"
#include "checks.h"
#include "geometry.h"
#include "run_limits.h"

namespace mk {

class Batch;  // batch.h

// How a backend reaches an array argument's host memory when a call queued in
// a batch runs (see batch.h, must_complete_first).
enum class HostAccess {
  Direct,  // the memory itself, when the call runs (a metalkit buffer; every array on the CPU)
  Mapped,  // a device copy or no-copy alias of that exact range, shared by the batch's calls,
           // copied in when first queued and back (if written) when the batch completes
  CopyIn,  // its bytes, copied when the call is queued (read-only; Metal's setBytes)
};

// Device memory that numpy arrays can view (shared storage on Metal).
class Allocation {
 public:
  virtual ~Allocation() = default;
  void* data() const { return data_; }
  size_t size() const { return size_; }

 protected:
  void* data_ = nullptr;
  size_t size_ = 0;
};

// One argument of one call, in the kernel's parameter order.
struct BoundArg {
  void* data = nullptr;            // host address (buffer contents or scalar bytes)
  size_t nbytes = 0;
  const Allocation* alloc = nullptr;  // device allocation holding data, if known
  size_t offset = 0;               // data - alloc->data()
  uint32_t tg_offset = 0;          // threadgroup parameters: offset in the group's arena
  bool none = false;               // the call passed None: a buffer the kernel does not read, left unbound
  // check="uninit": (offset, length) byte ranges nothing has written yet (metalkit.empty memory
  // the host and kernels left alone: src/cpu/unwritten_pages.h), as offsets from data
  std::vector<std::pair<uint64_t, uint64_t>> unwritten;
};

struct Launch {
  Geometry geometry;
  std::vector<BoundArg> args;      // one per parameter (builtins unused)
  uint64_t tg_bytes = 0;           // dynamic threadgroup memory per group
  uint32_t shuffle_seed = 0;       // CPU simulator: run fibers in a shuffled order (0: in order)
  uint32_t checks = 0;             // CPU simulator: check= (checks.h)
  RunLimits limits;                // what may stop it before it completes (a backend that defers: none)
};

class KernelImpl {
 public:
  virtual ~KernelImpl() = default;
  const KernelSpec& spec() const { return spec_; }
  // Runs and waits. Called without the GIL; must not touch Python objects. A
  // backend that can stop a running dispatch honours launch.limits and throws
  // KernelFault (Interrupted for Ctrl-C) with stop_message()'s text.
  virtual void dispatch(const Launch& launch) = 0;
  // Whether dispatch() uses BoundArg::alloc (the bindings then look it up).
  virtual bool wants_allocations() const { return false; }
  // GPU time of the last dispatch in seconds (the CPU simulator: its wall time).
  // Read and written from any thread.
  double last_gpu_time() const { return last_gpu_time_.load(std::memory_order_relaxed); }

  // metalkit.batch(). A backend that defers returns true from defers(), and
  // enqueue() adds the call to batch.encoding (creating it) without waiting;
  // like dispatch() it validates first and throws before queueing anything.
  // Other backends run each call at once through dispatch().
  virtual bool defers() const { return false; }
  virtual void enqueue(const Launch& launch, Batch& /*batch*/) { dispatch(launch); }
  // How a queued call reaches this argument (BoundArg::alloc already looked up).
  virtual HostAccess host_access(const ArgSpec&, const BoundArg&) const { return HostAccess::Direct; }

 protected:
  KernelSpec spec_;
  std::atomic<double> last_gpu_time_{0};  // seconds; last_gpu_time(). Batch sets it for queued calls.
  friend class Batch;
};

class LibraryImpl {
 public:
  virtual ~LibraryImpl() = default;
  virtual std::vector<std::string> kernel_names() const = 0;
  // nullptr if there is no kernel of that name.
  virtual std::shared_ptr<KernelImpl> kernel(const std::string& name) = 0;
  // Whether kernel() may be called from several threads at once; the bindings then call
  // it without the GIL (a GPU pipeline build is slow; see kernel_cache.h).
  virtual bool concurrent_kernels() const { return false; }
};

}  // namespace mk
