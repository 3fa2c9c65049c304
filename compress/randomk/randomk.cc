// Random-k with a shared seed (GRACE). The k = max(1, ceil(ratio * n)) indices (0 for an
// empty slice) come from a counter-based generator seeded by (seed, key, slice, step), which
// the receiver runs too, so only values travel: f32 value[k], little-endian, in ascending
// index order, exactly 4k bytes and no header. The length is the only check; a receiver
// given a different seed or SliceId adds the values at the wrong indices undetected.
//
// error_feedback=true (default): x = r + g; x goes out unscaled at the indices, r = x with
//   those zeroed. Nothing is lost over steps, but one step's estimate is biased.
// error_feedback=false: g * n/k goes out at the indices and no state is kept: an unbiased
//   estimate of g, with variance g^2 (n/k - 1) per element.
#include "compress/randomk/randomk.h"

#include <algorithm>
#include <bit>
#include <vector>

#include "compress/bytes.h"
#include "compress/cpu/checks.h"
#include "compress/params.h"
#include "compress/randomk/randomk_math.h"
#include "compress/sparse/select.h"

namespace gcagent::compress {
namespace {

// k distinct indices in [0, n), ascending, by Floyd's algorithm: draw j (j = n-k .. n-1)
// takes floydPick(stream, j), uniform on [0, j], or j itself when that is taken, so k draws
// give k distinct indices with every k-subset equally likely. Membership is a bitmap of n
// bits, read back in order, once k is at least n/256 (the n/64-word scan then costs less than
// sorting k indices); below that a hash set of 2k to 4k slots and a sort of the k indices, so
// a small k costs O(k log k), never O(n).
std::vector<uint32_t> randomIndices(size_t n, size_t k, uint64_t stream) {
  std::vector<uint32_t> out;
  out.reserve(k);
  if (256 * k >= n) {
    std::vector<uint64_t> bits((n + 63) / 64, 0);
    for (size_t j = n - k; j < n; ++j) {
      const size_t pick = randomk::floydPick(stream, j);
      const size_t take = (bits[pick / 64] >> (pick % 64)) & 1 ? j : pick;
      bits[take / 64] |= uint64_t{1} << (take % 64);
    }
    for (size_t w = 0; w < bits.size(); ++w)
      for (uint64_t word = bits[w]; word != 0; word &= word - 1)
        out.push_back(static_cast<uint32_t>(64 * w + std::countr_zero(word)));
    return out;
  }
  constexpr uint32_t kEmpty = 0xffffffffu;  // never an index: n <= sparse::kMaxElements
  const size_t mask = std::bit_ceil(2 * k) - 1;
  std::vector<uint32_t> slots(mask + 1, kEmpty);
  const auto insert = [&](uint32_t index) {  // false when already present
    for (size_t s = rng::mix64(index) & mask;; s = (s + 1) & mask) {
      if (slots[s] == index) return false;
      if (slots[s] == kEmpty) {
        slots[s] = index;
        return true;
      }
    }
  };
  for (size_t j = n - k; j < n; ++j) {
    uint32_t take = randomk::floydPick(stream, j);
    if (!insert(take)) {
      take = static_cast<uint32_t>(j);
      insert(take);
    }
    out.push_back(take);
  }
  std::sort(out.begin(), out.end());
  return out;
}

class RandomkCodec final : public Codec {
 public:
  RandomkCodec(double ratio, uint64_t seed, bool error_feedback, const CodecEnv& env)
      : ratio_(ratio), seed_(seed), error_feedback_(error_feedback), env_(env) {}

  std::string_view name() const override { return "randomk"; }
  size_t stateElements(size_t n) const override { return error_feedback_ ? n : 0; }
  size_t maxEncodedBytes(size_t n) const override { return 4 * sparse::countFor(ratio_, n); }

  Result<size_t> encode(std::span<const float> in, std::span<float> state, std::span<std::byte> out,
                        const SliceId& id) const override {
    const size_t n = in.size();
    const size_t k = sparse::countFor(ratio_, n);
    GC_RETURN_IF_ERROR(sparse::checkSliceLength(name(), n));
    GC_RETURN_IF_ERROR(
        checkEncodeSpans(name(), n, state.size(), stateElements(n), out.size(), 4 * k));
    const auto idx = randomIndices(n, k, streamOf(id));
    if (error_feedback_) {
      const std::span<float> r = state.first(n);
      sparse::accumulate(env_, in, r);
      for (size_t j = 0; j < k; ++j) {
        storeLe<float>(out.data() + 4 * j, r[idx[j]]);
        r[idx[j]] = 0.0f;
      }
    } else {
      const float scale = randomk::unbiasedScale(n, k);
      for (size_t j = 0; j < k; ++j) storeLe<float>(out.data() + 4 * j, in[idx[j]] * scale);
    }
    return 4 * k;
  }

  Status decodeAdd(std::span<const std::byte> in, std::span<float> acc,
                   const SliceId& id) const override {
    const size_t n = acc.size();
    const size_t k = sparse::countFor(ratio_, n);
    GC_RETURN_IF_ERROR(sparse::checkSliceLength(name(), n));
    GC_RETURN_IF_ERROR(checkEncodedSize(name(), n, in.size(), 4 * k));
    const auto idx = randomIndices(n, k, streamOf(id));
    for (size_t j = 0; j < k; ++j) acc[idx[j]] += loadLe<float>(in.data() + 4 * j);
    return {};
  }

 private:
  uint64_t streamOf(const SliceId& id) const {
    return rng::streamSeed(seed_, id.key, id.slice, id.step);
  }

  double ratio_;
  uint64_t seed_;
  bool error_feedback_;
  CodecEnv env_;
};

}  // namespace

std::vector<uint32_t> randomk::drawIndices(size_t n, size_t k, uint64_t stream) {
  return randomIndices(n, k, stream);
}

// ratio: the fraction of elements sent, in (0, 1], default 0.01.
// seed: the index generator's seed, default 0; sender and receiver must agree.
// error_feedback: keep the unsent rest as a residual (true, default) or scale by n/k (false).
Result<std::unique_ptr<Codec>> makeRandomkCodec(const Params& params, const CodecEnv& env) {
  ParamReader reader("randomk", params);
  const double ratio = reader.real("ratio", 0.01, Range::openClosed(0, 1),
      "fraction of the elements sent, chosen at random");
  const uint64_t seed = reader.seed("seed", 0,
      "seed of the shared random choice (equal on every node)");
  const bool error_feedback = reader.boolean("error_feedback", true,
      kErrorFeedbackHelp);
  GC_RETURN_IF_ERROR(reader.finish());
  return std::unique_ptr<Codec>(new RandomkCodec(ratio, seed, error_feedback, env));
}

}  // namespace gcagent::compress
