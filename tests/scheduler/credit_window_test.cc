#include "scheduler/credit_window.h"

#include <gtest/gtest.h>

namespace gcagent::scheduler {
namespace {

TEST(CreditWindow, LimitsSlicesInFlight) {
  CreditWindow w(2, 0);
  EXPECT_TRUE(w.admits(1 << 20));
  w.take(1 << 20);
  EXPECT_TRUE(w.admits(1 << 20));
  w.take(1 << 20);
  EXPECT_FALSE(w.admits(1));
  w.give(1 << 20);
  EXPECT_TRUE(w.admits(1));
  EXPECT_EQ(w.inflightSlices(), 1u);
  EXPECT_EQ(w.inflightBytes(), uint64_t{1} << 20);
}

TEST(CreditWindow, ByteBudgetLimitsToo) {
  CreditWindow w(10, 1000);
  w.take(600);
  EXPECT_TRUE(w.admits(400));
  EXPECT_FALSE(w.admits(401));
  w.take(400);
  EXPECT_FALSE(w.admits(1));
  w.give(600);
  EXPECT_TRUE(w.admits(600));
}

TEST(CreditWindow, OversizedSliceStillGoesAlone) {
  // A budget smaller than one slice must slow the link down, never stall it.
  CreditWindow w(10, 100);
  EXPECT_TRUE(w.admits(5000));
  w.take(5000);
  EXPECT_FALSE(w.admits(1));
  w.give(5000);
  EXPECT_TRUE(w.admits(5000));
}

}  // namespace
}  // namespace gcagent::scheduler
