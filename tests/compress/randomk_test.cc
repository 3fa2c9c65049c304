// randomk: k distinct indices that the receiver regenerates from the SliceId, values only on
// the wire, error feedback or an unbiased n/k scale.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "compress/randomk/randomk_math.h"
#include "tests/compress/codec_test_util.h"

namespace gcagent::compress {
namespace {

using testing::decode;
using testing::encode;
using testing::gaussian;
using testing::kSizes;
using testing::mustMake;

size_t kFor(double ratio, size_t n) {
  return n == 0 ? 0 : std::max<size_t>(1, static_cast<size_t>(std::ceil(ratio * n)));
}

std::vector<size_t> nonzeros(const std::vector<float>& v) {
  std::vector<size_t> at;
  for (size_t i = 0; i < v.size(); ++i)
    if (v[i] != 0) at.push_back(i);
  return at;
}

std::vector<std::byte> bytesOf(const std::vector<float>& v) {
  std::vector<std::byte> out(4 * v.size());
  std::memcpy(out.data(), v.data(), out.size());
  return out;
}

TEST(RandomkTest, GeneratorIsSplitmix64) {
  // splitmix64 seeded with 0 yields these first; the GPU must draw the same.
  EXPECT_EQ(rng::bits64(0, 0), 0xe220a8397b1dcdafull);
  EXPECT_EQ(rng::bits64(0, 1), 0x6e789e6aa1b965f4ull);
  EXPECT_EQ(rng::bits64(0, 2), 0x06c45d188009454full);
  EXPECT_EQ(sparse::below(~0ull, 10), 9u);
  EXPECT_EQ(sparse::below(0, 10), 0u);
}

TEST(RandomkTest, ExactlyKDistinctIndicesAtEverySize) {
  // The hash set draws k < n/256 (0.001 at the largest size), the bitmap the rest.
  for (double ratio : {0.001, 0.01, 0.5}) {
    auto codec =
        mustMake("randomk", {{"ratio", std::to_string(ratio)}, {"error_feedback", "false"}});
    for (size_t n : kSizes) {
      const size_t k = kFor(ratio, n);
      const std::vector<float> ones(n, 1.0f);
      std::vector<float> state;
      const auto bytes = encode(*codec, ones, state, {9, 1, 5});
      ASSERT_EQ(bytes.size(), 4 * k);
      const auto decoded = decode(*codec, bytes, n, {9, 1, 5});
      const auto picked = nonzeros(decoded);
      ASSERT_EQ(picked.size(), k) << "n=" << n;
      const float scale = static_cast<float>(static_cast<double>(n) / static_cast<double>(k));
      for (size_t i : picked)
        ASSERT_EQ(decoded[i], scale) << "a repeated index adds twice; n=" << n;
    }
  }
}

TEST(RandomkTest, ErrorFeedbackSendsAndClearsTheDrawnEntries) {
  auto codec = mustMake("randomk");
  for (size_t n : kSizes) {
    auto state = gaussian(n, 80 + n, 0.5f);
    const auto g = gaussian(n, 90 + n);
    std::vector<float> x(n);
    for (size_t i = 0; i < n; ++i) x[i] = state[i] + g[i];
    const auto bytes = encode(*codec, g, state, {1, 0, 7});
    ASSERT_EQ(bytes.size(), 4 * kFor(0.01, n));
    const auto decoded = decode(*codec, bytes, n, {1, 0, 7});
    EXPECT_EQ(nonzeros(decoded).size(), kFor(0.01, n));
    for (size_t i = 0; i < n; ++i)
      ASSERT_TRUE((decoded[i] == x[i] && state[i] == 0) || (decoded[i] == 0 && state[i] == x[i]))
          << "n=" << n << " i=" << i;
  }
}

TEST(RandomkTest, TheSliceIdDecidesTheIndices) {
  auto codec = mustMake("randomk", {{"ratio", "0.01"}, {"error_feedback", "false"}});
  const size_t n = 4096;
  std::vector<float> none;
  auto picked = [&](const std::vector<float>& g, const SliceId& id) {
    return nonzeros(decode(*codec, encode(*codec, g, none, id), n, id));
  };
  const auto ones = std::vector<float>(n, 1.0f);
  const auto a = picked(ones, {1, 2, 3});
  EXPECT_EQ(picked(std::vector<float>(n, -2.0f), {1, 2, 3}), a)
      << "indices must not depend on values";
  EXPECT_NE(picked(ones, {1, 2, 4}), a);
  EXPECT_NE(picked(ones, {1, 3, 3}), a);
  EXPECT_NE(picked(ones, {2, 2, 3}), a);
  auto seeded =
      mustMake("randomk", {{"ratio", "0.01"}, {"error_feedback", "false"}, {"seed", "5"}});
  EXPECT_NE(nonzeros(decode(*seeded, encode(*seeded, ones, none, {1, 2, 3}), n, {1, 2, 3})), a);
}

TEST(RandomkTest, HandComputedDrawMatchesFloyd) {
  // k = 2 of 4: draw j = 2 picks in [0, 2], draw j = 3 in [0, 3], or 3 when that repeats.
  auto codec = mustMake("randomk", {{"ratio", "0.5"}, {"error_feedback", "false"}, {"seed", "11"}});
  const SliceId id{6, 1, 9};
  const uint64_t stream = rng::streamSeed(11, 6, 1, 9);
  const uint32_t first = randomk::floydPick(stream, 2);
  uint32_t second = randomk::floydPick(stream, 3);
  if (second == first) second = 3;
  const std::vector<float> g = {1, -2, 3, -4};
  std::vector<float> none;
  EXPECT_EQ(encode(*codec, g, none, id),
            bytesOf({2 * g[std::min(first, second)], 2 * g[std::max(first, second)]}));
  // ratio 1 sends everything, in order, unscaled.
  auto all = mustMake("randomk", {{"ratio", "1"}});
  std::vector<float> r;
  EXPECT_EQ(encode(*all, g, r, id), bytesOf(g));
  EXPECT_EQ(r, std::vector<float>(4, 0.0f));
}

TEST(RandomkTest, IndicesAreUniform) {
  // Hash-set path (k = 10 of 10000): chi-square over 20000 draws of 10 indices.
  auto codec = mustMake("randomk", {{"ratio", "0.001"}, {"error_feedback", "false"}});
  const size_t n = 10000, steps = 20000;
  const std::vector<float> ones(n, 1.0f);
  std::vector<float> counts(n, 0.0f), none;
  for (uint64_t t = 0; t < steps; ++t)
    ASSERT_TRUE(codec->decodeAdd(encode(*codec, ones, none, {0, 0, t}), counts, {0, 0, t}).ok());
  const double expected = 10.0 * steps / n;  // each hit adds n/k = 1000
  double chi2 = 0;
  for (float c : counts) chi2 += std::pow(c / 1000.0 - expected, 2) / expected;
  // chi2 with n-1 degrees of freedom: mean 9999, standard deviation about 141.
  EXPECT_NEAR(chi2, n - 1, 5 * std::sqrt(2.0 * (n - 1)));
}

TEST(RandomkTest, UnbiasedWithoutErrorFeedback) {
  auto codec = mustMake("randomk", {{"ratio", "0.125"}, {"error_feedback", "false"}});
  ASSERT_EQ(codec->stateElements(64), 0u);
  const size_t n = 64, steps = 20000;
  const auto g = gaussian(n, 123);
  std::vector<double> sum(n, 0.0);
  std::vector<float> none;
  for (uint64_t t = 0; t < steps; ++t) {
    const auto d = decode(*codec, encode(*codec, g, none, {3, 0, t}), n, {3, 0, t});
    for (size_t i = 0; i < n; ++i) sum[i] += d[i];
  }
  // Each step sends 8 g_i with probability 1/8: variance g_i^2 (n/k - 1) = 7 g_i^2.
  for (size_t i = 0; i < n; ++i) {
    const double sigma = std::abs(g[i]) * std::sqrt(7.0 / steps);
    EXPECT_NEAR(sum[i] / steps, g[i], 5 * sigma + 1e-6) << "i=" << i;
  }
}

TEST(RandomkTest, StateOnlyWithErrorFeedback) {
  EXPECT_EQ(mustMake("randomk")->stateElements(100), 100u);
  EXPECT_EQ(mustMake("randomk", {{"error_feedback", "false"}})->stateElements(100), 0u);
}

TEST(RandomkTest, BadParametersNameTheCodecAndKey) {
  testing::expectBadParams("randomk", {{"ratio", "0"}, {"ratio", "2"}, {"error_feedback", "maybe"}, {"seed", "x"}});
}

TEST(RandomkTest, WrongSizesLeaveTheAccumulatorUntouched) {
  auto codec = mustMake("randomk", {{"ratio", "0.5"}});  // k = 5 of 10: 20 bytes
  const std::vector<float> before(10, 1.0f);
  for (size_t size : {0, 4, 16, 19, 21, 24}) {
    auto acc = before;
    Status s = codec->decodeAdd(std::vector<std::byte>(size), acc, {});
    EXPECT_EQ(s.code(), StatusCode::kDataLoss) << size;
    EXPECT_EQ(s.message().rfind("randomk:", 0), 0u) << s.message();
    EXPECT_EQ(acc, before);
  }
}

}  // namespace
}  // namespace gcagent::compress
