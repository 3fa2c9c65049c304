// The agent's periodic one-line summary: iterations and bytes per second since the previous
// line, read from the same counters Prometheus scrapes. An idle agent says so once and then
// stays quiet until work resumes, instead of printing zeros every interval.
#pragma once

#include <optional>
#include <string>

#include "common/clock.h"

namespace gcagent::agent {

class ProgressLine {
 public:
  struct Reading {
    double iterations = 0;
    double raw_sent = 0;   // bytes
    double wire_sent = 0;  // bytes
  };

  // The counters at `now`, the start of the first interval.
  ProgressLine(Reading start, SteadyTime now) : last_(start), last_time_(now) {}

  // The line for the interval that ends at `now`, or none (idle, and already said so).
  std::optional<std::string> next(Reading r, SteadyTime now);

 private:
  Reading last_;
  SteadyTime last_time_;
  bool said_idle_ = false;
};

}  // namespace gcagent::agent
