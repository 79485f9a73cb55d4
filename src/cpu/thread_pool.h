// Runs the threadgroups of a dispatch on every core. The calling thread takes
// part, so a pool of N-1 workers keeps N cores busy. A call made while the pool
// is busy with another (from a second Python thread) runs on its own thread.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace mk {

class ThreadPool {
 public:
  // Runs one chunk; returns false to end the job (a fault or a stop): chunks not yet
  // taken are skipped.
  using Body = std::function<bool(uint64_t first, uint64_t last)>;
  static ThreadPool& instance();
  // Calls body over [0, total) in chunks of `chunk`, in parallel; returns when all are done.
  void run(uint64_t total, uint64_t chunk, const Body& body);
  unsigned size() const { return unsigned(workers_.size()) + 1; }
  ~ThreadPool();

 private:
  explicit ThreadPool(unsigned workers);
  void work_loop();
  void take_chunks();

  std::vector<std::thread> workers_;
  std::mutex busy_;              // held by the caller whose job the pool runs
  std::mutex m_;
  std::condition_variable wake_, done_;
  uint64_t generation_ = 0;
  bool stop_ = false;
  // The current job.
  const Body* body_ = nullptr;
  uint64_t total_ = 0, chunk_ = 1;
  uint64_t next_ = 0;            // guarded by m_
  unsigned active_ = 0;          // workers inside the job, guarded by m_
};

}  // namespace mk
