#include "agent/slice_protocol.h"

#include <gtest/gtest.h>

#include "tests/agent/routes.h"

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

}  // namespace
}  // namespace gcagent::agent
