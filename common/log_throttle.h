// Lets one log line through per interval and counts the ones held back, so a fault that
// fails thousands of calls a second (trainers that go on while a peer is away) says so once
// a second, with the count, instead of flooding the log.
#pragma once

#include <chrono>
#include <cstdint>
#include <utility>

#include "common/clock.h"

namespace gcagent {

class LogThrottle {
 public:
  explicit LogThrottle(SteadyClock::duration interval = std::chrono::seconds(1)) : interval_(interval) {}

  // Whether a line may be logged at `now`; if so, `*held` gets how many were held back since
  // the last one.
  bool allow(SteadyTime now, uint64_t* held) {
    if (logged_ && now - last_ < interval_) {
      ++held_;
      return false;
    }
    logged_ = true;
    last_ = now;
    *held = std::exchange(held_, 0);
    return true;
  }

 private:
  SteadyClock::duration interval_;
  bool logged_ = false;
  SteadyTime last_{};
  uint64_t held_ = 0;
};

}  // namespace gcagent
