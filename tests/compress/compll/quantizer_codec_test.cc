// The checks compll's quantizer codec makes of what arrives, against brute force over every
// code: the padding past the last element and a code the encoder never writes, at 1, 2, 4 and
// 8 bits per code.
#include "compress/compll/quantizer_codec.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace gcagent::compress::compll {
namespace {

template <class C>
size_t bruteFirst(const std::vector<uint8_t>& codes, size_t n, uint32_t never) {
  for (size_t i = 0; i < n; ++i)
    if (((codes[i / C::kPerByte] >> (8 - C::kBitsPerCode * (1 + i % C::kPerByte))) & C::kMask) == never) return i;
  return n;
}

template <class C>
bool bruteClear(const std::vector<uint8_t>& codes, size_t n) {
  for (size_t i = n; i < 8 * codes.size() / C::kBitsPerCode; ++i)
    if (((codes[i / C::kPerByte] >> (8 - C::kBitsPerCode * (1 + i % C::kPerByte))) & C::kMask) != 0) return false;
  return true;
}

template <class C>
void checkAgainstBruteForce() {
  std::mt19937 rng(C::kBitsPerCode);
  for (size_t n : {size_t{0}, size_t{1}, size_t{5}, size_t{31}, size_t{32}, size_t{33}, size_t{100}, size_t{517}}) {
    for (int round = 0; round < 50; ++round) {
      std::vector<uint8_t> codes(C::bytes(n));
      // Mostly codes other than `never` (so that a found one is often far in), the padding
      // usually clear.
      const uint32_t never = rng() & C::kMask;
      for (size_t i = 0; i < n; ++i) {
        uint32_t code = rng() & C::kMask;
        if (code == never && rng() % 64 != 0) code = (code + 1) & C::kMask;
        codes[i / C::kPerByte] |= static_cast<uint8_t>(code << C::shift(i));
      }
      if (round % 5 == 0 && !codes.empty()) codes.back() |= 1;  // a set bit in the last word
      EXPECT_EQ(firstCodeEqualTo<C>(codes.data(), n, never), bruteFirst<C>(codes, n, never))
          << C::kBitsPerCode << " bits, n=" << n << " never=" << never;
      EXPECT_EQ(paddingIsClear<C>(codes.data(), n), bruteClear<C>(codes, n)) << C::kBitsPerCode << " bits, n=" << n;
    }
  }
}

// firstWithBits against a code-by-code search, at every position of the first match.
template <class C>
void checkFirstWithBits() {
  std::mt19937 rng(7 + C::kBitsPerCode);
  for (uint32_t mask : {C::kMask, C::kMask & 0x7cu, C::kMask & 0x7fu, 1u}) {
    if (mask == 0) continue;
    for (size_t n : {size_t{0}, size_t{3}, size_t{8}, size_t{9}, size_t{64}, size_t{517}}) {
      for (int round = 0; round < 40; ++round) {
        std::vector<uint8_t> codes(C::bytes(n));
        for (size_t i = 0; i < n; ++i) {
          uint32_t code = rng() & C::kMask;
          if ((code & mask) == mask && rng() % 64 != 0) code &= ~mask | (mask & (mask - 1));
          codes[i / C::kPerByte] |= static_cast<uint8_t>(code << C::shift(i));
        }
        size_t expected = n;
        for (size_t i = 0; i < n && expected == n; ++i)
          if ((C::at(codes.data(), i) & mask) == mask) expected = i;
        EXPECT_EQ(firstWithBits<C>(codes.data(), n, mask), expected) << "mask=" << mask << " n=" << n;
      }
    }
  }
}

TEST(QuantizerChecksTest, FirstCodeWithMaskBitsAtFourAndEightBits) {
  checkFirstWithBits<Codes<4>>();
  checkFirstWithBits<Codes<8>>();
}

TEST(QuantizerChecksTest, FirstCodeAndPaddingAtOneBit) { checkAgainstBruteForce<Codes<1>>(); }
TEST(QuantizerChecksTest, FirstCodeAndPaddingAtTwoBits) { checkAgainstBruteForce<Codes<2>>(); }
TEST(QuantizerChecksTest, FirstCodeAndPaddingAtFourBits) { checkAgainstBruteForce<Codes<4>>(); }
TEST(QuantizerChecksTest, FirstCodeAndPaddingAtEightBits) { checkAgainstBruteForce<Codes<8>>(); }

}  // namespace
}  // namespace gcagent::compress::compll
