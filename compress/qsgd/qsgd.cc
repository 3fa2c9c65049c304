// qsgd: stochastic quantization to s levels of each bucket's L2 norm (Alistarh et al. 2017,
// "QSGD"; GRACE's qsgd).
//
// Encoded format, little-endian, 4*ceil(n/bucket) + n bytes for n elements (0 when n == 0):
//   fp32 norm[ceil(n/bucket)]   L2 norm of each run of `bucket` consecutive elements of x
//                               (the last run may be shorter)
//   int8 level[n]               signed level in [-s, s]; element i decodes to
//                               (norm[i / bucket] / s) * level[i]
// where x = g, or x = g + r with error_feedback (r, the state, becomes x - decoded). The
// level is floor(s|x|/norm) or one more, with probability s|x|/norm - floor(s|x|/norm), drawn
// from a counter-based generator keyed by (seed, key, slice, step, i): E[decoded] = x up to
// the 2^-24 resolution of the draw, |decoded - x| < norm/s per element (plus fp32 rounding),
// and a non-zero level has the sign of x.
//
// Parameters: levels (s, integer in [1, 127], default 127: a level takes one byte whatever s
// is, so the most levels cost nothing extra on the wire), bucket (elements per norm, integer
// in [1, 2^20], default 512), seed (uint64, default 0), error_feedback (bool, default false).
// decodeAdd rejects (data_loss) a buffer of the wrong size, a norm that is not finite or is
// negative, and a level outside [-s, s]. encode rejects (invalid_argument) a non-finite x, or
// a bucket norm beyond fp32's range, before changing the state.
//
// int8: the same format with s = 127 and each block's largest magnitude in place of its norm
// (block-scaled int8, as low-communication training sends its outer gradients), every element
// rounded to the nearest level (ties to the smaller magnitude; |decoded - x| <= scale/254) or,
// with stochastic = true, drawn as qsgd's. Parameters: block (elements per scale, [1,
// 2^20], default 128), stochastic (default false), seed, error_feedback (default true).
#include "compress/qsgd/qsgd.h"

#include <algorithm>
#include <cmath>

#include "common/str_cat.h"
#include "compress/bytes.h"
#include "compress/cpu/checks.h"
#include "compress/cpu/chunks.h"
#include "compress/params.h"
#include "compress/qsgd/qsgd_kernels.h"
#include "compress/qsgd/qsgd_math.h"
#include "compress/random_math.h"

