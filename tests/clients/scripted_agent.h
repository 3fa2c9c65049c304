// Test scaffolding for the client library only: a minimal agent that speaks the real control
// protocol and hands out real shared-memory segments. It serves one connection at a time on a
// thread, answers Hello with Welcome{7, 1, 2} and Declare with a fresh Segment (dropping the
// previous one), and answers Submit by adding 1.0 (or `add`) to every element of the submitted slots and
// sending Complete, or misbehaving as configured.
#pragma once

#include <atomic>
#include <map>
#include <cstdint>
#include <limits>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "shm/protocol.h"
#include "shm/segment.h"

namespace gcagent::client::testing {

class ScriptedAgent {
 public:
  enum class OnSubmit {
    kComplete,               // one Complete per submit
    kCompleteSlowly,         // one Complete per submit, its first 10 bytes, the rest after release_rest
    kCompleteSplitReversed,  // one Complete per key, last key first
    kSilent,                 // never answer
    kClose,                  // close the connection
    kJobError,               // Error with request id 0
    kGarbage,                // a frame with a bad magic
  };
  static constexpr uint64_t kNoKey = std::numeric_limits<uint64_t>::max();

  // Listens on <dir>/agent.sock once start() is called.
  explicit ScriptedAgent(const std::string& dir);
  ~ScriptedAgent();
  void start();
  void stop();
  const std::string& socketPath() const { return path_; }
  // The current segment's name ("" before the first declare).
  std::string segmentName();

  std::atomic<OnSubmit> on_submit{OnSubmit::kComplete};
  // Added to every element of a submitted slot (0: the average of a single trainer).
  std::atomic<float> add{1.0f};
  // Submits are held until this many have arrived, then answered newest first.
  std::atomic<int> hold_submits{1};
  // A submit listing this key gets a Complete for its other keys, then an Error.
  std::atomic<uint64_t> fail_key{kNoKey};
  std::string reject_job = "rejected";
  std::string reject_codec = "bogus";
  std::atomic<int> submits_seen{0};
  std::atomic<bool> release_rest{false};       // kCompleteSlowly: send the rest of the frame
  std::atomic<bool> answer_pings{true};        // false: a frozen agent, which reads but never answers
  std::atomic<int> pings_seen{0};
  std::atomic<int> pongs_sent{0};
  std::atomic<int> pong_delay_ms{0};  // answers pings this late
  std::atomic<int> memfd_offers_closed{0};  // offers sent whose memfd this side has closed again
  // Error-feedback states: kept as put, read back as kept, in parts.
  std::atomic<int> state_parts_seen{0};
  std::atomic<uint32_t> state_dropped{0};  // reported at a put's last part
  std::atomic<uint64_t> iteration_offset{0};  // the job's iteration = the trainer's + this
  std::vector<std::byte> state(uint64_t key) {
    std::lock_guard lock(state_mutex_);
    return states_[key];
  }

  // How a DeclareDevice is answered.
  enum class OnDeviceDeclare {
    kRefuse,          // Error: "this agent has no GPU"
    kOfferMemfd,      // DeclaredDevice with a memfd riding on its first byte
    kOfferWithoutFd,  // DeclaredDevice (posix fd kind) with no descriptor
  };
  std::atomic<OnDeviceDeclare> on_device_declare{OnDeviceDeclare::kRefuse};

 private:
  std::mutex state_mutex_;
  std::map<uint64_t, std::vector<std::byte>> states_;
  struct Slot {
    float* data;
    uint64_t elements;
  };
  struct HeldSubmit {
    uint32_t request_id;
    shm::protocol::Submit submit;
  };
  void run();
  bool serve(int fd);  // false when stopping
  bool readFrame(int fd, shm::protocol::Message* out);
  bool send(int fd, const shm::protocol::Message& message);
  bool answer(int fd, const HeldSubmit& held);

  std::string path_;
  int listen_fd_ = -1;
  int stop_pipe_[2] = {-1, -1};
  std::thread thread_;
  std::mutex mu_;
  std::optional<shm::Segment> segment_;
  std::unordered_map<uint64_t, Slot> slots_;
  std::vector<HeldSubmit> held_;
  int declares_ = 0;
};

}  // namespace gcagent::client::testing
