// Where a LocalCoder's work runs: memory plus one ordered queue of work on it, a GPU and a
// stream on a GPU node, the host elsewhere. Every call enqueues its work and returns; after()
// reports once the work enqueued so far has run, with the first failure in it. So the
// engine's thread never waits for the device.
#pragma once

#include <cstddef>
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
  virtual Result<size_t> encode(std::span<const float> in, std::span<float> state, std::span<std::byte> out,
                                const compress::SliceId& id) = 0;
  // Enqueues out = scale * (the decoding of `in` added to -0.0), bit for bit what
  // Codec::decode writes.
  virtual Status decode(std::span<const std::byte> in, std::span<float> out, float scale,
                        const compress::SliceId& id) = 0;
};

class CoderDevice {
 public:
  using Done = std::function<void(const Status&)>;
  virtual ~CoderDevice() = default;

  // "gpu 0 (GPU-...)" or "host", for messages.
  virtual std::string describe() const = 0;
  virtual Result<std::unique_ptr<DeviceCodec>> makeCodec(const compress::CodecSpec& spec) = 0;

  // Zeroed memory on the device, and host memory the device copies to and from without
  // blocking (pinned). resourceExhausted naming the size when there is none.
  virtual Result<void*> allocateDevice(size_t bytes) = 0;
  virtual Result<void*> allocateHost(size_t bytes) = 0;
  // Frees once the work enqueued so far has run.
  virtual void freeDevice(void* p) = 0;
  virtual void freeHost(void* p) = 0;

  // Element work on device memory, enqueued.
  virtual Status add(float* dst, const float* src, size_t n) = 0;             // dst += src
  virtual Status divide(float* p, size_t n, float divisor) = 0;               // p /= divisor
  virtual Status flush(float* dst, float* residual, size_t n) = 0;            // dst += residual; residual = 0
  virtual Status zero(void* p, size_t bytes) = 0;
  // Between any two of: device memory, allocateHost() memory.
  virtual Status copy(void* dst, const void* src, size_t bytes) = 0;

  // Runs `done` on the engine's thread once everything enqueued before has run, with the
  // first failure among it (a codec's data error, a failed launch or copy).
  virtual void after(Done done) = 0;
};

}  // namespace gcagent::agent
