// The reduction engine's stats, read back by name after a 2-node 2bit run over loopback.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "agent/engine/reduction_engine.h"
#include "tests/agent/coding/host_coders.h"
#include "metrics/read.h"
#include "metrics/stats.h"
#include "transport/loopback/loopback.h"

namespace gcagent::agent {
namespace {

using metrics::read;

struct Node {
  std::shared_ptr<metrics::Stats> stats = std::make_shared<metrics::Stats>();
  std::unique_ptr<ReductionEngine> engine;
  int completed = 0;
};

TEST(EngineStats, CountBytesTimesAndDecisionsPerCodec) {
  constexpr uint64_t kElements = 1 << 20, kSlice = 65536, kIterations = 5;
  auto transports = transport::makeLoopbackGroup(2);
  asio::io_context io;
  HostCoders host(io);
  std::vector<Node> nodes(2);
  for (uint32_t r = 0; r < 2; ++r) {
    EngineOptions o;
    o.slice_elements = kSlice;
    o.stats = nodes[r].stats;
    o.host_stream = host.stream();
    Node& n = nodes[r];
    n.engine = std::make_unique<ReductionEngine>(*transports[r], o,
                                                 [&n](uint64_t, uint64_t, uint64_t, const Status& s, std::optional<uint32_t>) {
                                                   EXPECT_TRUE(s.ok()) << s.message();
                                                   ++n.completed;
                                                 });
    ReductionEngine* e = n.engine.get();
    transports[r]->setHandlers([e](const transport::Message& m) { e->onMessage(m); }, nullptr);
    ASSERT_TRUE(transports[r]->connect({}).ok());
    ASSERT_TRUE(e->declareJob(7, {{1, kElements, 0, {"2bit", {}}, {}}, {2, 1000, 0, {"none", {}}, {}}}).ok());
  }
  // Two local trainers per node, so the local merge runs too.
  std::vector<std::vector<float>> buffers(4, std::vector<float>(kElements));
  std::vector<std::vector<float>> small(4, std::vector<float>(1000, 1.0f));
  for (uint64_t it = 1; it <= kIterations; ++it) {
    for (size_t b = 0; b < buffers.size(); ++b)
      for (uint64_t i = 0; i < kElements; ++i) buffers[b][i] = static_cast<float>((i * 7 + b + it) % 13) - 6.0f;
    for (uint32_t r = 0; r < 2; ++r) {
      ASSERT_TRUE(nodes[r].engine->reduce(7, it, 1, {buffers[2 * r].data(), buffers[2 * r + 1].data()}).ok());
      ASSERT_TRUE(nodes[r].engine->reduce(7, it, 2, {small[2 * r].data(), small[2 * r + 1].data()}).ok());
    }
    for (int round = 0; round < 1000; ++round) {
      bool worked = false;
      for (auto& t : transports) worked |= t->progress();
      worked |= host.poll();
      if (!worked) break;
    }
  }
  for (uint32_t r = 0; r < 2; ++r) {
    SCOPED_TRACE(r);
    EXPECT_EQ(nodes[r].completed, 2 * kIterations);
    nodes[r].engine->tick();
    nodes[r].stats->updateRatios();
    const auto& reg = *nodes[r].stats->registry();
    const double raw = read(reg, "gcagent_raw_bytes_total", {{"codec", "2bit"}, {"direction", "sent"}}).value;
    const double wire = read(reg, "gcagent_wire_bytes_total", {{"codec", "2bit"}, {"direction", "sent"}}).value;
    EXPECT_GT(raw, 0);
    EXPECT_GT(raw / wire, 15.0);
    EXPECT_LE(raw / wire, 16.0);
    const double ratio = read(reg, "gcagent_compression_ratio", {{"codec", "2bit"}, {"direction", "sent"}}).value;
    EXPECT_DOUBLE_EQ(ratio, raw / wire);
    // What one node sent, the other received.
    const auto& other = *nodes[1 - r].stats->registry();
    EXPECT_EQ(read(other, "gcagent_wire_bytes_total", {{"codec", "2bit"}, {"direction", "received"}}).value, wire);
    EXPECT_EQ(read(reg, "gcagent_raw_bytes_total", {{"codec", "none"}}).series, 2u);
    EXPECT_GT(read(reg, "gcagent_encode_seconds", {{"codec", "2bit"}}).value, 0);
    EXPECT_GT(read(reg, "gcagent_decode_seconds", {{"codec", "2bit"}}).value, 0);
    EXPECT_GE(read(reg, "gcagent_merge_seconds").value, 2 * kIterations);
    EXPECT_EQ(read(reg, "gcagent_tensors_reduced_total").value, 2 * kIterations);
    EXPECT_EQ(read(reg, "gcagent_reduction_seconds", {{"size_class", "medium"}}).value, kIterations) << "4 MiB";
    EXPECT_EQ(read(reg, "gcagent_reduction_seconds", {{"size_class", "small"}}).value, kIterations);
    EXPECT_EQ(read(reg, "gcagent_scheduler_decisions_total", {{"decision", "compressed"}}).value, kIterations);
    EXPECT_EQ(read(reg, "gcagent_scheduler_decisions_total", {{"decision", "uncompressed"}}).value, kIterations);
    EXPECT_EQ(read(reg, "gcagent_inflight_slices").value, 0) << "every send completed";
    EXPECT_EQ(read(reg, "gcagent_queue_depth").value, 0);
    EXPECT_EQ(read(reg, "gcagent_errors_total").value, 0);
  }
  // 2bit keeps a residual: one encode in 64 samples its norm. About 16 encodes per node per
  // iteration (pushes to the other owner, results of its own slices): 80 in all.
  EXPECT_GT(read(*nodes[0].stats->registry(), "gcagent_residual_l2_norm", {{"codec", "2bit"}}).value +
                read(*nodes[1].stats->registry(), "gcagent_residual_l2_norm", {{"codec", "2bit"}}).value,
            0);

  // Errors by kind.
  const std::byte junk[3] = {};
  nodes[0].engine->onMessage({1, junk, {}});
  nodes[0].engine->onPeerDown(1, Status::deadlineExceeded("no heartbeat"));
  nodes[0].engine->onPeerDown(1, Status::unavailable("reset"));
  const auto& reg = *nodes[0].stats->registry();
  EXPECT_EQ(read(reg, "gcagent_errors_total", {{"kind", "bad_message"}}).value, 1);
  EXPECT_EQ(read(reg, "gcagent_errors_total", {{"kind", "timeout"}}).value, 1);
  EXPECT_EQ(read(reg, "gcagent_errors_total", {{"kind", "peer_lost"}}).value, 1);
}

}  // namespace
}  // namespace gcagent::agent