namespace gcagent::compress {
namespace qsgd {
namespace {

// Elements [begin, end) of one bucket.
template <bool kFeedback>
void encodeGeneric(const float* __restrict g, float* __restrict r, int8_t* __restrict level,
                   size_t begin, size_t end, float norm, int32_t levels, uint64_t stream) {
  const float unit = unitOf(norm, levels);
  for (size_t i = begin; i < end; ++i)
    level[i] = encodeElement<kFeedback>(g, r, i, norm, unit, levels, stream);
}

}  // namespace

const Kernels kGenericKernels = {encodeGeneric<false>, encodeGeneric<true>};

const Kernels& kernels() {
#if GC_CPU_X86
  if (cpu::useAvx2()) return kAvx2Kernels;
#endif
  return kGenericKernels;
}

}  // namespace qsgd

namespace {

// The loops take restrict pointers: the levels never alias the floats, and saying so lets
// the compiler vectorize.

// sum x^2 over [begin, end) in fixed lanes (four: two SSE2 registers of doubles), so the
// compiler may vectorize it without reassociating: the norm stays bit-reproducible. (`unroll
// 1` keeps g++ -O3 from unrolling the lanes into scalars before it vectorizes.) Exact
// squares in double keep the norm >= every |x| of the bucket.
template <bool kFeedback>
double squareSum(const float* __restrict g, const float* __restrict r, size_t begin,
                 size_t end) {
  double lane[4] = {};
  size_t i = begin;
  for (; i + 4 <= end; i += 4) {
#pragma GCC unroll 1
    for (size_t j = 0; j < 4; ++j) {
      const double x = inputAt<kFeedback>(g, r, i + j);
      lane[j] += x * x;
    }
  }
  for (; i < end; ++i) {
    const double x = inputAt<kFeedback>(g, r, i);
    lane[0] += x * x;
  }
  return (lane[0] + lane[1]) + (lane[2] + lane[3]);
}

// The largest magnitude of x over [begin, end), exact in any order (magnitudeBits).
template <bool kFeedback>
float maxMagnitude(const float* __restrict g, const float* __restrict r, size_t begin, size_t end) {
  uint32_t most = 0;
  for (size_t i = begin; i < end; ++i) most = std::max(most, qsgd::magnitudeBits(inputAt<kFeedback>(g, r, i)));
  return floatOf(most);
}

// int8's rounding, in the shape of qsgd's kernels (EncodeFn; it draws nothing from `stream`).
template <bool kFeedback>
void encodeNearestLoop(const float* __restrict g, float* __restrict r, int8_t* __restrict level, size_t begin,
                       size_t end, float scale, int32_t levels, uint64_t) {
  const float unit = qsgd::unitOf(scale, levels);
  for (size_t i = begin; i < end; ++i) level[i] = qsgd::encodeNearest<kFeedback>(g, r, i, scale, unit, levels);
}

void decodeAddLoop(const int8_t* __restrict level, float* __restrict acc, size_t begin,
                   size_t end, float unit) {
  for (size_t i = begin; i < end; ++i) acc[i] += qsgd::dequantize(level[i], unit);
}

// The index of the first level outside [-levels, levels], n if none.
size_t firstInvalidLevel(const int8_t* level, size_t n, int32_t levels) {
  uint32_t any = 0;
  for (size_t i = 0; i < n; ++i)
    any |= static_cast<uint32_t>(!qsgd::isValidLevel(level[i], levels));
  if (any == 0) return n;
  return static_cast<size_t>(std::find_if(level, level + n, [&](int8_t l) {
                               return !qsgd::isValidLevel(l, levels);
                             }) - level);
}

// What scales a bucket, and how a level is rounded: qsgd's L2 norm and random draw, or int8's
// largest magnitude and (by default) nearest rounding.
struct Flavor {
  std::string_view name;
  bool max_scale;
  bool stochastic;
};

class QsgdCodec final : public Codec {
 public:
  QsgdCodec(Flavor flavor, int32_t levels, size_t bucket, uint64_t seed, bool error_feedback,
            const CodecEnv& env)
      : flavor_(flavor), levels_(levels), bucket_(bucket), seed_(seed), error_feedback_(error_feedback), env_(env) {}

  std::string_view name() const override { return flavor_.name; }
  size_t stateElements(size_t n) const override { return error_feedback_ ? n : 0; }
  size_t maxEncodedBytes(size_t n) const override { return qsgd::encodedBytes(n, bucket_); }

  Result<size_t> encode(std::span<const float> in, std::span<float> state,
                        std::span<std::byte> out, const SliceId& id) const override {
    const size_t n = in.size();
    GC_RETURN_IF_ERROR(checkEncodeSpans(name(), n, state.size(), stateElements(n), out.size(),
                                        qsgd::encodedBytes(n, bucket_)));
    return error_feedback_ ? encodeWith<true>(in.data(), state.data(), n, out.data(), id)
                           : encodeWith<false>(in.data(), nullptr, n, out.data(), id);
  }

  Status decodeAdd(std::span<const std::byte> in, std::span<float> acc,
                   const SliceId&) const override {
    const size_t n = acc.size();
    const size_t bucket = bucket_;
    const int32_t levels = levels_;
    const size_t buckets = qsgd::bucketCount(n, bucket);
    GC_RETURN_IF_ERROR(checkEncodedSize(name(), n, in.size(), qsgd::encodedBytes(n, bucket)));
    const std::byte* norms = in.data();
    for (size_t k = 0; k < buckets; ++k) {
      const float norm = loadLe<float>(norms + 4 * k);
      if (!std::isfinite(norm) || norm < 0.0f)
        return Status::dataLoss(strCat(name(), ": bucket ", k, " has norm ", norm,
                                       ", expected a finite value >= 0"));
    }
    const auto* level = reinterpret_cast<const int8_t*>(in.data() + 4 * buckets);
    if (size_t bad = firstInvalidLevel(level, n, levels); bad < n)
      return Status::dataLoss(strCat(name(), ": element ", bad, " has level ", int{level[bad]},
                                     ", outside [-", levels, ", ", levels, "]"));
    float* dst = acc.data();
    forChunks(env_, n, bucket, [&](size_t begin, size_t end) {
      for (size_t k = begin / bucket; k * bucket < end; ++k) {
        const float unit = qsgd::unitOf(loadLe<float>(norms + 4 * k), levels);
        decodeAddLoop(level, dst, k * bucket, std::min(end, (k + 1) * bucket), unit);
      }
    });
    return {};
  }

