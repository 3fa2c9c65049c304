// The P3 send order: a max-heap on priority, first in first out among equal priorities.
//
// Priorities come from the client (shims pass minus the layer index, so the first layer,
// which the next forward pass needs first and the backward pass produces last, wins).
// ps-lite's P3 queue breaks ties arbitrarily; here a sequence number taken at push makes
// the order a pure function of the pushes, so every run sends in the same order.
#pragma once

#include <cstdint>
#include <optional>
#include <queue>
#include <utility>
#include <vector>

namespace gcagent::scheduler {

template <typename T>
class PriorityQueue {
 public:
  void push(int32_t priority, T item) { heap_.push(Entry{priority, next_seq_++, std::move(item)}); }

  // The highest-priority item, the oldest among equals; empty when the queue is.
  std::optional<T> pop() {
    if (heap_.empty()) return std::nullopt;
    // std::priority_queue::top() is const; the entry is moved out just before it is removed.
    T item = std::move(const_cast<Entry&>(heap_.top()).item);
    heap_.pop();
    return item;
  }

  const T* top() const { return heap_.empty() ? nullptr : &heap_.top().item; }
  int32_t topPriority() const { return heap_.top().priority; }
  size_t size() const { return heap_.size(); }
  bool empty() const { return heap_.empty(); }

 private:
  struct Entry {
    int32_t priority;
    uint64_t seq;
    T item;
  };
  struct Later {
    // True when a comes out after b.
    bool operator()(const Entry& a, const Entry& b) const {
      if (a.priority != b.priority) return a.priority < b.priority;
      return a.seq > b.seq;
    }
  };
  std::priority_queue<Entry, std::vector<Entry>, Later> heap_;
  uint64_t next_seq_ = 0;
};

}  // namespace gcagent::scheduler
