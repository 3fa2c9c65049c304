// Little-endian scalar access to encoded buffers. The wire format is little-endian and so
// are the hosts gcagent builds for; memcpy keeps unaligned access defined.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

namespace gcagent::compress {

static_assert(std::endian::native == std::endian::little, "gcagent's wire format is little-endian");

template <class T>
inline T loadLe(const std::byte* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

template <class T>
inline void storeLe(std::byte* p, T v) {
  std::memcpy(p, &v, sizeof v);
}

}  // namespace gcagent::compress
