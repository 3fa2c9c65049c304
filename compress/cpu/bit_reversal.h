// Packing comparison masks into MSB-first bytes: _mm256_movemask_ps puts element j in bit j,
// while the 1-bit formats (MXNet 1bit, onebit) put element j at 0x80 >> j.
#pragma once

#include <array>
#include <cstdint>

namespace gcagent::compress::cpu {

constexpr std::array<uint8_t, 256> makeReversedBytes() {
  std::array<uint8_t, 256> table{};
  for (uint32_t mask = 0; mask < 256; ++mask)
    for (uint32_t j = 0; j < 8; ++j)
      if (mask & (1u << j)) table[mask] |= static_cast<uint8_t>(0x80u >> j);
  return table;
}

// kReversedBytes[mask]: bit j of mask moved to 0x80 >> j.
inline constexpr std::array<uint8_t, 256> kReversedBytes = makeReversedBytes();

}  // namespace gcagent::compress::cpu
