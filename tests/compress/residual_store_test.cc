#include "compress/residual_store.h"

#include <gtest/gtest.h>

namespace gcagent::compress {
namespace {

TEST(ResidualStoreTest, CreatesZeroedStateOnFirstUseAndKeepsIt) {
  ResidualStore store;
  auto s = store.get(1, 0, 8);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->size(), 8u);
  for (float v : *s) EXPECT_EQ(v, 0.0f);
  (*s)[3] = 2.5f;
  auto again = store.get(1, 0, 8);
  EXPECT_EQ((*again)[3], 2.5f);
  EXPECT_EQ(store.bytes(), 32u);
  EXPECT_EQ(store.slices(), 1u);
}

TEST(ResidualStoreTest, SlicesAndKeysAreIndependent) {
  ResidualStore store;
  (*store.get(1, 0, 4))[0] = 1;
  (*store.get(1, 1, 4))[0] = 2;
  (*store.get(2, 0, 4))[0] = 3;
  EXPECT_EQ((*store.get(1, 0, 4))[0], 1);
  EXPECT_EQ((*store.get(1, 1, 4))[0], 2);
  EXPECT_EQ((*store.get(2, 0, 4))[0], 3);
  EXPECT_EQ(store.bytes(), 48u);
}

TEST(ResidualStoreTest, ShapeChangeResetsToZeros) {
  ResidualStore store;
  (*store.get(1, 0, 4))[0] = 1;
  auto s = store.get(1, 0, 6);
  ASSERT_TRUE(s.ok());
  for (float v : *s) EXPECT_EQ(v, 0.0f);
  EXPECT_EQ(store.resets(), 1u);
  EXPECT_EQ(store.bytes(), 24u);
  auto shrunk = store.get(1, 0, 2);
  EXPECT_EQ(shrunk->size(), 2u);
  EXPECT_EQ(store.bytes(), 8u);
}

TEST(ResidualStoreTest, EraseAndClearReleaseMemory) {
  ResidualStore store;
  ASSERT_TRUE(store.get(1, 0, 10).ok());
  ASSERT_TRUE(store.get(1, 1, 10).ok());
  ASSERT_TRUE(store.get(2, 0, 5).ok());
  store.erase(1);
  EXPECT_EQ(store.bytes(), 20u);
  EXPECT_EQ(store.slices(), 1u);
  store.erase(42);
  store.clear();
  EXPECT_EQ(store.bytes(), 0u);
  EXPECT_EQ(store.slices(), 0u);
}

TEST(ResidualStoreTest, BudgetIsEnforcedWithAClearError) {
  ResidualStore store(100);
  ASSERT_TRUE(store.get(1, 0, 20).ok());  // 80 bytes
  auto over = store.get(1, 1, 10);        // 40 more
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(over.status().message(),
            "residual store: key 1 slice 1 needs 40 bytes, but 80 of the 100-byte budget are in use");
  EXPECT_EQ(store.bytes(), 80u);
  EXPECT_EQ(store.slices(), 1u);
  ASSERT_TRUE(store.get(1, 1, 5).ok());  // 20 more fit exactly
  EXPECT_EQ(store.bytes(), 100u);
}

TEST(ResidualStoreTest, ErasingOneSliceFreesItsBytesAndLeavesTheOthers) {
  ResidualStore store;
  (*store.get(1, 0, 10))[3] = 2.0f;
  (*store.get(1, 1, 20))[4] = 5.0f;
  store.erase(1, 0);
  EXPECT_TRUE(store.find(1, 0).empty());
  EXPECT_EQ(store.bytes(), 20 * sizeof(float));
  EXPECT_EQ(store.find(1, 1)[4], 5.0f);
  EXPECT_EQ((*store.get(1, 0, 10))[3], 0.0f);  // back from zeros
  store.erase(1, 1);
  store.erase(1, 0);
  store.erase(1, 7);  // absent: nothing happens
  EXPECT_EQ(store.bytes(), 0u);
  EXPECT_EQ(store.slices(), 0u);
}

}  // namespace
}  // namespace gcagent::compress
