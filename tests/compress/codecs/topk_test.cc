// topk: exactly the k largest magnitudes go out, everything else stays owed. Also the
// selection helpers (compress/sparse/select.h) that topk, threshold and dgc share.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "compress/bytes.h"
#include "compress/sparse/select.h"
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

// The reference: a full sort by magnitude, larger first, equal magnitudes by index.
std::vector<uint32_t> topByFullSort(const std::vector<float>& x, size_t k) {
  std::vector<uint32_t> order(x.size());
  std::iota(order.begin(), order.end(), 0u);
  std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    const float ma = std::abs(x[a]), mb = std::abs(x[b]);
    return ma != mb ? ma > mb : a < b;
  });
  order.resize(k);
  std::sort(order.begin(), order.end());
  return order;
}

TEST(TopkTest, SendsExactlyTheKLargestAtEverySize) {
  for (double ratio : {0.01, 0.3}) {
    auto codec = mustMake("topk", {{"ratio", std::to_string(ratio)}});
    for (size_t n : kSizes) {
      const size_t k = n == 0 ? 0 : std::max<size_t>(1, static_cast<size_t>(std::ceil(ratio * n)));
      auto state = gaussian(n, 20 + n, 0.5f);
      const auto g = gaussian(n, 30 + n);
      std::vector<float> x(n);
      for (size_t i = 0; i < n; ++i) x[i] = state[i] + g[i];

      const auto bytes = encode(*codec, g, state, {1, 2, 3});
      ASSERT_EQ(bytes.size(), sparse::bytesFor(k)) << "n=" << n;
      ASSERT_EQ(indicesOf(bytes), topByFullSort(x, k)) << "n=" << n << " ratio=" << ratio;
      const auto decoded = decode(*codec, bytes, n, {1, 2, 3});
      for (size_t i = 0; i < n; ++i) {
        // Each element is either sent whole or kept whole.
        ASSERT_TRUE((decoded[i] == x[i] && state[i] == 0) || (decoded[i] == 0 && state[i] == x[i]))
            << "n=" << n << " i=" << i;
      }
    }
  }
}

TEST(TopkTest, HandComputedPairsOverTwoSteps) {
  auto codec = mustMake("topk", {{"ratio", "0.4"}});  // k = 2 of 5
  std::vector<float> r;
  EXPECT_EQ(encode(*codec, std::vector<float>{0.5f, -3, 1, 3, -0.25f}, r), pairs({1, 3}, {-3, 3}));
  EXPECT_EQ(r, (std::vector<float>{0.5f, 0, 1, 0, -0.25f}));
  EXPECT_EQ(encode(*codec, std::vector<float>{0, 0, 0.25f, 0, 0}, r), pairs({0, 2}, {0.5f, 1.25f}));
  EXPECT_EQ(r, (std::vector<float>{0, 0, 0, 0, -0.25f}));
}

TEST(TopkTest, EqualMagnitudesGoToTheLowerIndex) {
  auto codec = mustMake("topk", {{"ratio", "0.5"}});
  std::vector<float> r;
  EXPECT_EQ(encode(*codec, std::vector<float>{1, -1, 1, -1, 2, 1, -1, 1}, r),
            pairs({0, 1, 2, 4}, {1, -1, 1, 2}));
  // Past the size where a sampled prefilter narrows the candidates first.
  auto wide = mustMake("topk", {{"ratio", "0.01"}});
  std::vector<float> g(10000, 1.0f), r2;
  std::vector<uint32_t> first(100);
  std::iota(first.begin(), first.end(), 0u);
  EXPECT_EQ(indicesOf(encode(*wide, g, r2)), first);
}

TEST(TopkTest, RatioOneSendsEverything) {
  auto codec = mustMake("topk", {{"ratio", "1"}});
  const auto g = gaussian(33, 4);
  std::vector<float> r;
  const auto bytes = encode(*codec, g, r);
  EXPECT_EQ(decode(*codec, bytes, g.size()), g);
  EXPECT_EQ(r, std::vector<float>(g.size(), 0.0f));
}

TEST(TopkTest, BadParametersNameTheCodecAndKey) {
  testing::expectBadParams("topk", {{"ratio", "0"}, {"ratio", "2"}, {"ratio", "-0.5"}, {"ratio", "abc"}});
}

TEST(TopkTest, CorruptBuffersLeaveTheAccumulatorUntouched) {
  auto codec = mustMake("topk", {{"ratio", "0.2"}});  // k = 2 of 10
  const std::vector<float> before(10, 1.0f);
  const std::vector<std::vector<std::byte>> bad = {
      pairs({1, 10}, {1, 1}),       // index out of range
      pairs({4, 4}, {1, 1}),        // duplicate index
      pairs({1, 2, 3}, {1, 1, 1}),  // consistent, but not k pairs
      pairs({1}, {1}),              // too few pairs
  };
  for (const auto& bytes : bad) {
    auto acc = before;
    Status s = codec->decodeAdd(bytes, acc, {});
    EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s.toString();
    EXPECT_EQ(s.message().rfind("topk:", 0), 0u) << s.message();
    EXPECT_EQ(acc, before);
  }
}

TEST(TopkSelectTest, CountForRoundsUpAsWritten) {
  EXPECT_EQ(sparse::countFor(0.07, 100), 7u);  // 0.07 * 100 is 7.000000000000001 in doubles
  EXPECT_EQ(sparse::countFor(1 - 0.99, 100), 1u);
  EXPECT_EQ(sparse::countFor(0.3, 17), 6u);
  EXPECT_EQ(sparse::countFor(1e-9, 10), 1u);
  EXPECT_EQ(sparse::countFor(1, 5), 5u);
  EXPECT_EQ(sparse::countFor(0.5, 0), 0u);
}

TEST(TopkSelectTest, KeepLargestBreaksTiesByIndexAndStaysAscending) {
  const std::vector<float> x = {3, -1, 2, 1, -3, 0, 1, 2};
  std::vector<uint32_t> idx = {0, 1, 2, 3, 4, 5, 6, 7};
  sparse::keepLargest(x, idx, 5);
  EXPECT_EQ(idx, (std::vector<uint32_t>{0, 1, 2, 4, 7}));
  idx = {1, 3, 6};
  sparse::keepLargest(x, idx, 2);
  EXPECT_EQ(idx, (std::vector<uint32_t>{1, 3}));
  sparse::keepLargest(x, idx, 0);
  EXPECT_TRUE(idx.empty());
}

TEST(TopkSelectTest, LargestIsExactWhateverTheSampleSays) {
  // Magnitudes concentrated in a few elements, so a sample mostly sees the small ones.
  std::vector<float> x(100000, 0.001f);
  for (size_t i = 0; i < x.size(); i += 997) x[i] = static_cast<float>(i);
  for (uint64_t stream = 0; stream < 4; ++stream)
    EXPECT_EQ(sparse::largest(x, 150, stream), topByFullSort(x, 150)) << stream;
}

}  // namespace
}  // namespace gcagent::compress
