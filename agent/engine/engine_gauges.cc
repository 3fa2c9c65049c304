#include "agent/engine/engine_gauges.h"

#include <algorithm>
#include <set>
#include <string>

#include "common/log.h"

namespace gcagent::agent {

void countSent(EngineCounters& counters, metrics::CodecStats& stats, uint64_t raw, uint64_t wire, uint32_t copies) {
  counters.raw_bytes_sent += copies * raw;
  counters.wire_bytes_sent += copies * wire;
  stats.raw_sent->Increment(static_cast<double>(copies * raw));
  stats.wire_sent->Increment(static_cast<double>(copies * wire));
}

EngineGauges::EngineGauges(metrics::Stats& stats, scheduler::Planner& planner, ResidualSampler& sampler,
                           uint32_t world, uint32_t self)
    : stats_(stats), planner_(planner), sampler_(sampler) {
  for (uint32_t r = 0; r < world; ++r) peers_.push_back(r == self ? nullptr : &stats_.peer(r));
}

void EngineGauges::planned(const EngineJobs& jobs) {
  double compressed = 0, uncompressed = 0;
  double by_topology[3] = {0, 0, 0};
  for (const auto& [job, js] : jobs)
    for (const auto& [key, k] : js->keys) {
      (k.plan.compress ? compressed : uncompressed) += 1;
      by_topology[static_cast<int>(k.topology)] += 1;
    }
  stats_.gauge(metrics::Id::planned_tensors, {"compressed"}).Set(compressed);
  stats_.gauge(metrics::Id::planned_tensors, {"uncompressed"}).Set(uncompressed);
  for (Topology t : {Topology::kPs, Topology::kRing, Topology::kAllgather})
    stats_.gauge(metrics::Id::planned_topology, {std::string(topologyName(t))}).Set(by_topology[static_cast<int>(t)]);
}

void EngineGauges::encoded(KeyState& k, uint64_t iteration, const std::vector<SliceEncoding>& encodings) {
  for (uint32_t s = 0; s < encodings.size(); ++s) {
    const SliceEncoding& e = encodings[s];
    if (e.seconds <= 0) continue;  // not encoded (an exact slice), or not timed
    const uint64_t n = k.geometry.size(s);
    k.push_stats->encode->Observe(e.seconds);
    planner_.recordEncode(k.push_spec.name, n, e.bytes.size(), e.seconds);
    sampler_.encoded(*k.push_stats, *k.push, k.coder->residualOf(k.work.job, k.spec.key, s), n);
  }
  // Sampled: slice 0 now and then. The sum is still in the first buffer (results come later).
  if (!k.silent.due(0, iteration) || encodings.empty() || encodings[0].seconds <= 0) return;
  const std::span<const float> input(k.outputs[0], k.geometry.size(0));
  if (!k.silent.observe(*k.push, input, encodings[0].bytes, {k.spec.key, 0, iteration})) return;
  k.push_stats->silent->Increment();
  GC_LOG(kWarn, "agent", "tensor ", k.spec.key, ": codec '", k.push_spec.name, "' encoded nonzero gradients as nothing "
         "but zeros for ", k.silent.silentIterations(), " iterations; its residual only grows and the layer does not "
         "train (lower the codec's threshold or raise its ratio: gcagent --list-codecs)");
}

void EngineGauges::costs(const EngineJobs& jobs) {
  auto set = [&](const std::string& codec, const char* step, const scheduler::LinearCost& c) {
    stats_.gauge(metrics::Id::cost_model, {codec, step, "w"}).Set(c.w);
    stats_.gauge(metrics::Id::cost_model, {codec, step, "b"}).Set(c.b);
    stats_.gauge(metrics::Id::cost_model, {codec, step, "overhead"}).Set(c.overhead);
  };
  std::vector<std::string> codecs;
  for (const auto& [job, js] : jobs)
    for (const auto& [key, k] : js->keys)
      if (std::find(codecs.begin(), codecs.end(), k.push_spec.name) == codecs.end()) codecs.push_back(k.push_spec.name);
  for (const std::string& codec : codecs) {
    const scheduler::StepCosts c = planner_.costs(codec);
    set(codec, "encode", c.encode);
    set(codec, "decode", c.decode);
    set(codec, "wire", c.gather);
    set(codec, "aggregate", c.aggregate);
  }
}

void EngineGauges::refresh(const EngineJobs& jobs, const OwnerSide& owner, const PeerLanes& lanes) {
  std::vector<double> waiting(peers_.size(), 0.0);
  std::set<std::string, std::less<>> codecs_in_use;
  for (const auto& [job, js] : jobs)
    for (const auto& [key, k] : js->keys) {
      codecs_in_use.insert(k.push_spec.name);
      codecs_in_use.insert(k.pull_spec.name);
      codecs_in_use.insert("none");  // the raw stats of every tensor's uncompressed slices
    }
  owner.countWaiting(waiting);
  for (size_t r = 0; r < peers_.size(); ++r)
    if (peers_[r] != nullptr) {
      peers_[r]->queue_depth->Set(waiting[r]);
      peers_[r]->send_queue->Set(static_cast<double>(lanes.queued(static_cast<uint32_t>(r))));
    }
  stats_.gauge(metrics::Id::pending_sums, {}).Set(static_cast<double>(owner.pending()));
  stats_.retireCodecGaugesExcept(codecs_in_use);
}

}  // namespace gcagent::agent
