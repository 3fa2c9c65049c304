// fp16 and bf16: exact conversions at the interesting points, and the documented bound.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "compress/bf16/bf16_math.h"
#include "compress/fp16/fp16_math.h"
#include "tests/compress/codec_test_util.h"

namespace gcagent::compress {
namespace {

TEST(Fp16MathTest, KnownBitPatterns) {
  EXPECT_EQ(fp16::fromFloat(1.0f), 0x3c00);
  EXPECT_EQ(fp16::fromFloat(-2.0f), 0xc000);
  EXPECT_EQ(fp16::fromFloat(65504.0f), 0x7bff);
  EXPECT_EQ(fp16::fromFloat(65520.0f), 0x7c00);  // rounds up to infinity
  EXPECT_EQ(fp16::fromFloat(65519.0f), 0x7bff);
  EXPECT_EQ(fp16::fromFloat(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_EQ(fp16::fromFloat(-0.0f), 0x8000);
  EXPECT_EQ(fp16::fromFloat(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(fp16::fromFloat(std::ldexp(1.0f, -25)), 0x0000);  // tie to even: zero
  EXPECT_EQ(fp16::fromFloat(std::ldexp(3.0f, -25)), 0x0002);  // tie to even: two
  EXPECT_EQ(fp16::fromFloat(1.0f + std::ldexp(1.0f, -11)), 0x3c00);  // tie to even
  EXPECT_EQ(fp16::fromFloat(1.0f + std::ldexp(3.0f, -11)), 0x3c02);
  EXPECT_TRUE(std::isnan(fp16::toFloat(fp16::fromFloat(std::nanf("")))));
}

TEST(Fp16MathTest, EveryHalfRoundTripsExactly) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    float f = fp16::toFloat(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(fp16::fromFloat(f), h) << std::hex << h;
  }
}

TEST(Bf16MathTest, KnownBitPatterns) {
  EXPECT_EQ(bf16::fromFloat(1.0f), 0x3f80);
  EXPECT_EQ(bf16::fromFloat(-1.0f), 0xbf80);
  EXPECT_EQ(bf16::fromFloat(1.0f + std::ldexp(1.0f, -8)), 0x3f80);   // tie to even
  EXPECT_EQ(bf16::fromFloat(1.0f + std::ldexp(3.0f, -8)), 0x3f82);
  EXPECT_EQ(bf16::fromFloat(std::numeric_limits<float>::max()), 0x7f80);  // overflow to inf
  EXPECT_TRUE(std::isnan(bf16::toFloat(bf16::fromFloat(std::nanf("")))));
  for (uint32_t b = 0; b < 0x10000; ++b) {
    float f = bf16::toFloat(static_cast<uint16_t>(b));
    if (std::isnan(f)) continue;
    ASSERT_EQ(bf16::fromFloat(f), b) << std::hex << b;
  }
}

// Documented bound: relative error at most 2^-11 (fp16, normal range) or 2^-8 (bf16);
// fp16 values below 2^-14 carry an absolute error of at most 2^-25.
TEST(CastCodecTest, RoundTripWithinBound) {
  struct Case {
    const char* name;
    double rel;
    double abs;
  };
  for (const Case& c : {Case{"fp16", std::ldexp(1.0, -11), std::ldexp(1.0, -25)},
                        Case{"bf16", std::ldexp(1.0, -8), 0.0}}) {
    auto codec = testing::mustMake(c.name);
    for (size_t n : testing::kSizes) {
      auto g = testing::gaussian(n, n + 1, 10.0f);
      std::vector<float> state;
      auto d = testing::decode(*codec, testing::encode(*codec, g, state), n);
      for (size_t i = 0; i < n; ++i)
        ASSERT_LE(std::abs(d[i] - g[i]), c.rel * std::abs(g[i]) + c.abs) << c.name << " " << g[i];
    }
  }
}

TEST(CastCodecTest, ErrorFeedbackCarriesTheRoundingError) {
  auto codec = testing::mustMake("fp16", {{"error_feedback", "true"}});
  std::vector<float> g(1, 1.0f + std::ldexp(1.0f, -12));  // a quarter ulp above 1
  std::vector<float> state;
  float sent = 0;
  for (int step = 0; step < 4; ++step) sent += testing::decode(*codec, testing::encode(*codec, g, state), 1)[0];
  // Plain rounding would send exactly 4.0; feedback sends the four quarter ulps as one ulp.
  EXPECT_EQ(sent, 4.0f + std::ldexp(1.0f, -10));
  EXPECT_EQ(state[0], 0.0f);
}

}  // namespace
}  // namespace gcagent::compress
