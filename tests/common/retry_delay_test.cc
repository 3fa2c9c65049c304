#include "common/retry_delay.h"

#include <gtest/gtest.h>

namespace gcagent {
namespace {

using std::chrono::milliseconds;

TEST(RetryDelay, DoublesUpToTheMostAndStartsOverAfterASuccess) {
  RetryDelay delay(milliseconds(10), milliseconds(50));
  EXPECT_FALSE(delay.failing());
  EXPECT_EQ(delay.next(), milliseconds(10));
  EXPECT_TRUE(delay.failing());
  EXPECT_EQ(delay.next(), milliseconds(20));
  EXPECT_EQ(delay.next(), milliseconds(40));
  EXPECT_EQ(delay.next(), milliseconds(50));
  EXPECT_EQ(delay.next(), milliseconds(50));
  EXPECT_TRUE(delay.succeeded());   // ended a streak
  EXPECT_FALSE(delay.succeeded());  // nothing to end
  EXPECT_EQ(delay.next(), milliseconds(10));
}

}  // namespace
}  // namespace gcagent
