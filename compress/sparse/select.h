// Choosing which elements a sparse codec sends: counts from ratios, sampled magnitude
// thresholds, exact top-k by introselect (never a full sort), and writing the chosen pairs.
// Selection runs on the caller's thread and depends only on the values and the stream, so
// the bytes never depend on how the element-wise work around it was split.
#pragma once

#include <algorithm>
#include <cstring>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <mutex>
#include <utility>
#include <span>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "common/str_cat.h"
#include "compress/bytes.h"
#include "compress/cpu/chunks.h"
#include "compress/sparse/sparse_format.h"
#include "compress/sparse/select_kernels.h"
#include "compress/sparse/sparse_math.h"

namespace gcagent::compress::sparse {

// Indices travel as u32.
inline constexpr size_t kMaxElements = std::numeric_limits<uint32_t>::max();

// Fewest elements a sampled threshold looks at; smaller slices are read whole (exactly).
inline constexpr size_t kMinSamples = 256;

inline Status checkSliceLength(std::string_view codec, size_t n) {
  if (n > kMaxElements)
    return Status::invalidArgument(strCat(codec, ": a slice of ", n, " elements exceeds the ",
                                          kMaxElements, " that u32 indices address"));
  return {};
}

// decodeAdd() of a variable-size encoding: the buffer must not exceed the bound.
inline Status checkAtMost(std::string_view codec, size_t n, size_t have, size_t most) {
  if (have > most)
    return Status::dataLoss(strCat(codec, ": encoded buffer holds ", have, " bytes; a slice of ", n,
                                   " elements encodes to at most ", most));
  return {};
}

// countFor(fraction, n): compress/sparse/sparse_math.h (dgc's GPU warm-up computes it on the device).

// How many elements a sampled threshold draws: a `fraction` of n, at least kMinSamples,
// at most n.
inline size_t sampleCount(double fraction, size_t n) {
  return std::min(n, std::max(kMinSamples, countFor(fraction, n)));
}

// r += g, split over the codec pool (chunk edges on 64-byte lines).
inline void accumulate(const CodecEnv& env, std::span<const float> g, std::span<float> r) {
  const float* src = g.data();
  float* dst = r.data();
  forChunks(env, g.size(), 16, [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) dst[i] += src[i];
  });
}

inline size_t countAtLeast(std::span<const float> x, uint32_t key) {
  size_t count = 0;
  for (float v : x) count += magnitudeKey(v) >= key ? 1 : 0;
  return count;
}

// Per-thread room for one encode's candidate indices (n entries) and their keys: encode is
// const and runs on several codec threads at once, and the buffers keep the size of the
// largest slice the thread has seen, so a steady stream of slices allocates nothing.
inline uint32_t* indexScratch(size_t n) {
  thread_local std::vector<uint32_t> buffer;
  if (buffer.size() < n) buffer.resize(n);
  return buffer.data();
}
inline uint32_t* keyScratch(size_t n) {
  thread_local std::vector<uint32_t> buffer;
  if (buffer.size() < n) buffer.resize(n);
  return buffer.data();
}

// Writes the indices, ascending, of the elements of x whose magnitude key reaches `key` to
// idx (room for x.size()); returns how many.
inline size_t collectAtLeast(std::span<const float> x, uint32_t key, uint32_t* idx) {
  return kernels().collect(x.data(), 0, x.size(), key, idx);
}

// Runs a collecting pass, pass(begin, end, out) -> count, over [0, n), split over the codec
// pool as forChunks splits; each chunk collects into its own stretch of idx (room for n),
// and the stretches are then closed up in order. Returns the count.
template <class Pass>
size_t collectChunks(const CodecEnv& env, size_t n, uint32_t* idx, Pass&& pass) {
  if (!splitsOverPool(env, n)) return pass(size_t{0}, n, idx);
  std::mutex mu;
  std::vector<std::pair<size_t, size_t>> stretches;  // (begin, count), one per chunk
  forChunks(env, n, 16, [&](size_t begin, size_t end) {
    const size_t count = pass(begin, end, idx + begin);
    std::lock_guard<std::mutex> lock(mu);
    stretches.emplace_back(begin, count);
  });
  std::sort(stretches.begin(), stretches.end());
  size_t count = 0;
  for (const auto& [begin, c] : stretches) {
    std::memmove(idx + count, idx + begin, c * sizeof(uint32_t));
    count += c;
  }
  return count;
}

