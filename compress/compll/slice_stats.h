// CompLL's reductions over a slice (x = g + r, element by element): the statistics a scaled
// quantizer's scale is made from. Each is computed in one fixed order, so the scale has the
// same bits however the slice is split over the codec pool and on the GPU:
//   the slice is cut into blocks of kStatsBlock elements; a block sums in four double lanes,
//   lane j taking elements 4m + j in order while a whole group of four remains and lane 0
//   then the block's last n % 4, and adds its lanes as (lane0 + lane1) + (lane2 + lane3);
//   the blocks' sums are added in block order. Maxima are exact in any order.
#pragma once

#include <cstddef>

#include "compress/hd.h"

namespace gcagent::compress::compll {

// Which statistics a definition asks for (a bit set).
enum Stat : unsigned {
  kSumAbs = 1u,      // sum of |x|, in doubles
  kSumSquares = 2u,  // sum of x * x, each square in double
  kMaxAbs = 4u,      // max |x|, in floats
};

inline constexpr size_t kStatsBlock = 4096;

struct SliceStats {
  double sum_abs = 0.0;
  double sum_squares = 0.0;
  float max_abs = 0.0f;
};

// The slice's statistics from its blocks' (in block order).
GC_HD SliceStats combineBlocks(const SliceStats* blocks, size_t count) {
  SliceStats s;
  for (size_t b = 0; b < count; ++b) {
    s.sum_abs += blocks[b].sum_abs;
    s.sum_squares += blocks[b].sum_squares;
    s.max_abs = blocks[b].max_abs > s.max_abs ? blocks[b].max_abs : s.max_abs;
  }
  return s;
}

}  // namespace gcagent::compress::compll
