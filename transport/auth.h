// Peer authentication: HMAC-SHA256 over a shared cluster token, with fresh nonces, so each
// side of a link proves it knows the token without sending it.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "common/status.h"

namespace gcagent::transport {

using Digest = std::array<std::byte, 32>;
using Nonce = std::array<std::byte, 16>;

Digest hmacSha256(std::span<const std::byte> key, std::span<const std::byte> message);

// Compares in time independent of where the digests differ.
bool digestsEqual(const Digest& a, const Digest& b);

// Fills `out` from the kernel's random source (getrandom).
Status randomBytes(std::span<std::byte> out);

// Which side of the handshake a proof comes from: the two proofs over the same nonces
// differ, so one side's proof cannot be reflected back as the other's. The link-key roles
// derive the per-direction message tags of a link (handshake.h) the same way; they are
// never sent.
enum class Role : uint8_t { kAcceptor = 1, kConnector = 2, kKeyToAcceptor = 3, kKeyToConnector = 4 };

// The proof `role` sends on the link connector -> acceptor, binding both ranks and both
// nonces.
Digest handshakeProof(std::string_view token, Role role, uint32_t connector, uint32_t acceptor,
                      const Nonce& connector_nonce, const Nonce& acceptor_nonce);

// Reads the cluster token from `path`. The file must be a regular file that neither its
// group nor others can read or write (mode 0600 or 0400), and must hold a non-empty
// token; trailing whitespace is dropped. The token never appears in a message.
Result<std::string> readTokenFile(const std::string& path);

}  // namespace gcagent::transport
