// fp8 against the OCP 8-bit floating point spec (v1.0), written here from the spec: every
// code's value from its fields, and rounding as the search for the nearest finite value
// (ties to the even code), not the codec's bit arithmetic.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "tests/compress/codec_test_util.h"

namespace gcagent::compress {
namespace {

using testing::mustMake;

struct Format {
  int exponent_bits, mantissa_bits, bias;
  float largest;
};
constexpr Format kE4m3{4, 3, 7, 448.0f};
constexpr Format kE5m2{5, 2, 15, 57344.0f};

// The value of a code, or NaN for the codes that are NaN or infinity.
double specValue(const Format& f, uint32_t code) {
  const uint32_t e = (code >> f.mantissa_bits) & ((1u << f.exponent_bits) - 1);
  const uint32_t m = code & ((1u << f.mantissa_bits) - 1);
  const double sign = (code & 0x80) ? -1.0 : 1.0;
  if (f.exponent_bits == 4 && e == 15 && m == 7) return std::nan("");  // e4m3: the one NaN
  if (f.exponent_bits == 5 && e == 31) return std::nan("");            // e5m2: inf and NaN
  const double frac = static_cast<double>(m) / (1u << f.mantissa_bits);
  if (e == 0) return sign * frac * std::ldexp(1.0, 1 - f.bias);
  return sign * (1.0 + frac) * std::ldexp(1.0, static_cast<int>(e) - f.bias);
}

// The code of the finite value nearest v, ties to the even code, |v| past the largest
// finite value saturating to it; the sign follows v's sign bit.
uint32_t specCode(const Format& f, float v) {
  const uint32_t sign = std::signbit(v) ? 0x80 : 0;
  const double a = std::fabs(static_cast<double>(v));
  uint32_t best = 0;
  double best_gap = std::numeric_limits<double>::infinity();
  for (uint32_t code = 0; code < 0x80; ++code) {
    const double value = specValue(f, code);
    if (std::isnan(value)) continue;
    const double gap = std::fabs(value - a);
    if (gap < best_gap || (gap == best_gap && (code & 1) == 0)) {
      best = code;
      best_gap = gap;
    }
  }
  return sign | best;
}

Params paramsOf(const Format& f, uint32_t block) {
  return {{"exponent_bits", std::to_string(f.exponent_bits)}, {"block", std::to_string(block)},
          {"error_feedback", "false"}};
}

// Values spread over every binade of the format, the midpoints between neighbours (ties) and
// the subnormals, in one block whose largest magnitude is the format's largest (scale 1).
std::vector<float> probes(const Format& f) {
  std::vector<float> v;
  for (uint32_t code = 0; code < 0x80; ++code) {
    const double a = specValue(f, code), b = specValue(f, code + 1);
    if (std::isnan(a)) continue;
    v.push_back(static_cast<float>(a));
    if (!std::isnan(b) && code + 1 < 0x80) {
      v.push_back(static_cast<float>((a + b) / 2));             // a tie
      v.push_back(static_cast<float>(a + (b - a) * 0.26));      // nearer a
      v.push_back(static_cast<float>(a + (b - a) * 0.74));      // nearer b
    }
  }
  for (size_t i = 0, n = v.size(); i < n; ++i) v.push_back(-v[i]);
  v.push_back(-0.0f);
  while (v.size() % 256 != 0) v.push_back(0.0f);
  return v;
}

void checkAgainstSpec(const Format& f) {
  const std::vector<float> x = probes(f);
  for (size_t start = 0; start < x.size(); start += 256) {
    std::vector<float> block(x.begin() + start, x.begin() + start + 256);
    block[255] = f.largest;  // the block's scale is then exactly 1
    auto codec = mustMake("fp8", paramsOf(f, 256));
    std::vector<float> state;
    const auto bytes = testing::encode(*codec, block, state);
    ASSERT_EQ(bytes.size(), 4u + 256u);
    float scale;
    std::memcpy(&scale, bytes.data(), 4);
    ASSERT_EQ(scale, 1.0f);
    const auto decoded = testing::decode(*codec, bytes, 256);
    for (size_t i = 0; i < 256; ++i) {
      const float x = block[i] + 0.0f;  // g + r with no residual: -0 + 0 is +0
      const uint32_t code = static_cast<uint8_t>(bytes[4 + i]);
      ASSERT_EQ(code, specCode(f, x)) << "x=" << x;
      ASSERT_EQ(static_cast<double>(decoded[i]), specValue(f, code)) << "x=" << x;
      if (decoded[i] != 0) {
        ASSERT_EQ(std::signbit(decoded[i]), std::signbit(x)) << "x=" << x;
      }
    }
  }
}

TEST(Fp8Test, E4m3CodesAndValuesAreTheSpecsNearestTiesToEven) { checkAgainstSpec(kE4m3); }
TEST(Fp8Test, E5m2CodesAndValuesAreTheSpecsNearestTiesToEven) { checkAgainstSpec(kE5m2); }

// Each block of 32 gets scale max|x| / 448; its largest element is coded as 448 (0x7e).
TEST(Fp8Test, EachBlockIsScaledByItsLargestMagnitude) {
  std::vector<float> x = testing::gaussian(100, 4);
  x[40] = -1000.0f;  // block 1's largest
  auto codec = mustMake("fp8", {{"error_feedback", "false"}});
  std::vector<float> state;
  const auto bytes = testing::encode(*codec, x, state);
  ASSERT_EQ(bytes.size(), 16u + 100u);  // 4 scales, 100 codes (padded to whole words: 100)
  for (size_t b = 0; b < 4; ++b) {
    float amax = 0.0f;
    for (size_t i = 32 * b; i < std::min<size_t>(100, 32 * b + 32); ++i) amax = std::max(amax, std::fabs(x[i]));
    float scale;
    std::memcpy(&scale, bytes.data() + 4 * b, 4);
    EXPECT_EQ(scale, amax / 448.0f) << "block " << b;
    for (size_t i = 32 * b; i < std::min<size_t>(100, 32 * b + 32); ++i)
      ASSERT_EQ(static_cast<uint32_t>(static_cast<uint8_t>(bytes[16 + i])), specCode(kE4m3, x[i] / scale)) << i;
  }
  EXPECT_EQ(static_cast<uint8_t>(bytes[16 + 40]), 0xfe);  // -448
  // Relative error of e4m3 with nearest rounding: at most 2^-4 of each value above the
  // block's subnormals.
  const auto decoded = testing::decode(*codec, bytes, 100);
  for (size_t i = 0; i < 100; ++i) EXPECT_LE(std::fabs(decoded[i] - x[i]), std::fabs(x[i]) / 16 + 1e-6f) << i;
}

TEST(Fp8Test, ResidualKeepsWhatTheCodeDoesNotCarry) {
  const auto g = testing::gaussian(1000, 9);
  auto codec = mustMake("fp8", {{"block", "64"}});
  std::vector<float> state;
  const auto bytes = testing::encode(*codec, g, state);
  const auto decoded = testing::decode(*codec, bytes, g.size());
  for (size_t i = 0; i < g.size(); ++i) ASSERT_EQ(state[i], g[i] - decoded[i]) << i;
}

TEST(Fp8Test, AllZeroBlockHasScaleZeroAndDecodesToZero) {
  std::vector<float> x(64, 0.0f);
  auto codec = mustMake("fp8", {{"error_feedback", "false"}});
  std::vector<float> state;
  const auto bytes = testing::encode(*codec, x, state);
  for (size_t i = 0; i < bytes.size(); ++i) EXPECT_EQ(bytes[i], std::byte{0}) << i;
}

TEST(Fp8Test, NonFiniteInputFailsNamingTheBlockAndKeepsTheResidual) {
  for (float bad : {std::numeric_limits<float>::infinity(), std::nanf("")}) {
    std::vector<float> g(100, 0.5f);
    g[70] = bad;
    auto codec = mustMake("fp8");
    std::vector<float> state(100, 0.25f), out(codec->maxEncodedBytes(100));
    std::vector<std::byte> bytes(codec->maxEncodedBytes(100));
    const auto r = codec->encode(g, state, bytes, {});
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().message(), "fp8: block 2 of the gradient plus residual holds a non-finite value");
    EXPECT_EQ(state, std::vector<float>(100, 0.25f));
  }
}

TEST(Fp8Test, NanCodesAndBadScalesAreRefused) {
  for (const Format& f : {kE4m3, kE5m2}) {
    auto codec = mustMake("fp8", paramsOf(f, 32));
    std::vector<float> state;
    const auto good = testing::encode(*codec, testing::gaussian(40, 1), state);
    std::vector<float> acc(40, 1.0f);
    auto bad = good;
    bad[8 + 33] = std::byte{static_cast<uint8_t>(f.exponent_bits == 4 ? 0x7f : 0xfc)};  // NaN / -inf
    EXPECT_EQ(testing::expectRejectedUntouched(*codec, bad, acc, "nan code"),
              "fp8: element 33 has a code the encoder never writes");
    bad = good;
    const float negative = -1.0f;
    std::memcpy(bad.data() + 4, &negative, 4);
    EXPECT_EQ(testing::expectRejectedUntouched(*codec, bad, acc, "negative scale"),
              "fp8: block 1 has a scale the encoder never writes");
  }
}

TEST(Fp8Test, BadParametersAreRefused) {
  testing::expectBadParams("fp8", {{"exponent_bits", "3"}, {"exponent_bits", "6"}, {"block", "16"}, {"block", "48"},
                                   {"block", "512"}});
}

}  // namespace
}  // namespace gcagent::compress
