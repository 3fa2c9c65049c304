// The level and subsystem filters run before any argument is formatted.
#include "common/log.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <ostream>

namespace gcagent::log {
namespace {

// Set before main, before the first log call reads them.
const bool kEnvSet = [] {
  ::setenv("GCAGENT_LOG_LEVEL", "warn", 1);
  ::setenv("GCAGENT_LOG_SUBSYS", "agent,metrics", 1);
  return true;
}();

int formatted = 0;
struct CountsFormatting {};
std::ostream& operator<<(std::ostream& out, CountsFormatting) {
  ++formatted;
  return out << "x";
}

TEST(Log, LevelAndSubsystemAreCheckedBeforeFormatting) {
  ASSERT_TRUE(kEnvSet);
  formatted = 0;
  GC_LOG(kInfo, "agent", "below the level ", CountsFormatting{});
  GC_LOG(kDebug, "metrics", "below the level ", CountsFormatting{});
  GC_LOG(kError, "compress", "subsystem not selected ", CountsFormatting{});
  EXPECT_EQ(formatted, 0);
  GC_LOG(kWarn, "metrics", "shown ", CountsFormatting{});
  GC_LOG(kError, "agent", "shown ", CountsFormatting{});
  EXPECT_EQ(formatted, 2);
}

TEST(Log, Enabled) {
  EXPECT_TRUE(enabled(Level::kWarn, "agent"));
  EXPECT_TRUE(enabled(Level::kError, "metrics"));
  EXPECT_FALSE(enabled(Level::kInfo, "agent"));
  EXPECT_FALSE(enabled(Level::kError, "transport"));
}

}  // namespace
}  // namespace gcagent::log
