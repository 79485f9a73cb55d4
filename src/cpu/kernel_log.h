// A dispatch's log messages on the CPU simulator: collected from every worker while it runs,
// put in thread order when it ends (core/kernel_log.h says what order and what limit).
#pragma once
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "../core/kernel_log.h"
#include "metalkit/abi.h"

namespace mk {

class LogSink {
 public:
  explicit LogSink(std::string kernel, uint64_t limit = kMaxLogMessages) : kernel_(std::move(kernel)), limit_(limit) {}
  void add(KernelLogRecord r);
  // Appends the kept messages, in thread order, to `out` (and what was dropped).
  void finish(KernelLog& out);

 private:
  struct Entry {
    KernelLogRecord r;
    uint64_t arrival;  // a thread's messages all arrive from one worker, in program order
  };
  void keep_first();
  std::mutex lock_;
  std::vector<Entry> entries_;
  std::string kernel_;
  uint64_t limit_, arrivals_ = 0;
};

// The sink of the dispatch whose chunk the calling thread runs (null: messages are not kept,
// as while a faulting group's threads run again one by one to find the one that faults).
LogSink*& current_log_sink();

// mk_runtime::log: a message from module code running on this thread.
void rt_log(const mk_log_call* call);

}  // namespace mk
