#include "batch.h"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "errors.h"

namespace mk {

bool must_complete_first(const HostUse& pending, const HostUse& next) {
  if (!pending.writes) return false;  // a read leaves the memory as it was
  if (pending.lo >= next.hi || next.lo >= pending.hi) return false;
  const bool same_copy = pending.access == HostAccess::Mapped && next.access == HostAccess::Mapped &&
                         pending.lo == next.lo && pending.hi == next.hi && pending.layout == next.layout;
  if (same_copy) return false;
  // A Mapped write reaches the host only at completion; anything else reading
  // or writing those bytes in between would miss it or be overwritten by it.
  if (pending.access == HostAccess::Mapped) return true;
  // A direct write happens when the call runs: a later direct use is ordered
  // after it on the GPU, but a copy taken now would hold the old bytes.
  return next.access != HostAccess::Direct;
}

HostAccess host_access_for(BufferRoute route) {
  switch (route) {
    case BufferRoute::Bytes: return HostAccess::CopyIn;
    case BufferRoute::Wrap:
    case BufferRoute::Stage: return HostAccess::Mapped;
    case BufferRoute::Bound:
    case BufferRoute::Empty:
    case BufferRoute::Zeroed: break;
  }
  return HostAccess::Direct;
}

bool BatchMemory::conflicts(const std::vector<HostUse>& uses) const {
  for (const HostUse& w : writes_)
    for (const HostUse& u : uses)
      if (must_complete_first(w, u)) return true;
  return false;
}

void BatchMemory::add(const std::vector<HostUse>& uses) {
  for (const HostUse& u : uses) {
    if (!u.writes || u.lo == u.hi) continue;
    const bool known = std::any_of(writes_.begin(), writes_.end(), [&](const HostUse& w) {
      return w.lo == u.lo && w.hi == u.hi && w.access == u.access && w.layout == u.layout;
    });
    if (!known) writes_.push_back(u);  // a chain writing one array many times stays one entry
  }
}

std::string batch_fault_message(const std::vector<std::string>& kernels, const std::string& gpu_error,
                                bool validation_on) {
  std::vector<std::string> names;
  for (const std::string& k : kernels)
    if (std::find(names.begin(), names.end(), k) == names.end()) names.push_back(k);
  if (names.size() <= 1) {
    std::string msg = gpu_fault_message(names.empty() ? std::string("?") : names[0], gpu_error, validation_on);
    return kernels.size() > 1 ? msg + " (it ran " + std::to_string(kernels.size()) + " times in one metalkit.batch())"
                              : msg;
  }
  std::string list;
  for (size_t i = 0; i < names.size(); ++i)
    list += (i == 0 ? "'" : i + 1 == names.size() ? " or '" : ", '") + names[i] + "'";
  std::string msg = "kernel " + list + " (one of the " + std::to_string(kernels.size()) +
                    " calls of a metalkit.batch(); the GPU reports the batch, not the call): "
                    "the GPU stopped with an error: " + gpu_error;
  if (!validation_on)
    msg += ". Set METALKIT_VALIDATE=1 before importing metalkit to have Metal's shader validation report the "
           "out-of-bounds access or other fault";
  return msg + "; arrays the batch's kernels write may hold partial results";
}

namespace {
std::atomic<uint32_t> g_open_batches{0};
std::atomic<uint32_t> g_open_batch_limit{kMaxOpenBatches};
}  // namespace

uint32_t open_batches() { return g_open_batches.load(); }
uint32_t open_batch_limit() { return g_open_batch_limit.load(); }
void set_open_batch_limit(uint32_t limit) { g_open_batch_limit.store(limit); }

Batch::~Batch() {
  encoding.reset();
  release_slot();
}

bool Batch::hold_slot() {
  if (slot_) return true;
  uint32_t open = g_open_batches.load();
  do {
    if (open >= g_open_batch_limit.load()) return false;
  } while (!g_open_batches.compare_exchange_weak(open, open + 1));
  slot_ = true;
  return true;
}

void Batch::release_slot() {
  if (!slot_) return;
  slot_ = false;
  g_open_batches.fetch_sub(1);
}

void Batch::queued(std::shared_ptr<KernelImpl> kernel, const std::vector<HostUse>& uses) {
  memory.add(uses);
  queued_.push_back(std::move(kernel));
  ++calls_;
}

void Batch::ran(const KernelImpl& kernel) {
  gpu_time_ += kernel.last_gpu_time();
  ++calls_;
}

bool Batch::complete() {
  if (!encoding) {
    release_slot();
    return fault_.empty();
  }
  BatchOutcome out = encoding->finish();
  encoding.reset();
  release_slot();
  memory.clear();
  std::string message = out.fault;
  if (message.empty() && !out.gpu_error.empty()) {
    std::vector<std::string> names;
    for (const auto& k : queued_) names.push_back(k->spec().name);
    message = batch_fault_message(names, out.gpu_error, out.validation);
  }
  if (message.empty()) {
    gpu_time_ += out.seconds;
    for (const auto& k : queued_) k->last_gpu_time_.store(out.seconds, std::memory_order_relaxed);
  }
  queued_.clear();
  if (message.empty()) return true;
  fail(message);
  return false;
}

void Batch::fail(const std::string& message) {
  if (fault_.empty()) fault_ = message;
}

void HostQueue::add(std::shared_ptr<KernelImpl> kernel, const Launch& launch) {
  Entry e{kernel, launch, {}};
  const auto& args = kernel->spec().args;
  for (size_t i = 0; i < args.size() && i < e.launch.args.size(); ++i) {
    if (args[i].kind != ArgKind::Scalar) continue;
    BoundArg& b = e.launch.args[i];
    const auto* p = static_cast<const unsigned char*>(b.data);
    e.scalars.emplace_back(p, p + b.nbytes);
    e.scalars.back().resize(std::max<size_t>(b.nbytes, 16));  // scalar scratch slots are at least 16 bytes
    b.data = e.scalars.back().data();
  }
  entries_.push_back(std::move(e));
}

BatchOutcome HostQueue::finish() {
  BatchOutcome out;
  for (Entry& e : entries_) {
    try {
      e.kernel->dispatch(e.launch);
      out.seconds += e.kernel->last_gpu_time();
    } catch (const KernelFault& f) {
      out.fault = f.what();  // the CPU knows which call faulted; the rest do not run
      break;
    } catch (const std::exception& x) {
      out.fault = kernel_prefix(e.kernel->spec().name) + x.what();
      break;
    }
  }
  entries_.clear();
  return out;
}

}  // namespace mk
