// libFuzzer target: a peer's message header through the one parser of every frame between
// agents (agent/wire/peer_frame.h: slices, job, realign and membership notices, outcome queries and answers); what parses must
// encode to the same bytes and parse back to the same message.
#include <cstdint>
#include <cstdlib>
#include <span>

#include "agent/wire/peer_frame.h"

using namespace gcagent::agent;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  constexpr uint32_t kWorld = 8;
  const auto bytes = std::as_bytes(std::span(data, size));
  auto parsed = parsePeerFrame(bytes, kWorld);
  if (!parsed.ok()) return 0;
  const auto again = encodePeerFrame(*parsed);
  if (!std::equal(again.begin(), again.end(), bytes.begin(), bytes.end())) std::abort();
  auto reparsed = parsePeerFrame(again, kWorld);
  if (!reparsed.ok() || !(*reparsed == *parsed)) std::abort();
  return 0;
}
