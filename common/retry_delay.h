// How long a failed accept loop waits before it tries again: from `first`, doubling up to
// `most`, back to `first` after a success. Without it, an acceptor out of descriptors
// (EMFILE) either stops for good or spins on the error.
#pragma once

#include <algorithm>
#include <chrono>
#include <utility>

namespace gcagent {

class RetryDelay {
 public:
  using Duration = std::chrono::milliseconds;
  explicit RetryDelay(Duration first = Duration(10), Duration most = Duration(1000)) : first_(first), most_(most) {}

  // The delay before the next try; each call while failing doubles the next one.
  Duration next() {
    const Duration now = failing_ ? current_ : first_;
    failing_ = true;
    current_ = std::min(now * 2, most_);
    return now;
  }
  // A success: the next failure starts from `first` again. True if it ended a failing streak.
  bool succeeded() { return std::exchange(failing_, false); }
  bool failing() const { return failing_; }

 private:
  Duration first_, most_, current_{};
  bool failing_ = false;
};

}  // namespace gcagent
