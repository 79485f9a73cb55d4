#include "kernel_log.h"

#include <algorithm>

#include "../core/log_format.h"
#include "scheduler.h"

namespace mk {
namespace {

// Thread order: threadgroups in linear order (x fastest), threads in theirs, then arrival.
bool before(const KernelLogRecord& a, uint64_t ia, const KernelLogRecord& b, uint64_t ib) {
  for (int d = 2; d >= 0; --d)
    if (a.group[d] != b.group[d]) return a.group[d] < b.group[d];
  for (int d = 2; d >= 0; --d)
    if (a.thread[d] != b.thread[d]) return a.thread[d] < b.thread[d];
  return ia < ib;
}

}  // namespace

void LogSink::add(KernelLogRecord r) {
  std::lock_guard<std::mutex> lk(lock_);
  entries_.push_back({std::move(r), arrivals_++});
  // Which messages are kept must not depend on the order workers ran in: keep the first
  // `limit_` in thread order, whatever arrives later.
  if (entries_.size() >= 2 * limit_) keep_first();
}

void LogSink::keep_first() {
  auto cmp = [](const Entry& a, const Entry& b) { return before(a.r, a.arrival, b.r, b.arrival); };
  std::sort(entries_.begin(), entries_.end(), cmp);
  if (entries_.size() > limit_) entries_.resize(limit_);
}

void LogSink::finish(KernelLog& out) {
  std::lock_guard<std::mutex> lk(lock_);
  keep_first();
  for (Entry& e : entries_) {
    e.r.kernel = kernel_;
    out.messages.push_back(std::move(e.r));
  }
  if (arrivals_ > entries_.size()) {
    out.dropped_kernel = kernel_;
    out.dropped = arrivals_ - entries_.size();
    out.limit = limit_;
  }
  entries_.clear();
  arrivals_ = 0;
}

LogSink*& current_log_sink() {
  static thread_local LogSink* sink = nullptr;
  return sink;
}

void rt_log(const mk_log_call* c) {
  LogSink* sink = current_log_sink();
  if (!sink) return;
  KernelLogRecord r;
  if (c->where) {
    for (int i = 0; i < 3; ++i) {
      r.group[i] = c->where[i];
      r.thread[i] = c->where[3 + i];
    }
    r.thread_known = true;
  } else {
    r.thread_known = running_thread(c->lane, r.group, r.thread, &r.lane_known);
  }
  r.type = c->type;
  r.subsystem = c->subsystem ? c->subsystem : "";
  r.category = c->category ? c->category : "";
  r.text = format_log(c->format, c->args, c->nargs);
  sink->add(std::move(r));
}

}  // namespace mk
