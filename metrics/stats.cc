#include "metrics/stats.h"

#include <prometheus/family.h>

#include <cassert>
#include <cmath>
#include <utility>

#include "common/str_cat.h"

namespace gcagent::metrics {
namespace {

constexpr StatSpec kStats[] = {
#define GCAGENT_STAT_SPEC(name, type, buckets, labels, help) \
  {Id::name, "gcagent_" #name, Type::k##type, Buckets::k##buckets, labels, help},
    GCAGENT_STATS(GCAGENT_STAT_SPEC)
#undef GCAGENT_STAT_SPEC
};

// Codec kernels take microseconds to tens of milliseconds per slice; whole reductions
// take up to seconds.
prometheus::Histogram::BucketBoundaries bucketsFor(Buckets b) {
  // 16 buckets a factor 2.5 apart: 1 us .. 0.9 s, or 100 us .. 90 s.
  double bound = b == Buckets::kFast ? 1e-6 : 1e-4;
  prometheus::Histogram::BucketBoundaries out;
  for (int i = 0; i < 16; ++i, bound *= 2.5) out.push_back(bound);
  return out;
}

double ratio(double raw, double wire) { return wire > 0 ? raw / wire : 0.0; }

}  // namespace

std::string_view errorKindName(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kBadMessage: return "bad_message";
    case ErrorKind::kTimeout: return "timeout";
    case ErrorKind::kPeerLost: return "peer_lost";
    case ErrorKind::kReductionFailed: return "reduction_failed";
    case ErrorKind::kAuthFailed: return "auth_failed";
    case ErrorKind::kDeviceUnavailable: return "device_unavailable";
    case ErrorKind::kAcceptFailed: return "accept_failed";
  }
  return "?";
}

void Stats::recordError(ErrorKind kind, std::string_view message) {
  error(kind).Increment();
  health_.recordError(errorKindName(kind), message);
}

std::span<const StatSpec> statList() { return kStats; }

const StatSpec& spec(Id id) { return kStats[static_cast<size_t>(id)]; }

std::vector<std::string> labelNames(const StatSpec& s) {
  std::vector<std::string> out;
  std::string_view rest = s.labels;
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    out.emplace_back(rest.substr(0, comma));
    rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
  }
  return out;
}

std::string_view typeName(Type type) {
  switch (type) {
    case Type::kCounter: return "counter";
    case Type::kGauge: return "gauge";
    case Type::kHistogram: return "histogram";
  }
  return "?";
}

std::string formatStatList() {
  std::string out;
  for (const StatSpec& s : kStats)
    out += strCat(s.name, " ", typeName(s.type), " ", s.labels.empty() ? "-" : s.labels, " ", s.help, "\n");
  return out;
}

SizeClass sizeClassOf(uint64_t bytes) {
  if (bytes < (256u << 10)) return SizeClass::kSmall;
  if (bytes < (16u << 20)) return SizeClass::kMedium;
  return SizeClass::kLarge;
}

