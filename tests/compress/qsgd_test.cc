// qsgd: stochastic quantization to s levels of each bucket's L2 norm.
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

float normOf(const std::vector<std::byte>& encoded, size_t bucket_index) {
  float f;
  std::memcpy(&f, encoded.data() + 4 * bucket_index, sizeof f);
  return f;
}

void setNorm(std::vector<std::byte>& encoded, size_t bucket_index, float f) {
  std::memcpy(encoded.data() + 4 * bucket_index, &f, sizeof f);
}

// Every decoded value is within one level (norm / s) of x, on the same side of zero, and
// each bucket's header is its L2 norm.
TEST(QsgdTest, RoundTripWithinOneLevelAtEverySize) {
  struct Case {
    int levels;
    size_t bucket;
  };
  for (const Case& c : {Case{127, 512}, Case{3, 7}, Case{1, 1}}) {
    auto codec = mustMake("qsgd", {{"levels", std::to_string(c.levels)},
                                   {"bucket", std::to_string(c.bucket)}});
    for (size_t n : kSizes) {
      auto g = gaussian(n, 40 + n);
      std::vector<float> state;
      auto encoded = encode(*codec, g, state, {9, 0, 1});
      const size_t buckets = (n + c.bucket - 1) / c.bucket;
      ASSERT_EQ(encoded.size(), 4 * buckets + n);
      auto d = decode(*codec, encoded, n);
      for (size_t k = 0; k < buckets; ++k) {
        double squares = 0;
        for (size_t i = k * c.bucket; i < std::min(n, (k + 1) * c.bucket); ++i)
          squares += double{g[i]} * g[i];
        const float norm = normOf(encoded, k);
        ASSERT_NEAR(norm, std::sqrt(squares), 1e-6 * std::sqrt(squares)) << "n=" << n << " k=" << k;
        const double unit = double{norm} / c.levels;
        for (size_t i = k * c.bucket; i < std::min(n, (k + 1) * c.bucket); ++i) {
          ASSERT_LE(std::abs(d[i] - g[i]), unit * (1 + 1e-5)) << "n=" << n << " i=" << i;
          if (d[i] != 0.0f) {
            ASSERT_EQ(d[i] < 0, g[i] < 0) << "n=" << n << " i=" << i;
          }
        }
      }
    }
  }
}

TEST(QsgdTest, HandComputedBytes) {
  auto codec = mustMake("qsgd", {{"levels", "4"}, {"bucket", "4"}, {"error_feedback", "true"}});
  // |x| / norm is 1/2, 1 or 0 everywhere, so every level is exact (no random rounding).
  const std::vector<float> g = {0.5f, -0.5f, 0.5f, -0.5f, 0, 0, -3, 0, 0, 0, 0, 0, 7};
  std::vector<float> state;
  auto encoded = encode(*codec, g, state);
  EXPECT_EQ(encoded, bytes({0x00, 0x00, 0x80, 0x3f,  // norm 1
                            0x00, 0x00, 0x40, 0x40,  // norm 3
                            0x00, 0x00, 0x00, 0x00,  // norm 0
                            0x00, 0x00, 0xe0, 0x40,  // norm 7
                            0x02, 0xfe, 0x02, 0xfe, 0x00, 0x00, 0xfc, 0x00, 0x00, 0x00, 0x00, 0x00,
                            0x04}));
  EXPECT_EQ(decode(*codec, encoded, g.size()), g);
  EXPECT_EQ(state, std::vector<float>(g.size(), 0.0f));
}

TEST(QsgdTest, EmptySliceEncodesToNothing) {
  auto codec = mustMake("qsgd");
  std::vector<float> state;
  EXPECT_TRUE(encode(*codec, std::vector<float>{}, state).empty());
  EXPECT_TRUE(decode(*codec, {}, 0).empty());
}

