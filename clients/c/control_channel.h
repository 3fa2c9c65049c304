// The trainer's end of the control socket: connects (retrying while the agent starts), sends
// whole frames, and reads whole frames through an input buffer, so that a wait that times out
// in the middle of a frame loses nothing. Plain POSIX: a non-blocking socket and poll(2).
#pragma once

#include <chrono>
#include <cstddef>
#include <deque>
#include <string>
#include <vector>

#include "outcome.h"
#include "shm/protocol.h"

namespace gcagent::client {

// A point in time to give up at, or none.
class Deadline {
 public:
  using Clock = std::chrono::steady_clock;
  // timeout_ms < 0: never. `now` is a parameter so tests can run near the clock's epoch.
  static Deadline after(int timeout_ms, Clock::time_point now = Clock::now());
  static Deadline never() { return Deadline(); }
  // The later and the earlier of two deadlines.
  static Deadline latest(const Deadline& a, const Deadline& b);
  static Deadline earliest(const Deadline& a, const Deadline& b);

  bool infinite() const { return infinite_; }
  bool passed(Clock::time_point now = Clock::now()) const { return !infinite_ && now >= at_; }
  // For poll(2): -1 when infinite, else the milliseconds left, rounded up, >= 0.
  int pollTimeoutMs(Clock::time_point now = Clock::now()) const;

 private:
  Deadline() = default;
  bool infinite_ = true;  // "never" is this flag, not a time
  Clock::time_point at_;
};

class ControlChannel {
 public:
  ControlChannel() = default;
  ControlChannel(ControlChannel&& other) noexcept;
  ControlChannel& operator=(ControlChannel&& other) noexcept;
  ControlChannel(const ControlChannel&) = delete;
  ControlChannel& operator=(const ControlChannel&) = delete;
  ~ControlChannel();

  // Retries while the socket refuses connections, and while it is missing when
  // `wait_for_path`, until the deadline (GCAGENT_ERR_TIMEOUT); other failures, a missing
  // socket without `wait_for_path` included (GCAGENT_ERR_IO), return at once.
  static Outcome connect(const std::string& path, Deadline deadline, bool wait_for_path, ControlChannel* out);

  // Sends one whole frame. While the socket is full it keeps reading into the input buffer,
  // so neither side can block the other. A failure leaves the stream unusable.
  Outcome send(const shm::protocol::Message& message, Deadline deadline);

  // The next message. GCAGENT_ERR_TIMEOUT (with an empty message) when none is complete by
  // the deadline; GCAGENT_ERR_IO once the agent has closed the socket and every whole frame it
  // sent before has been returned; GCAGENT_ERR_PROTOCOL for a frame that does not decode.
  Outcome receive(Deadline deadline, shm::protocol::Message* out);
  // receive, but also GCAGENT_ERR_TIMEOUT as soon as `wake_fd` (>= 0) is readable; the
  // descriptor is only watched, never read.
  Outcome receive(Deadline deadline, int wake_fd, shm::protocol::Message* out);

  const std::string& path() const { return path_; }

  // The oldest descriptor the agent sent (SCM_RIGHTS) and nobody took yet, or -1. The
  // caller owns it. Descriptors arrive in order with the frames that announce them.
  int takeFd();

 private:
  Outcome readAvailable();
  void close();

  int fd_ = -1;
  std::string path_;
  std::vector<std::byte> in_;
  size_t in_begin_ = 0;
  bool eof_ = false;
  std::deque<int> fds_;
};

}  // namespace gcagent::client
