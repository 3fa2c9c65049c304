// dgc: momentum correction and momentum factor masking by hand, the count bounds of the
// sampled threshold, and its 0.8x relaxation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "compress/bytes.h"
#include "compress/dgc/dgc_math.h"
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

using Floats = std::vector<float>;

TEST(DgcTest, MomentumCorrectionAndMaskingByHand) {
  // k = 1 of 4, m = 0.5, the whole slice read: every step sends the largest |v|.
  auto codec = mustMake("dgc", {{"ratio", "0.25"}, {"momentum", "0.5"}, {"sample", "1"}});
  ASSERT_EQ(codec->stateElements(4), 8u);
  Floats state;
  auto v = [&] { return Floats(state.begin(), state.begin() + 4); };
  auto u = [&] { return Floats(state.begin() + 4, state.end()); };

  // u = g = v; send v[2]; u[2] = v[2] = 0.
  EXPECT_EQ(encode(*codec, Floats{1, 0.5f, -2, 0.25f}, state), pairs({2}, {-2}));
  EXPECT_EQ(u(), (Floats{1, 0.5f, 0, 0.25f}));
  EXPECT_EQ(v(), (Floats{1, 0.5f, 0, 0.25f}));
  // u = 0.5 u + g = [.5, 1.25, .5, .125]; v += u = [1.5, 1.75, .5, .375]; send v[1].
  EXPECT_EQ(encode(*codec, Floats{0, 1, 0.5f, 0}, state), pairs({1}, {1.75f}));
  EXPECT_EQ(u(), (Floats{0.5f, 0, 0.5f, 0.125f}));
  EXPECT_EQ(v(), (Floats{1.5f, 0, 0.5f, 0.375f}));
  // No gradient: momentum alone keeps v growing. u = [.25, 0, .25, .0625];
  // v = [1.75, 0, .75, .4375]; send v[0].
  EXPECT_EQ(encode(*codec, Floats{0, 0, 0, 0}, state), pairs({0}, {1.75f}));
  EXPECT_EQ(u(), (Floats{0, 0, 0.25f, 0.0625f}));
  EXPECT_EQ(v(), (Floats{0, 0, 0.75f, 0.4375f}));
  // The residual is v.
  const auto residual = codec->residual(state, 4);
  EXPECT_EQ(Floats(residual.begin(), residual.end()), v());
  EXPECT_TRUE(codec->residual(Floats(7), 4).empty());
}

TEST(DgcTest, CountsStayWithinBoundsAtEverySize) {
  const std::vector<std::pair<Params, double>> configs = {
      {{}, 0.001}, {{{"ratio", "0.01"}, {"momentum", "0.9"}, {"sample", "0.001"}}, 0.01}};
  for (const auto& [params, ratio] : configs) {
    auto codec = mustMake("dgc", params);
    for (size_t n : kSizes) {
      const size_t k = n == 0 ? 0 : std::max<size_t>(1, static_cast<size_t>(std::ceil(ratio * n)));
      Floats state(2 * n, 0.0f);
      for (uint64_t step = 0; step < 3; ++step) {
        // What the state should be before masking.
        Floats v(state.begin(), state.begin() + n), u(state.begin() + n, state.end());
        const auto g = gaussian(n, 70 + 10 * n + step);
        for (size_t i = 0; i < n; ++i) dgc::momentumStep(g[i], u[i], v[i], 0.9f);

        const auto bytes = encode(*codec, g, state, {2, 0, step});
        ASSERT_LE(bytes.size(), codec->maxEncodedBytes(n));
        const auto idx = indicesOf(bytes);
        EXPECT_LE(idx.size(), k + 3 * k / 10) << "n=" << n;
        EXPECT_GE(idx.size(), std::min<size_t>(n, 1)) << "n=" << n;
        if (n <= 256) {
          EXPECT_EQ(idx.size(), k) << "read whole, the cut is exact; n=" << n;
        }
        ASSERT_TRUE(std::is_sorted(idx.begin(), idx.end()));

        const auto decoded = decode(*codec, bytes, n);
        float least_sent = INFINITY, most_kept = 0;
        for (uint32_t i : idx) {
          ASSERT_EQ(decoded[i], v[i]);
          least_sent = std::min(least_sent, std::abs(v[i]));
          v[i] = u[i] = 0;  // masking
        }
        for (size_t i = 0; i < n; ++i) most_kept = std::max(most_kept, std::abs(v[i]));
        EXPECT_GE(least_sent, most_kept) << "n=" << n;
        ASSERT_EQ(Floats(state.begin(), state.begin() + n), v) << "n=" << n;
        ASSERT_EQ(Floats(state.begin() + n, state.end()), u) << "n=" << n;
      }
    }
  }
}

TEST(DgcTest, TooManyPassingAreCutToTheExactTopK) {
  // Half the slice at one magnitude: the sampled cut lets 5000 through, far over 1.3k.
  auto codec = mustMake("dgc", {{"ratio", "0.01"}, {"momentum", "0"}});
  Floats g(10000, 0.5f);
  for (size_t i = 0; i < g.size(); i += 2) g[i] = -1.0f;
  Floats state;
  const auto idx = indicesOf(encode(*codec, g, state));
  ASSERT_EQ(idx.size(), 100u);
  for (size_t j = 0; j < idx.size(); ++j) EXPECT_EQ(idx[j], 2 * j);
}

TEST(DgcSelectTest, RelaxLowersByFactorUntilEnoughPass) {
  const Floats x = {10, -7, 5, 1};
  float expected = 20;
  for (int t = 0; t < 7; ++t) expected *= 0.8f;  // 20 * 0.8^7 = 4.19: 3 pass
  EXPECT_EQ(sparse::relaxThreshold(x, sparse::magnitudeKey(20), 3, 0.8f, 10),
            sparse::magnitudeKey(expected));
  // Enough never pass: stops after `tries` lowerings.
  float exhausted = 20;
  for (int t = 0; t < 10; ++t) exhausted *= 0.8f;
  EXPECT_EQ(sparse::relaxThreshold(x, sparse::magnitudeKey(20), 5, 0.8f, 10),
            sparse::magnitudeKey(exhausted));
  // Already enough: unchanged.
  EXPECT_EQ(sparse::relaxThreshold(x, sparse::magnitudeKey(6), 2, 0.8f, 10),
            sparse::magnitudeKey(6));
}

TEST(DgcTest, BadParametersNameTheCodecAndKey) {
  testing::expectBadParams("dgc", {{"momentum", "1"}, {"momentum", "-0.1"}, {"ratio", "0"}, {"ratio", "2"}, {"sample", "0"}});
}

TEST(DgcTest, CorruptBuffersLeaveTheAccumulatorUntouched) {
  auto codec = mustMake("dgc", {{"ratio", "0.2"}});  // k = 2 of 10: at most floor(2.6) pairs
  const Floats before(10, 1.0f);
  const std::vector<std::vector<std::byte>> bad = {
      pairs({1, 10}, {1, 1}),       // index out of range
      pairs({4, 4}, {1, 1}),        // duplicate index
      pairs({1, 2, 3}, {1, 1, 1}),  // more than 1.3k pairs
  };
  for (const auto& bytes : bad) {
    auto acc = before;
    Status s = codec->decodeAdd(bytes, acc, {});
    EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s.toString();
    EXPECT_EQ(s.message().rfind("dgc:", 0), 0u) << s.message();
    EXPECT_EQ(acc, before);
  }
}

}  // namespace
}  // namespace gcagent::compress
