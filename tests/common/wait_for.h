// Waiting in tests: for an event, never for a time. The limit only turns a hang into a
// failure, so it is generous enough for a sanitizer build on a loaded machine.
#pragma once

#include <chrono>
#include <thread>

namespace gcagent::testing {

template <class Done>
bool waitFor(Done done, std::chrono::milliseconds limit = std::chrono::seconds(60)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

}  // namespace gcagent::testing
