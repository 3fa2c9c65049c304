// How a tensor's contributions are combined and what its caller gets back, chosen per tensor
// by the client at declare time through codec parameters named reduce.* (the codec never
// sees them):
//   reduce.aggregation = bidirectional (default) | mxnet
//   reduce.result      = average (default) | sum
//
// bidirectional: a slice's owner adds its own node's sum exactly; every other node sends
//   its sum encoded with its own residual; the owner encodes the total with its own residual
//   and every node decodes those same bytes. Both directions are compressed: the least
//   traffic, and the result carries a second compression error.
// mxnet: as MXNet's dist_sync kvstore with gradient compression. Every node, the owner
//   included, encodes its sum with its own residual; the owner adds the decoded
//   contributions in fp32, in rank order; the total travels uncompressed, so the caller
//   gets exactly that sum. Every tensor is compressed whatever its size (the planner and
//   compress.min_elements are not asked), as MXNet compresses every dense fp32 key.
//
// A sum is returned as summed; an average is that sum divided once by the number of
// trainers (never scaled twice).
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"
#include "compress/codec.h"

namespace gcagent::agent {

enum class Aggregation { kBidirectional, kMxnet };
enum class ResultKind { kAverage, kSum };

struct ReductionPolicy {
  Aggregation aggregation = Aggregation::kBidirectional;
  ResultKind result = ResultKind::kAverage;
  bool operator==(const ReductionPolicy&) const = default;
};

std::string_view aggregationName(Aggregation a);
std::string_view resultName(ResultKind r);
// "mxnet, sum"
std::string describe(const ReductionPolicy& p);

// Takes the reduce.* entries out of a tensor's parameters (what is left belongs to the
// codec). An unknown reduce.* name or value is an error naming it and the choices.
Result<ReductionPolicy> takeReductionPolicy(compress::Params& params);

}  // namespace gcagent::agent
