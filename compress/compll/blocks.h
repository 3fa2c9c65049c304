// What a block-scaled quantizer (definition.h) is made of besides its element math: how a
// block's scale travels, and the randomized Hadamard rotation of a block. Host and device
// code alike, so the CPU loops and the GPU kernels give the same bits.
#pragma once

#include "compress/hd.h"
#include "compress/random_math.h"

namespace gcagent::compress::compll {

// A block's scale as an fp32, little-endian; a scale that is not finite or is negative is
// never written.
struct Fp32Scale {
  static constexpr uint32_t kBytes = 4;
  GC_HD static void store(uint8_t* at, float s) {
    const uint32_t b = bitsOf(s);
    for (uint32_t k = 0; k < 4; ++k) at[k] = static_cast<uint8_t>(b >> (8 * k));
  }
  GC_HD static float load(const uint8_t* at) {
    return floatOf(at[0] | (uint32_t{at[1]} << 8) | (uint32_t{at[2]} << 16) | (uint32_t{at[3]} << 24));
  }
  GC_HD static bool valid(const uint8_t* at) {
    const uint32_t b = bitsOf(load(at));
    return b < 0x7f800000u;  // +0 .. the largest finite: not negative, not infinite, not NaN
  }
};

// OCP MX's E8M0: a power of two 2^(b - 127) in one byte b. 255 is NaN in the spec and 0
// (2^-127) is never written here.
struct Pow2Scale {
  static constexpr uint32_t kBytes = 1;
  GC_HD static void store(uint8_t* at, float s) { *at = static_cast<uint8_t>(bitsOf(s) >> 23); }
  GC_HD static float load(const uint8_t* at) { return floatOf(uint32_t{*at} << 23); }
  GC_HD static bool valid(const uint8_t* at) { return *at != 0 && *at != 255; }
};

// Bytes of the scales of `blocks` blocks, padded to whole 4-byte words so the codes after
// them start on a word.
template <class S>
GC_HD size_t scaleBytes(size_t blocks) {
  return (blocks * S::kBytes + 3) / 4 * 4;
}

// Element i's sign in a rotation drawn from `stream`: the low bit of draw i (the uniform
// draws of a stochastic rounding take the high bits of the same draw).
GC_HD uint32_t rotationSign(uint64_t stream, size_t i) {
  return static_cast<uint32_t>(rng::bits64(stream, i) & 1u) << 31;
}

// One stage of the Walsh-Hadamard transform: the butterfly of elements j and j + h (j & h
// clear), (a, b) -> (a + b, a - b). The stages h = 1, 2, 4, ... < n in turn make x <- H x;
// each output is one rounding of its two inputs, so any split of a stage gives the same bits.
GC_HD void butterfly(float* x, uint32_t j, uint32_t h) {
  const float a = x[j], b = x[j + h];
  x[j] = a + b;
  x[j + h] = a - b;
}

}  // namespace gcagent::compress::compll
