#include "common/status.h"

#include <gtest/gtest.h>

#include <memory>

namespace gcagent {
namespace {

Result<int> half(int v) {
  if (v % 2 != 0) return Status::invalidArgument("odd value");
  return v / 2;
}

Result<int> quarter(int v) {
  GC_ASSIGN_OR_RETURN(int h, half(v));
  GC_ASSIGN_OR_RETURN(int q, half(h));
  return q;
}

Status checkPositive(int v) {
  if (v <= 0) return Status::outOfRange("not positive");
  return {};
}

Status both(int a, int b) {
  GC_RETURN_IF_ERROR(checkPositive(a));
  GC_RETURN_IF_ERROR(checkPositive(b));
  return {};
}

TEST(StatusTest, OkByDefault) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.toString(), "ok");
}

TEST(StatusTest, CarriesCodeAndMessage) {
  Status s = Status::dataLoss("2bit: short buffer");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_EQ(s.toString(), "data_loss: 2bit: short buffer");
}

TEST(StatusTest, MacrosPropagateTheFirstError) {
  EXPECT_EQ(*quarter(8), 2);
  EXPECT_EQ(quarter(6).status().message(), "odd value");
  EXPECT_TRUE(both(1, 2).ok());
  EXPECT_EQ(both(1, -2).code(), StatusCode::kOutOfRange);
}

TEST(StatusTest, ResultHoldsMoveOnlyValues) {
  Result<std::unique_ptr<int>> r = std::make_unique<int>(5);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r.status().ok());
  std::unique_ptr<int> p = std::move(r).value();
  EXPECT_EQ(*p, 5);
}

}  // namespace
}  // namespace gcagent
