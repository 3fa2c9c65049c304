// The codec interface: encode an fp32 slice with its error-feedback state into bytes, and
// decode bytes back, adding into an fp32 accumulator (the aggregation primitive).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "common/status.h"

namespace gcagent {
class ThreadPool;
}

namespace gcagent::compress {

// Codec parameters as text, e.g. {"threshold": "0.5"}; each codec parses and range-checks its
// own keys and rejects unknown ones.
using Params = std::map<std::string, std::string, std::less<>>;

struct CodecSpec {
  std::string name;
  Params params;
};

// Names the slice being coded. Stochastic codecs seed their generators from it (with their
// `seed` parameter), and randomk derives its index set from it on both sides.
struct SliceId {
  uint64_t key = 0;
  uint32_t slice = 0;
  uint64_t step = 0;  // iteration number
};

// What the codecs may use beyond their parameters.
struct CodecEnv {
  ThreadPool* pool = nullptr;             // splits large slices; null runs on the caller
  size_t parallel_min_elements = 1 << 18; // a slice is split only into chunks at least this big
};

class Codec {
 public:
  virtual ~Codec() = default;

  virtual std::string_view name() const = 0;

  // Floats of error-feedback state a slice of n elements needs (0 when stateless). The
  // state starts zeroed and belongs to one (key, slice).
  virtual size_t stateElements(size_t n) const = 0;

  // The error-feedback residual inside a slice's state: what the encodings so far owe the
  // receiver (exported as the residual norm metric). Empty for stateless codecs.
  virtual std::span<const float> residual(std::span<const float> state, size_t n) const {
    return stateElements(n) >= n && state.size() >= n ? state.first(n) : std::span<const float>{};
  }

  // Bytes encode() writes for n elements: exact for every codec whose encoded size is
  // fixed by n (isFixedSize()), an upper bound otherwise.
  virtual size_t maxEncodedBytes(size_t n) const = 0;
  virtual bool isFixedSize() const { return true; }
  // What an encode of n elements writes once any warm-up is over: the size planning prices
  // (a schedule that starts dense would otherwise make the codec look dense for good).
  virtual size_t steadyEncodedBytes(size_t n) const { return maxEncodedBytes(n); }

  // Encodes `in` with `state` (stateElements(in.size()) floats, updated in place) into
  // `out` (at least maxEncodedBytes(in.size()) bytes). Returns the bytes written.
  virtual Result<size_t> encode(std::span<const float> in, std::span<float> state,
                                std::span<std::byte> out, const SliceId& id) const = 0;

  // Decodes `in`, an encoding of acc.size() elements, and adds it into `acc`. `in` is
  // validated completely before `acc` is touched, so a corrupt buffer changes nothing.
  virtual Status decodeAdd(std::span<const std::byte> in, std::span<float> acc,
                           const SliceId& id) const = 0;

  // Decodes `in` into `out`, overwriting it, times `scale` (> 0): bit for bit what
  // decodeAdd() adds to -0.0 (the identity of fp32 addition, so a sum that starts with a
  // decoded contribution is exactly the sum of the contributions), multiplied by scale.
  // After an error `out`'s contents are unspecified. Codecs override this to skip the fill
  // and the read of `out`.
  virtual Status decode(std::span<const std::byte> in, std::span<float> out, float scale,
                        const SliceId& id) const {
    std::fill(out.begin(), out.end(), -0.0f);
    GC_RETURN_IF_ERROR(decodeAdd(in, out, id));
    if (scale != 1.0f)
      for (float& v : out) v *= scale;
    return {};
  }
};

}  // namespace gcagent::compress
