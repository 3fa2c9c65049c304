// threshold: what goes out always dominates what stays; the count is at most k and about
// k on average (the cut comes from a sample), exactly k when the slice is read whole.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "compress/bytes.h"
#include "compress/sparse/sparse_format.h"
#include "tests/compress/codec_test_util.h"

namespace gcagent::compress {
namespace {

using testing::indicesOf;
using testing::pairs;
using testing::decode;
using testing::encode;
using testing::gaussian;
using testing::kSizes;
using testing::mustMake;

size_t kFor(double drop, size_t n) {
  return n == 0 ? 0 : std::max<size_t>(1, static_cast<size_t>(std::ceil((1 - drop) * n)));
}

TEST(ThresholdTest, SentDominatesKeptAtEverySize) {
  const std::vector<Params> configs = {{}, {{"drop", "0.9"}, {"sample", "0.01"}}};
  for (const auto& params : configs) {
    auto codec = mustMake("threshold", params);
    const double drop = params.empty() ? 0.99 : 0.9;
    for (size_t n : kSizes) {
      const size_t k = kFor(drop, n);
      auto state = gaussian(n, 40 + n, 0.5f);
      const auto g = gaussian(n, 50 + n);
      std::vector<float> x(n);
      for (size_t i = 0; i < n; ++i) x[i] = state[i] + g[i];

      const auto bytes = encode(*codec, g, state, {3, 1, 4});
      const auto idx = indicesOf(bytes);
      EXPECT_LE(idx.size(), k) << "n=" << n;
      EXPECT_GE(idx.size(), std::min<size_t>(n, 1)) << "n=" << n;
      // Slices within the minimum sample are read whole: the cut is exact.
      if (n <= 256) {
        EXPECT_EQ(idx.size(), k) << "n=" << n;
      }
      // At the large size the sampled cut lands near the target (documented: about k).
      if (n > 1000000) {
        EXPECT_GE(idx.size(), k / 2) << "n=" << n;
      }
      ASSERT_TRUE(std::is_sorted(idx.begin(), idx.end()));
      ASSERT_EQ(std::adjacent_find(idx.begin(), idx.end()), idx.end());

      const auto decoded = decode(*codec, bytes, n, {3, 1, 4});
      float least_sent = INFINITY, most_kept = 0;
      for (uint32_t i : idx) least_sent = std::min(least_sent, std::abs(x[i]));
      for (size_t i = 0; i < n; ++i) {
        ASSERT_TRUE((decoded[i] == x[i] && state[i] == 0) || (decoded[i] == 0 && state[i] == x[i]))
            << "n=" << n << " i=" << i;
        most_kept = std::max(most_kept, std::abs(state[i]));
      }
      EXPECT_GE(least_sent, most_kept) << "n=" << n;
    }
  }
}

TEST(ThresholdTest, CountVariesAroundTheTargetAndNeverExceedsIt) {
  auto codec = mustMake("threshold");  // drop 0.99, sample 0.001: rank 11 of 1049 draws
  const size_t n = 1 << 20, k = kFor(0.99, n);
  size_t below_k = 0, total = 0;
  const int steps = 20;
  for (int t = 0; t < steps; ++t) {
    std::vector<float> state;  // fresh each step: the same distribution, a new sample
    const size_t count =
        indicesOf(encode(*codec, gaussian(n, 60 + t), state, {0, 0, uint64_t(t)})).size();
    EXPECT_LE(count, k);
    below_k += count < k;
    total += count;
  }
  // A too-high cut sends fewer; a too-low one is capped at k. The 11th largest of 1049 draws
  // has a relative spread of about 1/sqrt(11), so both happen in 20 steps, and the mean
  // stays within a few tens of percent of k.
  EXPECT_GT(below_k, 0u);
  EXPECT_LT(below_k, size_t{steps});
  EXPECT_GT(static_cast<double>(total) / steps, 0.7 * k);
}

TEST(ThresholdTest, HandComputedPairsOverTwoSteps) {
  auto codec = mustMake("threshold", {{"drop", "0.8"}});  // k = 2 of 10
  const std::vector<float> g = {0.125f, -0.5f, 0.375f, 2, -0.25f, 0.0625f, -1, 0.4375f, 0, 0.25f};
  std::vector<float> r;
  EXPECT_EQ(encode(*codec, g, r), pairs({3, 6}, {2, -1}));
  EXPECT_EQ(r,
            (std::vector<float>{0.125f, -0.5f, 0.375f, 0, -0.25f, 0.0625f, 0, 0.4375f, 0, 0.25f}));
  // |-1| now at indices 1 and 6: the lower index goes.
  EXPECT_EQ(encode(*codec, g, r), pairs({1, 3}, {-1, 2}));
  EXPECT_EQ(r, (std::vector<float>{0.25f, 0, 0.75f, 0, -0.5f, 0.125f, -1, 0.875f, 0, 0.5f}));
}

TEST(ThresholdTest, CapsAtKWhenMorePassTheCut) {
  auto codec = mustMake("threshold");  // drop 0.99: k = 50 of 5000
  std::vector<float> g(5000);
  for (size_t i = 0; i < g.size(); ++i) g[i] = i % 2 ? -1.0f : 1.0f;
  std::vector<float> r;
  std::vector<uint32_t> first(50);
  std::iota(first.begin(), first.end(), 0u);
  EXPECT_EQ(indicesOf(encode(*codec, g, r)), first);
}

TEST(ThresholdTest, BadParametersNameTheCodecAndKey) {
  testing::expectBadParams("threshold",
                           {{"drop", "1"}, {"drop", "-0.1"}, {"sample", "0"}, {"sample", "1.5"}, {"seed", "-1"}});
}

TEST(ThresholdTest, CorruptBuffersLeaveTheAccumulatorUntouched) {
  auto codec = mustMake("threshold", {{"drop", "0.8"}});  // at most 2 pairs of 10
  const std::vector<float> before(10, 1.0f);
  const std::vector<std::vector<std::byte>> bad = {
      pairs({1, 10}, {1, 1}),       // index out of range
      pairs({4, 4}, {1, 1}),        // duplicate index
      pairs({1, 2, 3}, {1, 1, 1}),  // more pairs than k
  };
  for (const auto& bytes : bad) {
    auto acc = before;
    Status s = codec->decodeAdd(bytes, acc, {});
    EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s.toString();
    EXPECT_EQ(s.message().rfind("threshold:", 0), 0u) << s.message();
    EXPECT_EQ(acc, before);
  }
  auto acc = before;
  auto truncated = pairs({1}, {1});
  truncated.pop_back();
  EXPECT_FALSE(codec->decodeAdd(truncated, acc, {}).ok());
  EXPECT_EQ(acc, before);
}

}  // namespace
}  // namespace gcagent::compress
