#include "common/log.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <mutex>
#include <string>
#include <vector>

namespace gcagent::log {
namespace {

struct Settings {
  Level level = Level::kInfo;
  std::vector<std::string> subsystems;  // empty: all
};

Level parseLevel(const char* s) {
  if (s == nullptr) return Level::kInfo;
  std::string_view v(s);
  if (v == "error") return Level::kError;
  if (v == "warn") return Level::kWarn;
  if (v == "debug") return Level::kDebug;
  if (v == "trace") return Level::kTrace;
  return Level::kInfo;
}

const Settings& settings() {
  static const Settings s = [] {
    Settings out;
    out.level = parseLevel(std::getenv("GCAGENT_LOG_LEVEL"));
    if (const char* list = std::getenv("GCAGENT_LOG_SUBSYS")) {
      std::string_view rest(list);
      while (!rest.empty()) {
        size_t comma = rest.find(',');
        std::string_view item = rest.substr(0, comma);
        if (!item.empty()) out.subsystems.emplace_back(item);
        rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
      }
    }
    return out;
  }();
  return s;
}

const char* levelName(Level level) {
  switch (level) {
    case Level::kError: return "error";
    case Level::kWarn: return "warn";
    case Level::kInfo: return "info";
    case Level::kDebug: return "debug";
    case Level::kTrace: return "trace";
  }
  return "?";
}

}  // namespace

bool enabled(Level level, std::string_view subsystem) {
  const Settings& s = settings();
  if (level > s.level) return false;
  if (s.subsystems.empty()) return true;
  for (const auto& name : s.subsystems)
    if (name == subsystem) return true;
  return false;
}

void write(Level level, std::string_view subsystem, std::string_view message) {
  static std::mutex mu;
  auto now = std::chrono::system_clock::now();
  auto secs = std::chrono::system_clock::to_time_t(now);
  auto micros = std::chrono::duration_cast<std::chrono::microseconds>(now.time_since_epoch()).count() % 1000000;
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%S", &tm);
  std::lock_guard lock(mu);
  std::fprintf(stderr, "%s.%06lldZ %-5s %.*s: %.*s\n", stamp, static_cast<long long>(micros),
               levelName(level), static_cast<int>(subsystem.size()), subsystem.data(),
               static_cast<int>(message.size()), message.data());
}

}  // namespace gcagent::log
