// randomk's element math: the index draw that sender and receiver both run, and the scale
// of values sent without error feedback.
#pragma once

#include "compress/sparse/sparse_math.h"

namespace gcagent::compress::randomk {

// Draw j of Floyd's algorithm (j = n-k .. n-1): an index uniform on [0, j]. Integer math
// only, so every device regenerates the same set.
GC_HD uint32_t floydPick(uint64_t stream, uint64_t j) {
  return static_cast<uint32_t>(sparse::below(rng::bits64(stream, j), j + 1));
}

// Each index is drawn with probability k/n, so sending g * n/k estimates g without bias.
GC_HD float unbiasedScale(uint64_t n, uint64_t k) {
  return static_cast<float>(static_cast<double>(n) / static_cast<double>(k));
}

}  // namespace gcagent::compress::randomk
