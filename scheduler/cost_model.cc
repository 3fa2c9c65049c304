#include "scheduler/cost_model.h"

#include <algorithm>
#include <limits>

#include "common/str_cat.h"

namespace gcagent::scheduler {

double LinearCost::threshold() const {
  if (w <= 0) return overhead > b ? std::numeric_limits<double>::infinity() : 0.0;
  return std::max(0.0, (overhead - b) / w);
}

double LinearCost::operator()(double x) const { return x < threshold() ? overhead : w * x + b; }

double uncompressedCost(const StepCosts& c, double elements, uint32_t nodes, uint32_t partitions) {
  const double part = elements / partitions;
  return c.gather(part) + c.broadcast(part) + (nodes - 1) * c.aggregate(part);
}

double compressedCost(const StepCosts& c, double elements, uint32_t nodes, uint32_t partitions) {
  const double part = elements / partitions;
  const double encoded = c.ratio * part;
  // Each node encodes its parts for the owners (K of them, plus the owner's re-encode of
  // the sum, at most one per node); owners decode N-1 contributions and nodes decode the
  // results, overlapping to at most 2(N-1) decodes on the critical path.
  const double encodes = std::min<double>(partitions + 1, nodes);
  const double decodes = std::min<double>(nodes - 1 + partitions, 2.0 * (nodes - 1));
  return c.gather(encoded) + c.broadcast(encoded) + encodes * c.encode(part) + decodes * c.decode(encoded) +
         (nodes - 1) * c.aggregate(part);
}

Plan planReduction(const StepCosts& c, double elements, uint32_t nodes) {
  Plan plan;
  if (nodes <= 1) return plan;
  uint32_t best_raw_k = 1, best_enc_k = 1;
  double best_raw = std::numeric_limits<double>::infinity(), best_enc = best_raw;
  for (uint32_t k = 1; k <= nodes; ++k) {
    const double raw = uncompressedCost(c, elements, nodes, k);
    const double enc = compressedCost(c, elements, nodes, k);
    if (raw < best_raw) best_raw = raw, best_raw_k = k;
    if (enc < best_enc) best_enc = enc, best_enc_k = k;
  }
  plan.compressed_cost = best_enc;
  plan.uncompressed_cost = best_raw;
  plan.compress = best_enc < best_raw;
  plan.partitions = plan.compress ? best_enc_k : best_raw_k;
  return plan;
}

std::string Plan::describe() const {
  return strCat(compress ? "compressed" : "uncompressed", " in ", partitions, " partition",
                partitions == 1 ? "" : "s", " (model: compressed ", compressed_cost, ", uncompressed ",
                uncompressed_cost, ")");
}

}  // namespace gcagent::scheduler
