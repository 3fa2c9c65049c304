#include "common/thread_pool.h"

#include <algorithm>

namespace gcagent {

ThreadPool::ThreadPool(size_t threads) {
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  for (size_t i = 1; i < threads; ++i) workers_.emplace_back([this, i] { workerLoop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::workerLoop(size_t index) {
  size_t seen = 0;
  for (;;) {
    std::pair<size_t, size_t> chunk;
    const std::function<void(size_t, size_t)>* job;
    {
      std::unique_lock lock(mu_);
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      if (index >= chunks_.size()) continue;  // this round has fewer chunks than threads
      chunk = chunks_[index];
      job = job_;
    }
    (*job)(chunk.first, chunk.second);
    {
      std::lock_guard lock(mu_);
      if (--pending_ == 0) done_.notify_one();
    }
  }
}

void ThreadPool::parallelFor(size_t n, size_t align, size_t min_chunk,
                             const std::function<void(size_t, size_t)>& fn) {
  if (n == 0) return;
  align = std::max<size_t>(align, 1);
  size_t parts = std::min(size(), std::max<size_t>(1, n / std::max<size_t>(min_chunk, 1)));
  if (parts <= 1) {
    fn(0, n);
    return;
  }
  size_t per = (n + parts - 1) / parts;
  per = (per + align - 1) / align * align;
  std::vector<std::pair<size_t, size_t>> chunks;
  for (size_t b = 0; b < n; b += per) chunks.emplace_back(b, std::min(n, b + per));
  if (chunks.size() == 1) {
    fn(0, n);
    return;
  }

  std::lock_guard call_lock(call_mu_);
  {
    std::lock_guard lock(mu_);
    chunks_ = std::move(chunks);
    job_ = &fn;
    pending_ = chunks_.size() - 1;
    ++generation_;
  }
  wake_.notify_all();
  fn(chunks_[0].first, chunks_[0].second);
  std::unique_lock lock(mu_);
  done_.wait(lock, [&] { return pending_ == 0; });
  job_ = nullptr;
}

}  // namespace gcagent
