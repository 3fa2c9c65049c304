// Receive buffers, recycled: fresh large allocations cost page faults and zeroing on every
// message, which showed up as a third of the receive time.
#pragma once

#include <algorithm>
#include <cstddef>
#include <memory>
#include <span>
#include <vector>

namespace gcagent::transport {

// A received payload's memory. Uninitialised on purpose: it is written whole by UCX or by
// one copy before anyone reads it.
struct Buffer {
  std::unique_ptr<std::byte[]> data;
  size_t capacity = 0;
  size_t size = 0;
  std::span<const std::byte> bytes() const { return {data.get(), size}; }
};

class BufferPool {
 public:
  Buffer take(size_t size) {
    for (size_t i = 0; i < free_.size(); ++i) {
      if (free_[i].capacity < size) continue;
      Buffer b = std::move(free_[i]);
      free_[i] = std::move(free_.back());
      free_.pop_back();
      free_bytes_ -= b.capacity;
      b.size = size;
      return b;
    }
    Buffer b;
    b.capacity = std::max<size_t>(size, 4096);
    b.data.reset(new std::byte[b.capacity]);
    b.size = size;
    return b;
  }
  void give(Buffer b) {
    if (!b.data || free_bytes_ + b.capacity > kMaxFreeBytes) return;
    free_bytes_ += b.capacity;
    free_.push_back(std::move(b));
  }

 private:
  static constexpr size_t kMaxFreeBytes = 256u << 20;
  std::vector<Buffer> free_;
  size_t free_bytes_ = 0;
};

}  // namespace gcagent::transport
