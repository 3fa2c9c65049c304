// mxfp4 against the OCP Microscaling spec (v1.0), written here from it: the shared scale is
// 2^(floor(log2(max|x|)) - 2) (emax of e2m1 is 2), sent as an E8M0 byte (the biased
// exponent); each element is the e2m1 value nearest x / X (0, 0.5, 1, 1.5, 2, 3, 4, 6), ties
// to the even code, saturating at 6; code = sign, 2 exponent bits, 1 mantissa bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "tests/compress/codec_test_util.h"

namespace gcagent::compress {
namespace {

using testing::mustMake;

constexpr double kE2m1[8] = {0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0};

uint32_t specCode(float v) {
  const double a = std::fabs(static_cast<double>(v));
  uint32_t best = 0;
  for (uint32_t c = 1; c < 8; ++c) {
    const double gap = std::fabs(kE2m1[c] - a), best_gap = std::fabs(kE2m1[best] - a);
    if (gap < best_gap || (gap == best_gap && (c & 1) == 0)) best = c;
  }
  return (std::signbit(v) ? 8u : 0u) | best;
}

uint32_t nibble(const std::vector<std::byte>& bytes, size_t offset, size_t i) {
  return (static_cast<uint8_t>(bytes[offset + i / 2]) >> (i % 2 == 0 ? 4 : 0)) & 0xf;
}

TEST(Mxfp4Test, ScalesAndCodesAreTheSpecs) {
  std::vector<float> x = testing::gaussian(32 * 5, 2);
  // Block 1: every e2m1 value, the midpoints (ties), and 7 (past 6) times 2^-3.
  for (int k = 0; k < 32; ++k) x[32 + k] = 0.25f * static_cast<float>(k % 32) * 0.125f * (k % 2 ? -1.0f : 1.0f);
  x[32 + 31] = 7.0f * 0.125f;
  // Block 2: tiny values (the scale's exponent floor); block 3: large ones.
  for (int k = 0; k < 32; ++k) x[64 + k] *= 1e-38f;
  for (int k = 0; k < 32; ++k) x[96 + k] *= 1e30f;
  auto codec = mustMake("mxfp4", {{"error_feedback", "false"}});
  std::vector<float> state;
  const auto bytes = testing::encode(*codec, x, state);
  ASSERT_EQ(bytes.size(), 8u + 80u);  // 5 E8M0 bytes padded to a word, 160 nibbles
  const auto decoded = testing::decode(*codec, bytes, x.size());
  for (size_t b = 0; b < 5; ++b) {
    float amax = 0.0f;
    for (size_t i = 32 * b; i < 32 * b + 32; ++i) amax = std::max(amax, std::fabs(x[i]));
    const int unbiased = std::max(std::ilogb(amax) - 2, -126);
    const double scale = std::ldexp(1.0, unbiased);
    ASSERT_EQ(static_cast<uint8_t>(bytes[b]), static_cast<uint8_t>(unbiased + 127)) << b;
    for (size_t i = 32 * b; i < 32 * b + 32; ++i) {
      const uint32_t code = specCode(static_cast<float>((x[i] + 0.0f) / scale));  // -0 + 0 is +0
      ASSERT_EQ(nibble(bytes, 8, i), code) << "x=" << x[i];
      ASSERT_EQ(static_cast<double>(decoded[i]), ((code & 8) ? -1.0 : 1.0) * kE2m1[code & 7] * scale) << i;
    }
  }
  EXPECT_EQ(static_cast<uint8_t>(bytes[1]), 127 - 1 - 2);  // max 0.9375: 2^(-1 - 2)
  EXPECT_EQ(nibble(bytes, 8, 63), 7u);                            // 7 saturates to 6
  for (size_t i = 5; i < 8; ++i) EXPECT_EQ(bytes[i], std::byte{0});  // the scales' padding
}

TEST(Mxfp4Test, ReservedScaleBytesAreRefused) {
  auto codec = mustMake("mxfp4");
  std::vector<float> state;
  const auto good = testing::encode(*codec, testing::gaussian(64, 1), state);
  std::vector<float> acc(64, 1.0f);
  for (uint8_t reserved : {uint8_t{0}, uint8_t{255}}) {
    auto bad = good;
    bad[1] = std::byte{reserved};
    EXPECT_EQ(testing::expectRejectedUntouched(*codec, bad, acc, "reserved scale"),
              "mxfp4: block 1 has a scale the encoder never writes");
  }
}

TEST(Mxfp4Test, ErrorFeedbackCarriesTheSaturationToTheNextStep) {
  // 7 in a block of max 7 is coded as 6 (scale 1); the residual 1 goes out the next step.
  std::vector<float> g(32, 0.0f);
  g[0] = 7.0f;
  auto codec = mustMake("mxfp4");
  std::vector<float> state;
  auto first = testing::decode(*codec, testing::encode(*codec, g, state), 32);
  EXPECT_EQ(first[0], 6.0f);
  EXPECT_EQ(state[0], 1.0f);
  std::vector<float> zero(32, 0.0f);
  auto second = testing::decode(*codec, testing::encode(*codec, zero, state), 32);
  EXPECT_EQ(second[0], 1.0f);
  EXPECT_EQ(state[0], 0.0f);
}

}  // namespace
}  // namespace gcagent::compress
