// The GPU codec interface: the same encodings as compress/codec.h, computed by CUDA kernels
// on device memory, with the error-feedback state kept on the device. Every span here holds
// device pointers; nothing in this header needs the CUDA headers, so code built without nvcc
// can hold and call a GpuCodec.
//
// Work is stream-ordered and asynchronous: encode() and decodeAdd() check sizes, enqueue
// their kernels on the stream and return. Failures that depend on the data (a non-finite
// gradient, a corrupt encoded buffer) are found on the device and recorded in the codec; the
// kernels queued after a failure leave every buffer untouched, and finish() waits for the
// stream and reports the first failure, worded as the CPU codec words it. So, as on the CPU,
// a corrupt buffer never changes the accumulator and a rejected gradient never changes the
// state. A GpuCodec is used from one thread and one stream at a time.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "compress/codec.h"

struct CUstream_st;  // cudaStream_t is a CUstream_st*

namespace gcagent::compress::cuda {

using GpuStream = CUstream_st*;  // nullptr: the legacy default stream

class GpuCodec {
 public:
  virtual ~GpuCodec() = default;

  virtual std::string_view name() const = 0;
  // As Codec: floats of device state per slice of n elements, zeroed before first use.
  virtual size_t stateElements(size_t n) const = 0;
  virtual size_t maxEncodedBytes(size_t n) const = 0;
  // As Codec. The sparse codecs (topk, threshold, dgc) start their encoding with a u32 pair
  // count, so the exact size of a variable one is 4 + 8 * count, readable after finish().
  virtual bool isFixedSize() const { return true; }

  // Enqueues the encoding of `in` (updating `state`) into `out`; returns the bytes the
  // encoding takes when isFixedSize(), else maxEncodedBytes(n). Size errors return at once.
  virtual Result<size_t> encode(std::span<const float> in, std::span<float> state,
                                std::span<std::byte> out, const SliceId& id,
                                GpuStream stream) = 0;

  // Enqueues the decoding of `in`, an encoding of acc.size() elements, added into `acc`.
  virtual Status decodeAdd(std::span<const std::byte> in, std::span<float> acc,
                           const SliceId& id, GpuStream stream) = 0;

  // Waits for `stream` and returns the first failure recorded since the last finish(), then
  // clears it.
  virtual Status finish(GpuStream stream) = 0;

  // finish() without the wait, for callers that learn from the stream itself when it has
  // passed a point (a host function): enqueues a copy of the failure record into `snapshot`
  // (kFaultSnapshotBytes of pinned host memory) and then clears the record, so the work
  // enqueued after it runs. Once the stream has passed that point, faultIn(snapshot) returns
  // what finish() would have returned there.
  virtual Status snapshotFaults(void* snapshot, GpuStream stream) = 0;
  virtual Status faultIn(const void* snapshot) const = 0;
};

inline constexpr size_t kFaultSnapshotBytes = 32;

// Whether a usable GPU is present: ok, or unavailable("no GPU: ...") naming the cause (no
// driver, no device, a failing driver). Any CUDA error counts as "no GPU".
Status gpuAvailable();

// The codecs that have GPU kernels, in registry order.
std::vector<std::string_view> gpuCodecNames();

// Builds the GPU twin of a registered codec with the same parameters, defaults and checks as
// the CPU codec. notFound for a codec without GPU kernels; unavailable without a GPU.
Result<std::unique_ptr<GpuCodec>> makeGpuCodec(std::string_view name, const Params& params = {});

}  // namespace gcagent::compress::cuda
