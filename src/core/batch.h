// metalkit.batch(): kernel calls made in the block are queued and waited for
// once, at its end. Everything decided about a batch that is not a Metal call
// lives here and is tested on every platform: which queued work must run before
// a call can join it (host memory hazards), what a fault in a batch says, which
// kernels' GPU times it sets. A GPU backend only supplies a BatchEncoding (its
// command buffer); a backend that runs calls at once (the CPU) needs nothing.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend.h"
#include "gpu_dispatch.h"

namespace mk {

// One array argument of a call, as the host memory it spans and how the
// backend reaches that memory (KernelImpl::host_access).
struct HostUse {
  uintptr_t lo = 0, hi = 0;  // [lo, hi): from its lowest to its highest byte (a strided view spans its gaps)
  HostAccess access = HostAccess::Direct;
  bool writes = false;       // the parameter is writable
  // Mapped only: which device copy. Uses with the same range and layout share
  // one copy for the whole batch ("" for a contiguous range; a staged strided
  // view is keyed by its address, shape, strides and item size).
  std::string layout;
};

// Whether a queued (not yet run) use `pending` must run before a call making
// `next` is queued behind it. Overlapping memory is a hazard when the pending
// use writes it and either the write lands only at completion (a Mapped copy
// is copied back then) or `next` reads the host bytes now (a copy taken while
// queueing would miss the write). Direct uses are ordered by the GPU itself,
// and uses of one shared Mapped copy see each other's writes.
bool must_complete_first(const HostUse& pending, const HostUse& next);

// How a GPU reaches an argument on each route: a metalkit buffer directly,
// setBytes by a copy taken while queueing, a no-copy or staging buffer as a
// Mapped copy shared by the batch.
HostAccess host_access_for(BufferRoute route);

// The host memory the queued calls of a batch use: only their writes matter.
class BatchMemory {
 public:
  // Whether any of `uses` (one call's arrays) must wait for the queued calls.
  bool conflicts(const std::vector<HostUse>& uses) const;
  void add(const std::vector<HostUse>& uses);
  void clear() { writes_.clear(); }
  size_t size() const { return writes_.size(); }

 private:
  std::vector<HostUse> writes_;  // distinct writing uses of the queued calls
};

// A backend's queued work for one batch (on Metal: one command buffer and its
// compute encoder). Destroying it unfinished discards the work: nothing runs.
struct BatchOutcome {
  double seconds = 0;       // GPU time of the work
  std::string gpu_error;    // the GPU's description of an error, which does not say which kernel
  std::string fault;        // or a full KernelFault message that does
  bool validation = false;  // shader validation was on (the fault message says so)
  StopReason stopped = StopReason::None;  // the wait stopped early (the call's limits): no results
  std::shared_ptr<Completion> running;    // then: completes when the GPU is done with the work
};

class BatchEncoding {
 public:
  virtual ~BatchEncoding() = default;
  // Submits what was queued, waits, and copies staged results back if it
  // completed without error. Runs without the GIL; must not throw.
  virtual BatchOutcome finish() = 0;
};

// The KernelFault message for a batch whose GPU work ended in error. Metal
// reports the command buffer, not the dispatch, so it names every distinct
// kernel queued in it (one name when there is only one).
std::string batch_fault_message(const std::vector<std::string>& kernels, const std::string& gpu_error,
                                bool validation_on);

// How many batches may hold queued GPU work at once. Each holds a command buffer not
// yet committed, and a Metal queue allows only so many command buffers not yet
// completed ("Command Queues created via this method will only allow up to 64
// non-completed command buffers", MTLDevice.h of newCommandQueue): were all of them
// held by open batches (threads inside `with metalkit.batch()`, blocks abandoned and
// not yet collected), the next call would wait inside commandBuffer forever. So at
// most half of them are held by open batches, and the calls of any further batch run
// at once, as outside a batch (its block still ends with every call complete); the
// other half serve calls outside batches and batches being waited for.
constexpr uint32_t kCommandQueueDepth = 64;
constexpr uint32_t kMaxOpenBatches = kCommandQueueDepth / 2;
// Batches holding a slot now, and the limit (kMaxOpenBatches; tests lower it).
uint32_t open_batches();
uint32_t open_batch_limit();
void set_open_batch_limit(uint32_t limit);

// One thread's open batch, as the backends see it. Not thread-safe: a batch
// belongs to the thread that opened it.
class Batch {
 public:
  virtual ~Batch();  // an unfinished encoding is discarded; the slot is given back
  // Whether a call may be queued in this batch: it holds one of the open-batch slots
  // (taking one if it has none and one is free). If not, the call runs at once.
  bool hold_slot();
  // Queued GPU work (null: nothing queued). A deferring backend's enqueue()
  // creates it on first use and adds to it.
  std::unique_ptr<BatchEncoding> encoding;
  BatchMemory memory;

  bool pending() const { return encoding != nullptr; }
  // After kernel->enqueue() succeeded: the call is queued, using `uses`.
  void queued(std::shared_ptr<KernelImpl> kernel, const std::vector<HostUse>& uses);
  // After a call ran at once (a backend that does not defer).
  void ran(const KernelImpl& kernel);
  // Runs the queued work and waits; records its fault and sets the GPU time of
  // each kernel queued (on a GPU, the time of the whole command buffer).
  // Returns false if it ended in a fault. Needs no GIL; does not throw.
  bool complete();
  // A call's KernelFault; the first is kept and later calls do not run.
  void fail(const std::string& message);
  const std::string& fault() const { return fault_; }
  double gpu_time() const { return gpu_time_; }
  uint64_t calls() const { return calls_; }

 private:
  void release_slot();
  std::vector<std::shared_ptr<KernelImpl>> queued_;  // kept alive until the work completes
  bool slot_ = false;                                // holds an open-batch slot
  std::string fault_;
  double gpu_time_ = 0;
  uint64_t calls_ = 0;
};

// Queues launches and runs them in order at finish(), on the host: a stand-in
// for a GPU's command buffer, so the deferred path is tested where no GPU is.
// Scalar bytes are copied when queued, as Metal's setBytes does.
class HostQueue : public BatchEncoding {
 public:
  void add(std::shared_ptr<KernelImpl> kernel, const Launch& launch);
  BatchOutcome finish() override;

 private:
  struct Entry {
    std::shared_ptr<KernelImpl> kernel;
    Launch launch;
    std::vector<std::vector<unsigned char>> scalars;  // owned copies of scalar arguments
  };
  std::vector<Entry> entries_;
};

}  // namespace mk
