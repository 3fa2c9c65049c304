// One peer's P3 lane: slices wait in priority order (FIFO among equals) and leave while the
// credit window has room, so a high-priority slice queued late overtakes the low-priority
// ones still waiting; completions give the credit back and time the link for the planner.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>

#include "common/clock.h"
#include "scheduler/credit_window.h"
#include "scheduler/priority_queue.h"

namespace gcagent::scheduler {

template <typename T>
class SendLane {
 public:
  // bytes == 0: no byte limit (CreditWindow).
  SendLane(uint32_t slices, uint64_t bytes) : window_(slices, bytes) {}

  void push(int32_t priority, T item) { queue_.push(priority, std::move(item)); }
  // The slice that leaves next, or null.
  const T* next() const { return queue_.top(); }
  size_t queued() const { return queue_.size(); }
  bool admits(uint64_t bytes) const { return window_.admits(bytes); }

  // Takes the next slice out of the queue; it holds no credit until take().
  T pop() { return std::move(*queue_.pop()); }
  // A popped slice handed to the transport with `bytes`, or handed back when the hand-over failed.
  void take(uint64_t bytes) { window_.take(bytes); }
  void refund(uint64_t bytes) { window_.give(bytes); }

  // A send handed over at `handed` finished at `now`, well or not: its credit returns. Returns
  // the link's time for it when it went well: since it was handed over, or since the previous
  // completion if it waited behind that one (sends on a link finish in order).
  std::optional<double> complete(uint64_t bytes, SteadyTime handed, SteadyTime now, bool ok) {
    window_.give(bytes);
    std::optional<double> took;
    if (ok) took = secondsBetween(completed_once_ ? std::max(handed, last_completion_) : handed, now);
    last_completion_ = now;
    completed_once_ = true;
    return took;
  }

  uint32_t inflightSlices() const { return window_.inflightSlices(); }

 private:
  PriorityQueue<T> queue_;
  CreditWindow window_;
  // A flag, not an optional: g++ 12 -O1 with the sanitizers warns the optional's time may be
  // read uninitialised. "Never" stays explicit either way (not the clock's epoch).
  bool completed_once_ = false;
  SteadyTime last_completion_{};
};

}  // namespace gcagent::scheduler
