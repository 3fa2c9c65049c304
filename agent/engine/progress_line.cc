#include "agent/engine/progress_line.h"

#include "common/str_cat.h"

namespace gcagent::agent {

std::optional<std::string> ProgressLine::next(Reading r, SteadyTime now) {
  const double secs = secondsBetween(last_time_, now);
  const double iterations = r.iterations - last_.iterations;
  const double raw = r.raw_sent - last_.raw_sent, wire = r.wire_sent - last_.wire_sent;
  last_ = r;
  last_time_ = now;
  if (iterations == 0 && raw == 0 && wire == 0) {
    if (said_idle_) return std::nullopt;
    said_idle_ = true;
    return std::string("progress: idle (nothing reduced since the last line)");
  }
  said_idle_ = false;
  if (secs <= 0) return std::nullopt;  // a clock that did not advance gives no rate
  return strCat("progress: ", iterations / secs, " iterations/s, ", raw / secs / 1e6, " MB/s raw, ",
                wire / secs / 1e6, " MB/s on the wire, ratio ", wire > 0 ? raw / wire : 0.0);
}

}  // namespace gcagent::agent
