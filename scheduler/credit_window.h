// How much one peer may have in flight: at most `slices` messages (P3's water mark) and,
// optionally, `bytes`. Whatever is not admitted waits in the priority queue, where a later
// high-priority slice can still overtake it; a slice already handed over is never recalled,
// so pre-emption happens between slices, not inside one.
#pragma once

#include <cstdint>

namespace gcagent::scheduler {

class CreditWindow {
 public:
  // bytes == 0: no byte limit.
  CreditWindow(uint32_t slices, uint64_t bytes) : max_slices_(slices), max_bytes_(bytes) {}

  // A message larger than the byte budget still goes when nothing else is in flight, so a
  // budget below the slice size slows a link down but never stalls it.
  bool admits(uint64_t bytes) const {
    if (inflight_slices_ >= max_slices_) return false;
    if (max_bytes_ == 0 || inflight_slices_ == 0) return true;
    return inflight_bytes_ + bytes <= max_bytes_;
  }
  void take(uint64_t bytes) {
    ++inflight_slices_;
    inflight_bytes_ += bytes;
  }
  void give(uint64_t bytes) {
    --inflight_slices_;
    inflight_bytes_ -= bytes;
  }

  uint32_t inflightSlices() const { return inflight_slices_; }
  uint64_t inflightBytes() const { return inflight_bytes_; }

 private:
  uint32_t max_slices_;
  uint64_t max_bytes_;
  uint32_t inflight_slices_ = 0;
  uint64_t inflight_bytes_ = 0;
};

}  // namespace gcagent::scheduler
