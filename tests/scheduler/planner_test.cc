#include "scheduler/planner.h"

#include <gtest/gtest.h>

#include "compress/registry.h"

namespace gcagent::scheduler {
namespace {

std::unique_ptr<compress::Codec> codec(const std::string& name) {
  auto c = compress::makeCodec({name, {}}, {});
  EXPECT_TRUE(c.ok()) << c.status().message();
  return std::move(c).value();
}

TEST(Selection, ParsesNamesAndRejectsOthers) {
  EXPECT_EQ(*parseSelection("size"), Selection::kSize);
  EXPECT_EQ(*parseSelection("auto"), Selection::kAuto);
  auto bad = parseSelection("always");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "unknown selection 'always' (size or auto)");
}

TEST(Planner, SizeModeComparesWithMinElements) {
  Planner p({Selection::kSize, 262144, 4, 40000, 5});
  auto c = codec("2bit");
  EXPECT_FALSE(p.decide(262143, *c).compress);
  EXPECT_TRUE(p.decide(262144, *c).compress);
  EXPECT_EQ(p.decide(1000, *c).partitions, 1u);
  EXPECT_FALSE(p.decide(1 << 30, *codec("none")).compress);
}

TEST(Planner, AutoPartitionsComeFromTheReferenceModel) {
  Planner a({Selection::kAuto, 0, 4, 40000, 5});
  Planner b({Selection::kAuto, 0, 4, 40000, 5});
  for (uint64_t n : {100ull, 5000ull, 100000ull, 10000000ull}) {
    EXPECT_EQ(a.partitions(n), planReduction(referenceCosts(), static_cast<double>(n), 4).partitions);
    EXPECT_EQ(a.partitions(n), b.partitions(n));
  }
}

// The codec's speed pinned at 1 ns per element to encode and to decode, over the calibration
// the first plan makes on this machine (faded out by the newer samples): the decision must not
// depend on how fast this build's codec runs (an AddressSanitizer build under load once made
// 2bit too slow to pay off even over the slow link).
void pinCodecSpeed(Planner& p, const compress::Codec& c) {
  (void)p.decide(1, c);
  for (int i = 0; i < 4000; ++i) {
    const uint64_t n = i % 2 ? 16384 : 262144;
    p.recordEncode(c.name(), n, n / 4, static_cast<double>(n) * 1e-9);
    p.recordDecode(c.name(), n / 4, static_cast<double>(n) * 1e-9);
  }
}

TEST(Planner, AutoCompressesOverASlowLinkNotOverAFastOne) {
  auto c = codec("2bit");
  // A link of ~100 MB/s (25M fp32 elements/s) with 50 us per message.
  Planner slow({Selection::kAuto, 0, 4, 40000, 0});
  pinCodecSpeed(slow, *c);
  for (int i = 0; i < 64; ++i) {
    const uint64_t bytes = i % 2 ? 16000 : 160000;
    slow.recordWire(bytes, 5e-5 + bytes / 1e8);
  }
  ASSERT_TRUE(slow.maybeRefit(Planner::Clock::now()));
  EXPECT_TRUE(slow.decide(25'000'000, *c).compress) << slow.decide(25'000'000, *c).describe();

  // A link of ~1 TB/s: nothing is worth compressing.
  Planner fast({Selection::kAuto, 0, 4, 40000, 0});
  pinCodecSpeed(fast, *c);
  for (int i = 0; i < 64; ++i) {
    const uint64_t bytes = i % 2 ? 16000 : 160000;
    fast.recordWire(bytes, 1e-6 + bytes / 1e12);
  }
  ASSERT_TRUE(fast.maybeRefit(Planner::Clock::now()));
  EXPECT_FALSE(fast.decide(25'000'000, *c).compress) << fast.decide(25'000'000, *c).describe();
  EXPECT_EQ(fast.epoch(), 1u);
}

TEST(Planner, CalibrationFitsTheCodecFromItsOwnRuns) {
  Planner p({Selection::kAuto, 0, 4, 40000, 0});
  auto c = codec("2bit");
  p.decide(1000000, *c);  // first plan of 2bit calibrates it
  const StepCosts costs = p.costs("2bit");
  EXPECT_GT(costs.encode.w, 0);
  EXPECT_NEAR(costs.ratio, 1.0 / 16, 0.01);  // 2 bits of 32, plus a small header
}

TEST(Planner, FirstRefitDoesNotWaitWhenTheClockIsNearItsEpoch) {
  // A machine booted a second ago: steady_clock reads its epoch plus one second.
  Planner p({Selection::kAuto, 0, 4, 40000, 3600});
  const auto booted = Planner::Clock::time_point{} + std::chrono::seconds(1);
  EXPECT_TRUE(p.maybeRefit(booted));
  EXPECT_EQ(p.epoch(), 1u);
  EXPECT_FALSE(p.maybeRefit(booted + std::chrono::seconds(3599)));
  EXPECT_TRUE(p.maybeRefit(booted + std::chrono::seconds(3600)));
  EXPECT_EQ(p.epoch(), 2u);
}

TEST(Planner, RefitWaitsForTheInterval) {
  Planner p({Selection::kAuto, 0, 4, 40000, 60});
  const auto now = Planner::Clock::now();
  EXPECT_TRUE(p.maybeRefit(now));
  EXPECT_FALSE(p.maybeRefit(now + std::chrono::seconds(1)));
  EXPECT_TRUE(p.maybeRefit(now + std::chrono::seconds(61)));
  Planner size({Selection::kSize, 0, 4, 40000, 0});
  EXPECT_FALSE(size.maybeRefit(now));
}

}  // namespace
}  // namespace gcagent::scheduler
