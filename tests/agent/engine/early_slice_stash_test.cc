#include "agent/engine/early_slice_stash.h"

#include <gtest/gtest.h>

#include <vector>

namespace gcagent::agent {
namespace {

transport::Message message(transport::Rank from, const std::vector<std::byte>& header,
                           const std::vector<std::byte>& payload) {
  return {from, header, payload};
}

TEST(EarlySliceStashTest, KeepsCopiesWithinItsBudgetAndHandsThemBackInOrder) {
  EarlySliceStash stash(30);
  std::vector<std::byte> header(4, std::byte{1}), payload(10, std::byte{2});
  ASSERT_TRUE(stash.keep(7, message(1, header, payload)));
  payload.assign(10, std::byte{3});  // the stash holds its own copy
  ASSERT_TRUE(stash.keep(7, message(2, header, payload)));
  EXPECT_EQ(stash.bytes(), 28u);
  EXPECT_FALSE(stash.keep(8, message(3, header, payload)));  // 14 more would pass 30: refused, nothing kept
  EXPECT_TRUE(stash.take(8).empty());
  auto slices = stash.take(7);
  ASSERT_EQ(slices.size(), 2u);
  EXPECT_EQ(slices[0].from, 1u);
  EXPECT_EQ(slices[0].payload, std::vector<std::byte>(10, std::byte{2}));
  EXPECT_EQ(slices[1].from, 2u);
  EXPECT_EQ(slices[1].payload, std::vector<std::byte>(10, std::byte{3}));
  EXPECT_EQ(stash.bytes(), 0u);
  EXPECT_TRUE(stash.take(7).empty());
}

}  // namespace
}  // namespace gcagent::agent
