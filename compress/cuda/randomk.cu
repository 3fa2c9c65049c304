// randomk on the GPU (see compress/randomk/randomk.cc for the format). The index set comes
// from Floyd's algorithm, whose every draw depends on the ones before it, so the host draws
// it with the CPU codec's own function and copies it over (4k bytes, asynchronously from
// pinned memory); the GPU gathers (encode) or scatters (decode) the values.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <memory>

#include "compress/cuda/codecs.h"
#include "compress/cuda/launch.cuh"
#include "compress/params.h"
#include "compress/random_math.h"
#include "compress/randomk/randomk.h"
#include "compress/randomk/randomk_math.h"
#include "compress/sparse/select.h"

namespace gcagent::compress::cuda {
namespace {

__global__ void accumulate(const float* __restrict__ g, float* __restrict__ r, size_t n) {
  const size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i < n) r[i] += g[i];
}

// Error feedback: the residual's values go out unscaled and are no longer owed.
__global__ void sendAndClear(float* __restrict__ r, const uint32_t* __restrict__ idx, size_t k,
                             float* __restrict__ out) {
  const size_t j = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (j >= k) return;
  out[j] = r[idx[j]];
  r[idx[j]] = 0.0f;
}

__global__ void sendScaled(const float* __restrict__ g, const uint32_t* __restrict__ idx, size_t k,
                           float scale, float* __restrict__ out) {
  const size_t j = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (j < k) out[j] = g[idx[j]] * scale;
}

__global__ void scatterAdd(const float* __restrict__ in, const uint32_t* __restrict__ idx, size_t k,
                           float* __restrict__ acc) {
  const size_t j = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (j < k) acc[idx[j]] += in[j];
}

class GpuRandomkCodec final : public FaultingGpuCodec {
 public:
  GpuRandomkCodec(double ratio, uint64_t seed, bool error_feedback)
      : ratio_(ratio), seed_(seed), error_feedback_(error_feedback) {}
  ~GpuRandomkCodec() override {
    if (copied_ != nullptr) cudaEventDestroy(copied_);
    if (staging_ != nullptr) cudaFreeHost(staging_);
  }

  std::string_view name() const override { return "randomk"; }
  size_t stateElements(size_t n) const override { return error_feedback_ ? n : 0; }
  size_t maxEncodedBytes(size_t n) const override { return 4 * sparse::countFor(ratio_, n); }

  Result<size_t> encode(std::span<const float> in, std::span<float> state, std::span<std::byte> out,
                        const SliceId& id, GpuStream stream) override {
    const size_t n = in.size();
    const size_t k = sparse::countFor(ratio_, n);
    GC_RETURN_IF_ERROR(sparse::checkSliceLength(name(), n));
    GC_RETURN_IF_ERROR(checkEncodeSpans(name(), n, state.size(), stateElements(n), out.size(), 4 * k));
    GC_RETURN_IF_ERROR(checkAligned(name(), out.data(), "output"));
    if (k == 0) return size_t{0};
    const cudaStream_t s = toCuda(stream);
    GC_ASSIGN_OR_RETURN(const uint32_t* idx, indicesOnDevice(n, k, id, s));
    auto* values = reinterpret_cast<float*>(out.data());
    if (error_feedback_) {
      accumulate<<<blocksFor(n), kThreads, 0, s>>>(in.data(), state.data(), n);
      sendAndClear<<<blocksFor(k), kThreads, 0, s>>>(state.data(), idx, k, values);
    } else {
      sendScaled<<<blocksFor(k), kThreads, 0, s>>>(in.data(), idx, k, randomk::unbiasedScale(n, k), values);
    }
    GC_RETURN_IF_ERROR(launched(name()));
    return 4 * k;
  }

  Status decodeAdd(std::span<const std::byte> in, std::span<float> acc, const SliceId& id,
                   GpuStream stream) override {
    const size_t n = acc.size();
    const size_t k = sparse::countFor(ratio_, n);
    GC_RETURN_IF_ERROR(sparse::checkSliceLength(name(), n));
    GC_RETURN_IF_ERROR(checkEncodedSize(name(), n, in.size(), 4 * k));
    GC_RETURN_IF_ERROR(checkAligned(name(), in.data(), "encoded"));
    if (k == 0) return {};
    const cudaStream_t s = toCuda(stream);
    GC_ASSIGN_OR_RETURN(const uint32_t* idx, indicesOnDevice(n, k, id, s));
    scatterAdd<<<blocksFor(k), kThreads, 0, s>>>(reinterpret_cast<const float*>(in.data()), idx, k,
                                                 acc.data());
    return launched(name());
  }

  Status init() {
    GC_RETURN_IF_ERROR(initFaults());
    const cudaError_t err = cudaEventCreateWithFlags(&copied_, cudaEventDisableTiming);
    if (err != cudaSuccess)
      return Status::unavailable(strCat("randomk: cannot create a gpu event: ", cudaGetErrorString(err)));
    return {};
  }

 private:
  // Draws the slice's index set on the host and queues its copy to the device.
  Result<const uint32_t*> indicesOnDevice(size_t n, size_t k, const SliceId& id, cudaStream_t s) {
    const auto idx = randomk::drawIndices(n, k, rng::streamSeed(seed_, id.key, id.slice, id.step));
    if (device_idx_.size() < k) {
      GC_ASSIGN_OR_RETURN(device_idx_, DeviceBuffer<uint32_t>::allocate(k));
    }
    // The staging memory is reused: the previous copy out of it must have finished.
    cudaError_t err = cudaEventSynchronize(copied_);
    if (err == cudaSuccess && staging_elements_ < k) {
      if (staging_ != nullptr) cudaFreeHost(staging_);
      staging_ = nullptr;
      staging_elements_ = 0;
      err = cudaMallocHost(&staging_, 4 * k);
      if (err == cudaSuccess) staging_elements_ = k;
    }
    if (err == cudaSuccess) {
      std::memcpy(staging_, idx.data(), 4 * k);
      err = cudaMemcpyAsync(device_idx_.data(), staging_, 4 * k, cudaMemcpyHostToDevice, s);
    }
    if (err == cudaSuccess) err = cudaEventRecord(copied_, s);
    if (err != cudaSuccess)
      return Status::unavailable(strCat("randomk: cannot copy the index set to the gpu: ", cudaGetErrorString(err)));
    return static_cast<const uint32_t*>(device_idx_.data());
  }

  double ratio_;
  uint64_t seed_;
  bool error_feedback_;
  DeviceBuffer<uint32_t> device_idx_;
  uint32_t* staging_ = nullptr;
  size_t staging_elements_ = 0;
  cudaEvent_t copied_ = nullptr;
};

}  // namespace

Result<std::unique_ptr<GpuCodec>> makeGpuRandomk(const Params& params) {
  ParamReader reader("randomk", params);
  const double ratio = reader.real("ratio", 0.01, Range::openClosed(0, 1));
  const uint64_t seed = reader.seed("seed", 0);
  const bool error_feedback = reader.boolean("error_feedback", true);
  GC_RETURN_IF_ERROR(reader.finish());
  auto codec = std::make_unique<GpuRandomkCodec>(ratio, seed, error_feedback);
  GC_RETURN_IF_ERROR(codec->init());
  return std::unique_ptr<GpuCodec>(std::move(codec));
}

}  // namespace gcagent::compress::cuda
