// terngrad: stochastic ternary levels {-s, 0, +s} with one scaler s per slice (Wen et al.
// 2017, "TernGrad").
//
// Encoded format, little-endian, 4 + 4*ceil(n/16) bytes for n elements (4 when n == 0):
//   fp32 s               max |clip(x)| over the slice (0 for an all-zero or empty slice)
//   4*ceil(n/16) bytes   2-bit codes in MXNet 2-bit's layout: element i in byte 4 + (i>>2)
//                        at bit shift 6 - 2*(i&3); 0b11 is +s, 0b10 is -s, 0b00 is 0; 0b01
//                        is never written; codes past element n-1 are 0b00
// where x = g, or x = g + r with error_feedback (r, the state, becomes x - decoded, so the
// clipped-off part is carried too). Element i is sent as sign(x_i) * s with probability
// |clip(x_i)| / s, drawn from a counter-based generator keyed by (seed, key, slice, step, i):
// E[decoded] = clip(x) exactly up to the 2^-24 resolution of the draw, |decoded - clip(x)|
// <= s, and an element with |clip(x)| == s is always sent.
//
// Clipping (clip=true) bounds x to [-2.5 sigma, 2.5 sigma] with sigma = sqrt(mean(x^2)), the
// standard deviation about zero. The paper's model takes gradients as zero-mean, where this is
// the ordinary standard deviation; the reference code's deviation about the mean would clip
// a slice whose elements share one sign (a constant slice has sigma 0) towards zero.
//
// Parameters: clip (bool, default true), seed (uint64, default 0), error_feedback (bool,
// default false). decodeAdd rejects (data_loss) a buffer of the wrong size, an s that is not
// finite or is negative, a 0b01 code and a non-zero padding code. encode rejects
// (invalid_argument) a non-finite x before changing the state.
#include "compress/terngrad/terngrad.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "common/str_cat.h"
#include "compress/bytes.h"
#include "compress/cpu/checks.h"
#include "compress/cpu/chunks.h"
#include "compress/params.h"
#include "compress/random_math.h"
#include "compress/terngrad/terngrad_kernels.h"
#include "compress/terngrad/terngrad_math.h"

