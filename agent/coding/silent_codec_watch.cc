#include "agent/coding/silent_codec_watch.h"

#include <algorithm>
#include <vector>

namespace gcagent::agent {

bool SilentCodecWatch::observe(const compress::Codec& codec, std::span<const float> input,
                               std::span<const std::byte> encoded, const compress::SliceId& id) {
  const auto zero = [](float v) { return v == 0.0f; };
  if (std::all_of(input.begin(), input.end(), zero)) return false;  // a frozen layer sends nothing, rightly
  std::vector<float> decoded(input.size());
  if (!codec.decode(encoded, decoded, 1.0f, id).ok()) return false;  // the owner reports a bad encoding
  if (!std::all_of(decoded.begin(), decoded.end(), zero)) {
    silent_in_a_row_ = 0;
    reported_ = false;
    return false;
  }
  ++silent_in_a_row_;
  if (reported_ || silent_in_a_row_ < kReportAfter) return false;
  reported_ = true;
  return true;
}

}  // namespace gcagent::agent