Stats::Stats() : registry_(std::make_shared<prometheus::Registry>()) {
  for (const StatSpec& s : kStats) {
    const std::string name(s.name), help(s.help);
    switch (s.type) {
      case Type::kCounter:
        families_.push_back(&prometheus::BuildCounter().Name(name).Help(help).Register(*registry_));
        break;
      case Type::kGauge:
        families_.push_back(&prometheus::BuildGauge().Name(name).Help(help).Register(*registry_));
        break;
      case Type::kHistogram:
        families_.push_back(&prometheus::BuildHistogram().Name(name).Help(help).Register(*registry_));
        break;
    }
  }
  // Unlabelled stats and the small fixed label sets exist from the start, so a scrape
  // shows them at zero before the first event.
  merge_ = &histogram(Id::merge_seconds, {});
  reduction_[0] = &histogram(Id::reduction_seconds, {"small"});
  reduction_[1] = &histogram(Id::reduction_seconds, {"medium"});
  reduction_[2] = &histogram(Id::reduction_seconds, {"large"});
  iterations_ = &counter(Id::iterations_completed_total, {});
  tensors_ = &counter(Id::tensors_reduced_total, {});
  decisions_[0] = &counter(Id::scheduler_decisions_total, {"uncompressed"});
  decisions_[1] = &counter(Id::scheduler_decisions_total, {"compressed"});
  gpu_copy_[0] = &counter(Id::gpu_copy_bytes_total, {"sent"});
  gpu_copy_[1] = &counter(Id::gpu_copy_bytes_total, {"received"});
  gauge(Id::planned_tensors, {"compressed"});
  gauge(Id::planned_tensors, {"uncompressed"});
  gauge(Id::pending_sums, {});
  for (const char* topology : {"ps", "ring", "allgather"}) gauge(Id::planned_topology, {topology});
  for (ErrorKind kind : {ErrorKind::kBadMessage, ErrorKind::kTimeout, ErrorKind::kPeerLost, ErrorKind::kReductionFailed,
                         ErrorKind::kAuthFailed, ErrorKind::kDeviceUnavailable, ErrorKind::kAcceptFailed})
    errors_[static_cast<int>(kind)] = &counter(Id::errors_total, {std::string(errorKindName(kind))});
  for (size_t i = 0; i < kRefusalReasons.size(); ++i)
    refusals_[i] = &counter(Id::peer_refusals_total, {std::string(kRefusalReasons[i])});
  trainers_ = &gauge(Id::trainers_connected, {});
  peers_up_ = &gauge(Id::peers_up, {});
  for (size_t i = 0; i < kRecoveryEvents.size(); ++i)
    recovery_[i] = &counter(Id::recovery_events_total, {std::string(kRecoveryEvents[i])});
  stale_[0] = &counter(Id::stale_slices_total, {"contribution"});
  stale_[1] = &counter(Id::stale_slices_total, {"result"});
  non_finite_ = &counter(Id::non_finite_slices_total, {});
  gauge(Id::stalled_jobs, {});
  gauge(Id::members, {});
  gauge(Id::membership_epoch, {});
}

prometheus::Labels Stats::labelsOf(Id id, const std::vector<std::string>& values) const {
  const std::vector<std::string> names = labelNames(spec(id));
  assert(names.size() == values.size());
  prometheus::Labels labels;
  for (size_t i = 0; i < names.size() && i < values.size(); ++i) labels[names[i]] = values[i];
  return labels;
}

prometheus::Counter& Stats::counter(Id id, const std::vector<std::string>& values) {
  assert(spec(id).type == Type::kCounter);
  auto* f = static_cast<prometheus::Family<prometheus::Counter>*>(families_[static_cast<size_t>(id)]);
  return f->Add(labelsOf(id, values));
}

prometheus::Gauge& Stats::gauge(Id id, const std::vector<std::string>& values) {
  assert(spec(id).type == Type::kGauge);
  auto* f = static_cast<prometheus::Family<prometheus::Gauge>*>(families_[static_cast<size_t>(id)]);
  return f->Add(labelsOf(id, values));
}

prometheus::Histogram& Stats::histogram(Id id, const std::vector<std::string>& values) {
  assert(spec(id).type == Type::kHistogram);
  auto* f = static_cast<prometheus::Family<prometheus::Histogram>*>(families_[static_cast<size_t>(id)]);
  return f->Add(labelsOf(id, values), bucketsFor(spec(id).buckets));
}

CodecStats& Stats::codec(std::string_view name) {
  std::lock_guard lock(mu_);
  auto it = codecs_.find(name);
  if (it != codecs_.end()) {
    CodecStats& c = it->second;
    if (c.residual_norm == nullptr) {  // retired: its gauges come back
      c.residual_norm = &gauge(Id::residual_l2_norm, {it->first});
      c.ratio_sent = &gauge(Id::compression_ratio, {it->first, "sent"});
      c.ratio_received = &gauge(Id::compression_ratio, {it->first, "received"});
      // From the counters at once: a scrape before the next refresh must not read 0.
      c.ratio_sent->Set(ratio(c.raw_sent->Value(), c.wire_sent->Value()));
      c.ratio_received->Set(ratio(c.raw_received->Value(), c.wire_received->Value()));
    }
    return c;
  }
  const std::string c(name);
  CodecStats s{&counter(Id::raw_bytes_total, {c, "sent"}),
               &counter(Id::wire_bytes_total, {c, "sent"}),
               &counter(Id::raw_bytes_total, {c, "received"}),
               &counter(Id::wire_bytes_total, {c, "received"}),
               &histogram(Id::encode_seconds, {c}),
               &histogram(Id::decode_seconds, {c}),
               &gauge(Id::residual_l2_norm, {c}),
               &counter(Id::codec_silent_total, {c}),
               &gauge(Id::compression_ratio, {c, "sent"}),
               &gauge(Id::compression_ratio, {c, "received"})};
  return codecs_.emplace(c, s).first->second;
}

