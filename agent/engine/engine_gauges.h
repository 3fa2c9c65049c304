// The engine's metrics beyond a counter's bump: the samples of a host coder's encodings
// (encode times, the planner's cost samples, residual norms, the silent-codec watch), the
// gauges re-made when a plan changes (tensors by decision and by topology, the cost model),
// and those computed when read (each peer's queues, the sums being made, the codecs in use).
#pragma once

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "agent/coding/residual_sampler.h"
#include "agent/engine/engine_state.h"
#include "agent/engine/owner_side.h"
#include "agent/engine/peer_lanes.h"
#include "metrics/stats.h"
#include "scheduler/planner.h"

namespace gcagent::agent {

using EngineJobs = std::unordered_map<uint64_t, std::unique_ptr<JobState>>;

// Counts `copies` sends of a slice: its fp32 bytes and its bytes on the wire.
void countSent(EngineCounters& counters, metrics::CodecStats& stats, uint64_t raw, uint64_t wire, uint32_t copies);

class EngineGauges {
 public:
  EngineGauges(metrics::Stats& stats, scheduler::Planner& planner, ResidualSampler& sampler, uint32_t world,
               uint32_t self);

  // A host coder encoded k's slices of `iteration` (the sum is still in k's first buffer).
  void encoded(KeyState& k, uint64_t iteration, const std::vector<SliceEncoding>& encodings);
  // The tensors by decision and by topology, after a declaration or a re-plan.
  void planned(const EngineJobs& jobs);
  // The cost model of every codec in use, after the planner re-fitted it.
  void costs(const EngineJobs& jobs);
  // Each peer's queue depth (slices owned here that wait for it) and send queue, the sums
  // being made here, and the codecs in use.
  void refresh(const EngineJobs& jobs, const OwnerSide& owner, const PeerLanes& lanes);

 private:
  metrics::Stats& stats_;
  scheduler::Planner& planner_;
  ResidualSampler& sampler_;
  std::vector<metrics::PeerStats*> peers_;  // by rank, fetched once; null for this node
};

}  // namespace gcagent::agent
