// What the GPU's sparse codecs share (topk and threshold in sparse_codecs.cu, every selecting
// definition in compll/cuda/selector.cuh): the selection workspace and its stages
// (sparse_select.cuh), and the decoder of the (index, value) format
// (compress/sparse/sparse_format.h), which checks the count, then every pair (range, then
// repeats), before it adds anything.
#pragma once

#include <algorithm>

#include "common/str_cat.h"
#include "compress/cuda/device_buffer.h"
#include "compress/cuda/launch.cuh"
#include "compress/cuda/sparse_select.cuh"
#include "compress/sparse/select.h"

namespace gcagent::compress::cuda {


__global__ inline void checkCount(const uint32_t* __restrict__ in, size_t n, size_t bytes, DeviceFault* fault) {
  const uint32_t count = in[0];
  if (count > n) {
    fault->detail = count;
    fault->extra = n;
    raiseFault(fault, kFaultBadCount, 0);
  } else if (4 + 8 * static_cast<size_t>(count) != bytes) {  // sparse::bytesFor(count)
    fault->detail = count;
    fault->extra = bytes;
    raiseFault(fault, kFaultBadCount, 1);
  }
}

__global__ inline void checkPairs(const uint32_t* __restrict__ in, size_t n, size_t most, uint32_t* seen,
                           DeviceFault* fault) {
  const size_t p = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (faulted(fault)) return;  // a bad count: the pairs are not where they seem
  if (p >= in[0] || p >= most) return;
  const uint32_t index = in[1 + p];
  if (index >= n) {
    raiseFault(fault, kFaultBadPair, p);
    return;
  }
  const uint32_t bit = 1u << (index % 32);
  if ((atomicOr(&seen[index / 32], bit) & bit) != 0) raiseFault(fault, kFaultBadPair, p);
}

__global__ inline void recordPair(const uint32_t* __restrict__ in, size_t n, DeviceFault* fault) {
  if (faultKind(*fault) != kFaultBadPair) return;
  fault->detail = in[1 + faultIndex(*fault)];
  fault->extra = n;
}

__global__ inline void addPairs(const uint32_t* __restrict__ in, float* __restrict__ acc, size_t most,
                         const DeviceFault* fault) {
  const size_t p = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (faulted(fault)) return;
  const uint32_t count = in[0];
  if (p >= count || p >= most) return;
  acc[in[1 + p]] += reinterpret_cast<const float*>(in + 1 + count)[p];
}

// The selection workspace and the decoder.
class GpuSparseCodec : public FaultingGpuCodec {
 public:
  Status decodeAdd(std::span<const std::byte> in, std::span<float> acc, const SliceId&,
                   GpuStream stream) override {
    const size_t n = acc.size();
    GC_RETURN_IF_ERROR(sparse::checkSliceLength(name(), n));
    GC_RETURN_IF_ERROR(checkDecodeSize(n, in.size()));
    if (in.size() < 4)
      return Status::dataLoss(strCat(name(), ": encoded buffer holds ", in.size(),
                                     " bytes, less than the 4-byte count header"));
    GC_RETURN_IF_ERROR(checkAligned(name(), in.data(), "encoded"));
    const size_t most = (in.size() - 4) / 8;
    const size_t words = (n + 31) / 32;
    if (seen_.size() < std::max<size_t>(words, 1)) {
      GC_ASSIGN_OR_RETURN(seen_, DeviceBuffer<uint32_t>::allocate(std::max<size_t>(words, 1)));
    }
    const cudaStream_t s = toCuda(stream);
    const auto* words_in = reinterpret_cast<const uint32_t*>(in.data());
    checkCount<<<1, 1, 0, s>>>(words_in, n, in.size(), fault());
    if (most != 0) {
      cudaMemsetAsync(seen_.data(), 0, 4 * words, s);
      checkPairs<<<blocksFor(most), kThreads, 0, s>>>(words_in, n, most, seen_.data(), fault());
      recordPair<<<1, 1, 0, s>>>(words_in, n, fault());
      addPairs<<<blocksFor(most), kThreads, 0, s>>>(words_in, acc.data(), most, fault());
    }
    return launched(name());
  }

 protected:
  virtual Status checkDecodeSize(size_t n, size_t have) const = 0;

