// compll::Codes, the layout every quantizer definition's codes take, against the layouts
// written out by hand from MXNet's 2-bit and 1-bit encoders (PR #8728, #17952) and the
// nibble/byte orders the same rule gives at 4 and 8 bits.
#include "compress/compll/codes.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace gcagent::compress::compll {
namespace {

TEST(CodesTest, SizesArePaddedToWholeWords) {
  EXPECT_EQ(Codes<2>::bytes(0), 0u);
  EXPECT_EQ(Codes<2>::bytes(1), 4u);
  EXPECT_EQ(Codes<2>::bytes(16), 4u);
  EXPECT_EQ(Codes<2>::bytes(17), 8u);
  EXPECT_EQ(Codes<1>::bytes(32), 4u);
  EXPECT_EQ(Codes<1>::bytes(33), 8u);
  EXPECT_EQ(Codes<4>::bytes(9), 8u);
  EXPECT_EQ(Codes<8>::bytes(5), 8u);
  EXPECT_EQ(Codes<2>::usedBytes(17), 5u);
  EXPECT_EQ(Codes<1>::usedBytes(17), 3u);
}

TEST(CodesTest, MxnetTwoBitShiftsAreMostSignificantFirst) {
  // MXNet: element i in byte i>>2 at shift 6 - 2*(i&3).
  for (size_t i = 0; i < 12; ++i) EXPECT_EQ(Codes<2>::shift(i), 6u - 2u * (i & 3u)) << i;
  // MXNet 1-bit: element i under mask 0x80 >> (i&7).
  for (size_t i = 0; i < 20; ++i) EXPECT_EQ(1u << Codes<1>::shift(i), 0x80u >> (i & 7u)) << i;
  // 4 bits: the high nibble first; 8 bits: the whole byte.
  EXPECT_EQ(Codes<4>::shift(0), 4u);
  EXPECT_EQ(Codes<4>::shift(1), 0u);
  EXPECT_EQ(Codes<8>::shift(3), 0u);
}

TEST(CodesTest, ReadsEachElementsCode) {
  // The 2-bit golden bytes of docs/DESIGN.md (step 1): e0 e0 e0 03.
  const std::vector<uint8_t> two = {0xe0, 0xe0, 0xe0, 0x03};
  const uint32_t want2[16] = {3, 2, 0, 0, 3, 2, 0, 0, 3, 2, 0, 0, 0, 0, 0, 3};
  for (size_t i = 0; i < 16; ++i) EXPECT_EQ(Codes<2>::at(two.data(), i), want2[i]) << i;
  const std::vector<uint8_t> nibbles = {0xa5, 0x0f};
  EXPECT_EQ(Codes<4>::at(nibbles.data(), 0), 0xau);
  EXPECT_EQ(Codes<4>::at(nibbles.data(), 1), 0x5u);
  EXPECT_EQ(Codes<4>::at(nibbles.data(), 3), 0xfu);
  EXPECT_EQ(Codes<8>::at(nibbles.data(), 1), 0x0fu);
}

}  // namespace
}  // namespace gcagent::compress::compll
