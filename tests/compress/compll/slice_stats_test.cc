// compll's slice statistics against the order slice_stats.h states, written out here in
// plain loops: every combination of statistics, on every instruction set this CPU runs, at
// block edges and with infinities and NaNs, bit for bit.
#include "compress/compll/slice_stats.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "compress/compll/quantizer_kernels.h"

namespace gcagent::compress::compll {
namespace {

// One block, as the comment of slice_stats.h says: four double lanes, lane j elements 4m + j
// while a group of four remains, lane 0 the rest; (l0 + l1) + (l2 + l3).
SliceStats referenceBlock(const float* g, const float* r, size_t begin, size_t end) {
  double abs_lanes[4] = {}, square_lanes[4] = {};
  float largest = 0.0f;
  const size_t groups = (end - begin) / 4;
  for (size_t i = begin; i < end; ++i) {
    const float x = g[i] + r[i];
    const size_t lane = i - begin < 4 * groups ? (i - begin) % 4 : 0;
    abs_lanes[lane] += std::fabs(static_cast<double>(x));
    square_lanes[lane] += static_cast<double>(x) * static_cast<double>(x);
    if (std::fabs(x) > largest) largest = std::fabs(x);
  }
  SliceStats s;
  s.sum_abs = (abs_lanes[0] + abs_lanes[1]) + (abs_lanes[2] + abs_lanes[3]);
  s.sum_squares = (square_lanes[0] + square_lanes[1]) + (square_lanes[2] + square_lanes[3]);
  s.max_abs = largest;
  return s;
}

std::vector<cpu::Isa> isasHere() {
  std::vector<cpu::Isa> isas = {cpu::Isa::kGeneric};
  if (cpu::cpuSupports(cpu::Isa::kAvx2)) isas.push_back(cpu::Isa::kAvx2);
  return isas;
}

uint64_t bitsOfDouble(double d) {
  uint64_t u;
  std::memcpy(&u, &d, sizeof u);
  return u;
}

TEST(SliceStatsTest, EveryCombinationMatchesTheStatedOrderBitForBit) {
  for (size_t n : {size_t{0}, size_t{1}, size_t{3}, size_t{5}, size_t{4095}, size_t{4096}, size_t{4097},
                   size_t{3 * 4096 + 7}}) {
    std::mt19937 rng(static_cast<uint32_t>(n));
    // Magnitudes over many octaves, so any other order of the sums would round differently.
    std::lognormal_distribution<float> magnitude(0.0f, 4.0f);
    std::vector<float> g(n), r(n);
    for (size_t i = 0; i < n; ++i) {
      g[i] = (rng() & 1 ? -1.0f : 1.0f) * magnitude(rng);
      r[i] = (rng() & 1 ? -1.0f : 1.0f) * magnitude(rng) * 0.01f;
    }
    const size_t blocks = (n + kStatsBlock - 1) / kStatsBlock;
    for (cpu::Isa isa : isasHere()) {
      for (unsigned which = 1; which < 8; ++which) {
        std::vector<SliceStats> got(blocks);
        blockStatsKernel(isa, which)(g.data(), r.data(), 0, n, got.data());
        for (size_t b = 0; b < blocks; ++b) {
          const SliceStats want = referenceBlock(g.data(), r.data(), b * kStatsBlock, std::min(n, (b + 1) * kStatsBlock));
          const auto where = ::testing::Message() << cpu::isaName(isa) << " which=" << which << " n=" << n << " block " << b;
          if (which & kSumAbs) {
            EXPECT_EQ(bitsOfDouble(got[b].sum_abs), bitsOfDouble(want.sum_abs)) << where;
          }
          if (which & kSumSquares) {
            EXPECT_EQ(bitsOfDouble(got[b].sum_squares), bitsOfDouble(want.sum_squares)) << where;
          }
          if (which & kMaxAbs) {
            EXPECT_EQ(got[b].max_abs, want.max_abs) << where;
          }
        }
      }
    }
  }
}

// A split over threads computes whole blocks: a range that starts at a later block fills
// only its own blocks, with the values the whole slice's call gives them.
TEST(SliceStatsTest, RangesFillOnlyTheirOwnBlocks) {
  const size_t n = 5 * kStatsBlock + 11;
  std::vector<float> g(n), r(n, 0.25f);
  for (size_t i = 0; i < n; ++i) g[i] = static_cast<float>(i % 97) - 48.0f;
  for (cpu::Isa isa : isasHere()) {
    std::vector<SliceStats> whole(6), split(6, SliceStats{-1.0, -1.0, -1.0f});
    const BlockStatsFn stats = blockStatsKernel(isa, kSumAbs | kSumSquares | kMaxAbs);
    stats(g.data(), r.data(), 0, n, whole.data());
    stats(g.data(), r.data(), 2 * kStatsBlock, 4 * kStatsBlock, split.data());
    EXPECT_EQ(split[0].sum_abs, -1.0);
    EXPECT_EQ(split[4].max_abs, -1.0f);
    EXPECT_EQ(split[2].sum_abs, whole[2].sum_abs);
    EXPECT_EQ(split[3].sum_squares, whole[3].sum_squares);
    EXPECT_EQ(split[3].max_abs, whole[3].max_abs);
  }
}

TEST(SliceStatsTest, NonFiniteInputsReachTheSums) {
  std::vector<float> g(100, 1.0f), r(100, 0.0f);
  g[37] = std::numeric_limits<float>::infinity();
  g[91] = std::numeric_limits<float>::quiet_NaN();
  for (cpu::Isa isa : isasHere()) {
    SliceStats s;
    blockStatsKernel(isa, kSumAbs | kSumSquares)(g.data(), r.data(), 0, g.size(), &s);
    EXPECT_FALSE(std::isfinite(s.sum_abs)) << cpu::isaName(isa);
    EXPECT_FALSE(std::isfinite(s.sum_squares)) << cpu::isaName(isa);
  }
}

TEST(SliceStatsTest, BlocksCombineInOrder) {
  const SliceStats blocks[3] = {{1e16, 1.0, 2.0f}, {1.0, 1e16, 7.0f}, {-1e16, 3.0, 5.0f}};
  const SliceStats s = combineBlocks(blocks, 3);
  EXPECT_EQ(s.sum_abs, (1e16 + 1.0) + -1e16);  // 0: the 1 is lost in order, as it must be
  EXPECT_EQ(s.sum_squares, (1.0 + 1e16) + 3.0);
  EXPECT_EQ(s.max_abs, 7.0f);
}

}  // namespace
}  // namespace gcagent::compress::compll
