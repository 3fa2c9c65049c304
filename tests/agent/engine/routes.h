// A declared tensor's route for the tests of the parts that read one: tensor 7 of 2500
// elements in slices of 1000, with `codec` and the given aggregation and topology.
#pragma once

#include <string>

#include "agent/engine/tensor_route.h"

namespace gcagent::agent {

inline TensorRoute routeOf(const std::string& codec, Aggregation aggregation = Aggregation::kBidirectional,
                           Topology topology = Topology::kPs) {
  static metrics::Stats stats;
  scheduler::Planner planner({});
  RouteOptions options;
  options.slice_elements = 1000;
  options.topology = topology;
  TensorSpec t{7, 2500, 0, {codec, {}}, {aggregation, ResultKind::kAverage, {}}};
  return makeRoute(t, options, planner, stats).value();
}

}  // namespace gcagent::agent
