// Watches one tensor for a codec that sends nothing. A 2bit threshold far above the
// gradients' magnitude (or a topk ratio that rounds to nothing) encodes every step as zeros
// while the residual only grows: the model silently stops training. Every kEvery-th
// iteration the encoding of the tensor's first slice is decoded; nonzero gradients encoded as
// all zeros kReportAfter checks in a row are reported once, until the codec sends again.
#pragma once

#include <cstdint>
#include <span>

#include "compress/codec.h"

namespace gcagent::agent {

class SilentCodecWatch {
 public:
  static constexpr uint64_t kEvery = 16;
  static constexpr uint32_t kReportAfter = 4;  // 64 iterations

  bool due(uint32_t slice, uint64_t iteration) const { return slice == 0 && iteration % kEvery == 0; }

  // `input`: what the slice held before encoding. True when this check makes the tensor
  // silent (report it now); false otherwise, and after a report until it sends again.
  bool observe(const compress::Codec& codec, std::span<const float> input, std::span<const std::byte> encoded,
               const compress::SliceId& id);

  // Iterations the codec has been silent for, at the last check.
  uint64_t silentIterations() const { return silent_in_a_row_ * kEvery; }

 private:
  uint32_t silent_in_a_row_ = 0;
  bool reported_ = false;
};

}  // namespace gcagent::agent
