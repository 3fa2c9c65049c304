// A steady clock for tests that starts near its own epoch, as the real one does on a machine
// that booted a moment ago: it reads epoch + `since_epoch` when made, advances with real
// time, and jumps forward when the test says so (a timeout reached without waiting for it).
#pragma once

#include <chrono>
#include <memory>

#include "common/clock.h"

namespace gcagent::testing {

class EpochClock {
 public:
  explicit EpochClock(SteadyClock::duration since_epoch = std::chrono::seconds(1))
      : state_(std::make_shared<State>(State{SteadyClock::now(), since_epoch})) {}

  // The clock to hand to the code under test; copies share the jumps.
  SteadyNow now() const {
    return [s = state_] { return SteadyTime{} + s->offset + (SteadyClock::now() - s->made); };
  }
  SteadyTime operator()() const { return now()(); }
  void jump(SteadyClock::duration d) const { state_->offset += d; }

 private:
  struct State {
    SteadyTime made;
    SteadyClock::duration offset;
  };
  std::shared_ptr<State> state_;
};

// A clock that started one second after its epoch.
inline SteadyNow clockSinceEpoch() { return EpochClock().now(); }

}  // namespace gcagent::testing
