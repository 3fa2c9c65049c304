// libFuzzer target: a peer's message header through the agent's parsers (slice headers,
// job notices and membership notices); what parses must round-trip.
#include <cstdint>
#include <cstdlib>
#include <span>

#include "agent/job_notice.h"
#include "agent/membership_view.h"
#include "agent/slice_message.h"

using namespace gcagent::agent;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto bytes = std::as_bytes(std::span(data, size));
  if (isJobNotice(bytes)) {
    auto notice = parseJobNotice(bytes);
    if (notice.ok() && !(*parseJobNotice(encodeJobNotice(*notice)) == *notice)) std::abort();
    return 0;
  }
  if (isMembershipNotice(bytes)) {
    constexpr uint32_t kWorld = 8;
    auto notice = parseMembershipNotice(bytes, kWorld);
    if (notice.ok() && !(*parseMembershipNotice(encodeMembershipNotice(*notice), kWorld) == *notice)) std::abort();
    return 0;
  }
  auto parsed = parseSliceHeader(bytes);
  if (!parsed.ok()) return 0;
  const auto again = encodeSliceHeader(*parsed);
  auto reparsed = parseSliceHeader(again);
  if (!reparsed.ok() || !(*reparsed == *parsed)) std::abort();
  return 0;
}
