// A quantizer definition as a Codec: size checks, the slice statistics and the scale of a
// scaled definition, the split over the codec pool, the padding, the checks of what arrives,
// the error_feedback parameter (without it, no state: x = g + 0) around the definition's CPU
// loops.
#pragma once

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "common/str_cat.h"
#include "compress/bytes.h"
#include "compress/codec.h"
#include "compress/compll/definition.h"
#include "compress/compll/kernels.h"
#include "compress/cpu/checks.h"
#include "compress/cpu/chunks.h"
#include "compress/params.h"

namespace gcagent::compress::compll {

// True when no code bit past element n is set (codes of C::bytes(n) bytes).
template <class C>
bool paddingIsClear(const uint8_t* codes, size_t n) {
  const size_t last = n / C::kPerByte;  // the byte holding element n, when n is not on a byte edge
  if (n % C::kPerByte != 0 && (codes[last] & ((1u << C::shift(n - 1)) - 1u)) != 0) return false;
  for (size_t b = C::usedBytes(n); b < C::bytes(n); ++b)
    if (codes[b] != 0) return false;
  return true;
}

// The first element of [0, n) whose code is `never`, or n. Eight bytes at a time: the bytes
// XOR `never` in every field have an all-zero field exactly where a code equals it, and OR-ing
// each field's bits into its lowest (shifts narrower than a field, so a neighbour's bits never
// reach it) leaves that bit clear there. Only a word that has one is searched code by code.
template <class C>
size_t firstCodeEqualTo(const uint8_t* codes, size_t n, uint32_t never) {
  uint64_t pattern = 0, low_bits = 0;
  for (uint32_t k = 0; k < 64 / C::kBitsPerCode; ++k) {
    pattern |= static_cast<uint64_t>(never) << (C::kBitsPerCode * k);
    low_bits |= uint64_t{1} << (C::kBitsPerCode * k);
  }
  const size_t whole_bytes = n / C::kPerByte;
  size_t b = 0;
  for (; b + 8 <= whole_bytes; b += 8) {
    uint64_t word;
    std::memcpy(&word, codes + b, 8);
    uint64_t folded = word ^ pattern;
    for (uint32_t width = 1; width < C::kBitsPerCode; width *= 2) folded |= folded >> width;
    if ((~folded & low_bits) != 0) break;  // a code of these eight bytes is `never`
  }
  for (size_t i = b * C::kPerByte; i < n; ++i)
    if (C::at(codes, i) == never) return i;
  return n;
}

// The first element of [0, n) whose code c has (c & mask) == mask, or n. Byte codes eight at
// a time: ~word & mask has a zero byte exactly where a code has every mask bit, and the
// classic zero-byte test finds whether a word has one; only such a word is searched.
template <class C>
size_t firstWithBits(const uint8_t* codes, size_t n, uint32_t mask) {
  size_t i = 0;
  if constexpr (C::kBitsPerCode == 8) {
    const uint64_t masks = 0x0101010101010101ull * mask;
    for (; i + 8 <= n; i += 8) {
      uint64_t word;
      std::memcpy(&word, codes + i, 8);
      const uint64_t t = ~word & masks;
      if (((t - 0x0101010101010101ull) & ~t & 0x8080808080808080ull) != 0) break;
    }
  }
  for (; i < n; ++i)
    if ((C::at(codes, i) & mask) == mask) return i;
  return n;
}

template <class Def>
class QuantizerCodec final : public Codec {
  using C = typename Def::Codes;

 public:
  QuantizerCodec(typename Def::Params p, bool feedback, const CodecEnv& env) : p_(p), feedback_(feedback), env_(env) {}

  std::string_view name() const override { return Def::kName; }
  size_t stateElements(size_t n) const override { return feedback_ ? n : 0; }
  size_t maxEncodedBytes(size_t n) const override { return header(n) + C::bytes(codedElements<Def>(n, p_)); }

  Result<size_t> encode(std::span<const float> in, std::span<float> state, std::span<std::byte> out,
                        const SliceId& id) const override {
    const size_t n = in.size();
    const size_t bytes = maxEncodedBytes(n);
    GC_RETURN_IF_ERROR(checkEncodeSpans(name(), n, state.size(), stateElements(n), out.size(), bytes));
    const float* g = in.data();
    float* r = feedback_ ? state.data() : nullptr;
    if constexpr (BlockScaled<Def>) {
      return encodeBlocks(g, r, reinterpret_cast<uint8_t*>(out.data()), n, id, bytes);
    }
    constexpr size_t kHeader = kHeaderBytes<Def>;
    float scale = 1.0f;
    if constexpr (Scaled<Def>) {
      GC_ASSIGN_OR_RETURN(scale, scaleOf(g, r, n));
      storeLe(out.data(), scale);
    }
    const uint64_t stream = streamOf(id);
    auto* codes = reinterpret_cast<uint8_t*>(out.data() + kHeader);
    const auto encode = kernelsFor<Def>(cpu::activeIsa()).encode;
    forChunks(env_, n, C::kPerWord,
              [&](size_t begin, size_t end) { encode(g, r, codes, begin, end, p_, scale, stream); });
    // The tail of the last word carries no elements; keep it zero.
    const size_t code_bytes = C::bytes(n);
    if (code_bytes > C::usedBytes(n)) std::memset(codes + C::usedBytes(n), 0, code_bytes - C::usedBytes(n));
    return bytes;
  }

