// One trainer of the control server: its requests (hello, declare, declare device, submit),
// its slots (in a shared-memory segment, or device slots with host buffers), its submissions
// awaiting completion, and the copies of its device slots around a reduction. The frames
// themselves are TrainerConnection's; the jobs and the reductions are its host's
// (session_host.h: the control server).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

#include "agent/coding/device_path.h"
#include "agent/control/local_job.h"
#include "agent/control/session_host.h"
#include "common/default_init.h"
#include "agent/control/trainer_connection.h"

namespace gcagent::shm {
class Segment;
}

namespace gcagent::agent {

class TrainerSession : public TrainerConnection {
 public:
  TrainerSession(SessionHost& host, asio::local::stream_protocol::socket socket, uint32_t id);

  uint32_t localRank() const { return local_rank_; }
  const std::shared_ptr<LocalJob>& job() const { return job_; }

  // Whether this trainer submitted an iteration after `iteration` still awaiting completion.
  bool submittedAfter(uint64_t iteration) const {
    return !submits_.empty() && std::prev(submits_.end())->first.first > iteration;
  }
  // The request that submitted (iteration, key), if this trainer did; forgets it.
  std::optional<uint32_t> takeSubmit(uint64_t iteration, uint64_t key);

  // Completes (iteration, key) for this trainer: device slots get the average first;
  // `coded`: the average is already in the device slot (the coder decoded it there).
  void complete(uint32_t request, uint64_t iteration, uint64_t key, bool coded, std::optional<uint32_t> reload_root);
  // Copies this trainer's device slot of `key` into its host buffer (a reduction that runs on
  // the host); `done` on the io thread.
  void stageIn(size_t index, uint64_t elements, DevicePath::Done done);

 private:
  struct Slot {
    float* data;  // what the engine reduces in: the slot, or a narrow slot's fp32 twin
    uint64_t elements;
    size_t index;  // in the declaration
    shm::protocol::DType dtype = shm::protocol::DType::kFloat32;
    std::byte* narrow = nullptr;         // a bfloat16 or float16 slot (slot_dtype.h)
    std::shared_ptr<FloatBuffer> wide;   // its fp32 twin, pinned by the reductions that use it
  };

  bool identified() const override { return job_ != nullptr; }
  void dispatch(const shm::protocol::Message& m) override;
  void badMessage(const Status& why) override;
  void timedOut(std::string_view what) override;
  void onClosing() override;
  void onClosed() override;

  Status onHello(uint32_t request, const shm::protocol::Hello& h);
  void forgetSlots();
  Status onDeclare(uint32_t request, const shm::protocol::Declare& d);
  // The tensors live on the trainer's GPU: slots in device memory the agent exports, and
  // host buffers the engine reduces in, filled from the slots after each submit.
  Status onDeclareDevice(uint32_t request, const shm::protocol::DeclareDevice& d);
  Status onSubmit(uint32_t request, const shm::protocol::Submit& s);
  // A tensor's error-feedback state, read part by part from a copy taken at offset 0, and
  // written part by part, put in force at the last.
  Status onStateGet(uint32_t request, const shm::protocol::StateGet& g);
  Status onIterationQuery(uint32_t request, const shm::protocol::IterationQuery& q);
  Status onStatePart(uint32_t request, shm::protocol::StatePart p);
  void sendStatePart(uint32_t request, uint64_t offset);
  // This trainer's buffer of (iteration, key) is ready: starts the reduction once every
  // local trainer's is.
  void contribute(uint64_t iteration, uint64_t key);

  SessionHost& host_;
  std::shared_ptr<LocalJob> job_;
  uint32_t local_rank_ = 0;
  // Shared: the engine pins them while it sends straight from them (ReductionEngine::reduce).
  std::shared_ptr<shm::Segment> segment_;
  std::shared_ptr<DeviceSlots> device_;  // instead of segment_ for a device declaration
  size_t staging_count_ = 0;             // copies from device slots not yet finished
  uint64_t generation_ = 0;
  std::unordered_map<uint64_t, Slot> slots_;
  std::unordered_map<uint64_t, uint64_t> last_iteration_;
  std::map<std::pair<uint64_t, uint64_t>, uint32_t> submits_;
  struct StateBytes {
    uint64_t key = 0;
    uint64_t total = 0;
    std::vector<std::byte> bytes;
  };
  std::optional<StateBytes> state_out_, state_in_;  // the state being read, and written
};

}  // namespace gcagent::agent
