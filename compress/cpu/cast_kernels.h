// The element loops of the cast codecs (none, fp16, bf16), compiled twice: for the baseline
// ISA (cast_kernels.cc) and for AVX2 (cast_avx2.cc). Both run the element functions of
// fp16_math.h / bf16_math.h, so they give the same bits; castKernels() picks by activeIsa().
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "compress/bf16/bf16_math.h"
#include "compress/cpu/isa.h"
#include "compress/fp16/fp16_math.h"

namespace gcagent::compress {

// The loops of one element format over elements [begin, end) of a slice.
struct CastKernels {
  // Element i of g (plus r[i] when r is not null) goes to dst at byte i * element size;
  // with r, r[i] keeps the rounding error.
  void (*encode)(const float* g, float* r, std::byte* dst, size_t begin, size_t end);
  // acc[i] += the value at src byte i * element size.
  void (*decode_add)(const std::byte* src, float* acc, size_t begin, size_t end);
  // out[i] = (0 + the value at src byte i * element size) * scale: the bits decode_add gives
  // on zeros (-0 becomes +0 there too), scaled.
  void (*decode)(const std::byte* src, float* out, size_t begin, size_t end, float scale);
};

enum class CastFormat { kF32, kFp16, kBf16 };

// The kernels of `format` for the active ISA.
const CastKernels& castKernels(CastFormat format);

#if GC_CPU_X86
namespace detail {
extern const CastKernels kF32Avx2Kernels;
extern const CastKernels kFp16Avx2Kernels;
extern const CastKernels kBf16Avx2Kernels;
}  // namespace detail
#endif

// ---- The shared loop bodies. They are force-inlined into each ISA's kernel, so the
// compiler vectorises the same element math for each target.

struct Fp16Format {
  static uint16_t fromFloat(float v) { return fp16::fromFloat(v); }
  static float toFloat(uint16_t h) { return fp16::toFloat(h); }
};

struct Bf16Format {
  static uint16_t fromFloat(float v) { return bf16::fromFloat(v); }
  static float toFloat(uint16_t h) { return bf16::toFloat(h); }
};

template <class Format>
[[gnu::always_inline]] inline void castEncodeLoop(const float* __restrict g, float* __restrict r,
                                                  std::byte* __restrict dst, size_t begin,
                                                  size_t end) {
  if (r == nullptr) {
    for (size_t i = begin; i < end; ++i) {
      const uint16_t h = Format::fromFloat(g[i]);
      std::memcpy(dst + 2 * i, &h, 2);
    }
    return;
  }
  for (size_t i = begin; i < end; ++i) {
    const float x = g[i] + r[i];
    const uint16_t h = Format::fromFloat(x);
    r[i] = x - Format::toFloat(h);
    std::memcpy(dst + 2 * i, &h, 2);
  }
}

template <class Format>
[[gnu::always_inline]] inline void castDecodeAddLoop(const std::byte* __restrict src,
                                                     float* __restrict acc, size_t begin,
                                                     size_t end) {
  for (size_t i = begin; i < end; ++i) {
    uint16_t h;
    std::memcpy(&h, src + 2 * i, 2);
    acc[i] += Format::toFloat(h);
  }
}

template <class Format>
[[gnu::always_inline]] inline void castDecodeLoop(const std::byte* __restrict src,
                                                  float* __restrict out, size_t begin,
                                                  size_t end, float scale) {
  for (size_t i = begin; i < end; ++i) {
    uint16_t h;
    std::memcpy(&h, src + 2 * i, 2);
    out[i] = Format::toFloat(h) * scale;  // -0.0 stays -0.0: a sum starts from its first value
  }
}

[[gnu::always_inline]] inline void f32DecodeLoop(const std::byte* __restrict src,
                                                 float* __restrict out, size_t begin, size_t end,
                                                 float scale) {
  for (size_t i = begin; i < end; ++i) {
    float v;
    std::memcpy(&v, src + 4 * i, 4);
    out[i] = v * scale;  // -0.0 stays -0.0: a sum starts from its first value
  }
}

[[gnu::always_inline]] inline void f32DecodeAddLoop(const std::byte* __restrict src,
                                                    float* __restrict acc, size_t begin,
                                                    size_t end) {
  for (size_t i = begin; i < end; ++i) {
    float v;
    std::memcpy(&v, src + 4 * i, 4);
    acc[i] += v;
  }
}

}  // namespace gcagent::compress
