// How one declared tensor travels, decided once when it is declared: its codec each way (the
// push codec for contributions, the pull codec for results), their fingerprints on the wire,
// its slicing, its aggregation policy, whether its gradients on a GPU are coded there, and
// where its metrics go. Only the planner's
// compress-or-not is re-made later, when the planner re-fits (plan, replanned by the engine).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "agent/engine/reduction_policy.h"
#include "common/status.h"
#include "compress/codec.h"
#include "metrics/stats.h"
#include "scheduler/planner.h"
#include "scheduler/slicing.h"

namespace gcagent::agent {

struct TensorSpec {
  uint64_t key = 0;
  uint64_t elements = 0;
  int32_t priority = 0;
  compress::CodecSpec codec;  // empty name: the engine's default
  ReductionPolicy policy;
};

struct RouteOptions {
  compress::CodecSpec default_codec{"none", {}};
  std::string result_codec = "same";  // codec of the owner's result: "same" or a codec name
  uint64_t slice_elements = 40000;
  compress::CodecEnv codec_env;
  bool prioritize = true;  // false: every tensor at one priority (FIFO everywhere)
  Topology topology = Topology::kPs;  // unless the tensor chose one (scheduler.topology); may be kAuto
  // Codecs whose gradients on a GPU are staged through host memory for the CPU codecs
  // (compress.gpu_staged_codecs), unless the node is on its own (it only averages).
  std::vector<std::string> gpu_staged_codecs{};
  bool alone = false;
};

struct TensorRoute {
  TensorSpec spec;
  int32_t priority = 0;  // where its slices and codec work queue: the spec's, or 0 without P3
  compress::CodecSpec push_spec, pull_spec;
  std::shared_ptr<const compress::Codec> push, pull;  // shared with the codec work in flight
  uint32_t push_fp = 0, pull_fp = 0;                 // slice_protocol.h
  metrics::CodecStats* push_stats = nullptr;  // cached: no registry lookup per slice
  metrics::CodecStats* pull_stats = nullptr;
  metrics::CodecStats* raw_stats = nullptr;
  metrics::SizeClass size_class = metrics::SizeClass::kSmall;
  scheduler::SliceGeometry geometry;
  uint32_t slice_count = 0;
  Topology topology = Topology::kPs;  // the tensor's choice, else the agent's default (auto resolved)
  std::string topology_why;           // auto's choice and its model, for the log
  // Its gradients on a GPU are coded by that GPU's coder; else staged through host memory.
  bool device_coded = true;
  // The planner's decision: compressed or not, re-made when the planner re-fits.
  scheduler::Plan plan;
  uint64_t plan_epoch = UINT64_MAX;
  bool planned = false;

  bool mxnet() const { return spec.policy.aggregation == Aggregation::kMxnet; }
  bool ring() const { return topology == Topology::kRing; }
  bool allgather() const { return topology == Topology::kAllgather; }
  // Reduced to one node (reduce.owner): its result stays there.
  bool toOwner() const { return spec.policy.owner.has_value(); }
  // Contributions and results travel compressed this reduction.
  bool pushCompressed() const { return plan.compress && push_spec.name != "none"; }
  bool pullCompressed() const { return plan.compress && pull_spec.name != "none"; }
  // What the result is divided by: the number of trainers for an average, 1 for a sum.
  float divisor(uint32_t contributors) const {
    return spec.policy.result == ResultKind::kSum ? 1.0f : static_cast<float>(contributors);
  }
  // Whether the wire format of the tensor's contributions changed (its residuals are moot).
  bool sameWire(const TensorRoute& other) const {
    return spec.elements == other.spec.elements && push_fp == other.push_fp && topology == other.topology;
  }
};

// What the trainers' side reads of a declared tensor's route (ReductionEngine::declareJob).
struct DeclaredTensor {
  uint64_t key = 0;
  bool device_coded = true;  // TensorRoute::device_coded
  std::optional<uint32_t> contributor{};  // ReductionPolicy::contributor: who of the node contributes it
};

// Builds a tensor's route; the error names the tensor and which codec or policy is wrong.
Result<TensorRoute> makeRoute(const TensorSpec& t, const RouteOptions& options, const scheduler::Planner& planner,
                              metrics::Stats& stats);

// Re-makes the route's plan from the planner (MXNet compresses every key). Returns whether
// the decision to compress changed, and logs it then (or always, with `log_always`).
bool replan(TensorRoute& route, scheduler::Planner& planner, uint64_t min_elements, bool log_always);

}  // namespace gcagent::agent