PeerStats& Stats::peer(uint32_t rank) {
  std::lock_guard lock(mu_);
  auto it = peers_.find(rank);
  if (it != peers_.end()) return it->second;
  const std::string r = strCat(rank);
  PeerStats s{&gauge(Id::queue_depth, {r}), &gauge(Id::inflight_slices, {r}), &gauge(Id::send_queue, {r})};
  return peers_.emplace(rank, s).first->second;
}

void Stats::retireCodecGaugesExcept(const std::set<std::string, std::less<>>& in_use) {
  std::lock_guard lock(mu_);
  auto& gauges = *static_cast<prometheus::Family<prometheus::Gauge>*>(families_[static_cast<size_t>(Id::residual_l2_norm)]);
  auto& ratios = *static_cast<prometheus::Family<prometheus::Gauge>*>(families_[static_cast<size_t>(Id::compression_ratio)]);
  for (auto& [name, c] : codecs_) {
    if (in_use.contains(name) || c.residual_norm == nullptr) continue;
    gauges.Remove(std::exchange(c.residual_norm, nullptr));
    ratios.Remove(std::exchange(c.ratio_sent, nullptr));
    ratios.Remove(std::exchange(c.ratio_received, nullptr));
  }
}

JobStats& Stats::job(std::string_view name) {
  std::lock_guard lock(mu_);
  auto it = jobs_.find(name);
  // Live jobs with a label of their own, "other" aside: a retired job frees its label.
  const size_t own = jobs_.size() - jobs_.count("other");
  if (it == jobs_.end() && own >= kMaxJobLabels) it = jobs_.find("other");
  if (it != jobs_.end()) return it->second;
  const std::string label = own < kMaxJobLabels ? std::string(name) : std::string("other");
  JobStats s{&counter(Id::job_iterations_completed_total, {label}), &gauge(Id::job_trainers, {label})};
  return jobs_.emplace(label, s).first->second;
}

void Stats::retireJob(std::string_view name) {
  std::lock_guard lock(mu_);
  auto it = jobs_.find(name);
  if (it == jobs_.end() || it->first == "other") return;  // "other" is shared
  static_cast<prometheus::Family<prometheus::Counter>*>(families_[static_cast<size_t>(Id::job_iterations_completed_total)])
      ->Remove(it->second.iterations);
  static_cast<prometheus::Family<prometheus::Gauge>*>(families_[static_cast<size_t>(Id::job_trainers)])
      ->Remove(it->second.trainers);
  jobs_.erase(it);
}

void Stats::setBuildInfo(std::string_view version, std::string_view codecs, bool cuda, bool ucx) {
  gauge(Id::build_info, {std::string(version), std::string(codecs), cuda ? "1" : "0", ucx ? "1" : "0"}).Set(1);
}

void Stats::updateRatios() {
  std::lock_guard lock(mu_);
  for (auto& [name, c] : codecs_) {
    if (c.ratio_sent == nullptr) continue;  // retired
    c.ratio_sent->Set(ratio(c.raw_sent->Value(), c.wire_sent->Value()));
    c.ratio_received->Set(ratio(c.raw_received->Value(), c.wire_received->Value()));
  }
}

Stats::Totals Stats::totals() {
  std::lock_guard lock(mu_);
  Totals t;
  for (auto& [name, c] : codecs_) {
    t.raw_sent += c.raw_sent->Value();
    t.wire_sent += c.wire_sent->Value();
    t.raw_received += c.raw_received->Value();
    t.wire_received += c.wire_received->Value();
  }
  return t;
}

}  // namespace gcagent::metrics
