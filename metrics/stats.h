// The stats of one agent, registered in one prometheus-cpp Registry from the list in
// stats_list.h. Looking up a labelled metric (Family::Add) locks, so callers fetch the
// handles they need once (per codec, per peer) and keep them; a handle's update is an
// atomic add (counters, gauges) or a short lock per observation (histograms).
#pragma once

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <array>
#include <cstdint>
#include <map>
#include <set>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "metrics/health.h"
#include "metrics/stats_list.h"

namespace gcagent::metrics {

enum class Type { kCounter, kGauge, kHistogram };
enum class Buckets { kNone, kFast, kSlow };

enum class Id {
#define GCAGENT_STAT_ID(name, type, buckets, labels, help) name,
  GCAGENT_STATS(GCAGENT_STAT_ID)
#undef GCAGENT_STAT_ID
};

struct StatSpec {
  Id id;
  std::string_view name;  // with the gcagent_ prefix
  Type type;
  Buckets buckets;
  std::string_view labels;  // comma-separated, "" for none
  std::string_view help;
};

std::span<const StatSpec> statList();
const StatSpec& spec(Id id);
std::vector<std::string> labelNames(const StatSpec& s);
std::string_view typeName(Type type);
// "name type labels help" per line, for `gcagent --list-metrics`.
std::string formatStatList();

// Handles for one codec, fetched once per codec.
struct CodecStats {
  prometheus::Counter* raw_sent;
  prometheus::Counter* wire_sent;
  prometheus::Counter* raw_received;
  prometheus::Counter* wire_received;
  prometheus::Histogram* encode;
  prometheus::Histogram* decode;
  prometheus::Gauge* residual_norm;
  prometheus::Counter* silent;  // codec_silent_total
  prometheus::Gauge* ratio_sent;
  prometheus::Gauge* ratio_received;
};

// Handles for one training job's series.
struct JobStats {
  prometheus::Counter* iterations;
  prometheus::Gauge* trainers;
};

struct PeerStats {
  prometheus::Gauge* queue_depth;
  prometheus::Gauge* inflight;
  prometheus::Gauge* send_queue;
};

enum class ErrorKind { kBadMessage, kTimeout, kPeerLost, kReductionFailed, kAuthFailed, kDeviceUnavailable, kAcceptFailed };
enum class SizeClass { kSmall, kMedium, kLarge };
SizeClass sizeClassOf(uint64_t bytes);
// The kind label of errors_total: "bad_message", "timeout", "peer_lost", "reduction_failed".
std::string_view errorKindName(ErrorKind kind);

class Stats {
 public:
  Stats();
  Stats(const Stats&) = delete;
  Stats& operator=(const Stats&) = delete;

  std::shared_ptr<prometheus::Registry> registry() const { return registry_; }

  // Cold path (locks): the handles for a codec or a peer, created at the first call.
  CodecStats& codec(std::string_view name);
  PeerStats& peer(uint32_t rank);
  // Codecs that no declared tensor uses any more lose their gauges (compression ratios,
  // residual norm), so dashboards stop showing stale values; their counters stay, as rates
  // need them. codec() brings the gauges back.
  void retireCodecGaugesExcept(const std::set<std::string, std::less<>>& in_use);
  // A training job's series. Labels stay bounded: at most kMaxJobLabels live jobs have their
  // own, more share "other". retireJob() removes a job's own series (and frees its label).
  static constexpr size_t kMaxJobLabels = 32;
  JobStats& job(std::string_view name);
  void retireJob(std::string_view name);

  prometheus::Histogram& merge() { return *merge_; }
  prometheus::Histogram& reduction(SizeClass c) { return *reduction_[static_cast<int>(c)]; }
  prometheus::Counter& iterationsCompleted() { return *iterations_; }
  prometheus::Counter& tensorsReduced() { return *tensors_; }
  prometheus::Counter& decision(bool compressed) { return *decisions_[compressed ? 1 : 0]; }
  // Bytes of device tensors copied to the host (true) or to the GPU (false).
  prometheus::Counter& gpuCopy(bool to_host) { return *gpu_copy_[to_host ? 0 : 1]; }
  prometheus::Counter& error(ErrorKind kind) { return *errors_[static_cast<int>(kind)]; }
  // Refused peer links by reason, in the order of transport::Refusal.
  static constexpr std::array<std::string_view, 4> kRefusalReasons = {"malformed", "unauthenticated", "timed_out",
                                                                      "over_capacity"};
  prometheus::Counter& peerRefusal(size_t reason) { return *refusals_[reason]; }
  // recovery_events_total by event, in the order of kRecoveryEvents.
  static constexpr std::array<std::string_view, 9> kRecoveryEvents = {
      "peer_lost", "peer_shutdown", "peer_rejoined", "realigned", "reduction_timeout", "shrunk", "grown",
      "trainer_reconnected", "stalled"};
  enum RecoveryEvent {
    kPeerLost, kPeerShutdown, kPeerRejoined, kRealigned, kReductionTimeout, kShrunk, kGrown, kTrainerReconnected,
    kStalled
  };
  prometheus::Counter& recovery(RecoveryEvent event) { return *recovery_[event]; }
  // stale_slices_total: of contributions (false) or results (true).
  prometheus::Counter& staleSlices(bool results) { return *stale_[results ? 1 : 0]; }
  prometheus::Counter& nonFiniteSlices() { return *non_finite_; }
  // Where an error is decided: counts it by kind and keeps it as the health endpoint's last error.
  void recordError(ErrorKind kind, std::string_view message);
  Health& health() { return health_; }
  prometheus::Gauge& trainersConnected() { return *trainers_; }
  prometheus::Gauge& peersUp() { return *peers_up_; }

  void setBuildInfo(std::string_view version, std::string_view codecs, bool cuda, bool ucx);
  // Recomputes the ratio gauges from the byte counters (the periodic refresh calls it).
  void updateRatios();

  // Sums over every codec, for the progress summary.
  struct Totals {
    double raw_sent = 0, wire_sent = 0, raw_received = 0, wire_received = 0;
  };
  Totals totals();

  // Generic access by id: every labelled metric goes through these, so the label names
  // always match stats_list.h. Values are in the order of the spec's labels.
  prometheus::Counter& counter(Id id, const std::vector<std::string>& values);
  prometheus::Gauge& gauge(Id id, const std::vector<std::string>& values);
  prometheus::Histogram& histogram(Id id, const std::vector<std::string>& values);

 private:
  prometheus::Labels labelsOf(Id id, const std::vector<std::string>& values) const;

  std::shared_ptr<prometheus::Registry> registry_;
  std::vector<void*> families_;  // by Id; the Family<T> matching the spec's type
  std::mutex mu_;                // guards the maps below (cold path only)
  std::map<std::string, CodecStats, std::less<>> codecs_;
  std::map<uint32_t, PeerStats> peers_;
  std::map<std::string, JobStats, std::less<>> jobs_;
  prometheus::Histogram* merge_;
  prometheus::Histogram* reduction_[3];
  prometheus::Counter* iterations_;
  prometheus::Counter* tensors_;
  prometheus::Counter* decisions_[2];
  prometheus::Counter* gpu_copy_[2];  // sent, received
  prometheus::Counter* errors_[7];
  prometheus::Counter* refusals_[kRefusalReasons.size()];
  prometheus::Counter* recovery_[kRecoveryEvents.size()];
  prometheus::Counter* stale_[2];  // contribution, result
  prometheus::Counter* non_finite_;
  prometheus::Gauge* trainers_;
  prometheus::Gauge* peers_up_;
  Health health_;
};

}  // namespace gcagent::metrics
