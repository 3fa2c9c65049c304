// The prefix of every frame's header on a link: the sender's rank and its direction's link
// key (handshake.h). A backend may not say which link a frame came by, and a replaced link's
// frames may still arrive: the key tells the current link's frames from all others.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <vector>

namespace gcagent::transport {

inline constexpr uint32_t kLinkMagic = 0x54414347;  // "GCAT"

struct LinkPrefix {
  uint32_t magic;
  uint32_t from;
  uint64_t key;  // the link key of the direction from -> receiver
};

// The prefix followed by `user`.
inline std::vector<std::byte> encodeLinkHeader(uint32_t from, uint64_t key, std::span<const std::byte> user) {
  std::vector<std::byte> out(sizeof(LinkPrefix) + user.size());
  const LinkPrefix prefix{kLinkMagic, from, key};
  std::memcpy(out.data(), &prefix, sizeof prefix);
  if (!user.empty()) std::memcpy(out.data() + sizeof prefix, user.data(), user.size());
  return out;
}

// The prefix, if the header is long enough to hold one (its fields are not checked here).
inline std::optional<LinkPrefix> readLinkPrefix(std::span<const std::byte> header) {
  if (header.size() < sizeof(LinkPrefix)) return std::nullopt;
  LinkPrefix prefix;
  std::memcpy(&prefix, header.data(), sizeof prefix);  // backends give no alignment guarantee
  return prefix;
}

inline std::span<const std::byte> linkHeaderBody(std::span<const std::byte> header) {
  return header.subspan(sizeof(LinkPrefix));
}

}  // namespace gcagent::transport
