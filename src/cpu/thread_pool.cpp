#include "thread_pool.h"

#include <algorithm>

namespace mk {

ThreadPool& ThreadPool::instance() {
  // Never destroyed: workers may outlive static destruction at interpreter exit.
  static ThreadPool* pool = new ThreadPool(std::max(1u, std::thread::hardware_concurrency()) - 1);
  return *pool;
}

ThreadPool::ThreadPool(unsigned workers) {
  for (unsigned i = 0; i < workers; ++i) workers_.emplace_back([this] { work_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lk(m_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& w : workers_) w.join();
}

void ThreadPool::take_chunks() {
  for (;;) {
    uint64_t first;
    {
      std::lock_guard<std::mutex> lk(m_);
      if (next_ >= total_) return;
      first = next_;
      next_ += chunk_;
    }
    if (!(*body_)(first, std::min(first + chunk_, total_))) {
      std::lock_guard<std::mutex> lk(m_);
      next_ = total_;
    }
  }
}

void ThreadPool::work_loop() {
  uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> lk(m_);
      wake_.wait(lk, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      ++active_;
    }
    take_chunks();
    {
      std::lock_guard<std::mutex> lk(m_);
      --active_;
    }
    done_.notify_all();
  }
}

void ThreadPool::run(uint64_t total, uint64_t chunk, const Body& body) {
  if (total == 0) return;
  chunk = std::max<uint64_t>(1, chunk);
  std::unique_lock<std::mutex> busy(busy_, std::try_to_lock);
  if (workers_.empty() || total <= chunk || !busy.owns_lock()) {
    for (uint64_t first = 0, last; first < total; first = last) {  // chunk by chunk here too, so a stop
      last = first + std::min(chunk, total - first);                // takes effect between them
      if (!body(first, last)) break;
    }
    return;
  }
  {
    std::lock_guard<std::mutex> lk(m_);
    body_ = &body;
    total_ = total;
    chunk_ = chunk;
    next_ = 0;
    ++generation_;
  }
  wake_.notify_all();
  take_chunks();
  std::unique_lock<std::mutex> lk(m_);
  done_.wait(lk, [&] { return active_ == 0 && next_ >= total_; });
  body_ = nullptr;
}

}  // namespace mk
