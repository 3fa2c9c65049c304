// Where a quantizer's codes live in its encoding: kBits bits per element (1, 2, 4 or 8),
// most significant first within each byte (element i of a byte of E = 8 / kBits elements
// sits at shift 8 - kBits - kBits * (i % E)), bytes in element order, padded with zero bits to
// whole 4-byte words. MXNet's 2-bit and 1-bit layouts are this one.
#pragma once

#include "compress/hd.h"

namespace gcagent::compress::compll {

template <uint32_t kBits>
struct Codes {
  static_assert(kBits == 1 || kBits == 2 || kBits == 4 || kBits == 8, "codes fill bytes evenly");
  static constexpr uint32_t kBitsPerCode = kBits;
  static constexpr uint32_t kPerByte = 8 / kBits;
  static constexpr uint32_t kPerWord = 32 / kBits;
  static constexpr uint32_t kMask = (1u << kBits) - 1u;

  GC_HD static size_t bytes(size_t n) { return 4 * ((n + kPerWord - 1) / kPerWord); }
  // Bytes that hold at least one element's code; the rest of bytes(n) is padding.
  GC_HD static size_t usedBytes(size_t n) { return (n + kPerByte - 1) / kPerByte; }
  GC_HD static uint32_t shift(size_t i) { return 8u - kBits - kBits * static_cast<uint32_t>(i % kPerByte); }
  GC_HD static uint32_t at(const uint8_t* codes, size_t i) { return (codes[i / kPerByte] >> shift(i)) & kMask; }
};

}  // namespace gcagent::compress::compll
