#include "agent/engine/slice_protocol.h"

#include <gtest/gtest.h>

#include "common/str_cat.h"
#include "tests/agent/engine/routes.h"

namespace gcagent::agent {
namespace {

SliceMessage sliceOf(const TensorRoute& r, SliceKind kind, uint32_t fingerprint) {
  return {kind, 1, r.spec.key, 3, 1, r.slice_count, r.spec.elements, fingerprint, 1};
}

TEST(SliceProtocolTest, FingerprintsTellContributionsResultsPoliciesAndCodecsApart) {
  const compress::CodecSpec two{"2bit", {}}, two_other{"2bit", {{"threshold", "0.1"}}};
  EXPECT_NE(contributionFingerprint(two, false), resultFingerprint(two));
  EXPECT_NE(contributionFingerprint(two, false), contributionFingerprint(two, true));
  EXPECT_NE(contributionFingerprint(two, false), contributionFingerprint(two_other, false));
  EXPECT_EQ(rawContributionFingerprint(), contributionFingerprint({"none", {}}, false));
  EXPECT_EQ(rawResultFingerprint(), resultFingerprint({"none", {}}));
}

TEST(SliceProtocolTest, AContributionMustMatchSizeCodecAndOwner) {
  const TensorRoute r = routeOf("fp16");
  // In the tensor's codec, or uncompressed.
  EXPECT_TRUE(checkSlice(sliceOf(r, SliceKind::kContribution, r.push_fp), r, 0, 0, 2).value());
  EXPECT_FALSE(checkSlice(sliceOf(r, SliceKind::kContribution, rawContributionFingerprint()), r, 0, 0, 2).value());
  SliceMessage wrong_size = sliceOf(r, SliceKind::kContribution, r.push_fp);
  wrong_size.tensor_elements = 2400;
  EXPECT_EQ(checkSlice(wrong_size, r, 0, 0, 2).status().message(), "tensor 7 has 2400 elements there, 2500 here");
  SliceMessage other_cut = sliceOf(r, SliceKind::kContribution, r.push_fp);
  other_cut.slice_count = r.slice_count + 1;
  EXPECT_EQ(checkSlice(other_cut, r, 0, 0, 2).status().message(),
            strCat("tensor 7 is cut into ", r.slice_count + 1, " slices there, ", r.slice_count,
                   " here (scheduler.slice_elements, or under compress.selection = auto scheduler.link_gbps, differ "
                   "between the nodes)"));
  const TensorRoute mx = routeOf("fp16", Aggregation::kMxnet);
  EXPECT_EQ(checkSlice(sliceOf(r, SliceKind::kContribution, mx.push_fp), r, 0, 0, 2).status().message(),
            "tensor 7: codec differs from 'fp16' (aggregation bidirectional)");
  EXPECT_EQ(checkSlice(sliceOf(r, SliceKind::kContribution, r.push_fp), r, 1, 0, 2).status().message(),
            "tensor 7 slice 1 is not owned here");
}

TEST(SliceProtocolTest, AResultMustComeFromTheSlicesOwnerInTheResultCodec) {
  const TensorRoute r = routeOf("2bit");
  EXPECT_TRUE(checkSlice(sliceOf(r, SliceKind::kResult, r.pull_fp), r, 2, 0, 2).value());
  EXPECT_FALSE(checkSlice(sliceOf(r, SliceKind::kResult, rawResultFingerprint()), r, 2, 0, 2).value());
  EXPECT_EQ(checkSlice(sliceOf(r, SliceKind::kResult, r.push_fp), r, 2, 0, 2).status().message(),
            "tensor 7: result codec differs from '2bit'");
  EXPECT_EQ(checkSlice(sliceOf(r, SliceKind::kResult, r.pull_fp), r, 1, 0, 2).status().message(),
            "tensor 7 slice 1: result from rank 2, which does not own it");
}

TEST(SliceProtocolTest, ARingSliceMustComeFromThePredecessorToANodeThatTakesIt) {
  const TensorRoute r = routeOf("fp16", Aggregation::kBidirectional, Topology::kRing);
  SliceMessage partial = sliceOf(r, SliceKind::kContribution, r.push_fp);
  partial.topology = Topology::kRing;
  // Owner 2 of {0, 1, 2, 3}: node 0's predecessor is 3; node 3 starts the sum.
  const std::vector<uint32_t> members = {0, 1, 2, 3};
  const RingHop zero = ringHopOf(members, 2, 0), three = ringHopOf(members, 2, 3), two = ringHopOf(members, 2, 2);
  EXPECT_TRUE(checkSlice(partial, r, 2, 0, 3, &zero).value());
  EXPECT_EQ(checkSlice(partial, r, 2, 0, 1, &zero).status().message(),
            "tensor 7 slice 1: sent by rank 1, not by this node's predecessor in the ring, rank 3");
  EXPECT_EQ(checkSlice(partial, r, 2, 3, 2, &three).status().message(),
            "tensor 7 slice 1: a partial sum sent to the node that starts it");
  SliceMessage result = sliceOf(r, SliceKind::kResult, r.pull_fp);
  result.topology = Topology::kRing;
  EXPECT_TRUE(checkSlice(result, r, 2, 0, 3, &zero).value()) << "forwarded by the predecessor, not the owner";
  EXPECT_EQ(checkSlice(result, r, 2, 2, 1, &two).status().message(), "tensor 7 slice 1: a result sent to its owner");
}

TEST(SliceProtocolTest, TopologiesMustAgreeAndAllgatherTakesNoResult) {
  const TensorRoute ps = routeOf("fp16");
  SliceMessage from_ring = sliceOf(ps, SliceKind::kContribution, ps.push_fp);
  from_ring.topology = Topology::kRing;
  EXPECT_EQ(checkSlice(from_ring, ps, 0, 0, 2).status().message(),
            "tensor 7 travels by ring there, by ps here (scheduler.topology, the tensor's reduce.topology, or under "
            "auto scheduler.link_gbps, differ between the nodes)");
  const TensorRoute all = routeOf("topk", Aggregation::kBidirectional, Topology::kAllgather);
  SliceMessage share = sliceOf(all, SliceKind::kContribution, all.push_fp);
  share.topology = Topology::kAllgather;
  EXPECT_TRUE(checkSlice(share, all, 1, 0, 2).value()) << "from any member, whoever owns the slice";
  SliceMessage result = sliceOf(all, SliceKind::kResult, all.pull_fp);
  result.topology = Topology::kAllgather;
  EXPECT_EQ(checkSlice(result, all, 1, 0, 1).status().message(),
            "tensor 7 slice 1: a result, but under allgather every node sums the contributions itself");
}

}  // namespace
}  // namespace gcagent::agent
