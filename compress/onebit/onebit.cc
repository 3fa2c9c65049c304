// onebit: sign bits plus one mean-magnitude scale per slice, with error feedback (Seide et
// al. 2014, "1-bit SGD"; BytePS `onebit`).
//
// Encoded format, little-endian, 4 + 4*ceil(n/32) bytes for n elements (4 when n == 0):
//   fp32 scale           sum|x| / n with scaled=true (0 for n == 0), 1.0 with scaled=false
//   4*ceil(n/32) bytes   one bit per element, MSB first: element i in byte 4 + (i>>3) under
//                        mask 0x80 >> (i&7); set for x < 0 (decodes to -scale), clear for
//                        x >= 0 (decodes to +scale); bits past element n-1 are zero
// where x = g + e, and e (the state, n floats) is the error-feedback residual, always on:
// e = x - decoded. Every element is sent as +-scale, so no per-step bound holds; what a step
// does not send stays in e: decoded + e_new == g + e_old up to one fp32 rounding.
//
// Parameters: scaled (bool, default true).
// decodeAdd rejects (data_loss) a buffer of the wrong size, a scale that is not finite or is
// negative, and set padding bits. encode rejects (invalid_argument) a non-finite x when
// scaled, before changing the state.
#include "compress/onebit/onebit.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "common/str_cat.h"
#include "compress/bytes.h"
#include "compress/cpu/checks.h"
#include "compress/cpu/chunks.h"
#include "compress/onebit/onebit_kernels.h"
#include "compress/onebit/onebit_math.h"
#include "compress/params.h"
#include "compress/without_feedback.h"

namespace gcagent::compress {
namespace onebit {
namespace {

// The loops take restrict pointers: the packed bytes never alias the floats, and saying so
// lets the compiler vectorize.

// sum |g + e| over [begin, end) in fixed lanes (four: two SSE2 registers of doubles), so
// the compiler may vectorize it without reassociating: the result stays bit-reproducible.
// (`unroll 1` keeps g++ -O3 from unrolling the lanes into scalars before it vectorizes.)
double absSum(const float* __restrict g, const float* __restrict e, size_t begin, size_t end) {
  double lane[4] = {};
  size_t i = begin;
  for (; i + 4 <= end; i += 4) {
#pragma GCC unroll 1
    for (size_t j = 0; j < 4; ++j) lane[j] += magnitude(g[i + j] + e[i + j]);
  }
  for (; i < end; ++i) lane[0] += magnitude(g[i] + e[i]);
  return (lane[0] + lane[1]) + (lane[2] + lane[3]);
}

void blockSumsGeneric(const float* g, const float* e, size_t begin, size_t end, double* partial) {
  for (size_t b = begin / kSumBlock; b * kSumBlock < end; ++b)
    partial[b] = absSum(g, e, b * kSumBlock, std::min(end, (b + 1) * kSumBlock));
}

// Bytes begin/8 .. of the bits; begin is a multiple of 8, end a multiple of 8 or n.
void encodeGeneric(const float* __restrict g, float* __restrict e, uint8_t* __restrict bits,
                   size_t begin, size_t end, float scale) {
  for (size_t b = begin / 8; b < end / 8; ++b) bits[b] = encodeByte(g, e, b, 8, scale);
  if (end % 8 != 0) bits[end / 8] = encodeByte(g, e, end / 8, end % 8, scale);
}

// Byte by byte, so every shift is a constant the compiler can vectorize with.
void decodeAddGeneric(const uint8_t* __restrict bits, float* __restrict acc, size_t begin,
                      size_t end, float scale) {
  for (size_t b = begin / 8; b < end / 8; ++b)
    for (uint32_t j = 0; j < 8; ++j)
      acc[8 * b + j] += dequantize((bits[b] >> (7u - j)) & 1u, scale);
  for (size_t i = std::max(begin, end / 8 * 8); i < end; ++i)
    acc[i] += dequantize(bitAt(bits, i), scale);
}

}  // namespace

const Kernels kGenericKernels = {blockSumsGeneric, encodeGeneric, decodeAddGeneric};

const Kernels& kernels() {
#if GC_CPU_X86
  if (cpu::useAvx2()) return kAvx2Kernels;
#endif
  return kGenericKernels;
}

}  // namespace onebit

namespace {

// True when no bit at or past element n is set in the packed bits.
bool paddingIsClear(const uint8_t* bits, size_t n, size_t bit_bytes) {
  if (n % 8 != 0 && (bits[n / 8] & (0xffu >> (n % 8))) != 0) return false;
  return std::all_of(bits + (n + 7) / 8, bits + bit_bytes, [](uint8_t b) { return b == 0; });
}

class OnebitCodec final : public Codec {
 public:
  OnebitCodec(bool scaled, const CodecEnv& env) : scaled_(scaled), env_(env) {}

