// Slice statistics computed in exactly the CPU codecs' order, so the GPU gets the same bits:
// the CPU sums a run of elements in four double lanes (lane j takes elements j, j+4, ... while
// a whole group of four remains, lane 0 then takes the tail in order), adds the lanes as
// (l0 + l1) + (l2 + l3), and adds the runs' sums in order. Here a thread block stages a run in
// shared memory with coalesced loads and four threads run the lanes from there; the sum over
// runs is one thread's sequential walk over blocks staged the same way.
#pragma once

#include <cstddef>
#include <cstdint>

namespace gcagent::compress::cuda {

template <class F>
__device__ __forceinline__ double laneSum(size_t begin, size_t end, uint32_t lane, F term) {
  double sum = 0.0;
  const size_t groups = (end - begin) / 4;
  for (size_t q = 0; q < groups; ++q) sum += term(begin + 4 * q + lane);
  if (lane == 0)
    for (size_t i = begin + 4 * groups; i < end; ++i) sum += term(i);
  return sum;
}

__device__ __forceinline__ double combineLanes(const double* lanes) {
  return (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
}

inline constexpr unsigned kStageThreads = 256;

// The CPU's four-lane sum of term(v[k]) over the `count` values staged in shared memory,
// called by every thread of the block once each has staged its values; the result is valid in thread 0.
template <class F>
__device__ __forceinline__ double stagedRunSum(const float* v, size_t count, F term) {
  __shared__ double lanes[4];
  __syncthreads();  // the staging is complete
  if (threadIdx.x < 4)
    lanes[threadIdx.x] = laneSum(0, count, threadIdx.x, [&](size_t k) { return term(v[k]); });
  __syncthreads();
  return combineLanes(lanes);
}

// sum of parts[0 .. count) in order, by one block: the parts are staged in shared memory in
// chunks and thread 0 adds them. The result lands in *out.
__global__ inline void sumInOrder(const double* __restrict__ parts, size_t count, double* out) {
  constexpr size_t kChunk = 2048;
  __shared__ double chunk[kChunk];
  double sum = 0.0;
  for (size_t base = 0; base < count; base += kChunk) {
    const size_t here = count - base < kChunk ? count - base : kChunk;
    for (size_t k = threadIdx.x; k < here; k += blockDim.x) chunk[k] = parts[base + k];
    __syncthreads();
    if (threadIdx.x == 0)
      for (size_t k = 0; k < here; ++k) sum += chunk[k];
    __syncthreads();
  }
  if (threadIdx.x == 0) *out = sum;
}

// OR of v over groups of `width` consecutive lanes (a power of two up to 32); every lane of
// the warp must call it. Packs per-element bits into whole 32-bit words.
__device__ __forceinline__ uint32_t orOverLanes(uint32_t v, unsigned width) {
  for (unsigned offset = 1; offset < width; offset <<= 1) v |= __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// Byte b of a little-endian 32-bit word sits at bit 8 * b.
__device__ __forceinline__ uint32_t byteShift(size_t byte_index) {
  return 8u * static_cast<uint32_t>(byte_index & 3u);
}

}  // namespace gcagent::compress::cuda
