// The input an encoder with optional error feedback quantises: x = g, or g + r. Every pass
// over a slice (statistics, then encoding) reads x through here, so all of them see the
// same fp32 values, on the CPU and the GPU alike.
#pragma once

#include "compress/hd.h"

namespace gcagent::compress {

template <bool kFeedback>
GC_HD float inputAt(const float* g, const float* r, size_t i) {
  if constexpr (kFeedback) {
    return g[i] + r[i];
  } else {
    (void)r;
    return g[i];
  }
}

}  // namespace gcagent::compress
