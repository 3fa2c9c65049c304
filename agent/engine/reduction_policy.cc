#include "agent/engine/reduction_policy.h"

#include <charconv>

#include "common/str_cat.h"

namespace gcagent::agent {
namespace {

constexpr std::string_view kPrefix = "reduce.";

}  // namespace

std::string_view aggregationName(Aggregation a) {
  return a == Aggregation::kMxnet ? "mxnet" : "bidirectional";
}

std::string_view resultName(ResultKind r) { return r == ResultKind::kSum ? "sum" : "average"; }

std::string describe(const ReductionPolicy& p) {
  std::string text = strCat(aggregationName(p.aggregation), ", ", resultName(p.result));
  if (p.topology) text += strCat(", ", topologyName(*p.topology));
  if (p.contributor) text += strCat(", local rank ", *p.contributor, " alone");
  if (p.owner) text += strCat(", to node ", *p.owner);
  return text;
}

namespace {

// A rank given as a parameter's text: digits only.
Result<uint32_t> rankOf(std::string_view name, const std::string& value, std::string_view what) {
  uint32_t rank = 0;
  const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), rank);
  if (ec != std::errc() || end != value.data() + value.size() || value.empty())
    return Status::invalidArgument(strCat(name, " '", value, "' is not ", what, " (0, 1, ...)"));
  return rank;
}

}  // namespace

Result<ReductionPolicy> takeReductionPolicy(compress::Params& params) {
  ReductionPolicy policy;
  for (auto it = params.begin(); it != params.end();) {
    const std::string& name = it->first;
    if (!std::string_view(name).starts_with(kPrefix)) {
      ++it;
      continue;
    }
    const std::string& value = it->second;
    if (name == "reduce.aggregation") {
      if (value == "bidirectional") {
        policy.aggregation = Aggregation::kBidirectional;
      } else if (value == "mxnet") {
        policy.aggregation = Aggregation::kMxnet;
      } else {
        return Status::invalidArgument(
            strCat("reduce.aggregation '", value, "' is not one of: bidirectional, mxnet"));
      }
    } else if (name == "reduce.result") {
      if (value == "average") {
        policy.result = ResultKind::kAverage;
      } else if (value == "sum") {
        policy.result = ResultKind::kSum;
      } else {
        return Status::invalidArgument(strCat("reduce.result '", value, "' is not one of: average, sum"));
      }
    } else if (name == "reduce.topology") {
      auto topology = parseTopology(value);
      if (!topology.ok()) return Status::invalidArgument(strCat("reduce.", topology.status().message()));
      policy.topology = *topology;
    } else if (name == "reduce.contributor") {
      GC_ASSIGN_OR_RETURN(policy.contributor, rankOf(name, value, "a local rank"));
    } else if (name == "reduce.owner") {
      GC_ASSIGN_OR_RETURN(policy.owner, rankOf(name, value, "a node rank"));
    } else {
      return Status::invalidArgument(strCat("unknown parameter '", name,
                                            "' (reduce.* names are reduce.aggregation, reduce.result, reduce.topology, "
                                            "reduce.contributor and reduce.owner)"));
    }
    it = params.erase(it);
  }
  return policy;
}

}  // namespace gcagent::agent
