#include "scheduler/topology_model.h"

#include <algorithm>
#include <cmath>

#include "common/str_cat.h"

namespace gcagent::scheduler {
namespace {

double fanOut(uint32_t peers) { return 1 + kFanOutPenalty * (peers > 1 ? peers - 1 : 0); }

}  // namespace

std::string_view topologyName(Topology t) {
  switch (t) {
    case Topology::kRing: return "ring";
    case Topology::kAllgather: return "allgather";
    case Topology::kAuto: return "auto";
    case Topology::kPs: break;
  }
  return "ps";
}

Result<Topology> parseTopology(std::string_view name) {
  for (Topology t : {Topology::kPs, Topology::kRing, Topology::kAllgather, Topology::kAuto})
    if (name == topologyName(t)) return t;
  return Status::invalidArgument(strCat("topology '", name, "' is not one of: ps, ring, allgather, auto"));
}

Topology TopologyCosts::cheapest() const {
  if (ps <= ring && ps <= allgather) return Topology::kPs;
  return ring <= allgather ? Topology::kRing : Topology::kAllgather;
}

std::string TopologyCosts::describe() const {
  return strCat("model: ps ", ps, ", ring ", ring, ", allgather ", allgather);
}

TopologyCosts topologyCosts(const StepCosts& c, double elements, double slice_elements, uint32_t nodes,
                            bool compressed, double ratio) {
  TopologyCosts t;
  if (nodes <= 1 || elements <= 0) return t;
  const double n = nodes, s = std::min(elements, slice_elements), slices = std::ceil(elements / s);
  const double r = compressed ? ratio : 1.0, wire = s * r;  // one slice on the wire, in fp32 elements
  const double link = c.gather(wire);
  // Codec work on one slice: its encode, the decode of one share (a copy when raw), an add.
  const double enc = compressed ? c.encode(s) : 0.0, dec = compressed ? c.decode(wire) : c.aggregate(s);
  const double add = c.aggregate(s);

  // ps and ring: every slice encoded once here; (N-1)/N of them decoded and added as an
  // owner (or a hop); every result decoded into the trainers' buffers (a dense write).
  const double shared_work = slices * enc + slices * (n - 1) / n * (dec + add) + slices * (dec + add);
  // On the wire, throughput: the link's cost per element (its per-message intercept is the
  // trip's latency, counted once on the critical path; sends to different peers overlap).
  const double shared_wire = c.gather.w * wire * slices * 2 * (n - 1) / n;
  t.ps = enc + link + (n - 1) * dec + enc + link + dec + std::max(shared_work, shared_wire * fanOut(nodes - 1));
  t.ring = 2 * (n - 1) * (link + dec + add + enc) + std::max(shared_work, shared_wire);
  // allgather: every slice encoded once, sent to each peer, all N shares decoded into a sum
  // here (a dense write), and the sum copied into the trainers' buffers (another).
  const double gather_work = slices * (enc + n * dec + 2 * add);
  const double gather_wire = c.gather.w * wire * slices * (n - 1) * fanOut(nodes - 1);
  t.allgather = enc + link + n * dec + std::max(gather_work, gather_wire);
  return t;
}

Topology chooseTopology(const TopologyCosts& costs, bool compressed) {
  // Compressed: ps or allgather; uncompressed: ps (topology_model.h says why).
  return compressed && costs.allgather < costs.ps ? Topology::kAllgather : Topology::kPs;
}

}  // namespace gcagent::scheduler
