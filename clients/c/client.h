// One trainer's connection to its node's agent: the handshake, the declared tensors and their
// slots in the agent's shared segment, and the state of every key between submit and complete.
//
// Each declared key is idle, pending (submitted, not yet complete), complete or failed. The
// buffer of a key holds one iteration at a time, so a key has at most one submit in flight;
// completions and errors for any pending key are applied whenever a message arrives, whichever
// call happens to be reading, so none is lost.
//
// An Error from the agent fails the still-pending keys of the request whose id it carries;
// request id 0 fails the whole connection. The connection is also unusable after the socket
// closes, a malformed or unexpected message, or a request the agent never answered: every
// later call returns that first failure.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "client_device.h"
#include "control_channel.h"
#include "outcome.h"
#include "shm/protocol.h"
#include "shm/segment.h"

namespace gcagent::client {

struct ConnectOptions {
  std::string socket_path;
  std::string job;
  uint32_t local_rank = 0;
  uint32_t local_size = 1;
  int timeout_ms = 0;
  bool wait_for_agent = true;  // retry while the socket does not exist (until the timeout)
};

class Client {
 public:
  static constexpr int kDefaultReplyTimeoutMs = 60'000;
  static constexpr int kMinHandshakeMs = 5'000;

  static Outcome connect(const ConnectOptions& options, std::unique_ptr<Client>* out);

  Outcome declare(std::vector<shm::protocol::TensorDecl> tensors);
  // Tensors on the GPU `gpu`: slots in device memory the agent exports (client_device.h).
  Outcome declareDevice(std::vector<shm::protocol::TensorDecl> tensors, const shm::protocol::GpuUuidBytes& gpu);
  float* buffer(uint64_t key) const;
  uint64_t deviceBuffer(uint64_t key) const;  // a CUdeviceptr; 0 unless declared on the device
  Outcome submitDevice(uint64_t iteration, std::span<const uint64_t> keys, void* stream);
  Outcome waitDevice(uint64_t iteration, std::span<const uint64_t> keys, int timeout_ms, void* stream);
  uint64_t elements(uint64_t key) const;
  Outcome submit(uint64_t iteration, std::span<const uint64_t> keys);
  Outcome wait(uint64_t iteration, std::span<const uint64_t> keys, int timeout_ms);
  // Until one of the (iteration, key) pairs is complete (OK) or failed (GCAGENT_ERR_AGENT), its
  // place in *index; GCAGENT_ERR_TIMEOUT (*index = steps.size()) at the timeout or as soon as
  // wake_fd is readable.
  struct Step {
    uint64_t iteration;
    uint64_t key;
  };
  Outcome waitAny(std::span<const Step> steps, int timeout_ms, int wake_fd, size_t* index);
  // A declared tensor's error-feedback state on this node, as a blob for a checkpoint, read
  // part by part; and a blob put back, in force from the tensor's next step (`dropped`: owner
  // parts that belonged to another layout of the job).
  Outcome getState(uint64_t key, std::vector<std::byte>* out);
  // The job's iteration this trainer's `iteration` would be reduced as now (0: given up).
  Outcome jobIteration(uint64_t iteration, uint64_t* job_iteration);
  Outcome putState(uint64_t key, std::span<const std::byte> blob, uint32_t* dropped);
  // A new descriptor of the segment holding key's host slot, and the slot's offset in it.
  Outcome bufferFd(uint64_t key, int* fd, uint64_t* offset) const;
  void setReplyTimeout(int timeout_ms) { reply_timeout_ms_ = timeout_ms; }
  // How long a wait may hear nothing from the agent before the connection is given up as
  // frozen (GCAGENT_CLIENT_LIVENESS_TIMEOUT, seconds, default 10); <= 0: no limit.
  void setLivenessTimeout(int timeout_ms) { liveness_ms_ = timeout_ms; }
  static constexpr int kDefaultLivenessMs = 10'000;

  const shm::protocol::Welcome& welcome() const { return welcome_; }
  // The node ranks the latest completed result averaged over (every node until the agent
  // told a membership change), and the node whose weights every trainer loads after it: set
  // for the first completion under a membership that took nodes in (agent/membership/membership_view.h)
  // or after a step given up somewhere (agent/engine/job_reload.h).
  std::vector<uint32_t> resultNodes() const;
  std::optional<uint32_t> resyncRoot() const { return resync_root_; }

 private:
  enum class KeyState { kIdle, kPending, kComplete, kFailed };
  struct Slot {
    float* data = nullptr;
    uint64_t device = 0;  // a CUdeviceptr, for keys declared on the device
    uint64_t elements = 0;
    KeyState state = KeyState::kIdle;
    uint64_t iteration = 0;   // of the last submit
    uint32_t request_id = 0;  // of the last submit
    std::shared_ptr<const std::string> error;  // when failed
  };

  explicit Client(ControlChannel channel) : channel_(std::move(channel)) {}

  uint32_t nextRequestId();
  Outcome breakWith(Outcome outcome);
  // Sends a request and reads until its reply of type `reply` (or an Error for it) arrives,
  // handling whatever else comes first.
  Outcome request(shm::protocol::Message message, shm::protocol::MessageType reply, Deadline deadline,
                  shm::protocol::Message* out);
  // Applies a message that is not the reply to an outstanding request.
  Outcome handle(shm::protocol::Message&& message);
  Outcome checkDeclarable(const std::vector<shm::protocol::TensorDecl>& tensors) const;
  Outcome adopt(const std::vector<shm::protocol::TensorDecl>& tensors, const shm::protocol::Declared& declared);
  Outcome adoptDevice(const std::vector<shm::protocol::TensorDecl>& tensors, const shm::protocol::DeclaredDevice& offer,
                      int fd);
  Outcome submitSlots(uint64_t iteration, std::span<const uint64_t> keys);
  // The slot of a key submitted for `iteration`, or why a wait for it is not valid.
  Outcome waitable(uint64_t iteration, uint64_t key, const Slot** out) const;
  // Reads and handles the next message (or times out), pinging a quiet agent meanwhile.
  Outcome receiveOne(Deadline deadline, int wake_fd);
  // While keys are pending: pings an agent quiet for half the liveness timeout, and gives the
  // connection up when the ping stays unanswered as long. Returns when to check again.
  Outcome keepAlive(Deadline* next_check);

  ControlChannel channel_;
  shm::protocol::Welcome welcome_;
  shm::protocol::Membership view_;            // as last told (epoch 0 and no ranks: every node)
  shm::protocol::Membership completed_view_;  // the one the latest completion was made under
  std::optional<uint32_t> completed_epoch_;   // its epoch, once a completion came
  std::optional<uint32_t> resync_root_;
  uint64_t resync_iteration_ = 0;  // the step resync_root_ follows
  uint32_t next_request_id_ = 1;
  int reply_timeout_ms_ = kDefaultReplyTimeoutMs;
  Outcome broken_;  // the failure that made the connection unusable, if any
  std::optional<shm::Segment> segment_;
  std::shared_ptr<DeviceMapping> device_;  // instead of segment_ after declareDevice
  std::unordered_map<uint64_t, Slot> slots_;
  size_t pending_ = 0;  // slots in KeyState::kPending
  int liveness_ms_ = kDefaultLivenessMs;
  Deadline::Clock::time_point last_heard_ = Deadline::Clock::now();  // from the agent, or the last submit
  uint32_t ping_id_ = 0;  // the ping awaiting its pong; 0: none
  Deadline::Clock::time_point ping_sent_{};
};

}  // namespace gcagent::client
