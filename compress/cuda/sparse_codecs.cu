// topk and threshold on the GPU, with the CPU codecs' exact choices (see
// compress/topk/topk.cc, compress/threshold/threshold.cc and compress/sparse/select.h): a
// radix select instead of introselect, an ordered compaction instead of a loop, the same
// (index, value) format (compress/sparse/sparse_format.h). The encoded size of threshold varies: encode() returns the bound, and the exact
// size is 4 + 8 * the count in the first four bytes once finish() has returned.
#include <algorithm>
#include <memory>

#include "compress/cuda/codecs.h"
#include "compress/cuda/launch.cuh"
#include "compress/cuda/sparse_codec.cuh"
#include "compress/params.h"
#include "compress/random_math.h"
#include "compress/sparse/select.h"

namespace gcagent::compress::cuda {
namespace {

__global__ void accumulate(const float* __restrict__ g, float* __restrict__ r, size_t n) {
  const size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i < n) r[i] += g[i];
}

class GpuTopkCodec final : public GpuSparseCodec {
 public:
  explicit GpuTopkCodec(double ratio) : ratio_(ratio) {}

  std::string_view name() const override { return "topk"; }
  size_t stateElements(size_t n) const override { return n; }
  size_t maxEncodedBytes(size_t n) const override { return sparse::bytesFor(sparse::countFor(ratio_, n)); }

  Result<size_t> encode(std::span<const float> in, std::span<float> state, std::span<std::byte> out,
                        const SliceId&, GpuStream stream) override {
    const size_t n = in.size();
    GC_RETURN_IF_ERROR(sparse::checkSliceLength(name(), n));
    GC_RETURN_IF_ERROR(checkEncodeSpans(name(), n, state.size(), n, out.size(), maxEncodedBytes(n)));
    GC_RETURN_IF_ERROR(checkAligned(name(), out.data(), "output"));
    const cudaStream_t s = toCuda(stream);
    if (n == 0) {
      cudaMemsetAsync(out.data(), 0, 4, s);
      return launchedBytes(0);
    }
    GC_RETURN_IF_ERROR(reserve(n, 0));
    float* r = state.data();
    accumulate<<<blocksFor(n), kThreads, 0, s>>>(in.data(), r, n);
    selectReset<<<1, 1, 0, s>>>(st());
    selectLargest(r, n, sparse::countFor(ratio_, n), s);
    writePairs(r, nullptr, n, out.data(), s);
    return launchedBytes(n);
  }

  Status init() { return initFaults(); }

 protected:
  Status checkDecodeSize(size_t n, size_t have) const override {
    return checkEncodedSize(name(), n, have, maxEncodedBytes(n));
  }

 private:
  Result<size_t> launchedBytes(size_t n) {
    GC_RETURN_IF_ERROR(launched(name()));
    return maxEncodedBytes(n);
  }

  double ratio_;
};

class GpuThresholdCodec final : public GpuSparseCodec {
 public:
  GpuThresholdCodec(double drop, double sample, uint64_t seed)
      : keep_(1 - drop), sample_(sample), seed_(seed) {}

  std::string_view name() const override { return "threshold"; }
  size_t stateElements(size_t n) const override { return n; }
  size_t maxEncodedBytes(size_t n) const override { return sparse::bytesFor(sparse::countFor(keep_, n)); }
  bool isFixedSize() const override { return false; }

  Result<size_t> encode(std::span<const float> in, std::span<float> state, std::span<std::byte> out,
                        const SliceId& id, GpuStream stream) override {
    const size_t n = in.size();
    GC_RETURN_IF_ERROR(sparse::checkSliceLength(name(), n));
    GC_RETURN_IF_ERROR(checkEncodeSpans(name(), n, state.size(), n, out.size(), maxEncodedBytes(n)));
    GC_RETURN_IF_ERROR(checkAligned(name(), out.data(), "output"));
    const cudaStream_t s = toCuda(stream);
    if (n == 0) {
      cudaMemsetAsync(out.data(), 0, 4, s);
      GC_RETURN_IF_ERROR(launched(name()));
      return sparse::bytesFor(0);
    }
    const size_t samples = sparse::sampleCount(sample_, n);
    const size_t k = sparse::countFor(keep_, n);
    GC_RETURN_IF_ERROR(reserve(n, samples));
    float* r = state.data();
    accumulate<<<blocksFor(n), kThreads, 0, s>>>(in.data(), r, n);
    selectReset<<<1, 1, 0, s>>>(st());
    selectSampled(r, n, samples, sparse::countFor(keep_, std::min(samples, n)),
                  rng::streamSeed(seed_, id.key, id.slice, id.step), s);
    // More than k reach the cut: the k largest of them go, i.e. the k largest of all.
    countReaching(r, n, false, s);
    decideExact<<<1, 1, 0, s>>>(st(), k);
    selectLargest(r, n, k, s);
    writePairs(r, nullptr, n, out.data(), s);
    GC_RETURN_IF_ERROR(launched(name()));
    return maxEncodedBytes(n);
  }

  Status init() { return initFaults(); }

 protected:
  Status checkDecodeSize(size_t n, size_t have) const override {
    return sparse::checkAtMost(name(), n, have, maxEncodedBytes(n));
  }

 private:
  double keep_;
  double sample_;
  uint64_t seed_;
};

template <class C>
Result<std::unique_ptr<GpuCodec>> initialized(std::unique_ptr<C> codec) {
  GC_RETURN_IF_ERROR(codec->init());
  return std::unique_ptr<GpuCodec>(std::move(codec));
}

}  // namespace

Result<std::unique_ptr<GpuCodec>> makeGpuTopk(const Params& params) {
  ParamReader reader("topk", params);
  const double ratio = reader.real("ratio", 0.01, Range::openClosed(0, 1));
  GC_RETURN_IF_ERROR(reader.finish());
  return initialized(std::make_unique<GpuTopkCodec>(ratio));
}

Result<std::unique_ptr<GpuCodec>> makeGpuThreshold(const Params& params) {
  ParamReader reader("threshold", params);
  const double drop = reader.real("drop", 0.99, Range{0, 1, false, true});
  const double sample = reader.real("sample", 0.001, Range::openClosed(0, 1));
  const uint64_t seed = reader.seed("seed", 0);
  GC_RETURN_IF_ERROR(reader.finish());
  return initialized(std::make_unique<GpuThresholdCodec>(drop, sample, seed));
}

}  // namespace gcagent::compress::cuda
