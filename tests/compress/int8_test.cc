// int8: block-scaled int8 (each block's largest magnitude / 127 is its unit), against a
// reference written here from the format's definition, in double precision.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "tests/compress/codec_test_util.h"

namespace gcagent::compress {
namespace {

using testing::decode;
using testing::encode;
using testing::gaussian;
using testing::kSizes;
using testing::mustMake;

float scaleOf(const std::vector<std::byte>& encoded, size_t block) {
  float f;
  std::memcpy(&f, encoded.data() + 4 * block, sizeof f);
  return f;
}

int levelOf(const std::vector<std::byte>& encoded, size_t blocks, size_t i) {
  return static_cast<int>(static_cast<int8_t>(encoded[4 * blocks + i]));
}

TEST(Int8Test, GoldenBlockOfFour) {
  auto codec = mustMake("int8", {{"block", "4"}, {"error_feedback", "false"}});
  // Scale 2: units of 2/127. 1 -> 63.5 (a tie: the smaller magnitude), 0.5 -> 31.75 -> 32,
  // 0.2 -> 12.7 -> 13, -2 -> -127; the second block is all zero (scale 0, levels 0).
  const std::vector<float> g = {-1.0f, 0.5f, 0.2f, -2.0f, 0.0f, 0.0f};
  std::vector<float> state;
  auto encoded = encode(*codec, g, state);
  ASSERT_EQ(encoded.size(), 2u * 4u + 6u);
  EXPECT_EQ(scaleOf(encoded, 0), 2.0f);
  EXPECT_EQ(scaleOf(encoded, 1), 0.0f);
  std::vector<int> levels;
  for (size_t i = 0; i < g.size(); ++i) levels.push_back(levelOf(encoded, 2, i));
  EXPECT_EQ(levels, (std::vector<int>{-63, 32, 13, -127, 0, 0}));
  const auto back = decode(*codec, encoded, g.size());
  EXPECT_EQ(back[3], -2.0f);
  EXPECT_FLOAT_EQ(back[1], 32.0f * 2.0f / 127.0f);
  EXPECT_EQ(back[4], 0.0f);
}

// Every level is the reference's nearest level (within one where the two roundings of a tie
// differ), and every decoded value within half a unit of x (plus fp32 rounding).
TEST(Int8Test, NearestLevelsAgainstADoublePrecisionReference) {
  for (size_t block : {size_t{128}, size_t{7}, size_t{1}}) {
    auto codec = mustMake("int8", {{"block", std::to_string(block)}, {"error_feedback", "false"}});
    for (size_t n : kSizes) {
      auto g = gaussian(n, 70 + n);
      std::vector<float> state;
      auto encoded = encode(*codec, g, state);
      const size_t blocks = (n + block - 1) / block;
      ASSERT_EQ(encoded.size(), 4 * blocks + n);
      const auto back = decode(*codec, encoded, n);
      size_t differ = 0;
      for (size_t k = 0; k < blocks; ++k) {
        double most = 0.0;
        for (size_t i = k * block; i < std::min(n, (k + 1) * block); ++i) most = std::max(most, std::fabs(double{g[i]}));
        ASSERT_EQ(scaleOf(encoded, k), static_cast<float>(most)) << "block " << k;
        for (size_t i = k * block; i < std::min(n, (k + 1) * block); ++i) {
          const double exact = most > 0 ? g[i] / most * 127.0 : 0.0;
          const int got = levelOf(encoded, blocks, i);
          ASSERT_LE(std::fabs(got - std::round(exact)), 1.0) << i;
          differ += got != static_cast<int>(std::round(exact));
          ASSERT_LE(std::fabs(double{back[i]} - g[i]), most / 254.0 * (1 + 1e-5) + 1e-30) << i;
        }
      }
      EXPECT_LE(differ, n / 1000 + 1) << "only near-ties may round apart";
    }
  }
}

TEST(Int8Test, ErrorFeedbackCarriesWhatALevelLost) {
  auto codec = mustMake("int8", {{"block", "16"}});  // error feedback by default
  std::vector<float> state;
  const size_t n = 4096;
  std::vector<double> sent(n, 0.0), given(n, 0.0);
  for (uint64_t step = 0; step < 5; ++step) {
    auto g = gaussian(n, 90 + step);
    auto encoded = encode(*codec, g, state, {1, 0, step});
    const auto back = decode(*codec, encoded, n);
    for (size_t i = 0; i < n; ++i) {
      sent[i] += back[i];
      given[i] += g[i];
    }
  }
  // Everything given was either sent or is held in the residual.
  for (size_t i = 0; i < n; ++i) ASSERT_NEAR(sent[i] + state[i], given[i], 1e-5) << i;
}

TEST(Int8Test, StochasticRoundingIsUnbiased) {
  const std::vector<float> g = {1.0f, 0.3f, -0.011f, 0.5f};  // 0.3 -> 38.1 levels, -0.011 -> -1.397
  double mean[4] = {};
  const int draws = 4000;
  auto codec = mustMake("int8", {{"block", "4"}, {"stochastic", "true"}, {"error_feedback", "false"}});
  for (int s = 0; s < draws; ++s) {
    std::vector<float> state;
    const auto back = decode(*codec, encode(*codec, g, state, {2, 0, static_cast<uint64_t>(s)}), g.size());
    for (int i = 0; i < 4; ++i) mean[i] += back[i] / draws;
  }
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(mean[i], g[i], 0.2 / 127.0) << i;
}

TEST(Int8Test, PoolSplitEqualsSerial) {
  for (const Params& p : {Params{}, Params{{"stochastic", "true"}, {"block", "100"}}})
    testing::expectPoolSplitMatches("int8", p);
}

TEST(Int8Test, RejectsNonFiniteInputAndBadEncodings) {
  auto codec = mustMake("int8", {{"block", "4"}});
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    std::vector<float> g = {0.5f, 1.0f, 0.0f, 0.25f, 0.0f, bad};
    std::vector<float> state(g.size(), 0.0f);
    std::vector<std::byte> out(codec->maxEncodedBytes(g.size()));
    auto r = codec->encode(g, state, out, {});
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("int8: block 1 has largest magnitude"), std::string::npos)
        << r.status().message();
    EXPECT_EQ(state, std::vector<float>(g.size(), 0.0f)) << "the residual is untouched";
  }
  std::vector<float> g = {0.5f, -1.0f, 0.0f, 0.25f};
  std::vector<float> state;
  auto encoded = encode(*codec, g, state);
  std::vector<float> acc(4, 1.0f);
  auto level = encoded;
  level[4 + 1] = std::byte{0x80};  // -128
  EXPECT_NE(testing::expectRejectedUntouched(*codec, level, acc, "level -128").find("element 1 has level -128"),
            std::string::npos);
  auto scale = encoded;
  const float negative = -1.0f;
  std::memcpy(scale.data(), &negative, 4);
  testing::expectRejectedUntouched(*codec, scale, acc, "negative scale");
  testing::expectBadParams("int8", {{"block", "0"}, {"block", "2000000"}, {"stochastic", "maybe"}});
}

}  // namespace
}  // namespace gcagent::compress
