// Choosing which elements a sparse codec sends: counts from ratios, sampled magnitude
// thresholds, exact top-k by introselect (never a full sort), and writing the chosen pairs.
// Selection runs on the caller's thread and depends only on the values and the stream, so
// the bytes never depend on how the element-wise work around it was split.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <span>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "common/str_cat.h"
#include "compress/cpu/chunks.h"
#include "compress/sparse/sparse_format.h"
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

// max(1, ceil(fraction * n)), 0 for an empty slice. The product's rounding error is forgiven,
// so 0.07 of 100 is 7 and (1 - 0.99) of 100 is 1, as whoever wrote the config means.
inline size_t countFor(double fraction, size_t n) {
  if (n == 0) return 0;
  const double count = std::ceil(fraction * static_cast<double>(n) * (1 - 1e-9));
  return std::clamp(static_cast<size_t>(count), size_t{1}, n);
}

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

// The indices, ascending, of the elements whose magnitude key reaches `key`.
inline void collectAtLeast(std::span<const float> x, uint32_t key, std::vector<uint32_t>& out) {
  out.clear();
  for (size_t i = 0; i < x.size(); ++i)
    if (magnitudeKey(x[i]) >= key) out.push_back(static_cast<uint32_t>(i));
}

// Keeps the k candidates of `idx` (ascending indices into x) with the largest magnitudes;
// equal magnitudes go to the lower index, so the choice is reproducible. idx stays ascending.
inline void keepLargest(std::span<const float> x, std::vector<uint32_t>& idx, size_t k) {
  if (idx.size() <= k) return;
  if (k == 0) {
    idx.clear();
    return;
  }
  std::vector<uint32_t> keys(idx.size());
  for (size_t j = 0; j < idx.size(); ++j) keys[j] = magnitudeKey(x[idx[j]]);
  // Introselect: afterwards keys[k-1] is the k-th largest, everything before it >= it.
  std::nth_element(keys.begin(), keys.begin() + (k - 1), keys.end(), std::greater<>());
  const uint32_t kth = keys[k - 1];
  size_t ties = k - static_cast<size_t>(std::count_if(keys.begin(), keys.begin() + (k - 1),
                                                      [kth](uint32_t key) { return key > kth; }));
  size_t kept = 0;
  for (uint32_t i : idx) {
    const uint32_t key = magnitudeKey(x[i]);
    if (key > kth) {
      idx[kept++] = i;
    } else if (key == kth && ties > 0) {
      idx[kept++] = i;
      --ties;
    }
  }
  idx.resize(k);
}

// The rank-th largest magnitude key (rank 1 = the largest) among `samples` elements of a
// non-empty x drawn with replacement from `stream`; among all of x, exactly, when
// samples >= x.size().
inline uint32_t sampledKey(std::span<const float> x, size_t samples, size_t rank, uint64_t stream) {
  const size_t n = x.size();
  std::vector<uint32_t> keys(std::min(samples, n));
  if (keys.size() == n) {
    for (size_t i = 0; i < n; ++i) keys[i] = magnitudeKey(x[i]);
  } else {
    for (size_t j = 0; j < keys.size(); ++j) keys[j] = magnitudeKey(x[sampleIndex(stream, j, n)]);
  }
  rank = std::clamp(rank, size_t{1}, keys.size());
  std::nth_element(keys.begin(), keys.begin() + (rank - 1), keys.end(), std::greater<>());
  return keys[rank - 1];
}

// The magnitude key that about `density` of a non-empty x reaches, estimated from `samples`
// draws. At least one element reaches it (a sampled one); with samples >= n it is exactly
// the countFor(density, n)-th largest.
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

// The indices, ascending, of the k largest magnitudes of x, equal ones going to the lower
// index. Exact: a sampled threshold only narrows the candidates first. Aimed at a sample rank
// four standard deviations past k's expected one, it lets a little over k through; in the
// rare case it lets fewer through, every element becomes a candidate instead.
inline std::vector<uint32_t> largest(std::span<const float> x, size_t k, uint64_t stream) {
  constexpr size_t kSamples = 4096;
  const size_t n = x.size();
  std::vector<uint32_t> idx;
  if (k == 0) return idx;
  const double expected =
      static_cast<double>(kSamples) * static_cast<double>(k) / static_cast<double>(n);
  const auto rank = static_cast<size_t>(expected + 4 * std::sqrt(expected) + 4);
  if (n > kSamples && rank < kSamples)
    collectAtLeast(x, sampledKey(x, kSamples, rank, stream), idx);
  if (idx.size() < k) collectAtLeast(x, 0, idx);
  keepLargest(x, idx, k);
  return idx;
}

// Writes x at idx (ascending) as pairs into out (bytesFor(idx.size()) bytes) and zeroes
// those entries: what was sent is no longer owed. Returns the bytes written.
inline size_t sendAndClear(std::span<float> x, std::span<const uint32_t> idx,
                           std::span<std::byte> out) {
  std::vector<float> values(idx.size());
  for (size_t j = 0; j < idx.size(); ++j) {
    values[j] = x[idx[j]];
    x[idx[j]] = 0.0f;
  }
  return write(idx, values, out);
}

}  // namespace gcagent::compress::sparse
