#include "agent/engine/slice_protocol.h"

#include <string_view>

#include "common/str_cat.h"

namespace gcagent::agent {
namespace {

// Marks result fingerprints, so a contribution is never mistaken for a result.
constexpr uint32_t kResultMark = 0x5bd1e995u;
// Marks the contributions of tensors under the mxnet policy: nodes that disagree on the
// policy would sum differently, so their slices are refused like a codec mismatch.
constexpr uint32_t kMxnetMark = 0x2545f491u;

uint32_t fingerprint(const compress::CodecSpec& spec) {
  uint32_t h = 2166136261u;  // FNV-1a over name and sorted parameters
  auto add = [&](std::string_view s) {
    for (char c : s) h = (h ^ static_cast<uint8_t>(c)) * 16777619u;
    h = (h ^ 0xff) * 16777619u;
  };
  add(spec.name);
  for (const auto& [k, v] : spec.params) {
    add(k);
    add(v);
  }
  return h;
}

}  // namespace

uint32_t contributionFingerprint(const compress::CodecSpec& codec, bool mxnet) {
  return fingerprint(codec) ^ (mxnet ? kMxnetMark : 0u);
}
uint32_t resultFingerprint(const compress::CodecSpec& codec) { return fingerprint(codec) ^ kResultMark; }
uint32_t rawContributionFingerprint() { return fingerprint({"none", {}}); }
uint32_t rawResultFingerprint() { return fingerprint({"none", {}}) ^ kResultMark; }

Result<bool> checkSlice(const SliceMessage& h, const TensorRoute& r, uint32_t owner, uint32_t self, uint32_t from,
                        const RingHop* hop) {
  if (h.tensor_elements != r.spec.elements)
    return Status::invalidArgument(strCat("tensor ", h.key, " has ", h.tensor_elements, " elements there, ",
                                          r.spec.elements, " here"));
  if (h.slice_count != r.slice_count)
    return Status::invalidArgument(strCat("tensor ", h.key, " is cut into ", h.slice_count, " slices there, ",
                                          r.slice_count, " here (scheduler.slice_elements, or under "
                                          "compress.selection = auto scheduler.link_gbps, differ between the nodes)"));
  if (h.topology != r.topology)
    return Status::invalidArgument(strCat("tensor ", h.key, " travels by ", topologyName(h.topology), " there, by ",
                                          topologyName(r.topology), " here (scheduler.topology, the tensor's "
                                          "reduce.topology, or under auto scheduler.link_gbps, differ between "
                                          "the nodes)"));
  const bool ring = r.topology == Topology::kRing && hop != nullptr;
  if (ring && from != hop->predecessor)
    return Status::invalidArgument(strCat("tensor ", h.key, " slice ", h.slice, ": sent by rank ", from,
                                          ", not by this node's predecessor in the ring, rank ", hop->predecessor));
  if (h.kind == SliceKind::kContribution) {
    if (h.codec_fingerprint != r.push_fp && h.codec_fingerprint != rawContributionFingerprint())
      return Status::invalidArgument(strCat("tensor ", h.key, ": codec differs from '", r.push_spec.name,
                                            "' (aggregation ", aggregationName(r.spec.policy.aggregation), ")"));
    if (ring && hop->starts)
      return Status::invalidArgument(strCat("tensor ", h.key, " slice ", h.slice, ": a partial sum sent to the node "
                                            "that starts it"));
    if (r.topology == Topology::kPs && owner != self)
      return Status::invalidArgument(strCat("tensor ", h.key, " slice ", h.slice, " is not owned here"));
    return h.codec_fingerprint == r.push_fp && r.push_spec.name != "none";
  }
  if (r.allgather())
    return Status::invalidArgument(strCat("tensor ", h.key, " slice ", h.slice, ": a result, but under allgather "
                                          "every node sums the contributions itself"));
  if (h.codec_fingerprint != r.pull_fp && h.codec_fingerprint != rawResultFingerprint())
    return Status::invalidArgument(strCat("tensor ", h.key, ": result codec differs from '", r.pull_spec.name, "'"));
  if (ring && hop->owns)
    return Status::invalidArgument(strCat("tensor ", h.key, " slice ", h.slice, ": a result sent to its owner"));
  if (r.topology == Topology::kPs && owner != from)
    return Status::invalidArgument(strCat("tensor ", h.key, " slice ", h.slice, ": result from rank ", from,
                                          ", which does not own it"));
  return h.codec_fingerprint == r.pull_fp && r.pull_spec.name != "none";
}

}  // namespace gcagent::agent
