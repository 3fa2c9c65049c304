// The statistics of slice_stats.h over blocks of a slice, one Highway target at a time: the
// four double lanes are whole vectors of (at most) four doubles, so a vector unit keeps the
// order of the sums exactly (on a two-lane unit, two vectors make the four lanes).
#if defined(GCAGENT_COMPRESS_COMPLL_CPU_SLICE_STATS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef GCAGENT_COMPRESS_COMPLL_CPU_SLICE_STATS_INL_H_
#undef GCAGENT_COMPRESS_COMPLL_CPU_SLICE_STATS_INL_H_
#else
#define GCAGENT_COMPRESS_COMPLL_CPU_SLICE_STATS_INL_H_
#endif

#include <hwy/highway.h>

#include <algorithm>

#include "compress/compll/slice_stats.h"

HWY_BEFORE_NAMESPACE();
namespace gcagent::compress::compll::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// The statistics of x = g + r over kBlocks consecutive blocks from `begin`, each `count`
// elements (count < kStatsBlock only for a slice's last block, alone). The blocks run side
// by side: each sum is a chain of dependent adds, and several chains keep the adder busy.
template <unsigned kWhich, size_t kBlocks, bool kFeedback>
HWY_INLINE void blockStats(const float* HWY_RESTRICT g, const float* HWY_RESTRICT r, size_t begin, size_t count,
                           SliceStats* HWY_RESTRICT out) {
  const hn::CappedTag<double, 4> dd;
  const hn::Rebind<float, decltype(dd)> df;
  constexpr size_t kVectors = 4 / hn::MaxLanes(dd);  // vectors that make the four lanes
  static_assert(kVectors * hn::MaxLanes(dd) == 4, "four lanes in whole vectors");
  const size_t lanes = hn::Lanes(dd);
  hn::Vec<decltype(dd)> sum_abs[kBlocks][kVectors], sum_squares[kBlocks][kVectors];
  hn::Vec<decltype(df)> max_abs[kBlocks][kVectors];
  for (size_t k = 0; k < kBlocks; ++k) {
    for (size_t v = 0; v < kVectors; ++v) {
      sum_abs[k][v] = hn::Zero(dd);
      sum_squares[k][v] = hn::Zero(dd);
      max_abs[k][v] = hn::Zero(df);
    }
  }
  size_t i = 0;
  for (; i + 4 <= count; i += 4) {
    for (size_t k = 0; k < kBlocks; ++k) {
      const size_t at = begin + k * kStatsBlock + i;
      for (size_t v = 0; v < kVectors; ++v) {
        const auto x = hn::Add(hn::LoadU(df, g + at + v * lanes),
                               kFeedback ? hn::LoadU(df, r + at + v * lanes) : hn::Zero(df));
        const auto a = hn::Abs(x);
        if constexpr ((kWhich & kSumAbs) != 0) sum_abs[k][v] = hn::Add(sum_abs[k][v], hn::PromoteTo(dd, a));
        if constexpr ((kWhich & kSumSquares) != 0) {
          const auto xd = hn::PromoteTo(dd, x);
          sum_squares[k][v] = hn::Add(sum_squares[k][v], hn::Mul(xd, xd));
        }
        if constexpr ((kWhich & kMaxAbs) != 0) max_abs[k][v] = hn::Max(max_abs[k][v], a);
      }
    }
  }
  for (size_t k = 0; k < kBlocks; ++k) {
    HWY_ALIGN double abs_lanes[4], square_lanes[4];
    HWY_ALIGN float max_lanes[4];
    for (size_t v = 0; v < kVectors; ++v) {
      hn::Store(sum_abs[k][v], dd, abs_lanes + v * lanes);
      hn::Store(sum_squares[k][v], dd, square_lanes + v * lanes);
      hn::Store(max_abs[k][v], df, max_lanes + v * lanes);
    }
    for (size_t j = begin + k * kStatsBlock + i; j < begin + k * kStatsBlock + count; ++j) {
      const float x = g[j] + (kFeedback ? r[j] : 0.0f);
      abs_lanes[0] += static_cast<double>(floatOf(bitsOf(x) & 0x7fffffffu));
      square_lanes[0] += static_cast<double>(x) * static_cast<double>(x);
      max_lanes[0] = std::max(max_lanes[0], floatOf(bitsOf(x) & 0x7fffffffu));
    }
    out[k].sum_abs = (abs_lanes[0] + abs_lanes[1]) + (abs_lanes[2] + abs_lanes[3]);
    out[k].sum_squares = (square_lanes[0] + square_lanes[1]) + (square_lanes[2] + square_lanes[3]);
    out[k].max_abs = std::max(std::max(max_lanes[0], max_lanes[1]), std::max(max_lanes[2], max_lanes[3]));
  }
}

// out[b] = block b's statistics, for the blocks of [begin, end) (begin a multiple of
// kStatsBlock, end one too or the slice's end): four at a time while four whole ones remain.
template <unsigned kWhich, bool kFeedback>
void blockStatsOf(const float* g, const float* r, size_t begin, size_t end, SliceStats* out) {
  size_t b = begin / kStatsBlock;
  for (; (b + 4) * kStatsBlock <= end; b += 4)
    blockStats<kWhich, 4, kFeedback>(g, r, b * kStatsBlock, kStatsBlock, out + b);
  for (; b * kStatsBlock < end; ++b)
    blockStats<kWhich, 1, kFeedback>(g, r, b * kStatsBlock, std::min(end - b * kStatsBlock, kStatsBlock), out + b);
}

// The same, with or without a residual (r null: x = g + 0).
template <unsigned kWhich>
void blockStatsRange(const float* g, const float* r, size_t begin, size_t end, SliceStats* out) {
  if (r != nullptr) {
    blockStatsOf<kWhich, true>(g, r, begin, end, out);
  } else {
    blockStatsOf<kWhich, false>(g, nullptr, begin, end, out);
  }
}

}  // namespace gcagent::compress::compll::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // include toggle
