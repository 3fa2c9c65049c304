#include "metrics/health.h"

#include <gtest/gtest.h>

#include "metrics/stats.h"

namespace gcagent::metrics {
namespace {

TEST(Health, ReadyOnlyWhenServingWithEveryPeerUp) {
  Health h;
  h.setRank(2, 3);
  EXPECT_FALSE(h.snapshot().ready());
  h.setPeersConnected(3);
  EXPECT_FALSE(h.snapshot().ready());  // peers up, but trainers not served yet
  h.setServing(true);
  EXPECT_TRUE(h.snapshot().ready());
  h.setPeersConnected(2);
  EXPECT_FALSE(h.snapshot().ready());
  h.setPeersConnected(3);
  h.setStalledJobs(1);  // every peer up, and still a job cannot make progress
  EXPECT_FALSE(h.snapshot().ready());
  h.setStalledJobs(0);
  EXPECT_TRUE(h.snapshot().ready());
}

TEST(Health, JsonCarriesPeersTrainersAndTheLastErrorWithItsAge) {
  Health h;
  h.setRank(1, 1);
  h.setServing(true);
  h.setTrainers(4);
  const auto now = std::chrono::system_clock::now();
  EXPECT_EQ(healthJson(h.snapshot(), now),
            "{\"status\":\"not ready\",\"rank\":1,\"peers_connected\":0,\"peers_expected\":1,\"serving\":true,"
            "\"trainers\":4,\"stalled_jobs\":0,\"lost_node\":null,\"away_nodes\":[],\"errors\":0,\"last_error\":null}\n");
  h.recordError("peer_lost", "peer rank 0 lost: \"ucx\"\n");
  HealthSnapshot s = h.snapshot();
  ASSERT_TRUE(s.last_error);
  s.last_error->when = std::chrono::system_clock::time_point(std::chrono::milliseconds(1700000000123));
  const auto later = s.last_error->when + std::chrono::milliseconds(2500);
  EXPECT_EQ(healthJson(s, later),
            "{\"status\":\"not ready\",\"rank\":1,\"peers_connected\":0,\"peers_expected\":1,\"serving\":true,"
            "\"trainers\":4,\"stalled_jobs\":0,\"lost_node\":null,\"away_nodes\":[],\"errors\":1,\"last_error\":{\"kind\":\"peer_lost\","
            "\"message\":\"peer rank 0 lost: \\\"ucx\\\"\\n\",\"time\":\"2023-11-14T22:13:20.123Z\","
            "\"seconds_ago\":2.500}}\n");
}

TEST(Health, JsonNamesALostNodeUntilItIsCleared) {
  Health h;
  h.setLostNode(2, "node 2 has been unreachable for 61 s \"x\"");
  EXPECT_NE(healthJson(h.snapshot(), std::chrono::system_clock::now())
                .find(",\"lost_node\":{\"rank\":2,\"why\":\"node 2 has been unreachable for 61 s \\\"x\\\"\"},"),
            std::string::npos);
  h.setAwayNodes({{2, 61.25, false, "nothing heard"}, {3, 1.0, true, "it shut down"}});
  EXPECT_NE(healthJson(h.snapshot(), std::chrono::system_clock::now())
                .find(",\"away_nodes\":[{\"rank\":2,\"seconds\":61.2,\"shut_down\":false,\"why\":\"nothing heard\"},"
                      "{\"rank\":3,\"seconds\":1.0,\"shut_down\":true,\"why\":\"it shut down\"}],"),
            std::string::npos);
  h.setLostNode(std::nullopt, "");
  EXPECT_NE(healthJson(h.snapshot(), std::chrono::system_clock::now()).find(",\"lost_node\":null,"), std::string::npos);
}

TEST(Health, ErrorAgeNearTheClocksEpochAndAfterAStepBack) {
  Health h;
  h.recordError("timeout", "t");
  HealthSnapshot s = h.snapshot();
  ASSERT_TRUE(s.last_error);
  const auto epoch = std::chrono::system_clock::time_point{};
  s.last_error->when = epoch + std::chrono::milliseconds(250);
  const std::string json = healthJson(s, epoch + std::chrono::seconds(1));
  EXPECT_NE(json.find("\"time\":\"1970-01-01T00:00:00.250Z\",\"seconds_ago\":0.750}"), std::string::npos) << json;
  // The wall clock stepped back below the error's time: an age of zero, never negative.
  const std::string stepped = healthJson(s, epoch);
  EXPECT_NE(stepped.find("\"seconds_ago\":0.000}"), std::string::npos) << stepped;
}

TEST(Health, StatsRecordErrorCountsByKindAndKeepsTheLatest) {
  Stats stats;
  stats.recordError(ErrorKind::kBadMessage, "first");
  stats.recordError(ErrorKind::kTimeout, "second");
  EXPECT_EQ(stats.error(ErrorKind::kBadMessage).Value(), 1);
  EXPECT_EQ(stats.error(ErrorKind::kTimeout).Value(), 1);
  const HealthSnapshot s = stats.health().snapshot();
  EXPECT_EQ(s.errors, 2u);
  ASSERT_TRUE(s.last_error);
  EXPECT_EQ(s.last_error->kind, "timeout");
  EXPECT_EQ(s.last_error->message, "second");
}

}  // namespace
}  // namespace gcagent::metrics
