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

namespace {

// What one node does for `slices` slices of one tensor, apart from the critical path: its
// work (codec, adds, the network stack) and its time on the wire, which overlap.
struct Load {
  double work = 0, wire = 0;
  double bound() const { return std::max(work, wire); }
};

struct SliceCosts {
  double n, wire_elements, link, enc, dec, add, link_rate;
};

SliceCosts sliceCosts(const StepCosts& c, double slice, uint32_t nodes, bool compressed, double ratio) {
  const double wire = slice * (compressed ? ratio : 1.0);  // one slice on the wire, in fp32 elements
  // Codec work on one slice: its encode, the decode of one share (a copy when raw), an add.
  return {static_cast<double>(nodes), wire, c.gather(wire), compressed ? c.encode(slice) : 0.0,
          compressed ? c.decode(wire) : c.aggregate(slice), c.aggregate(slice), c.gather.w};
}

// ps and ring: every slice encoded once here; (N-1)/N of them decoded and added as an owner
// (or a hop); every result decoded into the trainers' buffers (a dense write). 2(N-1)/N of
// the tensor sent and as much received. On the wire, throughput: the link's cost per
// element (its per-message intercept is the trip's latency, counted once on the critical
// path; sends to different peers overlap). `peers` is how many it sends to at once.
Load shardedLoad(const SliceCosts& s, double slices, uint32_t peers) {
  const double n = s.n, moved = s.wire_elements * slices * 2 * (n - 1) / n;
  return {slices * (s.enc + (n - 1) / n * (s.dec + s.add) + s.dec + s.add) + 2 * moved * kStackCpuPerElement,
          s.link_rate * moved * fanOut(peers)};
}

// allgather: every slice encoded once, sent to each peer, all N shares decoded into a sum
// here (a dense write), and the sum copied into the trainers' buffers (another).
Load gatherLoad(const SliceCosts& s, double slices) {
  const double n = s.n, moved = s.wire_elements * slices * (n - 1);
  return {slices * (s.enc + n * s.dec + 2 * s.add) + 2 * moved * kStackCpuPerElement,
          s.link_rate * moved * fanOut(static_cast<uint32_t>(n) - 1)};
}

}  // namespace

TopologyCosts topologyCosts(const StepCosts& c, double elements, double slice_elements, uint32_t nodes,
                            bool compressed, double ratio) {
  TopologyCosts t;
  if (nodes <= 1 || elements <= 0) return t;
  const double slice = std::min(elements, slice_elements), slices = std::ceil(elements / slice);
  const SliceCosts s = sliceCosts(c, slice, nodes, compressed, ratio);
  const double n = s.n;
  t.ps = s.enc + s.link + (n - 1) * s.dec + s.enc + s.link + s.dec + shardedLoad(s, slices, nodes - 1).bound();
  t.ring = 2 * (n - 1) * (s.link + s.dec + s.add + s.enc) + shardedLoad(s, slices, 1).bound();
  t.allgather = s.enc + s.link + n * s.dec + gatherLoad(s, slices).bound();
  return t;
}

Topology uncompressedJobTopology(const StepCosts& c, double slice_elements, uint32_t nodes) {
  if (nodes < 3) return Topology::kPs;  // with one peer a ring is ps with a longer path
  // Per slice (the rates scale with the slice count alike), the same bytes and work either
  // way; the ring only when the link would bound ps and bounds the ring less.
  const SliceCosts s = sliceCosts(c, slice_elements, nodes, false, 1.0);
  return shardedLoad(s, 1, 1).bound() < shardedLoad(s, 1, nodes - 1).bound() ? Topology::kRing : Topology::kPs;
}

Topology chooseTopology(const TopologyCosts& costs, bool compressed) {
  // Compressed: ps or allgather; uncompressed: ps (topology_model.h says why).
  return compressed && costs.allgather < costs.ps ? Topology::kAllgather : Topology::kPs;
}

}  // namespace gcagent::scheduler