// The k-th largest of keys[0, count) (1 <= k <= count), and how many keys exceed it.
// Reorders keys.
struct KthKey {
  uint32_t key;
  size_t greater;
};

inline KthKey kthLargestKey(uint32_t* keys, size_t count, size_t k) {
  // A large candidate set (a relaxed DGC cut can let many through) is first counted by 12
  // bits of the keys at a time, top bits first (keys are below 2^31), keeping only the
  // bucket that holds the k-th: introselect then runs over that bucket, not over every
  // candidate.
  constexpr size_t kBucketFrom = 1024;
  constexpr uint32_t kBuckets = 1u << 12;
  size_t above = 0;
  for (int shift = 19; shift >= 7 && count >= kBucketFrom; shift -= 12) {
    thread_local std::vector<uint32_t> histogram;
    histogram.assign(kBuckets, 0);
    // Every key left shares the bits above `shift`, so the next 12 tell them apart.
    for (size_t j = 0; j < count; ++j) ++histogram[(keys[j] >> shift) & (kBuckets - 1)];
    uint32_t bucket = kBuckets - 1;
    for (; above + histogram[bucket] < k; --bucket) above += histogram[bucket];
    size_t inside = 0;
    for (size_t j = 0; j < count; ++j)
      if (((keys[j] >> shift) & (kBuckets - 1)) == bucket) keys[inside++] = keys[j];
    count = inside;
  }
  k -= above;
  // Introselect: afterwards keys[k-1] is the k-th largest, everything before it >= it.
  std::nth_element(keys, keys + (k - 1), keys + count, std::greater<>());
  const uint32_t kth = keys[k - 1];
  const auto greater = static_cast<size_t>(
      std::count_if(keys, keys + (k - 1), [kth](uint32_t key) { return key > kth; }));
  return {kth, above + greater};
}

// Keeps the k candidates of idx[0, count) (ascending indices into x) with the largest
// magnitudes; equal magnitudes go to the lower index, so the choice is reproducible. The
// kept ones stay ascending at the front of idx; returns min(count, k).
inline size_t keepLargest(std::span<const float> x, uint32_t* idx, size_t count, size_t k) {
  if (count <= k) return count;
  if (k == 0) return 0;
  uint32_t* keys = keyScratch(count);
  for (size_t j = 0; j < count; ++j) keys[j] = magnitudeKey(x[idx[j]]);
  const KthKey kth = kthLargestKey(keys, count, k);
  size_t ties = k - kth.greater;  // how many equal to the k-th still go, lowest index first
  size_t kept = 0;
  for (size_t j = 0; j < count; ++j) {
    const uint32_t i = idx[j];
    const uint32_t key = magnitudeKey(x[i]);
    if (key > kth.key) {
      idx[kept++] = i;
    } else if (key == kth.key && ties > 0) {
      idx[kept++] = i;
      --ties;
    }
  }
  return k;
}

inline void keepLargest(std::span<const float> x, std::vector<uint32_t>& idx, size_t k) {
  idx.resize(keepLargest(x, idx.data(), idx.size(), k));
}

// The rank-th largest (1 = the largest) of keys[0, count), 1 <= rank <= count; reorders keys.
inline uint32_t rankedKey(uint32_t* keys, size_t count, size_t rank) {
  constexpr size_t kFew = 16;
  if (rank > kFew) {
    std::nth_element(keys, keys + (rank - 1), keys + count, std::greater<>());
    return keys[rank - 1];
  }
  // A few from the top, as sampled cuts usually ask: one pass keeping the `rank` largest
  // in descending order; a key only enters when it beats the smallest kept.
  uint32_t top[kFew];
  size_t have = 0;
  for (size_t j = 0; j < count; ++j) {
    const uint32_t key = keys[j];
    if (have == rank && key <= top[rank - 1]) continue;
    size_t at = have < rank ? have++ : rank - 1;
    for (; at > 0 && top[at - 1] < key; --at) top[at] = top[at - 1];
    top[at] = key;
  }
  return top[rank - 1];
}