TEST(QsgdTest, Unbiased) {
  const int levels = 2;
  const size_t bucket = 16;
  auto codec = mustMake("qsgd", {{"levels", std::to_string(levels)},
                                 {"bucket", std::to_string(bucket)},
                                 {"seed", "11"}});
  const size_t n = 64;
  auto g = gaussian(n, 6);
  const int steps = 20000;
  std::vector<double> mean(n, 0.0);
  std::vector<std::byte> encoded;
  for (int t = 0; t < steps; ++t) {
    std::vector<float> state;
    encoded = encode(*codec, g, state, {2, 5, static_cast<uint64_t>(t)});
    auto d = decode(*codec, encoded, n);
    for (size_t i = 0; i < n; ++i) mean[i] += d[i] / static_cast<double>(steps);
  }
  double z_sum = 0;  // a bias shared by many elements shows here long before per element
  int random_elements = 0;
  for (size_t i = 0; i < n; ++i) {
    const double norm = normOf(encoded, i / bucket);
    const double y = std::abs(g[i]) / norm * levels;
    const double frac = y - std::floor(y);
    const double unit = norm / levels;
    const double standard_error = unit * std::sqrt(frac * (1 - frac) / steps);
    EXPECT_NEAR(mean[i], g[i], 5 * standard_error + 1e-6 * norm) << "i=" << i;
    if (standard_error > 0) {
      z_sum += (mean[i] - g[i]) / standard_error * (g[i] < 0 ? -1 : 1);
      ++random_elements;
    }
  }
  EXPECT_LT(std::abs(z_sum) / std::sqrt(random_elements), 5.0);
}

TEST(QsgdTest, DrawsFollowTheSliceIdAndSeed) { testing::expectDrawsFollowSliceIdAndSeed("qsgd"); }

TEST(QsgdTest, BadParametersAreNamed) {
  testing::expectBadParams("qsgd", {{"levels", "0"}, {"levels", "128"}, {"levels", "300"}, {"levels", "many"},
                                    {"bucket", "0"}, {"bucket", "1048577"}, {"seed", "x"}, {"error_feedback", "2"}});
  EXPECT_TRUE(makeCodec("qsgd", {{"levels", "1"}, {"bucket", "1048576"}}).ok());
}

TEST(QsgdTest, CorruptBuffersAreRejectedUntouched) {
  auto codec = mustMake("qsgd", {{"levels", "4"}, {"bucket", "4"}});
  const size_t n = 13;
  std::vector<float> state;
  const auto good = encode(*codec, gaussian(n, 1), state);
  ASSERT_EQ(good.size(), 16 + n);
  auto acc = gaussian(n, 2);
  auto expectRejected = [&](const Codec& c, const std::vector<std::byte>& bad, const char* what) {
    return testing::expectRejectedUntouched(c, bad, acc, what);
  };
  for (float norm : {std::nanf(""), std::numeric_limits<float>::infinity(), -1.0f}) {
    auto bad = good;
    setNorm(bad, 3, norm);
    expectRejected(*codec, bad, "bad norm");
  }
  for (int level : {5, -5, -128}) {
    auto bad = good;
    bad[16 + 6] = static_cast<std::byte>(level);
    EXPECT_EQ(expectRejected(*codec, bad, "bad level"),
              "qsgd: element 6 has level " + std::to_string(level) + ", outside [-4, 4]");
  }
  // The same bytes read with another bucket size have the wrong length.
  expectRejected(*mustMake("qsgd", {{"levels", "4"}, {"bucket", "8"}}), good, "other bucket");

  auto wide = mustMake("qsgd");
  std::vector<float> wide_state;
  auto bad = encode(*wide, gaussian(n, 3), wide_state);
  bad[4] = std::byte{0x80};  // -128 is outside [-127, 127]
  expectRejected(*wide, bad, "level -128");
}

TEST(QsgdTest, NonFiniteInputOrNormIsRejectedBeforeTheStateChanges) {
  auto codec = mustMake("qsgd", {{"error_feedback", "true"}, {"bucket", "2"}});
  const float big = 3e38f;  // finite, but the norm of {big, big} is not
  const float inf = std::numeric_limits<float>::infinity();
  for (const std::vector<float>& g : {std::vector<float>{1, 2, std::nanf(""), 4},
                                      std::vector<float>{1, 2, inf, 4},
                                      std::vector<float>{1, 2, big, big}}) {
    std::vector<float> state = {0.5f, 0.5f, 0.5f, 0.5f};
    std::vector<std::byte> out(codec->maxEncodedBytes(4));
    auto r = codec->encode(g, state, out, {});
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(r.status().message().rfind("qsgd: ", 0), 0u);
    EXPECT_EQ(state, std::vector<float>(4, 0.5f));
  }
}

TEST(QsgdTest, StateOnlyWithErrorFeedback) {
  EXPECT_EQ(mustMake("qsgd")->stateElements(100), 0u);
  EXPECT_EQ(mustMake("qsgd", {{"error_feedback", "true"}})->stateElements(100), 100u);
}

TEST(QsgdTest, PoolSplitWithErrorFeedbackGivesTheSameBytes) {
  testing::expectPoolSplitMatches("qsgd",
                         {{"error_feedback", "true"}, {"bucket", "1000"}, {"levels", "5"}});
}

}  // namespace
}  // namespace gcagent::compress
