// MXNet 2-bit and 1-bit golden vectors (DESIGN.md section 4), bit for bit.
#include <gtest/gtest.h>

#include <vector>

#include "tests/compress/codec_test_util.h"

namespace gcagent::compress {
namespace {

using testing::bytes;
using testing::decode;
using testing::encode;
using testing::mustMake;

const std::vector<float> kG = {0.75f, -0.5f, 0.25f,   -0.25f, 0.5f, -1.0f, 0.125f, 0.0f, 1.5f,
                               -0.75f, 0.375f, 0.25f, -0.375f, 0.0f, 0.0f,  2.0f,  0.25f};

TEST(GoldenTest, Mx2bitTwoStepsMatchMxnet) {
  auto codec = mustMake("2bit", {{"threshold", "0.5"}});
  std::vector<float> residual;
  EXPECT_EQ(encode(*codec, kG, residual), bytes({0xe0, 0xe0, 0xe0, 0x03, 0, 0, 0, 0}));
  EXPECT_EQ(residual, (std::vector<float>{.25f, 0, .25f, -.25f, 0, -.5f, .125f, 0, 1, -.25f, .375f,
                                          .25f, -.375f, 0, 0, 1.5f, .25f}));
  EXPECT_EQ(encode(*codec, kG, residual), bytes({0xee, 0xe0, 0xef, 0x83, 0xc0, 0, 0, 0}));
  EXPECT_EQ(residual, (std::vector<float>{.5f, 0, 0, 0, 0, -1, .25f, 0, 2, -.5f, .25f, 0, -.25f, 0,
                                          0, 3, 0}));
}

TEST(GoldenTest, Mx2bitDecodesToPlusMinusThreshold) {
  auto codec = mustMake("2bit", {{"threshold", "0.5"}});
  // Second-step bytes from the golden table: codes 11 -> +t, 10 -> -t, 00 -> 0.
  auto out = decode(*codec, bytes({0xee, 0xe0, 0xef, 0x83, 0xc0, 0, 0, 0}), 17);
  EXPECT_EQ(out, (std::vector<float>{.5f, -.5f, .5f, -.5f, .5f, -.5f, 0, 0, .5f, -.5f, .5f, .5f,
                                     -.5f, 0, 0, .5f, .5f}));
}

TEST(GoldenTest, Mx2bitCodeOneDecodesToZero) {
  auto codec = mustMake("2bit", {{"threshold", "0.5"}});
  auto out = decode(*codec, bytes({0x55, 0x55, 0x55, 0x55}), 16);
  EXPECT_EQ(out, std::vector<float>(16, 0.0f));
}

TEST(GoldenTest, Mx1bitStepMatchesMxnet) {
  auto codec = mustMake("1bit", {{"threshold", "0"}});
  std::vector<float> residual;
  EXPECT_EQ(encode(*codec, kG, residual), bytes({0xaa, 0xb1, 0x80, 0x00}));
  EXPECT_EQ(residual, (std::vector<float>{-.25f, .5f, -.75f, .75f, -.5f, 0, -.875f, 1, .5f, .25f,
                                          -.625f, -.75f, .625f, 1, 1, 1, -.75f}));
}

TEST(GoldenTest, Mx1bitDecodesToUnitMagnitudes) {
  auto codec = mustMake("1bit");
  auto out = decode(*codec, bytes({0xaa, 0xb1, 0x80, 0x00}), 17);
  EXPECT_EQ(out, (std::vector<float>{1, -1, 1, -1, 1, -1, 1, -1, 1, -1, 1, 1, -1, -1, -1, 1, 1}));
}

}  // namespace
}  // namespace gcagent::compress
