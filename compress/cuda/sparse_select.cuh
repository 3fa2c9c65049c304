// Choosing on the GPU which elements a sparse codec (topk, threshold, dgc) sends, with the
// CPU's exact semantics (compress/sparse/select.h) and without sorting or a host round trip:
//   - the k-th largest magnitude key, by a radix select over 8-bit digits (four histogram
//     passes), over the whole slice or over keys sampled with the CPU's generator;
//   - equal keys go to the lower index: when only some of the keys equal to the k-th are
//     taken, the last index taken is found by counting equal keys per tile;
//   - the chosen elements, ascending, written as (index, value) pairs by an ordered
//     compaction (per-tile counts, one scan, per-tile writes), and zeroed in the residual.
// Every decision taken from device data (whether the exact top-k is needed, DGC's lowering of
// its threshold) stays on the device: the kernels of a stage read a flag and leave when it is
// off, so encode() never waits for the GPU.
#pragma once

#include <cstddef>
#include <cstdint>

#include "compress/cuda/launch.cuh"
#include "compress/sparse/sparse_math.h"

namespace gcagent::compress::cuda {

struct SelectState {
  uint32_t cut;        // send keys > cut, and keys == cut at indices <= last_tie
  uint32_t last_tie;
  uint32_t active;     // the exact top-k stage runs
  uint32_t need_tie;   // only some keys equal to the cut are sent
  uint32_t settled;    // dgc: the threshold needs no more lowering
  uint32_t prefix;     // radix select: the digits fixed so far ...
  uint32_t mask;       // ... and which bits they cover
  uint32_t unused;
  unsigned long long rank;     // the rank still sought among keys with the prefix
  unsigned long long greater;  // keys above the prefix
  unsigned long long equal;    // keys equal to the selected one, after the last pass
  unsigned long long count;    // countAtLeast's result
  unsigned long long plan[4];  // dgc with a warm-up: this encode's counts (Count::planned)
  unsigned long long hist[256];
};

// A count the host passes, or one a kernel planned into SelectState::plan before (dgc's
// warm-up counts follow the encodes the slice's device state has recorded).
struct Count {
  unsigned long long value = 0;
  int planned = -1;  // >= 0: st->plan[planned] instead of value

