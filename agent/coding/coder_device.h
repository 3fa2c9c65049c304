// Where a LocalCoder's work runs: memory plus one ordered queue of work on it, a GPU and a
// stream on a GPU node, the host elsewhere. Every call enqueues its work and returns; after()
// reports once the work enqueued so far has run, with the first failure in it. So the
// engine's thread never waits for the device.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "common/status.h"
#include "compress/codec.h"

namespace gcagent::agent {

// A codec that works on the device's memory: the encodings, state layout and error wording
// of the compress::Codec of the same spec.
class DeviceCodec {
 public:
  virtual ~DeviceCodec() = default;
  // Enqueues the encoding of `in` with `state` into `out`. Returns the encoded size when the
  // codec is fixed size, else maxEncodedBytes(n): the sparse codecs' encodings start with a
  // u32 pair count, and take 4 + 8 * count bytes, readable once the work has run.
  // `seconds`, where the device can time the encoding (the host), gets its duration once
  // the work has run.
  // `skip_if`, host memory (a device that can read it when the encode runs: the host), makes
  // the encode write nothing, state included, when it then holds a nonzero value (a slice
  // found non-finite by markNonFinite just before); others refuse it.
  virtual Result<size_t> encode(std::span<const float> in, std::span<float> state, std::span<std::byte> out,
                                const compress::SliceId& id, double* seconds = nullptr,
                                const uint32_t* skip_if = nullptr) = 0;
  // Enqueues out = scale * (the decoding of `in` added to -0.0), bit for bit what
  // Codec::decode writes. `seconds`, where the device times it (the host), as encode's.
  virtual Status decode(std::span<const std::byte> in, std::span<float> out, float scale,
                        const compress::SliceId& id, double* seconds = nullptr) = 0;
  // Enqueues acc += the decoding of `in`, bit for bit what Codec::decodeAdd does.
  virtual Status decodeAdd(std::span<const std::byte> in, std::span<float> acc, const compress::SliceId& id,
                           double* seconds = nullptr) = 0;
};

class CoderDevice {
 public:
  using Done = std::function<void(const Status&)>;
  virtual ~CoderDevice() = default;

  // "gpu 0 (GPU-...)" or "host", for messages.
  virtual std::string describe() const = 0;
  // Whether the device's memory is host memory the transport can send from (the host).
  virtual bool hostAddressable() const { return false; }
  // The work enqueued from here on belongs to `tag` (one tensor) at `priority`. A device that
  // can reorder (the host's) runs higher priorities first, each tag's work in order; after()
  // then reports on the tag's work only. One GPU stream ignores it: everything is in order.
  virtual void setTag(uint64_t tag, int64_t priority) {
    (void)tag;
    (void)priority;
  }
  virtual Result<std::unique_ptr<DeviceCodec>> makeCodec(const compress::CodecSpec& spec) = 0;

  // Zeroed memory on the device, and host memory the device copies to and from without
  // blocking (pinned). resourceExhausted naming the size when there is none.
  virtual Result<void*> allocateDevice(size_t bytes) = 0;
  virtual Result<void*> allocateHost(size_t bytes) = 0;
  // Frees once the work enqueued so far has run.
  virtual void freeDevice(void* p) = 0;
  virtual void freeHost(void* p) = 0;

  // Element work on device memory, enqueued.
  // dst += src; `seconds`, where the device times it (the host), gets its duration once run.
  virtual Status add(float* dst, const float* src, size_t n, double* seconds = nullptr) = 0;
  virtual Status divide(float* p, size_t n, float divisor) = 0;               // p /= divisor
  virtual Status flush(float* dst, float* residual, size_t n) = 0;            // dst += residual; residual = 0
  virtual Status zero(void* p, size_t bytes) = 0;
  // *flag = 1 if p[0, n) holds an infinity or a NaN, else unchanged; `flag` in allocateHost()
  // memory, read once the work has run (or by a later encode's skip_if on the host).
  virtual Status markNonFinite(const float* p, size_t n, uint32_t* flag) = 0;
  // Between any two of: device memory, allocateHost() memory.
  virtual Status copy(void* dst, const void* src, size_t bytes) = 0;

  // Keeps `pin` alive until the work enqueued so far has run: host memory that work reads or
  // writes (a trainer's segment) stays mapped even if its reduction was abandoned meanwhile.
  virtual void hold(std::shared_ptr<const void> pin) { (void)pin; }

  // Runs `done` on the engine's thread once everything enqueued before has run, with the
  // first failure among it (a codec's data error, a failed launch or copy).
  virtual void after(Done done) = 0;
  // The current tag's work enqueued so far is given up: a device that can drops what has not
  // started (the host); `done` runs once none of it will run any more. A GPU stream cannot
  // drop launched work, so it waits for it, as after() does.
  virtual void cancel(Done done) {
    after([done = std::move(done)](const Status&) { done({}); });
  }
};

}  // namespace gcagent::agent
