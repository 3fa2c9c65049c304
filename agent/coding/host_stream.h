// The host's counterpart of a CUDA stream: one worker thread that runs the codec work of
// host gradients (local sums, encodes, decode-merges) so the comm thread never does, and
// posts each report back to the comm thread's io_context.
//
// Work is tagged with the tensor it belongs to and that tensor's priority. The worker always
// runs the highest-priority work queued (FIFO among equals), so a front layer submitted late
// overtakes the back layers still waiting, on the encoding side and on the decoding side
// alike. Work of one tag has one priority, so it runs in the order it was enqueued; after()
// reports once the tag's earlier work has run, with the tag's first failure since the last
// report. Work at kLast runs only when nothing else waits (frees: after every earlier use).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <queue>
#include <thread>
#include <vector>

#include "agent/io.h"
#include "common/status.h"

namespace gcagent::agent {

class HostStream {
 public:
  using Task = std::function<Status()>;
  using Done = std::function<void(const Status&)>;
  static constexpr int64_t kLast = std::numeric_limits<int64_t>::min();

  // kThread: a worker thread runs the work (the agent). kManual: nothing runs until drain()
  // is called, so tests decide exactly what has been queued when the priorities are applied.
  enum class Mode { kThread, kManual };
  explicit HostStream(asio::io_context& io, Mode mode = Mode::kThread);
  // Runs what is queued, then stops; reports not yet delivered are dropped with the io_context.
  ~HostStream();
  HostStream(const HostStream&) = delete;
  HostStream& operator=(const HostStream&) = delete;

  // Queues `task` on the worker; its failure is kept for the tag's next report.
  void enqueue(uint64_t tag, int64_t priority, Task task);
  // Queues a report: `done` runs on the io_context's thread after the tag's earlier work,
  // with the first failure among it (and clears it).
  void after(uint64_t tag, int64_t priority, Done done);
  // Drops the tag's work queued so far (a failed reduction's: it must not write a trainer's
  // memory after the failure is reported), then reports like after() once the task that may
  // be running has ended, with no failure. Work enqueued after it runs as usual.
  void cancel(uint64_t tag, int64_t priority, Done done);
  // Keeps `pin` (memory the tag's queued work reads or writes) alive until that work has
  // run; it is released on the io_context's thread.
  void hold(uint64_t tag, int64_t priority, std::shared_ptr<const void> pin);
  // kManual: runs everything queued, highest priority first, on the caller's thread.
  void drain();
  // No work queued or running and every report delivered. For tests that pump by hand.
  bool idle() const { return outstanding_->load() == 0; }

 private:
  struct Item {
    int64_t priority;
    uint64_t seq;
    uint64_t tag;
    Task task;  // or a report
    Done done;
    std::shared_ptr<const void> pin;  // or memory to release
    // Reports and releases keep io.run() from returning until they are delivered.
    std::shared_ptr<void> guard;
    bool ends_cancel = false;  // the report of a cancel()
    bool operator<(const Item& o) const {  // the top of the heap runs first
      return priority != o.priority ? priority < o.priority : seq > o.seq;
    }
  };
  void push(Item item);
  std::shared_ptr<void> guard();
  void run();
  void execute(Item item);

  asio::io_context& io_;
  std::mutex mu_;
  std::condition_variable wake_;
  std::priority_queue<Item> queue_;
  std::map<uint64_t, Status> failures_;  // by tag, worker thread only
  // Tags whose tasks queued before their cancel() (the seq given) are skipped.
  std::map<uint64_t, uint64_t> cancelled_;  // under mu_
  std::atomic<uint64_t> cancels_{0};        // cancel() reports not yet run (changed under mu_)
  uint64_t seq_ = 0;
  bool stop_ = false;
  // Shared with the reports in flight, which may run after the stream is gone.
  std::shared_ptr<std::atomic<uint64_t>> outstanding_ = std::make_shared<std::atomic<uint64_t>>(0);
  std::thread worker_;
};

}  // namespace gcagent::agent