// The rank-th largest magnitude key (rank 1 = the largest) among `samples` elements of a
// slice of n > 0 drawn with replacement from `stream`, where valueAt(i) gives element i;
// among all n, exactly, when samples >= n. Taking the values through valueAt lets a codec
// sample what an update pass is about to write before it runs that pass.
// The draws j < count of a sample of [0, n) (n < 2^32), sorted ascending by an LSD radix
// sort of 11 bits a pass, in per-thread scratch.
inline constexpr size_t kSortedDrawsFrom = 1u << 16;

inline const uint32_t* sortedDraws(uint64_t stream, size_t count, size_t n) {
  thread_local std::vector<uint32_t> a, b;
  if (a.size() < count) a.resize(count), b.resize(count);
  for (size_t j = 0; j < count; ++j) a[j] = static_cast<uint32_t>(sampleIndex(stream, j, n));
  constexpr unsigned kDigit = 11;
  std::vector<uint32_t>* from = &a;
  std::vector<uint32_t>* to = &b;
  for (unsigned shift = 0; shift < 32 && (uint64_t{n - 1} >> shift) != 0; shift += kDigit) {
    size_t starts[(1u << kDigit) + 1] = {};
    for (size_t j = 0; j < count; ++j) ++starts[(((*from)[j] >> shift) & ((1u << kDigit) - 1)) + 1];
    for (size_t d = 1; d <= (1u << kDigit); ++d) starts[d] += starts[d - 1];
    for (size_t j = 0; j < count; ++j) {
      const uint32_t x = (*from)[j];
      (*to)[starts[(x >> shift) & ((1u << kDigit) - 1)]++] = x;
    }
    std::swap(from, to);
  }
  return from->data();
}

// `prefetch(i)` may ask for element i's memory ahead: the draws land anywhere in the slice, and
// taking them a batch at a time, prefetched, keeps many misses in flight instead of one.
struct NoPrefetch {
  void operator()(size_t) const {}
};

// A large sorted sample is gathered over the codec pool (`env`): each draw costs a miss or
// more, so a much smaller share than a streaming pass's is worth a thread.
template <class ValueAt, class Prefetch = NoPrefetch>
uint32_t sampledKeyOf(size_t n, size_t samples, size_t rank, uint64_t stream, ValueAt&& valueAt,
                      Prefetch&& prefetch = {}, const CodecEnv& env = {}) {
  const size_t count = std::min(samples, n);
  uint32_t* keys = keyScratch(count);
  if (count == n) {
    for (size_t i = 0; i < n; ++i) keys[i] = magnitudeKey(valueAt(i));
  } else if (count >= kSortedDrawsFrom) {
    // The rank depends on the drawn elements alone, not their order: taken in ascending
    // order, the draws walk the slice front to back, and the hardware prefetcher and the
    // TLB serve them instead of a cache and TLB miss each.
    const uint32_t* at = sortedDraws(stream, count, n);
    const auto gather = [&](size_t begin, size_t end) {
      for (size_t j = begin; j < end; ++j) keys[j] = magnitudeKey(valueAt(at[j]));
    };
    if (env.pool != nullptr && env.pool->size() > 1) {
      env.pool->parallelFor(count, 16, kSortedDrawsFrom / 2, gather);
    } else {
      gather(0, count);
    }
  } else {
    constexpr size_t kBatch = 32;
    uint64_t at[kBatch];
    for (size_t j = 0; j < count; j += kBatch) {
      const size_t batch = std::min(kBatch, count - j);
      for (size_t b = 0; b < batch; ++b) prefetch(at[b] = sampleIndex(stream, j + b, n));
      for (size_t b = 0; b < batch; ++b) keys[j + b] = magnitudeKey(valueAt(at[b]));
    }
  }
  return rankedKey(keys, count, std::clamp(rank, size_t{1}, count));
}