  std::string_view name() const override { return "onebit"; }
  size_t stateElements(size_t n) const override { return n; }
  size_t maxEncodedBytes(size_t n) const override { return onebit::encodedBytes(n); }

  Result<size_t> encode(std::span<const float> in, std::span<float> state,
                        std::span<std::byte> out, const SliceId&) const override {
    const size_t n = in.size();
    const size_t bytes = onebit::encodedBytes(n);
    GC_RETURN_IF_ERROR(checkEncodeSpans(name(), n, state.size(), n, out.size(), bytes));
    const float* g = in.data();
    float* e = state.data();
    float scale = 1.0f;
    if (scaled_) {
      GC_ASSIGN_OR_RETURN(scale, meanMagnitude(g, e, n));
    }
    storeLe(out.data(), scale);
    auto* bits = reinterpret_cast<uint8_t*>(out.data() + onebit::kHeaderBytes);
    const auto encode = onebit::kernels().encode;
    forChunks(env_, n, 32,
              [&](size_t begin, size_t end) { encode(g, e, bits, begin, end, scale); });
    const size_t used = (n + 7) / 8;
    std::memset(bits + used, 0, bytes - onebit::kHeaderBytes - used);
    return bytes;
  }

  Status decodeAdd(std::span<const std::byte> in, std::span<float> acc,
                   const SliceId&) const override {
    const size_t n = acc.size();
    const size_t bytes = onebit::encodedBytes(n);
    GC_RETURN_IF_ERROR(checkEncodedSize(name(), n, in.size(), bytes));
    const float scale = loadLe<float>(in.data());
    if (!std::isfinite(scale) || scale < 0.0f)
      return Status::dataLoss(strCat("onebit: scale is ", scale, ", expected a finite value >= 0"));
    const auto* bits = reinterpret_cast<const uint8_t*>(in.data() + onebit::kHeaderBytes);
    if (!paddingIsClear(bits, n, bytes - onebit::kHeaderBytes))
      return Status::dataLoss(strCat("onebit: padding bits past element ", n, " are set"));
    float* dst = acc.data();
    const auto decode_add = onebit::kernels().decode_add;
    forChunks(env_, n, 32,
              [&](size_t begin, size_t end) { decode_add(bits, dst, begin, end, scale); });
    return {};
  }

 private:
  // sum|g + e| / n, or an error when g + e holds an infinity or a NaN.
  Result<float> meanMagnitude(const float* g, const float* e, size_t n) const {
    if (n == 0) return 0.0f;
    // Per thread: encode is const and runs on several codec threads at once.
    thread_local std::vector<double> partial;
    const size_t blocks = (n + onebit::kSumBlock - 1) / onebit::kSumBlock;
    if (partial.size() < blocks) partial.resize(blocks);
    double* sums = partial.data();
    const auto block_sums = onebit::kernels().block_sums;
    forChunks(env_, n, onebit::kSumBlock,
              [&](size_t begin, size_t end) { block_sums(g, e, begin, end, sums); });
    double sum = 0.0;
    for (size_t b = 0; b < blocks; ++b) sum += sums[b];
    // A sum of fp32 magnitudes cannot overflow a double: non-finite means the input was.
    if (!std::isfinite(sum))
      return Status::invalidArgument("onebit: gradient plus residual holds a non-finite value");
    return static_cast<float>(sum / static_cast<double>(n));
  }

  bool scaled_;
  CodecEnv env_;
};

}  // namespace

Result<std::unique_ptr<Codec>> makeOnebitCodec(const Params& params, const CodecEnv& env) {
  ParamReader reader("onebit", params);
  const bool scaled = reader.boolean("scaled", true,
      "scale the signs by the mean magnitude (false: plain signs)");
  const bool error_feedback = reader.boolean("error_feedback", true,
      kErrorFeedbackHelp);
  GC_RETURN_IF_ERROR(reader.finish());
  return applyErrorFeedback(error_feedback, std::unique_ptr<Codec>(new OnebitCodec(scaled, env)));
}

}  // namespace gcagent::compress
