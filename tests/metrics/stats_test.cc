#include "metrics/stats.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

#include "metrics/read.h"

namespace gcagent::metrics {
namespace {

// gcagent_[a-z0-9_]+ (std::regex trips g++ 12's warnings under the sanitizers).
bool validName(std::string_view name) {
  if (!name.starts_with("gcagent_") || name.size() == 8) return false;
  for (char c : name)
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) return false;
  return true;
}

TEST(StatList, NamesFollowPrometheusConventions) {
  const std::set<std::string> allowed_labels{"codec", "direction", "peer", "size_class", "decision", "kind",
                                             "version", "codecs", "cuda", "ucx", "training_job", "step", "term",
                                             "reason", "event", "message", "topology"};
  std::set<std::string_view> seen;
  for (const StatSpec& s : statList()) {
    SCOPED_TRACE(std::string(s.name));
    EXPECT_TRUE(validName(s.name));
    EXPECT_TRUE(seen.insert(s.name).second) << "duplicate";
    EXPECT_FALSE(s.help.empty());
    const bool total = s.name.ends_with("_total");
    EXPECT_EQ(total, s.type == Type::kCounter) << "_total marks counters, and only them";
    if (s.type == Type::kHistogram) {
      EXPECT_TRUE(s.name.ends_with("_seconds"));
      EXPECT_NE(s.buckets, Buckets::kNone);
    }
    for (const std::string& l : labelNames(s)) EXPECT_TRUE(allowed_labels.count(l)) << l;
    EXPECT_EQ(&spec(s.id), &s);
  }
}

TEST(StatList, FormatListsEveryStat) {
  const std::string text = formatStatList();
  for (const StatSpec& s : statList()) EXPECT_NE(text.find(std::string(s.name) + " "), std::string::npos);
}

TEST(Stats, EveryListedStatIsRegistered) {
  Stats stats;
  stats.codec("2bit");
  stats.peer(1);
  stats.setBuildInfo("0.1.0", "none,2bit", false, true);
  stats.gauge(Id::cost_model, {"2bit", "encode", "w"});  // the auto planner's first fit creates these
  stats.job("resnet");                                     // the first trainer of a job
  std::set<std::string> families;
  for (const auto& f : stats.registry()->Collect()) families.insert(f.name);
  for (const StatSpec& s : statList()) EXPECT_TRUE(families.count(std::string(s.name))) << s.name;
  EXPECT_EQ(families.size(), statList().size());
}

TEST(Stats, ReadsBackByName) {
  Stats stats;
  CodecStats& c = stats.codec("2bit");
  EXPECT_EQ(&c, &stats.codec("2bit")) << "handles are cached";
  c.raw_sent->Increment(1600);
  c.wire_sent->Increment(100);
  c.encode->Observe(2e-5);
  stats.codec("none").raw_sent->Increment(40);
  stats.codec("none").wire_sent->Increment(40);
  stats.iterationsCompleted().Increment();
  stats.error(ErrorKind::kPeerLost).Increment(2);
  stats.decision(true).Increment();
  stats.peer(3).inflight->Set(5);
  stats.trainersConnected().Set(2);
  stats.updateRatios();
  const auto& r = *stats.registry();

  EXPECT_EQ(read(r, "gcagent_raw_bytes_total", {{"codec", "2bit"}, {"direction", "sent"}}).value, 1600);
  EXPECT_EQ(read(r, "gcagent_raw_bytes_total", {{"direction", "sent"}}).value, 1640);
  EXPECT_EQ(read(r, "gcagent_raw_bytes_total", {{"direction", "sent"}}).series, 2u);
  EXPECT_EQ(read(r, "gcagent_wire_bytes_total", {{"codec", "2bit"}}).value, 100);
  EXPECT_DOUBLE_EQ(read(r, "gcagent_compression_ratio", {{"codec", "2bit"}, {"direction", "sent"}}).value, 16.0);
  EXPECT_DOUBLE_EQ(read(r, "gcagent_compression_ratio", {{"codec", "2bit"}, {"direction", "received"}}).value, 0.0);
  const Reading enc = read(r, "gcagent_encode_seconds", {{"codec", "2bit"}});
  EXPECT_EQ(enc.value, 1);
  EXPECT_DOUBLE_EQ(enc.sum, 2e-5);
  EXPECT_EQ(read(r, "gcagent_iterations_completed_total").value, 1);
  EXPECT_EQ(read(r, "gcagent_errors_total", {{"kind", "peer_lost"}}).value, 2);
  EXPECT_EQ(read(r, "gcagent_errors_total", {{"kind", "timeout"}}).value, 0);
  EXPECT_EQ(read(r, "gcagent_errors_total").series, 7u) << "every kind is exported from the start";
  EXPECT_EQ(read(r, "gcagent_scheduler_decisions_total", {{"decision", "compressed"}}).value, 1);
  EXPECT_EQ(read(r, "gcagent_inflight_slices", {{"peer", "3"}}).value, 5);
  EXPECT_EQ(read(r, "gcagent_trainers_connected").value, 2);
  EXPECT_EQ(read(r, "gcagent_no_such_stat").series, 0u);

  const Stats::Totals t = stats.totals();
  EXPECT_EQ(t.raw_sent, 1640);
  EXPECT_EQ(t.wire_sent, 140);
}

TEST(Stats, SizeClasses) {
  EXPECT_EQ(sizeClassOf(0), SizeClass::kSmall);
  EXPECT_EQ(sizeClassOf((256 << 10) - 1), SizeClass::kSmall);
  EXPECT_EQ(sizeClassOf(256 << 10), SizeClass::kMedium);
  EXPECT_EQ(sizeClassOf(16 << 20), SizeClass::kLarge);
  Stats stats;
  stats.reduction(SizeClass::kLarge).Observe(0.5);
  EXPECT_EQ(read(*stats.registry(), "gcagent_reduction_seconds", {{"size_class", "large"}}).value, 1);
  EXPECT_EQ(read(*stats.registry(), "gcagent_reduction_seconds").series, 3u);
}

TEST(StatsHygiene, JobSeriesAreBoundedAndRemovedWithTheirJob) {
  Stats stats;
  for (size_t i = 0; i < Stats::kMaxJobLabels + 5; ++i) stats.job("job" + std::to_string(i)).iterations->Increment();
  const auto& r = *stats.registry();
  EXPECT_EQ(read(r, "gcagent_job_iterations_completed_total").series, Stats::kMaxJobLabels + 1);  // + "other"
  EXPECT_EQ(read(r, "gcagent_job_iterations_completed_total", {{"training_job", "other"}}).value, 5);
  EXPECT_EQ(read(r, "gcagent_job_iterations_completed_total", {{"training_job", "job0"}}).value, 1);
  stats.retireJob("job0");
  EXPECT_EQ(read(r, "gcagent_job_iterations_completed_total", {{"training_job", "job0"}}).series, 0u);
  EXPECT_EQ(read(r, "gcagent_job_trainers", {{"training_job", "job0"}}).series, 0u);
  stats.job("late").iterations->Increment();  // job0's label is free again
  EXPECT_EQ(read(r, "gcagent_job_iterations_completed_total", {{"training_job", "late"}}).value, 1);
  stats.retireJob("other");  // shared by many: stays
  EXPECT_EQ(read(r, "gcagent_job_iterations_completed_total", {{"training_job", "other"}}).series, 1u);
}

TEST(StatsHygiene, GaugesOfCodecsNoLongerUsedGoAndComeBackWithTheCodec) {
  Stats stats;
  stats.codec("2bit").residual_norm->Set(3);
  stats.codec("none").raw_sent->Increment(8);
  const auto& r = *stats.registry();
  stats.retireCodecGaugesExcept({"none"});
  stats.updateRatios();  // skips the retired codec
  EXPECT_EQ(read(r, "gcagent_residual_l2_norm", {{"codec", "2bit"}}).series, 0u);
  EXPECT_EQ(read(r, "gcagent_compression_ratio", {{"codec", "2bit"}}).series, 0u);
  EXPECT_EQ(read(r, "gcagent_residual_l2_norm", {{"codec", "none"}}).series, 1u);
  EXPECT_EQ(read(r, "gcagent_raw_bytes_total", {{"codec", "2bit"}}).series, 2u);  // counters stay
  stats.codec("2bit").raw_sent->Increment(1600);
  stats.codec("2bit").wire_sent->Increment(100);
  stats.retireCodecGaugesExcept({"none"});
  stats.codec("2bit").residual_norm->Set(4);  // back, its ratio at once from the counters
  EXPECT_EQ(read(r, "gcagent_compression_ratio", {{"codec", "2bit"}, {"direction", "sent"}}).value, 16);
  EXPECT_EQ(read(r, "gcagent_residual_l2_norm", {{"codec", "2bit"}}).value, 4);
  EXPECT_EQ(read(r, "gcagent_compression_ratio", {{"codec", "2bit"}}).series, 2u);
}

}  // namespace
}  // namespace gcagent::metrics