 private:
  template <bool kFeedback>
  Result<size_t> encodeWith(const float* g, float* r, size_t n, std::byte* out,
                            const SliceId& id) const {
    const size_t bucket = bucket_;
    const int32_t levels = levels_;
    const size_t buckets = qsgd::bucketCount(n, bucket);
    // Every norm first, into the header, so a non-finite input fails before r changes.
    forChunks(env_, n, bucket, [&](size_t begin, size_t end) {
      for (size_t k = begin / bucket; k * bucket < end; ++k) {
        const size_t last = std::min(end, (k + 1) * bucket);
        storeLe(out + 4 * k, flavor_.max_scale ? maxMagnitude<kFeedback>(g, r, k * bucket, last)
                                               : static_cast<float>(std::sqrt(squareSum<kFeedback>(g, r, k * bucket,
                                                                                                   last))));
      }
    });
    for (size_t k = 0; k < buckets; ++k) {
      const float norm = loadLe<float>(out + 4 * k);
      if (!std::isfinite(norm))
        return Status::invalidArgument(
            flavor_.max_scale
                ? strCat(name(), ": block ", k, " has largest magnitude ", norm, ": the input must be finite")
                : strCat(name(), ": bucket ", k, " has L2 norm ", norm,
                         ": the input must be finite and each bucket's norm must fit in fp32"));
    }
    const uint64_t stream = rng::streamSeed(seed_, id.key, id.slice, id.step);
    auto* level = reinterpret_cast<int8_t*>(out + 4 * buckets);
    const qsgd::EncodeFn encode = !flavor_.stochastic ? encodeNearestLoop<kFeedback>
                                  : kFeedback        ? qsgd::kernels().encode_feedback
                                                     : qsgd::kernels().encode;
    forChunks(env_, n, bucket, [&](size_t begin, size_t end) {
      for (size_t k = begin / bucket; k * bucket < end; ++k) {
        encode(g, r, level, k * bucket, std::min(end, (k + 1) * bucket),
               loadLe<float>(out + 4 * k), levels, stream);
      }
    });
    return qsgd::encodedBytes(n, bucket);
  }

  Flavor flavor_;
  int32_t levels_;
  size_t bucket_;
  uint64_t seed_;
  bool error_feedback_;
  CodecEnv env_;
};

}  // namespace

Result<std::unique_ptr<Codec>> makeQsgdCodec(const Params& params, const CodecEnv& env) {
  ParamReader reader("qsgd", params);
  const int64_t levels =
      reader.integer("levels", qsgd::kMaxLevels, Range::closed(1, qsgd::kMaxLevels),
      "quantization levels s per sign");
  const int64_t bucket = reader.integer("bucket", 512, Range::closed(1, 1 << 20),
      "elements that share one norm");
  const uint64_t seed = reader.seed("seed", 0,
      "seed of the stochastic rounding");
  const bool error_feedback = reader.boolean("error_feedback", false,
      kErrorFeedbackHelp);
  GC_RETURN_IF_ERROR(reader.finish());
  return std::unique_ptr<Codec>(new QsgdCodec({"qsgd", false, true}, static_cast<int32_t>(levels),
                                              static_cast<size_t>(bucket), seed, error_feedback,
                                              env));
}

Result<std::unique_ptr<Codec>> makeInt8Codec(const Params& params, const CodecEnv& env) {
  ParamReader reader("int8", params);
  const int64_t block = reader.integer("block", 128, Range::closed(1, 1 << 20),
      "elements that share one scale (their largest magnitude)");
  const bool stochastic = reader.boolean("stochastic", false,
      "round each level by a random draw with the expected value of x (false: to the nearest level)");
  const uint64_t seed = reader.seed("seed", 0,
      "seed of the stochastic rounding");
  const bool error_feedback = reader.boolean("error_feedback", true,
      kErrorFeedbackHelp);
  GC_RETURN_IF_ERROR(reader.finish());
  return std::unique_ptr<Codec>(new QsgdCodec({"int8", true, stochastic}, qsgd::kMaxLevels,
                                              static_cast<size_t>(block), seed, error_feedback, env));
}

}  // namespace gcagent::compress
