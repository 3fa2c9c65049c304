// libFuzzer target: bytes from a trainer's socket through the control-protocol parser.
// Whatever parses must encode back to a message that parses to the same value.
#include <cstdint>
#include <cstdlib>
#include <span>

#include "shm/protocol.h"

using namespace gcagent::shm::protocol;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto bytes = std::as_bytes(std::span(data, size));
  if (bytes.size() < kHeaderBytes) return 0;
  auto header = parseHeader(bytes.first(kHeaderBytes));
  if (!header.ok()) return 0;
  const auto body = bytes.subspan(kHeaderBytes);
  if (body.size() < header->body_bytes) return 0;
  auto message = decode(*header, body.first(header->body_bytes));
  if (!message.ok()) return 0;
  const auto again = encode(*message);
  auto header2 = parseHeader(std::span(again).first(kHeaderBytes));
  if (!header2.ok()) std::abort();
  auto message2 = decode(*header2, std::span(again).subspan(kHeaderBytes));
  if (!message2.ok() || !(*message2 == *message)) std::abort();
  return 0;
}