  Status describe(const DeviceFault& f) const override {
    switch (faultKind(f)) {
      case kFaultBadCount:
        if (faultIndex(f) == 0)
          return Status::dataLoss(strCat(name(), ": encoded count ", f.detail, " exceeds the slice length ", f.extra));
        return Status::dataLoss(strCat(name(), ": encoded buffer holds ", f.extra, " bytes, but ", f.detail,
                                       " pairs need ", sparse::bytesFor(f.detail)));
      case kFaultBadPair:
        if (f.detail >= f.extra)
          return Status::dataLoss(strCat(name(), ": pair ", faultIndex(f), " has index ", f.detail,
                                         ", outside the slice of ", f.extra, " elements"));
        return Status::dataLoss(strCat(name(), ": pair ", faultIndex(f), " repeats index ", f.detail));
      default:
        return FaultingGpuCodec::describe(f);
    }
  }

  // Device workspace for a slice of n elements and a sample of `samples` keys.
  Status reserve(size_t n, size_t samples) {
    if (state_.size() == 0) {
      GC_ASSIGN_OR_RETURN(state_, DeviceBuffer<SelectState>::allocate(1));
    }
    const size_t tiles = std::max<size_t>((n + kTile - 1) / kTile, 1);
    if (tiles_.size() < tiles) {
      GC_ASSIGN_OR_RETURN(tiles_, DeviceBuffer<uint32_t>::allocate(tiles));
    }
    if (samples < n && sample_keys_.size() < samples) {
      GC_ASSIGN_OR_RETURN(sample_keys_, DeviceBuffer<uint32_t>::allocate(samples));
    }
    return {};
  }

  SelectState* st() const { return state_.data(); }

  // The rank-th largest key of x (over all n elements), ties resolved to the lower index.
  void selectLargest(const float* x, size_t n, Count rank, cudaStream_t s) {
    radixSelect(KeySource{x, nullptr}, n, rank, s);
    const unsigned tiles = static_cast<unsigned>((n + kTile - 1) / kTile);
    countEqualPerTile<<<tiles, kTileThreads, 0, s>>>(x, n, st(), tiles_.data());
    findLastTie<<<1, 1, 0, s>>>(x, n, tiles_.data(), st());
  }

  // The rank-th largest of `samples` keys drawn from x as the CPU draws them (all of x when
  // samples >= n); every key at or above it goes.
  void selectSampled(const float* x, size_t n, size_t samples, Count rank, uint64_t stream,
                     cudaStream_t s) {
    if (samples >= n) {
      radixSelect(KeySource{x, nullptr}, n, rank, s);
    } else {
      gatherSample<<<blocksFor(samples), kThreads, 0, s>>>(x, n, samples, stream, sample_keys_.data());
      radixSelect(KeySource{nullptr, sample_keys_.data()}, samples, rank, s);
    }
    takeAllAtCut<<<1, 1, 0, s>>>(st());
  }

  void countReaching(const float* x, size_t n, bool unless_settled, cudaStream_t s) {
    if (!unless_settled) clearCount<<<1, 1, 0, s>>>(st());
    countAtLeast<<<histogramBlocks(n), kThreads, 0, s>>>(x, n, st(), unless_settled);
  }

  // Writes the chosen elements of x as pairs into out and zeroes them in x (and in `also`).
  void writePairs(float* x, float* also, size_t n, std::byte* out, cudaStream_t s) {
    const unsigned tiles = static_cast<unsigned>((n + kTile - 1) / kTile);
    auto* words = reinterpret_cast<uint32_t*>(out);
    countChosenPerTile<<<tiles, kTileThreads, 0, s>>>(x, n, st(), tiles_.data());
    scanTiles<<<1, 1024, 0, s>>>(tiles_.data(), tiles, words);
    writeChosen<<<tiles, kTileThreads, 0, s>>>(x, also, n, st(), tiles_.data(), words);
  }

 private:
  static unsigned histogramBlocks(size_t count) {
    return static_cast<unsigned>(std::min<size_t>(blocksFor(count), 1024));
  }

  void radixSelect(KeySource src, size_t count, Count rank, cudaStream_t s) {
    radixStart<<<1, 1, 0, s>>>(st(), rank);
    for (int shift = 24; shift >= 0; shift -= 8) {
      radixHistogram<<<histogramBlocks(count), kThreads, 0, s>>>(src, count, st(), shift);
      radixPick<<<1, 1, 0, s>>>(st(), shift);
    }
  }

  DeviceBuffer<SelectState> state_;
  DeviceBuffer<uint32_t> tiles_;
  DeviceBuffer<uint32_t> sample_keys_;
  DeviceBuffer<uint32_t> seen_;
};

}  // namespace gcagent::compress::cuda
