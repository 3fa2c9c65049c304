// int4 against a reference written here: levels round(|x| / s) with s = max|x| / 7 (C's
// nearbyint: ties to even), sign and level in a nibble, most significant first; the
// stochastic rounding's mean; and the rotation against the Hadamard matrix itself,
// H[i][j] = (-1)^popcount(i & j), in double.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <vector>

#include "compress/random_math.h"
#include "tests/compress/codec_test_util.h"

namespace gcagent::compress {
namespace {

using testing::mustMake;

uint32_t nibble(const std::vector<std::byte>& bytes, size_t offset, size_t i) {
  return (static_cast<uint8_t>(bytes[offset + i / 2]) >> (i % 2 == 0 ? 4 : 0)) & 0xf;
}

TEST(Int4Test, LevelsAreTheNearestMultiplesOfTheBlockScaleTiesToEven) {
  // Block 0 has max 7 (scale 1) and every half level, ties included; block 1 is random.
  std::vector<float> x;
  for (int k = -14; k <= 14; ++k) x.push_back(0.5f * static_cast<float>(k));
  x.push_back(7.0f);
  x.push_back(-0.0f);
  x.push_back(0.2f);
  const auto random = testing::gaussian(40, 3);
  x.insert(x.end(), random.begin(), random.end());
  auto codec = mustMake("int4", {{"block", "32"}, {"error_feedback", "false"}});
  std::vector<float> state;
  const auto bytes = testing::encode(*codec, x, state);
  ASSERT_EQ(bytes.size(), 3 * 4 + 4 * ((x.size() + 7) / 8));
  const auto decoded = testing::decode(*codec, bytes, x.size());
  for (size_t b = 0; b * 32 < x.size(); ++b) {
    float amax = 0.0f;
    for (size_t i = 32 * b; i < std::min(x.size(), 32 * b + 32); ++i) amax = std::max(amax, std::fabs(x[i]));
    float scale;
    std::memcpy(&scale, bytes.data() + 4 * b, 4);
    ASSERT_EQ(scale, amax / 7.0f) << b;
    for (size_t i = 32 * b; i < std::min(x.size(), 32 * b + 32); ++i) {
      const float xi = x[i] + 0.0f;  // g + r with no residual: -0 + 0 is +0
      const float level = std::min(7.0f, std::nearbyint(std::fabs(xi) / scale));
      const uint32_t expected = (std::signbit(xi) ? 8u : 0u) | static_cast<uint32_t>(level);
      ASSERT_EQ(nibble(bytes, 12, i), expected) << "x=" << xi;
      ASSERT_EQ(decoded[i], std::copysign(level * scale, xi)) << "x=" << xi;
    }
  }
  EXPECT_EQ(nibble(bytes, 12, 3), 8u | 6u);  // -5.5: a tie, to the even 6
  EXPECT_EQ(nibble(bytes, 12, 5), 8u | 4u);  // -4.5: a tie, to the even 4
}

TEST(Int4Test, StochasticRoundingIsUnbiased) {
  // x = 2.3 in a block whose scale is 1: level 2 or 3, 3 with probability 0.3.
  std::vector<float> x(64, 2.3f);
  x[0] = 7.0f;
  auto codec = mustMake("int4", {{"stochastic", "true"}, {"error_feedback", "false"}});
  double sum = 0.0;
  const int steps = 400;
  for (int step = 0; step < steps; ++step) {
    std::vector<float> state;
    const auto decoded = testing::decode(*codec, testing::encode(*codec, x, state, {1, 0, uint64_t(step)}), 64,
                                         {1, 0, uint64_t(step)});
    for (size_t i = 1; i < 64; ++i) {
      ASSERT_TRUE(decoded[i] == 2.0f || decoded[i] == 3.0f) << decoded[i];
      sum += decoded[i];
    }
  }
  const double mean = sum / (63.0 * steps);
  // 25200 draws of a Bernoulli(0.3): the mean's deviation is 0.0029; allow 5 of them.
  EXPECT_NEAR(mean, 2.3, 0.015);
}

// The rotated encoding is the levels of H D x, D the signs the slice's stream draws (the low
// bit of draw i, as documented), and decodes to D H y / size: checked against the matrix
// product in double, to fp32's rounding.
TEST(Int4Test, RotationIsTheRandomizedHadamardTransformAndItsInverse) {
  const size_t size = 64;
  std::vector<float> x = testing::gaussian(100, 5);
  x[10] = 30.0f;  // an outlier the rotation spreads over its block
  auto rotated = mustMake("int4", {{"rotate", "true"}, {"error_feedback", "false"}, {"seed", "9"}});
  const SliceId id{3, 1, 4};
  std::vector<float> state;
  const auto bytes = testing::encode(*rotated, x, state, id);
  ASSERT_EQ(bytes.size(), 2 * 4 + 128 / 2);  // two blocks, the last padded to a whole one
  const auto decoded = testing::decode(*rotated, bytes, x.size(), id);
  const uint64_t stream = rng::streamSeed(9, id.key, id.slice, id.step);
  const auto h = [](size_t i, size_t j) { return (std::popcount(i & j) % 2) ? -1.0 : 1.0; };
  for (size_t b = 0; b < 2; ++b) {
    std::vector<double> dx(size, 0.0), hx(size, 0.0), y(size);
    for (size_t i = 0; i < size; ++i) {
      const size_t at = b * size + i;
      const double d = (rng::bits64(stream, at) & 1) ? -1.0 : 1.0;
      dx[i] = at < x.size() ? d * x[at] : 0.0;
    }
    double amax = 0;
    for (size_t j = 0; j < size; ++j) {
      for (size_t i = 0; i < size; ++i) hx[j] += h(i, j) * dx[i];
      amax = std::max(amax, std::fabs(hx[j]));
    }
    float scale;
    std::memcpy(&scale, bytes.data() + 4 * b, 4);
    ASSERT_NEAR(scale, amax / 7, 1e-5 * amax) << b;
    for (size_t j = 0; j < size; ++j) {
      const uint32_t c = nibble(bytes, 8, b * size + j);
      y[j] = ((c & 8) ? -1.0 : 1.0) * static_cast<double>(c & 7) * scale;
      const double level = std::fabs(hx[j]) / scale;
      if (std::fabs(level - std::floor(level) - 0.5) < 1e-4) continue;  // a tie in fp32 may go either way
      ASSERT_EQ(c & 7, static_cast<uint32_t>(std::min(7.0, std::nearbyint(level)))) << b << " " << j;
      if (c & 7) {
        ASSERT_EQ((c & 8) != 0, hx[j] < 0) << b << " " << j;
      }
    }
    for (size_t i = 0; i < size && b * size + i < x.size(); ++i) {
      double back = 0;
      for (size_t j = 0; j < size; ++j) back += h(i, j) * y[j];
      back *= ((rng::bits64(stream, b * size + i) & 1) ? -1.0 : 1.0) / static_cast<double>(size);
      ASSERT_NEAR(decoded[b * size + i], back, 1e-5 * (1 + std::fabs(back))) << b << " " << i;
    }
  }
  // The outlier's block loses less than without the rotation.
  auto plain = mustMake("int4", {{"error_feedback", "false"}});
  std::vector<float> plain_state;
  const auto plain_decoded = testing::decode(*plain, testing::encode(*plain, x, plain_state), x.size());
  double err_rotated = 0, err_plain = 0;
  for (size_t i = 0; i < 64; ++i) {
    err_rotated += std::pow(decoded[i] - x[i], 2);
    err_plain += std::pow(plain_decoded[i] - x[i], 2);
  }
  EXPECT_LT(err_rotated, 0.5 * err_plain);
}

TEST(Int4Test, RotatedResidualIsWhatTheDecoderDidNotGetBack) {
  const auto g = testing::gaussian(300, 7);
  auto codec = mustMake("int4", {{"rotate", "true"}, {"stochastic", "true"}, {"block", "128"}});
  std::vector<float> state;
  const auto bytes = testing::encode(*codec, g, state, {1, 2, 3});
  const auto decoded = testing::decode(*codec, bytes, g.size(), {1, 2, 3});
  for (size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(state[i], g[i] - decoded[i], 1e-5f) << i;
}

TEST(Int4Test, BadParametersAreRefused) {
  testing::expectBadParams("int4", {{"block", "100"}, {"block", "8"}, {"rotate", "sometimes"}, {"stochastic", "2"}});
}

}  // namespace
}  // namespace gcagent::compress