  __host__ __device__ Count(unsigned long long v) : value(v) {}
  static Count plannedAt(int i) {
    Count c(0);
    c.planned = i;
    return c;
  }
  __device__ unsigned long long of(const SelectState* st) const { return planned < 0 ? value : st->plan[planned]; }
};

inline constexpr size_t kTile = 4096;          // elements per tile of the ordered compaction
inline constexpr unsigned kTileThreads = 256;  // 16 consecutive elements per thread
inline constexpr uint32_t kAllTies = 0xffffffffu;

// Keys from the elements of x, or from a buffer of sampled keys.
struct KeySource {
  const float* x;
  const uint32_t* keys;
  __device__ uint32_t at(size_t j) const { return keys != nullptr ? keys[j] : sparse::magnitudeKey(x[j]); }
};

__device__ __forceinline__ bool chosen(uint32_t key, size_t i, uint32_t cut, uint32_t last_tie) {
  return key > cut || (key == cut && i <= last_tie);
}

__global__ inline void selectReset(SelectState* st) {
  st->cut = 0;
  st->last_tie = kAllTies;
  st->active = 1;
  st->need_tie = 0;
  st->settled = 0;
}

__global__ inline void radixStart(SelectState* st, Count rank) {
  if (!st->active) return;
  st->prefix = 0;
  st->mask = 0;
  st->rank = rank.of(st);
  st->greater = 0;
  for (int b = 0; b < 256; ++b) st->hist[b] = 0;
}

__global__ inline void radixHistogram(KeySource src, size_t count, SelectState* st, unsigned shift) {
  if (!st->active) return;
  __shared__ unsigned int h[256];
  for (unsigned b = threadIdx.x; b < 256; b += blockDim.x) h[b] = 0;
  __syncthreads();
  const uint32_t prefix = st->prefix, mask = st->mask;
  for (size_t j = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; j < count;
       j += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const uint32_t key = src.at(j);
    if ((key & mask) == prefix) atomicAdd(&h[(key >> shift) & 0xffu], 1u);
  }
  __syncthreads();
  for (unsigned b = threadIdx.x; b < 256; b += blockDim.x)
    if (h[b] != 0) atomicAdd(&st->hist[b], static_cast<unsigned long long>(h[b]));
}

// Fixes the digit at `shift`: the bucket holding the sought rank, counted from the top.
__global__ inline void radixPick(SelectState* st, unsigned shift) {
  if (!st->active) return;
  unsigned b = 255;
  for (;; --b) {
    const unsigned long long c = st->hist[b];
    if (st->rank <= c || b == 0) break;
    st->rank -= c;
    st->greater += c;
  }
  st->prefix |= static_cast<uint32_t>(b) << shift;
  st->mask |= 0xffu << shift;
  if (shift == 0) {
    st->cut = st->prefix;
    st->equal = st->hist[b];
    // rank is now how many keys equal to the cut are sent.
    st->need_tie = st->rank < st->equal ? 1u : 0u;
    st->last_tie = kAllTies;
  }
  for (int d = 0; d < 256; ++d) st->hist[d] = 0;
}

// st->count = the number of keys of x at or above the cut (skipped once `settled` when
// `unless_settled`).
__global__ inline void countAtLeast(const float* __restrict__ x, size_t n, SelectState* st,
                                    bool unless_settled) {
  if (unless_settled && st->settled) return;
  const uint32_t cut = st->cut;
  unsigned long long mine = 0;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    mine += sparse::magnitudeKey(x[i]) >= cut ? 1 : 0;
  for (unsigned offset = 16; offset != 0; offset >>= 1) mine += __shfl_xor_sync(0xffffffffu, mine, offset);
  if (threadIdx.x % 32 == 0 && mine != 0) atomicAdd(&st->count, mine);
}

__global__ inline void clearCount(SelectState* st) { st->count = 0; }

// After a sampled select: every key at or above the cut goes (until an exact stage says
// otherwise).
__global__ inline void takeAllAtCut(SelectState* st) {
  st->need_tie = 0;
  st->last_tie = kAllTies;
}

// DGC: lower the cut by `factor` while fewer than `enough` reach it.
__global__ inline void relaxStep(SelectState* st, Count enough, float factor) {
  if (st->settled) return;
  if (st->cut != 0 && st->count < enough.of(st)) {
    st->cut = sparse::scaledKey(st->cut, factor);
  } else {
    st->settled = 1;
  }
  st->count = 0;
}

// Whether the exact top-k must replace "everything at or above the cut".
__global__ inline void decideExact(SelectState* st, Count most) {
  st->active = st->count > most.of(st) ? 1u : 0u;
}

// ---- ties: the index of the rank-th key equal to the cut.

__global__ inline void countEqualPerTile(const float* __restrict__ x, size_t n, const SelectState* st,
                                         uint32_t* __restrict__ tile_counts) {
  if (!st->need_tie) return;
  const size_t begin = blockIdx.x * kTile;
  const size_t end = begin + kTile < n ? begin + kTile : n;
  unsigned int mine = 0;
  for (size_t i = begin + threadIdx.x; i < end; i += blockDim.x) mine += sparse::magnitudeKey(x[i]) == st->cut;
  for (unsigned offset = 16; offset != 0; offset >>= 1) mine += __shfl_xor_sync(0xffffffffu, mine, offset);
  __shared__ unsigned int sum;
  if (threadIdx.x == 0) sum = 0;
  __syncthreads();
  if (threadIdx.x % 32 == 0) atomicAdd(&sum, mine);
  __syncthreads();
  if (threadIdx.x == 0) tile_counts[blockIdx.x] = sum;
}

__global__ inline void findLastTie(const float* __restrict__ x, size_t n, const uint32_t* tile_counts,
                                   SelectState* st) {
  if (!st->need_tie) return;
  unsigned long long left = st->rank;  // equal keys still to take
  const size_t tiles = (n + kTile - 1) / kTile;
  size_t tile = 0;
  for (; tile < tiles && tile_counts[tile] < left; ++tile) left -= tile_counts[tile];
  for (size_t i = tile * kTile; i < n; ++i) {
    if (sparse::magnitudeKey(x[i]) == st->cut && --left == 0) {
      st->last_tie = static_cast<uint32_t>(i);
      return;
    }
  }
}

// ---- the ordered compaction of the chosen elements into (count | indices | values).

__global__ inline void countChosenPerTile(const float* __restrict__ x, size_t n, const SelectState* st,
                                          uint32_t* __restrict__ tile_counts) {
  const size_t begin = blockIdx.x * kTile;
  const size_t end = begin + kTile < n ? begin + kTile : n;
  const uint32_t cut = st->cut, last_tie = st->last_tie;
  unsigned int mine = 0;
  for (size_t i = begin + threadIdx.x; i < end; i += blockDim.x)
    mine += chosen(sparse::magnitudeKey(x[i]), i, cut, last_tie);
  for (unsigned offset = 16; offset != 0; offset >>= 1) mine += __shfl_xor_sync(0xffffffffu, mine, offset);
  __shared__ unsigned int sum;
  if (threadIdx.x == 0) sum = 0;
  __syncthreads();
  if (threadIdx.x % 32 == 0) atomicAdd(&sum, mine);
  __syncthreads();
  if (threadIdx.x == 0) tile_counts[blockIdx.x] = sum;
}

// Exclusive scan of the tile counts, by one block; the total is the encoding's count header.
__global__ inline void scanTiles(uint32_t* __restrict__ tile_counts, size_t tiles, uint32_t* header) {
  __shared__ uint32_t partial[1024];
  const size_t per = (tiles + blockDim.x - 1) / blockDim.x;
  const size_t begin = threadIdx.x * per;
  const size_t end = begin + per < tiles ? begin + per : tiles;
  uint32_t sum = 0;
  for (size_t t = begin; t < end; ++t) sum += tile_counts[t];
  partial[threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.x == 0) {
    uint32_t run = 0;
    for (unsigned k = 0; k < blockDim.x; ++k) {
      const uint32_t c = partial[k];
      partial[k] = run;
      run += c;
    }
    *header = run;
  }
  __syncthreads();
  uint32_t run = partial[threadIdx.x];
  for (size_t t = begin; t < end; ++t) {
    const uint32_t c = tile_counts[t];
    tile_counts[t] = run;
    run += c;
  }
}

// Writes the chosen elements of each tile in order and zeroes them in x (and in `also`, DGC's
// momentum, when given): what was sent is no longer owed.
__global__ inline void writeChosen(float* __restrict__ x, float* __restrict__ also, size_t n,
                                   const SelectState* st, const uint32_t* __restrict__ tile_offsets,
                                   uint32_t* __restrict__ out) {
  const size_t begin = blockIdx.x * kTile + threadIdx.x * (kTile / kTileThreads);
  const size_t end = begin + kTile / kTileThreads < n ? begin + kTile / kTileThreads : n;
  const uint32_t cut = st->cut, last_tie = st->last_tie;
  uint32_t mine = 0;
  for (size_t i = begin; i < end; ++i) mine += chosen(sparse::magnitudeKey(x[i]), i, cut, last_tie);
  // Exclusive scan of `mine` over the block: within each warp, then over the warps.
  const unsigned lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  uint32_t inclusive = mine;
  for (unsigned offset = 1; offset < 32; offset <<= 1) {
    const uint32_t up = __shfl_up_sync(0xffffffffu, inclusive, offset);
    if (lane >= offset) inclusive += up;
  }
  __shared__ uint32_t warp_total[kTileThreads / 32];
  if (lane == 31) warp_total[warp] = inclusive;
  __syncthreads();
  uint32_t before = tile_offsets[blockIdx.x];
  for (unsigned w = 0; w < warp; ++w) before += warp_total[w];
  uint32_t pos = before + inclusive - mine;
  const uint32_t total = out[0];
  uint32_t* indices = out + 1;
  auto* values = reinterpret_cast<float*>(out + 1 + total);
  for (size_t i = begin; i < end && mine != 0; ++i) {
    if (!chosen(sparse::magnitudeKey(x[i]), i, cut, last_tie)) continue;
    indices[pos] = static_cast<uint32_t>(i);
    values[pos] = x[i];
    x[i] = 0.0f;
    if (also != nullptr) also[i] = 0.0f;
    ++pos;
  }
}

// Keys of the sampled elements, drawn as the CPU draws them.
__global__ inline void gatherSample(const float* __restrict__ x, size_t n, size_t samples,
                                    uint64_t stream, uint32_t* __restrict__ keys) {
  const size_t j = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (j < samples) keys[j] = sparse::magnitudeKey(x[sparse::sampleIndex(stream, j, n)]);
}

}  // namespace gcagent::compress::cuda
