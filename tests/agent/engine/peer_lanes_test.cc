// P3 sending over the loopback transport: what leaves, in which order, as the window allows.
#include "agent/engine/peer_lanes.h"

#include <gtest/gtest.h>

#include "agent/wire/peer_frame.h"
#include "common/str_cat.h"
#include "transport/loopback/loopback.h"

namespace gcagent::agent {
namespace {

Outgoing contributionOf(uint64_t key, std::shared_ptr<std::vector<std::byte>> bytes) {
  SliceMessage h{SliceKind::kContribution, 1, key, 1, 0, 1, 4, 0, 1};
  return {SliceKind::kContribution, 1, key, 1, 0, encodePeerFrame(h), {bytes, *bytes}};
}

TEST(PeerLanesTest, AOneSliceWindowSendsTheMostUrgentQueuedSliceNextAndDropsUnwantedOnes) {
  auto transports = transport::makeLoopbackGroup(2);
  std::vector<uint64_t> arrived;
  transports[1]->setHandlers([&](const transport::Message& m) { arrived.push_back(std::get<SliceMessage>(*parsePeerFrame(m.header, 2)).key); },
                             nullptr);
  for (auto& t : transports) ASSERT_TRUE(t->connect({}).ok());
  auto stats = std::make_shared<metrics::Stats>();
  scheduler::Planner planner({});
  std::vector<uint64_t> unwanted = {13};
  PeerLanes lanes(
      *transports[0], /*inflight_slices=*/1, /*inflight_bytes=*/0, stats, planner, steadyNow,
      [&](const Outgoing& o) { return std::find(unwanted.begin(), unwanted.end(), o.key) == unwanted.end(); },
      [](const Outgoing& o, const Status& why) { ADD_FAILURE() << "refused " << o.key << ": " << why.toString(); });
  auto bytes = std::make_shared<std::vector<std::byte>>(16);
  lanes.push(1, -3, contributionOf(10, bytes));
  lanes.push(1, -1, contributionOf(11, bytes));
  lanes.push(1, 0, contributionOf(12, bytes));
  lanes.push(1, 0, contributionOf(13, bytes));  // as urgent, but its reduction failed meanwhile
  lanes.push(1, -1, contributionOf(14, bytes));
  lanes.send(1);
  EXPECT_EQ(lanes.queued(1), 4u) << "one slice in flight";
  for (int i = 0; i < 20; ++i)
    for (auto& t : transports) t->progress();
  EXPECT_EQ(arrived, (std::vector<uint64_t>{12, 11, 14, 10})) << "priority first, FIFO among equals";
  EXPECT_EQ(lanes.queued(1), 0u);
  EXPECT_EQ(bytes.use_count(), 1) << "every send released its pin";
}

}  // namespace
}  // namespace gcagent::agent
