// dgc: momentum correction and momentum factor masking by hand, the count bounds of the
// sampled threshold, and its 0.8x relaxation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "compress/bytes.h"
#include "compress/compll/selection.h"
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
  auto codec = mustMake("dgc", {{"ratio", "0.25"}, {"momentum", "0.5"}, {"sample", "1"}, {"warmup_steps", "0"}});
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
      {{{"momentum", "0.9"}, {"warmup_steps", "0"}}, 0.001},
      {{{"ratio", "0.01"}, {"momentum", "0.9"}, {"sample", "0.001"}, {"warmup_steps", "0"}}, 0.01}};
  for (const auto& [params, ratio] : configs) {
    auto codec = mustMake("dgc", params);
    for (size_t n : kSizes) {
      const size_t k = n == 0 ? 0 : std::max<size_t>(1, static_cast<size_t>(std::ceil(ratio * n)));
      Floats state(2 * n, 0.0f);
      for (uint64_t step = 0; step < 3; ++step) {
        // What the state should be before masking.
        Floats v(state.begin(), state.begin() + n), u(state.begin() + n, state.end());
        const auto g = gaussian(n, 70 + 10 * n + step);
        for (size_t i = 0; i < n; ++i) v[i] += u[i] = 0.9f * u[i] + g[i];  // two roundings (-ffp-contract=off)

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
  auto codec = mustMake("dgc", {{"ratio", "0.01"}, {"momentum", "0"}, {"warmup_steps", "0"}});
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

// ---- The sparsity warm-up: kept(t) = 0.25 * (ratio / 0.25)^(t / warmup_steps) for the first
// warmup_steps encodes of a slice, ratio after. The whole slice is read (sample 1) and the
// gradients are distinct, so each step sends exactly k = ceil(kept * n) pairs.

// Encodes `steps` Gaussian gradients into one state; returns each step's pair count, checking
// that the pairs sent are the largest |v| (momentum 0: v before = v after + what was sent).
std::vector<size_t> warmupCounts(const Codec& codec, size_t n, int steps, Floats& state) {
  std::vector<size_t> counts;
  for (int step = 0; step < steps; ++step) {
    Floats v_before(state.empty() ? Floats(n, 0.0f) : Floats(state.begin(), state.begin() + n));
    const auto g = gaussian(n, 500 + step);
    for (size_t i = 0; i < n; ++i) v_before[i] += g[i];
    const auto bytes = encode(codec, g, state, {1, 0, static_cast<uint64_t>(step)});
    const auto idx = indicesOf(bytes);
    counts.push_back(idx.size());
    Floats magnitudes(n);
    for (size_t i = 0; i < n; ++i) magnitudes[i] = std::abs(v_before[i]);
    std::sort(magnitudes.begin(), magnitudes.end(), std::greater<>());
    for (uint32_t i : idx) EXPECT_GE(std::abs(v_before[i]), magnitudes[idx.size() - 1]) << "step " << step;
  }
  return counts;
}

TEST(DgcWarmupTest, DgcsScheduleFourTimesSparserEachStep) {
  // ratio 0.25 / 256 over 4 steps: q = 1/4, DGC's 75%, 93.75%, 98.4375%, 99.609%, then 99.902%:
  // 1024, 256, 64, 16 of 4096, then ceil(4096 / 1024) = 4 for good.
  auto codec = mustMake("dgc", {{"ratio", "0.0009765625"}, {"momentum", "0"}, {"sample", "1"}, {"warmup_steps", "4"}});
  ASSERT_EQ(codec->stateElements(4096), 2u * 4096 + 1);  // v, u, the encode count
  Floats state;
  EXPECT_EQ(warmupCounts(*codec, 4096, 7, state), (std::vector<size_t>{1024, 256, 64, 16, 4, 4, 4}));
  EXPECT_EQ(state[2 * 4096], 4.0f) << "the count stops at warmup_steps";
  // A zeroed state (a new slice, or a reset one) warms up again.
  Floats fresh;
  EXPECT_EQ(warmupCounts(*codec, 4096, 2, fresh), (std::vector<size_t>{1024, 256}));
}

TEST(DgcWarmupTest, CountsFollowTheFormulaBetweenPowers) {
  // 0.25 * 0.004^(t/4) of 10000: 2500; 628.72 -> 629; 158.11 -> 159; 39.76 -> 40; then 10.
  auto codec = mustMake("dgc", {{"ratio", "0.001"}, {"momentum", "0"}, {"sample", "1"}, {"warmup_steps", "4"}});
  Floats state;
  EXPECT_EQ(warmupCounts(*codec, 10000, 6, state), (std::vector<size_t>{2500, 629, 159, 40, 10, 10}));
  // The bound covers the first step: at most floor(1.3 * 2500) pairs.
  EXPECT_EQ(codec->maxEncodedBytes(10000), sparse::bytesFor(3250));
}

TEST(DgcWarmupTest, TheDefaultWarmsUpOverFiftyEncodes) {
  // ratio 0.001, 50 steps: q = 0.004^(1/50) = 0.895..; of 100000 elements, k(0) = 25000,
  // k(1) = ceil(22386.24) = 22387, k(10) = ceil(25000 * 0.004^0.2) = ceil(8286.1) = 8287,
  // k(25) = ceil(25000 * 0.004^0.5) = ceil(1581.14) = 1582, k(50) = 100.
  auto codec = mustMake("dgc", {{"sample", "1"}});
  std::vector<size_t> counts;
  const size_t n = 100000;
  Floats state;
  for (int step = 0; step <= 51; ++step) counts.push_back(indicesOf(encode(*codec, gaussian(n, step), state)).size());
  EXPECT_EQ(counts[0], 25000u);
  EXPECT_EQ(counts[1], 22387u);
  EXPECT_EQ(counts[10], 8287u);
  EXPECT_EQ(counts[25], 1582u);
  EXPECT_EQ(counts[49], 112u);  // 25000 * 0.004^0.98 = 111.68
  EXPECT_EQ(counts[50], 100u);
  EXPECT_EQ(counts[51], 100u);
  EXPECT_EQ(state[2 * n], 50.0f);
}

TEST(DgcWarmupTest, SampledCutsStayWithinTheStepsBounds) {
  // A sampled cut (1000 of 100000 read): each step sends between 1 and floor(1.3 k(t)).
  auto codec = mustMake("dgc", {{"ratio", "0.01"}, {"momentum", "0.9"}, {"warmup_steps", "2"}});
  const size_t n = 100000;
  const std::vector<size_t> k = {25000, 5000, 1000, 1000};  // 0.25 * 0.04^(t/2)
  Floats state;
  for (size_t step = 0; step < k.size(); ++step) {
    const auto bytes = encode(*codec, gaussian(n, 900 + step), state, {4, 1, step});
    ASSERT_LE(bytes.size(), codec->maxEncodedBytes(n));
    const size_t count = indicesOf(bytes).size();
    EXPECT_GE(count, 1u) << "step " << step;
    EXPECT_LE(count, k[step] + 3 * k[step] / 10) << "step " << step;
    EXPECT_GE(count, k[step] / 2) << "step " << step;  // the cut is lowered while under 0.8k
  }
}

TEST(DgcWarmupTest, NoWarmupWhenZeroOrWhenTheRatioIsAboveTheStart) {
  for (const Params& params : {Params{{"ratio", "0.01"}, {"sample", "1"}, {"warmup_steps", "0"}},
                               Params{{"ratio", "0.01"}, {"sample", "1"}, {"warmup_steps", "5"}, {"error_feedback", "false"}}}) {
    auto codec = mustMake("dgc", params);
    EXPECT_EQ(codec->maxEncodedBytes(1000), sparse::bytesFor(13));
    Floats state;
    for (int step = 0; step < 3; ++step) EXPECT_EQ(indicesOf(encode(*codec, gaussian(1000, step), state)).size(), 10u);
  }
  EXPECT_EQ(mustMake("dgc", {{"warmup_steps", "0"}})->stateElements(10), 20u);
  // Already denser than 25%: ratio from the first step.
  auto dense = mustMake("dgc", {{"ratio", "0.5"}, {"sample", "1"}, {"warmup_steps", "5"}});
  Floats state;
  EXPECT_EQ(indicesOf(encode(*dense, gaussian(1000, 1), state)).size(), 500u);
  EXPECT_EQ(dense->maxEncodedBytes(1000), sparse::bytesFor(650));
}

TEST(DgcWarmupTest, ScheduleMathByHand) {
  const double q = compll::warmupFactor(0.0009765625, 4);
  EXPECT_EQ(q, 0.25);
  EXPECT_EQ(compll::keptFraction(0.0009765625, q, 0, 4), 0.25);
  EXPECT_EQ(compll::keptFraction(0.0009765625, q, 3, 4), 0.00390625);
  EXPECT_EQ(compll::keptFraction(0.0009765625, q, 4, 4), 0.0009765625);
  EXPECT_EQ(compll::keptFraction(0.0009765625, q, 1000, 4), 0.0009765625);
  EXPECT_EQ(compll::warmupFactor(0.001, 0), 1.0);
  EXPECT_EQ(compll::keptFraction(0.001, 1.0, 0, 0), 0.001);
  EXPECT_EQ(compll::mostKept(0.001, 50), 0.25);
  EXPECT_EQ(compll::mostKept(0.001, 0), 0.001);
  EXPECT_EQ(compll::mostKept(0.5, 50), 0.5);
}

TEST(DgcTest, BadParametersNameTheCodecAndKey) {
  testing::expectBadParams("dgc", {{"momentum", "1"}, {"momentum", "-0.1"}, {"ratio", "0"}, {"ratio", "2"}, {"sample", "0"},
                                   {"warmup_steps", "-1"}, {"warmup_steps", "1000001"}, {"warmup_steps", "1.5"},
                                   {"warmup_steps", "many"}});
}

TEST(DgcTest, CorruptBuffersLeaveTheAccumulatorUntouched) {
  // k = 2 of 10: at most floor(2.6) pairs
  auto codec = mustMake("dgc", {{"ratio", "0.2"}, {"warmup_steps", "0"}});
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
