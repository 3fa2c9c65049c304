// The selective-compression cost model (HiPress SeCoPa): every step of a reduction costs
// `overhead` below a size threshold and `w*x + b` above it, and the planner picks, per
// gradient, whether to compress and into how many partitions to cut it, whichever the model
// says finishes first.
#pragma once

#include <cstdint>
#include <string>

namespace gcagent::scheduler {

// cost(x) = overhead if x < thr else w*x + b, with thr = max(0, (overhead - b) / w): the
// fixed cost of launching a step until the linear part outgrows it.
struct LinearCost {
  double w = 0;
  double b = 0;
  double overhead = 0;

  double threshold() const;
  double operator()(double x) const;
};

// The steps of one reduction in the parameter-server topology (each partition has an owner
// that gathers every node's part, aggregates and broadcasts the sum). Units are the caller's
// (SeCoPa's table is in milliseconds); x counts fp32 elements, the encoded size of x
// elements is `ratio * x`.
struct StepCosts {
  LinearCost encode;
  LinearCost decode;
  LinearCost gather;
  LinearCost broadcast;
  LinearCost aggregate;
  double ratio = 1.0 / 16;  // encoded over raw size of the codec in use
};

struct Plan {
  bool compress = false;
  uint32_t partitions = 1;
  double compressed_cost = 0;    // best over the partition counts
  double uncompressed_cost = 0;  // likewise
  std::string describe() const;
};

// Cost of reducing `elements` over `nodes` nodes in `partitions` partitions.
double uncompressedCost(const StepCosts& c, double elements, uint32_t nodes, uint32_t partitions);
double compressedCost(const StepCosts& c, double elements, uint32_t nodes, uint32_t partitions);

// The minimum over K = 1..nodes of each (the first minimum wins ties); compress when the
// compressed minimum is strictly lower. `nodes` of 1 plans nothing to send: uncompressed.
Plan planReduction(const StepCosts& c, double elements, uint32_t nodes);

}  // namespace gcagent::scheduler