// sampledKeyOf over a non-empty x as it is.
inline uint32_t sampledKey(std::span<const float> x, size_t samples, size_t rank, uint64_t stream) {
  return sampledKeyOf(x.size(), samples, rank, stream, [x](size_t i) { return x[i]; });
}

// The magnitude key that about `density` of a non-empty x reaches, estimated from `samples`
// draws. At least one element reaches it (a sampled one); with samples >= x.size() it is
// exactly the countFor(density, x.size())-th largest.
inline uint32_t estimateThreshold(std::span<const float> x, double density, size_t samples,
                                  uint64_t stream) {
  return sampledKey(x, samples, countFor(density, std::min(samples, x.size())), stream);
}

// DGC's remedy for a sampled threshold that lets too few through: lower it by `factor`, at
// most `tries` times, until at least `enough` elements reach it.
inline uint32_t relaxThreshold(std::span<const float> x, uint32_t key, size_t enough, float factor,
                               int tries) {
  for (int t = 0; t < tries && key != 0 && countAtLeast(x, key) < enough; ++t)
    key = scaledKey(key, factor);
  return key;
}

// relaxThreshold for a key whose candidates are already collected in idx[0, count): the
// usual case, enough pass, costs nothing more; each lowering collects afresh. Returns the
// count at the final key, whose candidates idx then holds.
inline size_t relaxCollected(std::span<const float> x, uint32_t key, size_t count, size_t enough,
                             float factor, int tries, uint32_t* idx) {
  for (int t = 0; t < tries && key != 0 && count < enough; ++t) {
    key = scaledKey(key, factor);
    count = collectAtLeast(x, key, idx);
  }
  return count;
}

// Candidates for the k largest magnitudes: a sampled cut aimed four standard deviations
// past k's expected rank among `samples` draws lets a little over k through. The sample
// only narrows the candidates, so its size is free to trade the cost of drawing against
// the cost of the exact selection after it: about n/32 draws, 256 to 4096.
inline size_t prefilterSamples(size_t n) { return std::clamp<size_t>(n / 32, 256, 4096); }

// The rank to cut at among `samples` draws for k of n, or 0 when a sample cannot narrow
// the candidates (the slice is no larger than the sample, or k is too large a share).
inline size_t prefilterRank(size_t n, size_t k, size_t samples) {
  if (n <= samples) return 0;
  const double expected =
      static_cast<double>(samples) * static_cast<double>(k) / static_cast<double>(n);
  const auto rank = static_cast<size_t>(expected + 4 * std::sqrt(expected) + 4);
  return rank < samples ? rank : 0;
}

// The indices, ascending, of the k largest magnitudes of x, equal ones going to the lower
// index. Exact: a sampled threshold only narrows the candidates first; in the rare case it
// lets fewer than k through, every element becomes a candidate instead.
inline std::vector<uint32_t> largest(std::span<const float> x, size_t k, uint64_t stream) {
  const size_t n = x.size();
  if (k == 0) return {};
  std::vector<uint32_t> idx(n);
  size_t count = 0;
  const size_t samples = prefilterSamples(n);
  const size_t rank = prefilterRank(n, k, samples);
  if (rank != 0) count = collectAtLeast(x, sampledKey(x, samples, rank, stream), idx.data());
  if (count < k) count = collectAtLeast(x, 0, idx.data());
  idx.resize(keepLargest(x, idx.data(), count, k));
  return idx;
}

// Writes x at idx (ascending) as pairs into out (bytesFor(idx.size()) bytes) and zeroes
// those entries: what was sent is no longer owed. Returns the bytes written.
inline size_t sendAndClear(std::span<float> x, std::span<const uint32_t> idx,
                           std::span<std::byte> out) {
  const size_t count = idx.size();
  storeLe<uint32_t>(out.data(), static_cast<uint32_t>(count));
  std::byte* indices = out.data() + 4;
  std::byte* values = indices + 4 * count;
  for (size_t j = 0; j < count; ++j) {
    storeLe<uint32_t>(indices + 4 * j, idx[j]);
    storeLe<float>(values + 4 * j, x[idx[j]]);
    x[idx[j]] = 0.0f;
  }
  return bytesFor(count);
}

}  // namespace gcagent::compress::sparse
