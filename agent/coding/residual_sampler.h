// The residual norm gauge, sampled: one encode in kEvery has its residual's L2 norm taken (a
// full pass over the slice, on the comm thread, of host memory the stream has finished with).
#pragma once

#include <cmath>
#include <cstdint>
#include <span>

#include "compress/codec.h"
#include "metrics/stats.h"

namespace gcagent::agent {

class ResidualSampler {
 public:
  static constexpr uint64_t kEvery = 64;

  // Counts one encode of `n` elements with `codec`, whose state is `state` (empty where the
  // state is not readable here: a GPU's); every kEvery-th sets the codec's gauge.
  void encoded(metrics::CodecStats& stats, const compress::Codec& codec, std::span<const float> state, size_t n) {
    if (++encodes_ % kEvery != 0 || state.empty()) return;
    const std::span<const float> r = codec.residual(state, n);
    if (r.empty()) return;  // stateless codec
    double sum = 0;
    for (float v : r) sum += static_cast<double>(v) * v;
    stats.residual_norm->Set(std::sqrt(sum));
  }

 private:
  uint64_t encodes_ = 0;
};

}  // namespace gcagent::agent
