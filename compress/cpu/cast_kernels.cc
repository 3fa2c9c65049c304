// The cast loops for the baseline ISA, and the choice between them and the AVX2 ones.
#include "compress/cpu/cast_kernels.h"

namespace gcagent::compress {
namespace {

// fp32 passthrough: there is no rounding error, so r is never used.
void f32Encode(const float* g, float*, std::byte* dst, size_t begin, size_t end) {
  if (end > begin) std::memcpy(dst + 4 * begin, g + begin, 4 * (end - begin));
}

void f32DecodeAdd(const std::byte* src, float* acc, size_t begin, size_t end) {
  f32DecodeAddLoop(src, acc, begin, end);
}

void f32Decode(const std::byte* src, float* out, size_t begin, size_t end, float scale) {
  f32DecodeLoop(src, out, begin, end, scale);
}

template <class Format>
void encode(const float* g, float* r, std::byte* dst, size_t begin, size_t end) {
  castEncodeLoop<Format>(g, r, dst, begin, end);
}

template <class Format>
void decodeAdd(const std::byte* src, float* acc, size_t begin, size_t end) {
  castDecodeAddLoop<Format>(src, acc, begin, end);
}

template <class Format>
void decode(const std::byte* src, float* out, size_t begin, size_t end, float scale) {
  castDecodeLoop<Format>(src, out, begin, end, scale);
}

constexpr CastKernels kF32Generic = {f32Encode, f32DecodeAdd, f32Decode};
constexpr CastKernels kFp16Generic = {encode<Fp16Format>, decodeAdd<Fp16Format>, decode<Fp16Format>};
constexpr CastKernels kBf16Generic = {encode<Bf16Format>, decodeAdd<Bf16Format>, decode<Bf16Format>};

}  // namespace

const CastKernels& castKernels(CastFormat format) {
#if GC_CPU_X86
  if (cpu::useAvx2()) {
    switch (format) {
      case CastFormat::kF32: return detail::kF32Avx2Kernels;
      case CastFormat::kFp16: return detail::kFp16Avx2Kernels;
      case CastFormat::kBf16: return detail::kBf16Avx2Kernels;
    }
  }
#endif
  switch (format) {
    case CastFormat::kF32: return kF32Generic;
    case CastFormat::kFp16: return kFp16Generic;
    case CastFormat::kBf16: return kBf16Generic;
  }
  return kF32Generic;
}

}  // namespace gcagent::compress
