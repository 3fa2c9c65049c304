// The element-wise passes, against plain float arithmetic written out here.
#include "agent/coding/slice_math.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

namespace gcagent::agent {
namespace {

TEST(SliceMathTest, AveragesAreDivisionsOfTheSum) {
  std::vector<float> acc = {1.0f, -2.5f, 3.0f, 0.1f}, in = {0.5f, 0.5f, -3.0f, 0.2f};
  addAndDivide(acc.data(), in.data(), acc.size(), 3.0f);
  const std::vector<float> want = {1.5f / 3.0f, -2.0f / 3.0f, 0.0f / 3.0f, (0.1f + 0.2f) / 3.0f};
  for (size_t i = 0; i < acc.size(); ++i) EXPECT_EQ(std::bit_cast<uint32_t>(acc[i]), std::bit_cast<uint32_t>(want[i]));
}

TEST(SliceMathTest, ExactReciprocalsAreThePowersOfTwo) {
  for (float d : {1.0f, 2.0f, 4.0f, 8.0f, 1024.0f, 0x1p126f, 0.5f}) EXPECT_TRUE(exactReciprocal(d)) << d;
  for (float d : {0.0f, -4.0f, 3.0f, 6.0f, 12.0f, 0x1p127f, std::numeric_limits<float>::infinity(),
                  std::numeric_limits<float>::quiet_NaN()})
    EXPECT_FALSE(exactReciprocal(d)) << d;
}

// The reason the node may scale by the reciprocal instead of dividing: for the divisors it
// accepts, every float (subnormals, signed zeros and extremes included) comes out the same.
TEST(SliceMathTest, ScalingByAnExactReciprocalIsDivisionBitForBit) {
  std::mt19937 rng(7);
  std::vector<float> xs = {0.0f, -0.0f, std::numeric_limits<float>::denorm_min(), -std::numeric_limits<float>::min(),
                           std::numeric_limits<float>::max(), 3.0e-39f, 1.0f / 3.0f};
  for (int i = 0; i < 100000; ++i) xs.push_back(std::bit_cast<float>(static_cast<uint32_t>(rng())));
  for (float d : {2.0f, 4.0f, 8.0f, 64.0f}) {
    ASSERT_TRUE(exactReciprocal(d));
    const float scale = 1.0f / d;
    for (float x : xs) {
      if (std::isnan(x)) continue;
      ASSERT_EQ(std::bit_cast<uint32_t>(x * scale), std::bit_cast<uint32_t>(x / d)) << x << " / " << d;
    }
  }
  // Where it would not be: a third is not a power of two.
  volatile float five = 5.0f, third = 1.0f / 3.0f;  // volatile: computed here, not folded
  EXPECT_NE(std::bit_cast<uint32_t>(five * third), std::bit_cast<uint32_t>(five / 3.0f));
}

}  // namespace
}  // namespace gcagent::agent
