#include "scheduler/slicing.h"

#include <gtest/gtest.h>

#include <vector>

namespace gcagent::scheduler {
namespace {

TEST(SliceGeometry, CutsAtTheSliceSize) {
  const auto g = SliceGeometry::of(100001, 40000, 1);
  EXPECT_EQ(g.count(), 3u);
  EXPECT_EQ(g.begin(2), 80000u);
  EXPECT_EQ(g.end(2), 100001u);
  EXPECT_EQ(g.size(0), 40000u);
  EXPECT_EQ(g.size(2), 20001u);
}

TEST(SliceGeometry, PartitionsSplitSmallTensorsOnly) {
  EXPECT_EQ(SliceGeometry::of(1000, 40000, 4).slice_elements, 250u);
  EXPECT_EQ(SliceGeometry::of(1001, 40000, 4).count(), 4u);
  EXPECT_EQ(SliceGeometry::of(1000000, 40000, 4).slice_elements, 40000u);
  EXPECT_EQ(SliceGeometry::of(3, 40000, 4).count(), 3u);  // never an empty slice
  EXPECT_EQ(SliceGeometry::of(1, 40000, 0).count(), 1u);
}

TEST(SliceGeometry, SlicesTileTheTensor) {
  for (uint64_t n : {1ull, 7ull, 39999ull, 40000ull, 40001ull, 1234567ull}) {
    for (uint32_t k : {1u, 2u, 3u, 4u}) {
      const auto g = SliceGeometry::of(n, 40000, k);
      uint64_t next = 0;
      for (uint32_t s = 0; s < g.count(); ++s) {
        EXPECT_EQ(g.begin(s), next);
        EXPECT_GT(g.size(s), 0u);
        next = g.end(s);
      }
      EXPECT_EQ(next, n) << n << " " << k;
    }
  }
}

TEST(Owners, RoundRobinOverTheNodes) {
  // Consecutive slices of one key go to consecutive nodes, so a tensor of N slices
  // touches every node once.
  for (uint64_t key : {0ull, 1ull, 99ull, 0xdeadbeefull}) {
    std::vector<int> hits(4, 0);
    const uint32_t first = ownerOf(key, 0, 4);
    for (uint32_t s = 0; s < 4; ++s) {
      EXPECT_EQ(ownerOf(key, s, 4), (first + s) % 4);
      ++hits[ownerOf(key, s, 4)];
    }
    EXPECT_EQ(hits, (std::vector<int>{1, 1, 1, 1}));
  }
}

TEST(Owners, SmallTensorsSpreadOverNodes) {
  std::vector<int> hits(4, 0);
  for (uint64_t key = 0; key < 400; ++key) ++hits[ownerOf(key, 0, 4)];
  for (int h : hits) EXPECT_GT(h, 70);
}

}  // namespace
}  // namespace gcagent::scheduler
