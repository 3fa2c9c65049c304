#include "common/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <set>
#include <vector>

namespace gcagent {
namespace {

TEST(ThreadPoolTest, CoversTheRangeExactlyOnceWithAlignedChunks) {
  ThreadPool pool(4);
  EXPECT_EQ(pool.size(), 4u);
  for (size_t n : {size_t{1}, size_t{31}, size_t{1000}, size_t{100003}}) {
    std::vector<int> hits(n, 0);
    std::mutex mu;
    std::vector<std::pair<size_t, size_t>> chunks;
    pool.parallelFor(n, 32, 100, [&](size_t b, size_t e) {
      for (size_t i = b; i < e; ++i) hits[i]++;
      std::lock_guard lock(mu);
      chunks.emplace_back(b, e);
    });
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(hits[i], 1) << "n=" << n << " i=" << i;
    EXPECT_LE(chunks.size(), 4u);
    for (auto [b, e] : chunks) {
      EXPECT_EQ(b % 32, 0u);
      if (chunks.size() > 1) {
        EXPECT_GE(e - b, 32u);
      }
    }
  }
}

TEST(ThreadPoolTest, SmallLoopsRunInline) {
  ThreadPool pool(4);
  int calls = 0;
  pool.parallelFor(50, 1, 100, [&](size_t b, size_t e) {
    ++calls;
    EXPECT_EQ(b, 0u);
    EXPECT_EQ(e, 50u);
  });
  EXPECT_EQ(calls, 1);
  pool.parallelFor(0, 1, 1, [&](size_t, size_t) { ++calls; });
  EXPECT_EQ(calls, 1);
}

TEST(ThreadPoolTest, UsesSeveralThreadsAndSurvivesManyRounds) {
  ThreadPool pool(3);
  std::atomic<long> sum{0};
  for (int round = 0; round < 200; ++round)
    pool.parallelFor(3000, 1, 10, [&](size_t b, size_t e) {
      long s = 0;
      for (size_t i = b; i < e; ++i) s += static_cast<long>(i);
      sum += s;
    });
  EXPECT_EQ(sum.load(), 200L * (2999L * 3000L / 2));
}

}  // namespace
}  // namespace gcagent
