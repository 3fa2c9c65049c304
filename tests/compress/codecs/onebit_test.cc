// onebit: sign bits with a mean-magnitude scale, error feedback always on.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

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

// Each element is sent as +-scale with the sign of x = g + e, scale = mean |x|, and the new
// residual keeps exactly what was not sent.
TEST(OnebitTest, RoundTripAtEverySize) {
  auto codec = mustMake("onebit");
  for (size_t n : kSizes) {
    auto g = gaussian(n, 10 + n);
    auto state = gaussian(n, 20 + n, 0.1f);  // a residual from earlier steps
    std::vector<float> x(n);
    double sum = 0;
    for (size_t i = 0; i < n; ++i) {
      x[i] = g[i] + state[i];
      sum += std::abs(x[i]);
    }
    auto encoded = encode(*codec, g, state);
    ASSERT_EQ(encoded.size(), 4 + 4 * ((n + 31) / 32));
    const float scale = scaleOf(encoded);
    if (n == 0) {
      EXPECT_EQ(scale, 0.0f);
      continue;
    }
    EXPECT_NEAR(scale, sum / n, 1e-6 * sum / n) << "n=" << n;
    auto d = decode(*codec, encoded, n);
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(d[i], x[i] < 0 ? -scale : scale) << "n=" << n << " i=" << i;
      ASSERT_NEAR(d[i] + state[i], x[i], 1e-6f * (std::abs(x[i]) + scale))
          << "n=" << n << " i=" << i;
    }
  }
}

TEST(OnebitTest, HandComputedTwoSteps) {
  auto codec = mustMake("onebit");
  const std::vector<float> g = {1.5f, -0.5f, 2.0f, -0.75f, 0.25f};
  std::vector<float> e;
  // sum|g| = 5, scale 1.0 (0x3f800000); elements 1 and 3 are negative: 0b01010000.
  EXPECT_EQ(encode(*codec, g, e), bytes({0x00, 0x00, 0x80, 0x3f, 0x50, 0, 0, 0}));
  EXPECT_EQ(e, (std::vector<float>{0.5f, 0.5f, 1.0f, 0.25f, -0.75f}));
  // x = [2, 0, 3, -0.5, -0.5]: scale 6/5 (0x3f99999a); 0 counts as positive; 0b00011000.
  EXPECT_EQ(encode(*codec, g, e), bytes({0x9a, 0x99, 0x99, 0x3f, 0x18, 0, 0, 0}));
  const float s = 1.2f;
  EXPECT_EQ(e, (std::vector<float>{2.0f - s, 0.0f - s, 3.0f - s, -0.5f + s, -0.5f + s}));
}

TEST(OnebitTest, UnscaledSendsUnitMagnitudes) {
  auto codec = mustMake("onebit", {{"scaled", "false"}});
  const std::vector<float> g = {0.5f, -3.0f, 0.0f, -0.0f, 2.0f};
  std::vector<float> e;
  auto encoded = encode(*codec, g, e);
  EXPECT_EQ(encoded, bytes({0x00, 0x00, 0x80, 0x3f, 0x40, 0, 0, 0}));
  EXPECT_EQ(e, (std::vector<float>{-0.5f, -2.0f, -1.0f, -1.0f, 1.0f}));
  EXPECT_EQ(decode(*codec, encoded, 5), (std::vector<float>{1, -1, 1, 1, 1}));
}

TEST(OnebitTest, DecodesHandWrittenBytes) {
  auto codec = mustMake("onebit");
  // scale 2.0, bits 101 (MSB first).
  EXPECT_EQ(decode(*codec, bytes({0x00, 0x00, 0x00, 0x40, 0xa0, 0, 0, 0}), 3),
            (std::vector<float>{-2, 2, -2}));
  EXPECT_EQ(decode(*codec, bytes({0, 0, 0, 0}), 0), std::vector<float>{});
}

TEST(OnebitTest, CorruptBuffersAreRejectedUntouched) {
  auto codec = mustMake("onebit");
  const size_t n = 17;
  std::vector<float> state;
  const auto good = encode(*codec, gaussian(n, 1), state);
  auto acc = gaussian(n, 2);
  auto expectRejected = [&](const std::vector<std::byte>& bad, const char* what) {
    testing::expectRejectedUntouched(*codec, bad, acc, what);
  };
  testing::expectBadScalesRejected(*codec, good, acc);
  auto padded = good;
  padded[4 + 2] |= std::byte{0x40};  // element 17 does not exist
  expectRejected(padded, "padding bit");
  padded = good;
  padded.back() = std::byte{1};
  expectRejected(padded, "padding byte");
  expectRejected(std::vector<std::byte>(good.begin(), good.end() - 1), "short buffer");
  Status s = codec->decodeAdd(std::vector<std::byte>(7), acc, {});
  EXPECT_EQ(s.message(), "onebit: encoded buffer holds 7 bytes, expected 8 for 17 elements");
}

TEST(OnebitTest, NonFiniteInputIsRejectedBeforeTheStateChanges) {
  auto codec = mustMake("onebit");
  std::vector<float> g = {1.0f, std::numeric_limits<float>::infinity(), -1.0f};
  std::vector<float> state = {0.5f, 0.5f, 0.5f};
  std::vector<std::byte> out(codec->maxEncodedBytes(3));
  auto r = codec->encode(g, state, out, {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(state, (std::vector<float>{0.5f, 0.5f, 0.5f}));
}

TEST(OnebitTest, BadParametersAreNamed) { testing::expectBadParams("onebit", {{"scaled", "maybe"}}); }

}  // namespace
}  // namespace gcagent::compress
