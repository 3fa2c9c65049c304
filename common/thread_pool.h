// A small fixed pool that splits one large loop over a few threads; the caller's thread
// takes a share of the work too, so a pool of size 1 runs everything inline.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace gcagent {

class ThreadPool {
 public:
  // threads: total parallelism including the calling thread; 0 means hardware concurrency.
  explicit ThreadPool(size_t threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  size_t size() const { return workers_.size() + 1; }

  // Calls fn(begin, end) over [0, n) cut into contiguous chunks whose boundaries are
  // multiples of `align` (so packed bit codes never straddle chunks), at most one chunk per
  // thread, none shorter than min_chunk elements. Returns when every chunk is done.
  // Not reentrant: fn must not call parallelFor on the same pool.
  void parallelFor(size_t n, size_t align, size_t min_chunk,
                   const std::function<void(size_t, size_t)>& fn);

 private:
  void workerLoop(size_t index);

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable wake_;
  std::condition_variable done_;
  const std::function<void(size_t, size_t)>* job_ = nullptr;
  std::vector<std::pair<size_t, size_t>> chunks_;  // chunk i goes to worker i-1; chunk 0 is the caller's
  size_t generation_ = 0;
  size_t pending_ = 0;
  bool stop_ = false;
  std::mutex call_mu_;  // serialises parallelFor callers
};

}  // namespace gcagent
