// Steady time, passed in. "Not yet" is never a default time_point: on Linux the steady
// clock's epoch is the machine's boot, so `time_point{}` means "at boot", which on a fresh
// machine or container host is only seconds ago. Code that keeps a "last time X happened"
// holds it in a std::optional, and code that schedules or times out takes a SteadyNow, so a
// test can run it with the clock one second after its epoch.
#pragma once

#include <chrono>
#include <functional>

namespace gcagent {

using SteadyClock = std::chrono::steady_clock;
using SteadyTime = SteadyClock::time_point;
using SteadyNow = std::function<SteadyTime()>;

// The real clock, the default everywhere.
inline SteadyTime steadyNow() { return SteadyClock::now(); }

inline double secondsBetween(SteadyTime from, SteadyTime to) {
  return std::chrono::duration<double>(to - from).count();
}

inline SteadyClock::duration steadySeconds(double s) {
  return std::chrono::duration_cast<SteadyClock::duration>(std::chrono::duration<double>(s));
}

}  // namespace gcagent