  Status decodeAdd(std::span<const std::byte> in, std::span<float> acc, const SliceId& id) const override {
    const size_t n = acc.size();
    if constexpr (BlockScaled<Def>) return decodeBlocks(in, acc, 1.0f, true, id);
    constexpr size_t kHeader = kHeaderBytes<Def>;
    GC_ASSIGN_OR_RETURN(const float scale, arrived(in, n));
    const auto* codes = reinterpret_cast<const uint8_t*>(in.data() + kHeader);
    float* dst = acc.data();
    const auto decode_add = kernelsFor<Def>(cpu::activeIsa()).decode_add;
    forChunks(env_, n, C::kPerWord, [&](size_t begin, size_t end) { decode_add(codes, dst, begin, end, p_, scale); });
    return {};
  }

  Status decode(std::span<const std::byte> in, std::span<float> out, float factor,
                const SliceId& id) const override {
    const size_t n = out.size();
    if constexpr (BlockScaled<Def>) return decodeBlocks(in, out, factor, false, id);
    constexpr size_t kHeader = kHeaderBytes<Def>;
    GC_ASSIGN_OR_RETURN(const float scale, arrived(in, n));
    const auto* codes = reinterpret_cast<const uint8_t*>(in.data() + kHeader);
    float* dst = out.data();
    const auto decode = kernelsFor<Def>(cpu::activeIsa()).decode;
    forChunks(env_, n, C::kPerWord,
              [&](size_t begin, size_t end) { decode(codes, dst, begin, end, p_, scale, factor); });
    return {};
  }

 private:
  // The scale of x = g + r, or an error when x holds an infinity or a NaN.
  Result<float> scaleOf(const float* g, const float* r, size_t n) const {
    const unsigned which = Def::stats(p_);
    SliceStats stats;
    if (which != 0 && n != 0) {
      // Per thread: encode is const and runs on several codec threads at once.
      thread_local std::vector<SliceStats> blocks;
      const size_t count = (n + kStatsBlock - 1) / kStatsBlock;
      if (blocks.size() < count) blocks.resize(count);
      SliceStats* out = blocks.data();
      const BlockStatsFn block_stats = blockStatsKernel(cpu::activeIsa(), which);
      forChunks(env_, n, kStatsBlock, [&](size_t begin, size_t end) { block_stats(g, r, begin, end, out); });
      stats = combineBlocks(out, count);
      // Sums of fp32 magnitudes and squares cannot overflow a double: non-finite means x was.
      if (!std::isfinite(stats.sum_abs) || !std::isfinite(stats.sum_squares))
        return Status::invalidArgument(
            strCat(name(), ": ", r != nullptr ? "gradient plus residual" : "gradient", " holds a non-finite value"));
    }
    return Def::scale(stats, n, p_);
  }

  // Bytes in front of the codes: the slice's scale, or the blocks' scales.
  size_t header(size_t n) const {
    if constexpr (BlockScaled<Def>) {
      return scaleBytes<typename Def::Scale>((n + Def::block(p_) - 1) / Def::block(p_));
    } else {
      (void)n;
      return kHeaderBytes<Def>;
    }
  }

  uint64_t streamOf(const SliceId& id) const { return compll::streamOf<Def>(p_, id.key, id.slice, id.step); }