namespace gcagent::compress {
namespace terngrad {
namespace {

// Bytes begin/4 .. of the codes; begin is a multiple of 4, end a multiple of 4 or n.
template <bool kFeedback>
void encodeGeneric(const float* __restrict g, float* __restrict r, uint8_t* __restrict codes,
                   size_t begin, size_t end, Scaler q, uint64_t stream) {
  for (size_t b = begin / 4; b < end / 4; ++b)
    codes[b] = encodeByte<kFeedback>(g, r, b, 4, q, stream);
  if (end % 4 != 0) codes[end / 4] = encodeByte<kFeedback>(g, r, end / 4, end % 4, q, stream);
}

// The loops take restrict pointers: the packed bytes never alias the floats, and saying so
// lets the compiler vectorize.

// Fixed lanes (four: two SSE2 registers of doubles) let the compiler vectorize without
// reassociating the sum: it stays bit-reproducible. (`unroll 1` keeps g++ -O3 from
// unrolling the lanes into scalars before it vectorizes.)
template <bool kFeedback>
BlockStats statsOf(const float* __restrict g, const float* __restrict r, size_t begin,
                   size_t end) {
  double squares[4] = {};
  float largest[4] = {};
  size_t i = begin;
  for (; i + 4 <= end; i += 4) {
#pragma GCC unroll 1
    for (size_t j = 0; j < 4; ++j) {
      const float x = inputAt<kFeedback>(g, r, i + j);
      const float a = magnitude(x);
      squares[j] += static_cast<double>(x) * x;
      largest[j] = a > largest[j] ? a : largest[j];
    }
  }
  for (; i < end; ++i) {
    const float x = inputAt<kFeedback>(g, r, i);
    squares[0] += static_cast<double>(x) * x;
    largest[0] = std::max(largest[0], magnitude(x));
  }
  return {(squares[0] + squares[1]) + (squares[2] + squares[3]),
          *std::max_element(largest, largest + 4)};
}

template <bool kFeedback>
void blockStatsGeneric(const float* g, const float* r, size_t begin, size_t end, BlockStats* out) {
  for (size_t b = begin / kStatsBlock; b * kStatsBlock < end; ++b)
    out[b] = statsOf<kFeedback>(g, r, b * kStatsBlock, std::min(end, (b + 1) * kStatsBlock));
}

}  // namespace

const Kernels kGenericKernels = {encodeGeneric<false>, encodeGeneric<true>,
                                 blockStatsGeneric<false>, blockStatsGeneric<true>};

const Kernels& kernels() {
#if GC_CPU_X86
  if (cpu::useAvx2()) return kAvx2Kernels;
#endif
  return kGenericKernels;
}

}  // namespace terngrad

namespace {

constexpr double kClipSigmas = 2.5;

// Byte by byte, so every shift is a constant the compiler can vectorize with.
void decodeAddLoop(const uint8_t* __restrict codes, float* __restrict acc, size_t begin,
                   size_t end, float s) {
  for (size_t b = begin / 4; b < end / 4; ++b)
    for (uint32_t j = 0; j < 4; ++j)
      acc[4 * b + j] += terngrad::dequantize((codes[b] >> terngrad::shiftOf(j)) & 3u, s);
  for (size_t i = std::max(begin, end / 4 * 4); i < end; ++i)
    acc[i] += terngrad::dequantize((codes[i >> 2] >> terngrad::shiftOf(i)) & 3u, s);
}

// Whether the encoder could have written these codes: no 0b01 anywhere, and 0b00 past
// element n-1.
bool codesAreValid(const uint8_t* codes, size_t n, size_t code_bytes) {
  uint32_t low_only = 0;  // bit 2k set where pair k of a byte is 0b01
  for (size_t k = 0; k < code_bytes; ++k) low_only |= codes[k] & ~(codes[k] >> 1) & 0x55u;
  uint32_t padding = n % 4 != 0 ? codes[n / 4] & (0xffu >> (2 * (n % 4))) : 0u;
  for (size_t k = (n + 3) / 4; k < code_bytes; ++k) padding |= codes[k];
  return low_only == 0 && padding == 0;
}

class TerngradCodec final : public Codec {
 public:
  TerngradCodec(bool clip, uint64_t seed, bool error_feedback, const CodecEnv& env)
      : clip_(clip), seed_(seed), error_feedback_(error_feedback), env_(env) {}

  std::string_view name() const override { return "terngrad"; }
  size_t stateElements(size_t n) const override { return error_feedback_ ? n : 0; }
  size_t maxEncodedBytes(size_t n) const override { return terngrad::encodedBytes(n); }

  Result<size_t> encode(std::span<const float> in, std::span<float> state,
                        std::span<std::byte> out, const SliceId& id) const override {
    const size_t n = in.size();
    GC_RETURN_IF_ERROR(checkEncodeSpans(name(), n, state.size(), stateElements(n), out.size(),
                                        terngrad::encodedBytes(n)));
    return error_feedback_ ? encodeWith<true>(in.data(), state.data(), n, out.data(), id)
                           : encodeWith<false>(in.data(), nullptr, n, out.data(), id);
  }

  Status decodeAdd(std::span<const std::byte> in, std::span<float> acc,
                   const SliceId&) const override {
    const size_t n = acc.size();
    const size_t bytes = terngrad::encodedBytes(n);
    GC_RETURN_IF_ERROR(checkEncodedSize(name(), n, in.size(), bytes));
    const float s = loadLe<float>(in.data());
    if (!std::isfinite(s) || s < 0.0f)
      return Status::dataLoss(strCat("terngrad: scaler is ", s, ", expected a finite value >= 0"));
    const auto* codes = reinterpret_cast<const uint8_t*>(in.data() + terngrad::kHeaderBytes);
    if (!codesAreValid(codes, n, bytes - terngrad::kHeaderBytes))
      return Status::dataLoss(
          "terngrad: codes hold 0b01 or a non-zero padding code, which the encoder never writes");
    float* dst = acc.data();
    forChunks(env_, n, 16,
              [&](size_t begin, size_t end) { decodeAddLoop(codes, dst, begin, end, s); });
    return {};
  }

