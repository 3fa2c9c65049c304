// Leveled logging by subsystem. The level check happens before any formatting, so a
// disabled debug line costs one load and a compare.
#pragma once

#include <string_view>

#include "common/str_cat.h"

namespace gcagent::log {

enum class Level { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3, kTrace = 4 };

// GCAGENT_LOG_LEVEL (error|warn|info|debug|trace, default info) and GCAGENT_LOG_SUBSYS
// (comma-separated subsystems, default all) are read once, at the first call.
bool enabled(Level level, std::string_view subsystem);
void write(Level level, std::string_view subsystem, std::string_view message);

}  // namespace gcagent::log

// GC_LOG(kWarn, "compress", "codec '", name, "': ", status.message());
#define GC_LOG(level, subsys, ...)                                                     \
  do {                                                                                 \
    if (::gcagent::log::enabled(::gcagent::log::Level::level, subsys))                 \
      ::gcagent::log::write(::gcagent::log::Level::level, subsys,                      \
                            ::gcagent::strCat(__VA_ARGS__));                           \
  } while (0)
