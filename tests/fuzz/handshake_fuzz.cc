// libFuzzer target: what a stranger can send to transport.listen. The first byte picks the
// side (acceptor or connector) and the tokens; the rest is read as frames the way the gate
// reads them (header first, body only once the header passed). Nothing may crash, a body is
// never read past the cap, and a side says nothing after it admitted or refused a link.
#include <cstdint>
#include <cstdlib>
#include <span>

#include "transport/handshake.h"

using namespace gcagent::transport;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const bool acceptor = (data[0] & 1) != 0;
  const std::string token = (data[0] & 2) != 0 ? "cluster-token" : "";
  auto input = std::as_bytes(std::span(data + 1, size - 1));
  const std::vector<std::byte> address{std::byte{0x55}, std::byte{0xaa}};
  AcceptorHandshake a({token, 1, 3, address});
  ConnectorHandshake c({token, 0, 3, address}, 1);
  if (!acceptor && !c.start().ok()) return 0;
  while (input.size() >= kFrameHeaderBytes) {
    auto header = parseFrameHeader(input.first(kFrameHeaderBytes));
    if (!header.ok()) return 0;
    if (header->body_bytes > kMaxFrameBody) std::abort();
    input = input.subspan(kFrameHeaderBytes);
    if (input.size() < header->body_bytes) return 0;
    const auto body = input.first(header->body_bytes);
    input = input.subspan(header->body_bytes);
    // What parses must round-trip.
    const auto again = encodeFrame(header->type, body);
    if (again.size() != kFrameHeaderBytes + body.size()) std::abort();
    Step step = acceptor ? a.onFrame(header->type, body) : c.onFrame(header->type, body);
    if (step.admitted && step.refused) std::abort();
    if (step.admitted && step.admitted->peer_address.empty()) std::abort();
    if (step.refused || step.admitted) return 0;
  }
  return 0;
}