 private:
  template <bool kFeedback>
  Result<size_t> encodeWith(const float* g, float* r, size_t n, std::byte* out,
                            const SliceId& id) const {
    GC_ASSIGN_OR_RETURN(const terngrad::Scaler q, scalerOf<kFeedback>(g, r, n));
    storeLe(out, q.s);
    const uint64_t stream = rng::streamSeed(seed_, id.key, id.slice, id.step);
    auto* codes = reinterpret_cast<uint8_t*>(out + terngrad::kHeaderBytes);
    const auto encode =
        kFeedback ? terngrad::kernels().encode_feedback : terngrad::kernels().encode;
    forChunks(env_, n, 16,
              [&](size_t begin, size_t end) { encode(g, r, codes, begin, end, q, stream); });
    const size_t bytes = terngrad::encodedBytes(n);
    const size_t used = (n + 3) / 4;
    std::memset(codes + used, 0, bytes - terngrad::kHeaderBytes - used);
    return bytes;
  }

  // The clipping bound and s, or an error when x holds an infinity or a NaN.
  template <bool kFeedback>
  Result<terngrad::Scaler> scalerOf(const float* g, const float* r, size_t n) const {
    // Per thread: encode is const and runs on several codec threads at once.
    thread_local std::vector<terngrad::BlockStats> blocks;
    const size_t count = (n + terngrad::kStatsBlock - 1) / terngrad::kStatsBlock;
    if (blocks.size() < count) blocks.resize(count);
    terngrad::BlockStats* stats = blocks.data();
    const auto block_stats =
        kFeedback ? terngrad::kernels().block_stats_feedback : terngrad::kernels().block_stats;
    forChunks(env_, n, terngrad::kStatsBlock,
              [&](size_t begin, size_t end) { block_stats(g, r, begin, end, stats); });
    double sum_squares = 0.0;
    float max_magnitude = 0.0f;
    for (const terngrad::BlockStats& block : std::span(stats, count)) {
      sum_squares += block.sum_squares;
      max_magnitude = std::max(max_magnitude, block.max_magnitude);
    }
    // Squares of fp32 values cannot overflow a double: non-finite means the input was.
    if (!std::isfinite(sum_squares))
      return Status::invalidArgument(
          strCat("terngrad: ", kFeedback ? "gradient plus residual" : "gradient",
                 " holds a non-finite value"));
    float bound = std::numeric_limits<float>::infinity();
    if (clip_ && n > 0)
      bound = static_cast<float>(kClipSigmas * std::sqrt(sum_squares / static_cast<double>(n)));
    return terngrad::Scaler{bound, std::min(bound, max_magnitude)};
  }

  bool clip_;
  uint64_t seed_;
  bool error_feedback_;
  CodecEnv env_;
};

}  // namespace

Result<std::unique_ptr<Codec>> makeTerngradCodec(const Params& params, const CodecEnv& env) {
  ParamReader reader("terngrad", params);
  const bool clip = reader.boolean("clip", true,
      "clip to 2.5 times the slice's root mean square before quantizing, as TernGrad does");
  const uint64_t seed = reader.seed("seed", 0,
      "seed of the stochastic rounding");
  const bool error_feedback = reader.boolean("error_feedback", false,
      kErrorFeedbackHelp);
  GC_RETURN_IF_ERROR(reader.finish());
  return std::unique_ptr<Codec>(new TerngradCodec(clip, seed, error_feedback, env));
}

}  // namespace gcagent::compress
