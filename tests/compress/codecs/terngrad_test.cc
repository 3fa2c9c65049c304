// terngrad: stochastic ternary with a per-slice scaler and clipping at 2.5 sigma.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "compress/random_math.h"
#include "tests/compress/codec_test_util.h"

namespace gcagent::compress {
namespace {

using testing::bytes;
using testing::decode;
using testing::encode;
using testing::gaussian;
using testing::kSizes;
using testing::mustMake;
using testing::scaleOf;

// The scaler a slice should get: max |x| clipped at 2.5 * sqrt(mean(x^2)).
double expectedScaler(const std::vector<float>& x, bool clip) {
  double squares = 0, max = 0;
  for (float v : x) {
    squares += double{v} * v;
    max = std::max(max, double{std::abs(v)});
  }
  return clip && !x.empty() ? std::min(max, 2.5 * std::sqrt(squares / x.size())) : max;
}

TEST(TerngradTest, RoundTripAtEverySize) {
  for (bool clip : {true, false}) {
    auto codec = mustMake("terngrad", {{"clip", clip ? "true" : "false"}});
    for (size_t n : kSizes) {
      auto g = gaussian(n, 30 + n);
      if (n >= 16) g[n / 2] = 40.0f;  // an outlier that clipping cuts down
      std::vector<float> state;
      auto encoded = encode(*codec, g, state, {1, 2, 3});
      ASSERT_EQ(encoded.size(), 4 + 4 * ((n + 15) / 16));
      const float s = scaleOf(encoded);
      const double expected = expectedScaler(g, clip);
      EXPECT_NEAR(s, expected, 1e-6 * expected) << "n=" << n << " clip=" << clip;
      auto d = decode(*codec, encoded, n);
      size_t sent = 0;
      for (size_t i = 0; i < n; ++i) {
        ASSERT_TRUE(d[i] == 0.0f || d[i] == s || d[i] == -s) << "n=" << n << " i=" << i;
        if (d[i] != 0.0f) {
          ASSERT_EQ(d[i] < 0, g[i] < 0) << "sign, n=" << n << " i=" << i;
          ++sent;
        }
        if (g[i] == 0.0f) {
          ASSERT_EQ(d[i], 0.0f);
        }
        // |clip(x)| == s has probability 1.
        if (std::abs(g[i]) >= s) {
          ASSERT_EQ(d[i], g[i] < 0 ? -s : s) << "n=" << n << " i=" << i;
        }
      }
      if (n >= 4096) {
        // About sum |clip(x)| / s elements are sent.
        double expected_sent = 0;
        for (float v : g) expected_sent += std::min<double>(std::abs(v), s) / s;
        EXPECT_NEAR(sent, expected_sent, 5 * std::sqrt(expected_sent)) << "n=" << n;
      }
    }
  }
}

TEST(TerngradTest, EqualMagnitudesAreSentExactly) {
  auto codec = mustMake("terngrad");
  const std::vector<float> g = {0.5f, -0.5f, 0.0f, 0.5f, -0.5f};
  std::vector<float> state;
  // No clipping (2.5 sigma = 1.12); s = 0.5 (0x3f000000); codes 11 10 00 11 | 10.
  auto encoded = encode(*codec, g, state);
  EXPECT_EQ(encoded, bytes({0x00, 0x00, 0x00, 0x3f, 0xe3, 0x80, 0x00, 0x00}));
  EXPECT_EQ(decode(*codec, encoded, g.size()), g);
}

TEST(TerngradTest, ClippingBoundsTheScaler) {
  std::vector<float> g(16, 0.0f);
  g[15] = 10.0f;  // sigma = sqrt(100 / 16) = 2.5, clipped to 6.25 (0x40c80000)
  std::vector<float> state;
  auto clipped = mustMake("terngrad", {{"error_feedback", "true"}});
  auto encoded = encode(*clipped, g, state);
  EXPECT_EQ(encoded, bytes({0x00, 0x00, 0xc8, 0x40, 0, 0, 0, 0x03}));
  std::vector<float> expected(16, 0.0f);
  expected[15] = 6.25f;
  EXPECT_EQ(decode(*clipped, encoded, 16), expected);
  // Error feedback carries the clipped-off part.
  expected[15] = 3.75f;
  EXPECT_EQ(state, expected);

  std::vector<float> none;
  auto unclipped = mustMake("terngrad", {{"clip", "false"}});
  EXPECT_EQ(encode(*unclipped, g, none), bytes({0x00, 0x00, 0x20, 0x41, 0, 0, 0, 0x03}));
}

TEST(TerngradTest, UnbiasedForTheClippedInput) {
  auto codec = mustMake("terngrad", {{"seed", "7"}});
  const size_t n = 64;
  auto g = gaussian(n, 5);
  g[9] = 12.0f;  // clipped
  const int steps = 20000;
  std::vector<double> mean(n, 0.0);
  float s = 0;
  for (int t = 0; t < steps; ++t) {
    std::vector<float> state;
    auto encoded = encode(*codec, g, state, {3, 1, static_cast<uint64_t>(t)});
    s = scaleOf(encoded);
    auto d = decode(*codec, encoded, n);
    for (size_t i = 0; i < n; ++i) mean[i] += d[i] / static_cast<double>(steps);
  }
  ASSERT_LT(s, 12.0f);
  double z_sum = 0;  // a bias shared by many elements shows here long before per element
  int random_elements = 0;
  for (size_t i = 0; i < n; ++i) {
    const double clipped = std::copysign(std::min<double>(std::abs(g[i]), s), g[i]);
    const double standard_error = std::sqrt((s * std::abs(clipped) - clipped * clipped) / steps);
    EXPECT_NEAR(mean[i], clipped, 5 * standard_error + 1e-6 * s) << "i=" << i;
    if (standard_error > 0) {
      z_sum += (mean[i] - clipped) / standard_error * (clipped < 0 ? -1 : 1);
      ++random_elements;
    }
  }
  EXPECT_NEAR(mean[9], s, 1e-6 * s);
  EXPECT_LT(std::abs(z_sum) / std::sqrt(random_elements), 5.0);
}

TEST(TerngradTest, DrawsFollowTheSliceIdAndSeed) { testing::expectDrawsFollowSliceIdAndSeed("terngrad"); }

TEST(TerngradTest, UniformDrawsAreInRangeAndDependOnEveryField) {
  const uint64_t stream = rng::streamSeed(0, 0, 0, 0);
  double sum = 0;
  const int draws = 1 << 16;
  for (int i = 0; i < draws; ++i) {
    const float u = rng::uniform01(stream, i);
    ASSERT_GE(u, 0.0f);
    ASSERT_LT(u, 1.0f);
    sum += u;
  }
  EXPECT_NEAR(sum / draws, 0.5, 5 * std::sqrt(1.0 / 12 / draws));
  EXPECT_NE(rng::streamSeed(1, 0, 0, 0), stream);
  EXPECT_NE(rng::streamSeed(0, 1, 0, 0), stream);
  EXPECT_NE(rng::streamSeed(0, 0, 1, 0), stream);
  EXPECT_NE(rng::streamSeed(0, 0, 0, 1), stream);
  EXPECT_NE(rng::streamSeed(0, 1, 0, 0), rng::streamSeed(0, 0, 0, 1));
}

TEST(TerngradTest, BadParametersAreNamed) {
  testing::expectBadParams("terngrad", {{"clip", "2"}, {"seed", "-1"}, {"error_feedback", "yes"}});
}

TEST(TerngradTest, CorruptBuffersAreRejectedUntouched) {
  auto codec = mustMake("terngrad");
  const size_t n = 17;
  std::vector<float> state;
  const auto good = encode(*codec, gaussian(n, 1), state);
  auto acc = gaussian(n, 2);
  auto expectRejected = [&](const std::vector<std::byte>& bad, const char* what) {
    testing::expectRejectedUntouched(*codec, bad, acc, what);
  };
  testing::expectBadScalesRejected(*codec, good, acc);
  auto bad = good;
  bad[4] = std::byte{0x40};  // element 0 gets 0b01
  expectRejected(bad, "code 01");
  bad = good;
  bad[4 + 4] |= std::byte{0x20};  // element 17 (padding) gets 0b10
  expectRejected(bad, "padding code");
  bad = good;
  bad.back() = std::byte{0xc0};
  expectRejected(bad, "padding byte");
  expectRejected(std::vector<std::byte>(good.begin(), good.end() - 4), "short buffer");
}

TEST(TerngradTest, NonFiniteInputIsRejectedBeforeTheStateChanges) {
  auto codec = mustMake("terngrad", {{"error_feedback", "true"}});
  std::vector<float> g = {1.0f, std::nanf(""), -1.0f};
  std::vector<float> state = {0.5f, 0.5f, 0.5f};
  std::vector<std::byte> out(codec->maxEncodedBytes(3));
  auto r = codec->encode(g, state, out, {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(state, (std::vector<float>{0.5f, 0.5f, 0.5f}));
}

TEST(TerngradTest, StateOnlyWithErrorFeedback) {
  EXPECT_EQ(mustMake("terngrad")->stateElements(100), 0u);
  EXPECT_EQ(mustMake("terngrad", {{"error_feedback", "true"}})->stateElements(100), 100u);
}

TEST(TerngradTest, PoolSplitWithErrorFeedbackGivesTheSameBytes) {
  testing::expectPoolSplitMatches("terngrad", {{"error_feedback", "true"}});
}

}  // namespace
}  // namespace gcagent::compress
