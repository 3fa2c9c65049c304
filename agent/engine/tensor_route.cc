#include "agent/engine/tensor_route.h"

#include <algorithm>

#include "agent/engine/slice_protocol.h"
#include "common/log.h"
#include "common/str_cat.h"
#include "compress/registry.h"

namespace gcagent::agent {

Result<TensorRoute> makeRoute(const TensorSpec& t, const RouteOptions& options, const scheduler::Planner& planner,
                              metrics::Stats& stats) {
  TensorRoute r;
  r.spec = t;
  r.priority = options.prioritize ? t.priority : 0;
  r.push_spec = t.codec.name.empty() ? options.default_codec : t.codec;
  auto push = compress::makeCodec(r.push_spec, options.codec_env);
  if (!push.ok()) return Status::invalidArgument(strCat("tensor ", t.key, ": ", push.status().message()));
  r.push = std::move(push).value();
  // A tensor reduced to one node travels as to a parameter server unless it chose otherwise.
  r.topology = t.policy.topology.value_or(t.policy.owner ? Topology::kPs : options.topology);
  if (r.topology == Topology::kAuto && (r.mxnet() || t.policy.owner)) {
    r.topology = Topology::kPs;
  } else if (r.topology == Topology::kAuto) {
    // From the reference model, the same on every node: the topology is part of the wire.
    const auto [chosen, costs] = planner.chooseTopology(t.elements, *r.push);
    r.topology = chosen;
    r.topology_why = strCat("topology auto: ", topologyName(chosen), " (", costs.describe(), ")");
  }
  if (r.topology != Topology::kPs && r.mxnet())
    return Status::invalidArgument(strCat("tensor ", t.key, ": aggregation mxnet is a parameter server's; it cannot "
                                          "travel by ", topologyName(r.topology),
                                          " (use reduce.topology=ps, or the bidirectional aggregation)"));
  // Whether a tensor is worth compressing is the planner's call (per reduction); the pull
  // codec of an uncompressed push codec stays uncompressed, and so does every result under
  // the mxnet policy, and none travel under allgather (each node sums the contributions).
  if (r.toOwner() && r.topology != Topology::kPs)
    return Status::invalidArgument(strCat("tensor ", t.key, ": reduce.owner reduces to one node, as a parameter "
                                          "server does; it cannot travel by ", topologyName(r.topology),
                                          " (use reduce.topology=ps)"));
  if (r.mxnet() || r.allgather() || r.toOwner() || r.push_spec.name == "none") {
    r.pull_spec = {"none", {}};
  } else {
    r.pull_spec = options.result_codec == "same" ? r.push_spec : compress::CodecSpec{options.result_codec, {}};
  }
  auto pull = compress::makeCodec(r.pull_spec, options.codec_env);
  if (!pull.ok()) return Status::invalidArgument(strCat("tensor ", t.key, ": result codec: ", pull.status().message()));
  r.pull = std::move(pull).value();
  r.push_stats = &stats.codec(r.push_spec.name);
  r.pull_stats = &stats.codec(r.pull_spec.name);
  r.raw_stats = &stats.codec("none");
  r.size_class = metrics::sizeClassOf(t.elements * sizeof(float));
  r.push_fp = contributionFingerprint(r.push_spec, r.mxnet());
  r.pull_fp = resultFingerprint(r.pull_spec);
  r.geometry = scheduler::SliceGeometry::of(t.elements, options.slice_elements, planner.partitions(t.elements));
  r.slice_count = r.geometry.count();
  const auto& staged = options.gpu_staged_codecs;
  r.device_coded = options.alone || std::find(staged.begin(), staged.end(), r.push_spec.name) == staged.end();
  return r;
}

bool replan(TensorRoute& r, scheduler::Planner& planner, uint64_t min_elements, bool log_always) {
  scheduler::Plan plan = planner.decide(r.spec.elements, *r.push);
  // MXNet compresses every dense fp32 key, whatever its size.
  if (r.mxnet()) plan.compress = true;
  const bool changed = !r.planned || plan.compress != r.plan.compress;
  r.plan = plan;
  r.plan.partitions = r.geometry.count() < plan.partitions ? r.geometry.count() : plan.partitions;
  r.plan_epoch = planner.epoch();
  r.planned = true;
  if (!(changed || log_always) || r.push_spec.name == "none") return changed;
  std::string why;
  if (r.mxnet()) {
    why = "compressed (aggregation mxnet compresses every key)";
  } else if (planner.selection() == scheduler::Selection::kAuto) {
    why = r.plan.describe();
  } else {
    why = strCat(r.plan.compress ? "compressed" : "uncompressed", " (min_elements ", min_elements, ")");
  }
  std::string policy = describe(r.spec.policy);
  if (!r.spec.policy.topology) policy += strCat(", ", topologyName(r.topology));
  GC_LOG(kInfo, "scheduler", "tensor ", r.spec.key, " (", r.spec.elements, " elements, ", r.push_spec.name, ", ",
         policy, "): ", why, r.topology_why.empty() ? "" : "; ", r.topology_why);
  return changed;
}

}  // namespace gcagent::agent
