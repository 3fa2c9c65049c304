// What every GPU codec's kernels and host code share: launch geometry, the device-side fault
// record that data-dependent failures land in, and the host side that reads it back.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>

#include "common/status.h"
#include "common/str_cat.h"
#include "compress/cpu/checks.h"
#include "compress/cuda/device_buffer.h"
#include "compress/cuda/gpu_codec.h"

namespace gcagent::compress::cuda {

inline constexpr unsigned kThreads = 256;

inline unsigned blocksFor(size_t work) {
  return static_cast<unsigned>((work + kThreads - 1) / kThreads);
}

inline cudaStream_t toCuda(GpuStream s) { return s; }

// Failure kinds in the order the CPU codecs check them: when several are found in one call,
// the lowest (kind, index) wins, which is the one the CPU codec would have reported.
enum FaultKind : uint32_t {
  kFaultNonFinite = 1,  // encode: gradient (plus residual) not finite; index = bucket or 0
  kFaultBadScale = 2,   // decode: header scale not finite or negative
  kFaultBadNorm = 3,    // decode: bucket norm not finite or negative; index = bucket
  kFaultBadPadding = 4, // decode: bits past the last element set
  kFaultBadCode = 5,    // decode: a code the encoder never writes
  kFaultBadLevel = 6,   // decode: a level outside [-s, s]; index = element
  kFaultBadCount = 7,   // decode: sparse count beyond the slice or the buffer; detail = count
  kFaultBadPair = 8,    // decode: sparse pair out of range or repeated; index = pair, detail = its index
};

struct DeviceFault {
  unsigned long long key;  // (kind << 48) | index; kNoFault when nothing failed
  float value;             // the offending value, when the kind has one
  uint32_t detail;          // a second number for the message, when the kind has one
  unsigned long long extra; // a third (a slice length or a buffer size)
};

inline constexpr unsigned long long kNoFault = ~0ull;
static_assert(sizeof(DeviceFault) <= kFaultSnapshotBytes);

#if defined(__CUDACC__)
__device__ __forceinline__ size_t smaller(size_t a, size_t b) { return a < b ? a : b; }

__device__ __forceinline__ bool faulted(const DeviceFault* f) {
  // Raised only by earlier kernels of the stream, never during the reading one, so a cached
  // read is enough (and keeps every thread from hitting L2 for the same word).
  return __ldg(&f->key) != kNoFault;
}

__device__ __forceinline__ void raiseFault(DeviceFault* f, FaultKind kind, uint64_t index) {
  atomicMin(&f->key, (static_cast<unsigned long long>(kind) << 48) | index);
}
#endif

// The host side of one codec's fault record.
class FaultSlot {
 public:
  Status init() {
    GC_ASSIGN_OR_RETURN(buffer_, DeviceBuffer<DeviceFault>::allocate(1));
    return clear();
  }
  DeviceFault* device() const { return buffer_.data(); }

  // Waits for the stream; returns the recorded fault (kind 0 for none) and clears it, in
  // the stream's order.
  Result<DeviceFault> take(GpuStream stream, std::string_view codec) {
    cudaError_t err = cudaStreamSynchronize(toCuda(stream));
    if (err != cudaSuccess)
      return Status::unavailable(strCat(codec, ": gpu stream failed: ", cudaGetErrorString(err)));
    GC_ASSIGN_OR_RETURN(auto host, buffer_.download());
    if (host[0].key != kNoFault) {
      err = cudaMemsetAsync(&buffer_.data()->key, 0xff, sizeof(unsigned long long), toCuda(stream));
      if (err != cudaSuccess)
        return Status::unavailable(strCat(codec, ": gpu fault reset failed: ", cudaGetErrorString(err)));
    }
    return host[0];
  }

  // take() in the stream's order, without waiting: the record's copy lands in `host` and the
  // record is cleared after it.
  Status snapshot(void* host, GpuStream stream, std::string_view codec) {
    cudaError_t err =
        cudaMemcpyAsync(host, buffer_.data(), sizeof(DeviceFault), cudaMemcpyDeviceToHost, toCuda(stream));
    if (err == cudaSuccess)
      err = cudaMemsetAsync(&buffer_.data()->key, 0xff, sizeof(unsigned long long), toCuda(stream));
    if (err != cudaSuccess)
      return Status::unavailable(strCat(codec, ": gpu fault snapshot failed: ", cudaGetErrorString(err)));
    return {};
  }

 private:
  Status clear() {
    const DeviceFault none{kNoFault, 0.0f, 0u, 0ull};
    return buffer_.upload(std::span<const DeviceFault>(&none, 1));
  }

  DeviceBuffer<DeviceFault> buffer_;
};

__host__ __device__ inline uint32_t faultKind(const DeviceFault& f) {
  return f.key == kNoFault ? 0u : static_cast<uint32_t>(f.key >> 48);
}
__host__ __device__ inline uint64_t faultIndex(const DeviceFault& f) { return f.key & ((1ull << 48) - 1); }

// After a batch of launches: a launch error (bad configuration, no device) as a Status.
inline Status launched(std::string_view codec) {
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess)
    return Status::unavailable(strCat(codec, ": gpu kernel launch failed: ", cudaGetErrorString(err)));
  return {};
}

// Encoded buffers hold fp32 headers read in place: they must be 4-byte aligned on the device.
inline Status checkAligned(std::string_view codec, const void* p, std::string_view what) {
  if (reinterpret_cast<uintptr_t>(p) % 4 != 0)
    return Status::invalidArgument(strCat(codec, ": ", what, " buffer is not 4-byte aligned"));
  return {};
}

}  // namespace gcagent::compress::cuda

namespace gcagent::compress::cuda {

// A GpuCodec with a fault record; subclasses word their faults as the CPU codec does.
class FaultingGpuCodec : public GpuCodec {
 public:
  Status finish(GpuStream stream) override {
    GC_ASSIGN_OR_RETURN(const DeviceFault f, faults_.take(stream, name()));
    if (faultKind(f) == 0) return {};
    return describe(f);
  }
  Status snapshotFaults(void* snapshot, GpuStream stream) override { return faults_.snapshot(snapshot, stream, name()); }
  Status faultIn(const void* snapshot) const override {
    DeviceFault f;
    std::memcpy(&f, snapshot, sizeof f);
    if (faultKind(f) == 0) return {};
    return describe(f);
  }

 protected:
  Status initFaults() { return faults_.init(); }
  DeviceFault* fault() const { return faults_.device(); }

  virtual Status describe(const DeviceFault& f) const {
    return Status::internal(strCat(name(), ": gpu recorded an unexpected fault of kind ", faultKind(f)));
  }

 private:
  FaultSlot faults_;
};

}  // namespace gcagent::compress::cuda