  // A block-scaled encoding: every block's scale first (all of them, so a non-finite x fails
  // the encode before the state changes), then the codes.
  Result<size_t> encodeBlocks(const float* g, float* r, uint8_t* out, size_t n, const SliceId& id,
                              size_t bytes) const {
    const size_t block = Def::block(p_);
    const size_t scale_bytes = header(n);
    const size_t blocks = (n + block - 1) / block;
    if (n == 0) return bytes;  // nothing to write (and `out` may be null)
    std::memset(out + blocks * Def::Scale::kBytes, 0, scale_bytes - blocks * Def::Scale::kBytes);
    const uint64_t stream = streamOf(id);
    const auto& kernels = kernelsFor<Def>(cpu::activeIsa());
    std::atomic<size_t> bad{SIZE_MAX};
    forChunks(env_, n, block, [&](size_t begin, size_t end) {
      const size_t b = kernels.block_scales(g, r, out, begin, end, p_, stream);
      size_t seen = bad.load();
      while (b < seen && !bad.compare_exchange_weak(seen, b)) {
      }
    });
    if (bad.load() != SIZE_MAX)
      return Status::invalidArgument(strCat(name(), ": block ", bad.load(), " of the ",
                                            r != nullptr ? "gradient plus residual" : "gradient",
                                            " holds a non-finite value"));
    uint8_t* codes = out + scale_bytes;
    forChunks(env_, n, block,
              [&](size_t begin, size_t end) { kernels.encode_blocks(g, r, out, codes, begin, end, p_, stream); });
    const size_t coded = codedElements<Def>(n, p_);
    if (C::bytes(coded) > C::usedBytes(coded))
      std::memset(codes + C::usedBytes(coded), 0, C::bytes(coded) - C::usedBytes(coded));
    return bytes;
  }

  Status decodeBlocks(std::span<const std::byte> in, std::span<float> out, float factor, bool add,
                      const SliceId& id) const {
    const size_t n = out.size();
    GC_RETURN_IF_ERROR(checkEncodedSize(name(), n, in.size(), maxEncodedBytes(n)));
    const auto* scales = reinterpret_cast<const uint8_t*>(in.data());
    const size_t block = Def::block(p_);
    for (size_t b = 0; b * block < n; ++b) {
      if (!Def::Scale::valid(scales + b * Def::Scale::kBytes))
        return Status::dataLoss(strCat(name(), ": block ", b, " has a scale the encoder never writes"));
    }
    const uint8_t* codes = scales + header(n);
    GC_RETURN_IF_ERROR(checkCodes(codes, codedElements<Def>(n, p_)));
    const uint64_t stream = streamOf(id);
    const auto decode = kernelsFor<Def>(cpu::activeIsa()).decode_blocks;
    float* dst = out.data();
    forChunks(env_, n, block,
              [&](size_t begin, size_t end) { decode(scales, codes, dst, begin, end, p_, stream, factor, add); });
    return {};
  }

  // The padding past the n codes, and every code, are what an encoder writes.
  Status checkCodes(const uint8_t* codes, size_t n) const {
    if constexpr (kPaddingChecked<Def>) {
      if (!paddingIsClear<C>(codes, n))
        return Status::dataLoss(strCat(name(), ": padding bits past element ", n, " are set"));
    }
    if constexpr (kChecksCodes<Def>) {
      const size_t i = firstCodeEqualTo<C>(codes, n, Def::kNeverWritten);
      if (i < n)
        return Status::dataLoss(strCat(name(), ": element ", i, " has code ", Def::kNeverWritten,
                                       ", which the encoder never writes"));
    }
    if constexpr (kChecksWritten<Def>) {
      const size_t i = firstWithBits<C>(codes, n, Def::unwrittenMask(p_));
      if (i < n)
        return Status::dataLoss(strCat(name(), ": element ", i, " has a code the encoder never writes"));
    }
    return {};
  }

  // The scale of an encoding that arrived for n elements, once its size, scale, padding and
  // codes are what an encoder writes.
  Result<float> arrived(std::span<const std::byte> in, size_t n) const {
    constexpr size_t kHeader = kHeaderBytes<Def>;
    GC_RETURN_IF_ERROR(checkEncodedSize(name(), n, in.size(), maxEncodedBytes(n)));
    float scale = 1.0f;
    if constexpr (Scaled<Def>) {
      scale = loadLe<float>(in.data());
      if (!std::isfinite(scale) || scale < 0.0f)
        return Status::dataLoss(strCat(name(), ": scale is ", scale, ", expected a finite value >= 0"));
    }
    GC_RETURN_IF_ERROR(checkCodes(reinterpret_cast<const uint8_t*>(in.data() + kHeader), n));
    return scale;
  }

  typename Def::Params p_;
  bool feedback_;
  CodecEnv env_;
};

// The registry's factory for a quantizer definition: its parameters, then error_feedback.
template <class Def>
Result<std::unique_ptr<Codec>> makeQuantizer(const Params& params, const CodecEnv& env) {
  ParamReader reader(Def::kName, params);
  const typename Def::Params p = Def::read(reader);
  const bool error_feedback = reader.boolean("error_feedback", feedbackByDefault<Def>(), kErrorFeedbackHelp);
  GC_RETURN_IF_ERROR(reader.finish());
  return std::unique_ptr<Codec>(new QuantizerCodec<Def>(p, error_feedback, env));
}

}  // namespace gcagent::compress::compll
