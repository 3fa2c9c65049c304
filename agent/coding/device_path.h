// The agent's side of trainers whose gradients live on a GPU. A DevicePath hands each such
// trainer one exported device allocation with a slot per tensor (DeviceSlots), and moves a
// slot's gradient to the host buffer the reduction engine works on and the average back,
// ordered against the trainer's own GPU work by the two interprocess events of the offer.
//
// Two data paths. Where every local trainer of a key has its slots on one GPU, the agent
// reduces there: the slots' LocalCoder sums them, encodes with residuals kept on the GPU and
// decodes the results into the slots, so only encoded bytes cross PCIe. Otherwise (trainers
// on several GPUs, or host and device trainers in one job) each slot is staged through a
// host buffer and the engine works on those with the CPU codecs.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "agent/io.h"
#include "common/gpu_uuid.h"
#include "common/status.h"
#include "shm/protocol.h"

namespace gcagent::agent {

class LocalCoder;

// One trainer's device allocation; freed with the object.
class DeviceSlots {
 public:
  virtual ~DeviceSlots() = default;
  // The DeclaredDevice body to send (slot offsets in declaration order).
  virtual const shm::protocol::DeclaredDevice& offer() const = 0;
  // The descriptor that travels with the offer (kPosixFd), or -1. Owned by this object.
  virtual int fd() const = 0;
  // The host buffer of slot `index` that the engine reduces in (the slot's size, pinned where
  // the device copies need it to run asynchronously).
  virtual float* hostBuffer(size_t index) = 0;
  // Slot `index` in the device's memory, where the coder works.
  virtual float* deviceBuffer(size_t index) = 0;
  // The coder of the slots' GPU; null where this path only stages through the host.
  virtual std::shared_ptr<LocalCoder> coder() = 0;
};

class DevicePath {
 public:
  using Done = std::function<void(const Status&)>;
  virtual ~DevicePath() = default;

  // Slots of `slot_bytes` each for a trainer whose tensors live on `trainer_gpu`. Fails
  // with failedPrecondition naming both GPUs when the agent cannot reach the trainer's GPU.
  virtual Result<std::unique_ptr<DeviceSlots>> allocate(const shm::protocol::GpuUuidBytes& trainer_gpu,
                                                        std::span<const uint64_t> slot_bytes) = 0;
  // After the trainer's last ready-event record, copies slot `index` (`elements` floats)
  // into its host buffer; `done` runs on the agent's io thread. Never blocks on the GPU.
  virtual void stageIn(DeviceSlots& slots, size_t index, uint64_t elements, Done done) = 0;
  // Copies the host buffer into slot `index`, records the done event, then runs `done` on
  // the io thread.
  virtual void stageOut(DeviceSlots& slots, size_t index, uint64_t elements, Done done) = 0;
  // For the coder: makes the device's later work wait for the trainer's last ready-event
  // record (enqueued, never blocks).
  virtual Status awaitReady(DeviceSlots& slots) = 0;
  // Records the done event after the device's work so far (the coder's result decodes), then
  // runs `done` on the io thread.
  virtual void signalDone(DeviceSlots& slots, Done done) = 0;
};

// Every GPU the agent sees (a trainer's slots go on the GPU its tensors live on) when this
// build has CUDA and the host a driver; otherwise a path whose allocate() says "this agent
// has no GPU" and why. Never fails: the agent keeps serving host jobs either way.
// Builds the LocalCoder of one GPU, working on that GPU's stream (a CUstream).
using CoderFactory = std::function<Result<std::shared_ptr<LocalCoder>>(int ordinal, void* stream,
                                                                       const std::string& description)>;
// `coders`: each GPU gets one from it; without, slots are always staged through the host.
std::unique_ptr<DevicePath> makeDevicePath(asio::io_context& io, CoderFactory coders = nullptr);

// The path that refuses every device declaration with `why` (no GPU, or none built in).
std::unique_ptr<DevicePath> makeUnavailableDevicePath(std::string why);

}  // namespace gcagent::agent
