// libFuzzer target: a peer's slice header through its parser; what parses round-trips.
#include <cstdint>
#include <cstdlib>
#include <span>

#include "agent/slice_message.h"

using namespace gcagent::agent;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto parsed = parseSliceHeader(std::as_bytes(std::span(data, size)));
  if (!parsed.ok()) return 0;
  const auto again = encodeSliceHeader(*parsed);
  auto reparsed = parseSliceHeader(again);
  if (!reparsed.ok() || !(*reparsed == *parsed)) std::abort();
  return 0;
}
