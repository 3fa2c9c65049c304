// Runs fn(begin, end) over [0, n), split over the codec pool when the slice is large enough
// to be worth it. Chunk boundaries are multiples of `align` elements.
#pragma once

#include <cstddef>
#include <utility>

#include "common/thread_pool.h"
#include "compress/codec.h"

namespace gcagent::compress {

// Whether forChunks splits a slice of n elements; a small slice runs on the caller, where
// handing it to the pool would cost more than it saves.
inline bool splitsOverPool(const CodecEnv& env, size_t n) {
  return env.pool != nullptr && env.pool->size() > 1 && n >= 2 * env.parallel_min_elements;
}

template <class Fn>
void forChunks(const CodecEnv& env, size_t n, size_t align, Fn&& fn) {
  if (!splitsOverPool(env, n)) {
    fn(size_t{0}, n);
    return;
  }
  env.pool->parallelFor(n, align, env.parallel_min_elements, std::forward<Fn>(fn));
}

}  // namespace gcagent::compress
