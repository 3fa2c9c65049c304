#include "agent/coding/silent_codec_watch.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "compress/registry.h"

namespace gcagent::agent {
namespace {

// Runs `iterations` encodes of a constant gradient through the codec, with its residual, and
// returns the iterations at which the watch reported.
std::vector<uint64_t> reports(const char* codec_name, compress::Params params, float gradient, uint64_t iterations,
                              uint64_t loud_from = UINT64_MAX, uint64_t loud_to = 0) {
  auto codec = compress::makeCodec(codec_name, params);
  EXPECT_TRUE(codec.ok()) << codec.status().message();
  const size_t n = 1000;
  std::vector<float> input(n, gradient), state((*codec)->stateElements(n), 0.0f);
  std::vector<std::byte> out((*codec)->maxEncodedBytes(n));
  SilentCodecWatch watch;
  std::vector<uint64_t> at;
  for (uint64_t it = 0; it < iterations; ++it) {
    std::fill(input.begin(), input.end(), it >= loud_from && it < loud_to ? 1.0f : gradient);
    auto written = (*codec)->encode(input, state, out, {7, 0, it});
    EXPECT_TRUE(written.ok());
    if (watch.due(0, it) && watch.observe(**codec, input, {out.data(), *written}, {7, 0, it})) at.push_back(it);
  }
  return at;
}

TEST(SilentCodecWatchTest, ATwoBitThresholdFarAboveTheGradientsIsReportedOnceAfter64Iterations) {
  // 0.001 a step reaches the 0.5 threshold only after 500 steps: 2bit sends nothing till then.
  EXPECT_EQ(reports("2bit", {{"threshold", "0.5"}}, 0.001f, 400), (std::vector<uint64_t>{48}));
}

TEST(SilentCodecWatchTest, AThresholdNearTheGradientsIsNeverReported) {
  EXPECT_TRUE(reports("2bit", {{"threshold", "0.0005"}}, 0.001f, 400).empty());
}

TEST(SilentCodecWatchTest, AFrozenLayerSendsNothingRightly) {
  EXPECT_TRUE(reports("2bit", {{"threshold", "0.5"}}, 0.0f, 400).empty());
}

TEST(SilentCodecWatchTest, ACodecThatSendsAgainIsReportedAgainWhenItFallsSilentAgain) {
  // Silent, then gradients of 1.0 from step 100 to 200: 2bit sends 0.5 a step, so the residual
  // grows by 0.5 a step and drains by 2bit's sends until about step 300; silent again after.
  EXPECT_EQ(reports("2bit", {{"threshold", "0.5"}}, 0.001f, 400, 100, 200), (std::vector<uint64_t>{48, 352}));
}

}  // namespace
}  // namespace gcagent::agent
