#include "agent/engine/residual_state.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>

namespace gcagent::agent {
namespace {

using ::testing::HasSubstr;

ResidualState sample() {
  ResidualState s;
  s.layout = {42, 2500, 1000, 0x1234, 0x5678, "2bit", "2bit", 1, 3, 0};
  s.parts = {{ResidualKind::kNode, 0, {0.5f, -0.25f}}, {ResidualKind::kResult, 2, {1.0f}}, {ResidualKind::kHop, 1, {}}};
  return s;
}

TEST(ResidualState, RoundTripsWithAFixedLittleEndianLayout) {
  const auto blob = encodeResidualState(sample());
  auto back = decodeResidualState(blob);
  ASSERT_TRUE(back.ok()) << back.status().toString();
  EXPECT_EQ(*back, sample());
  EXPECT_EQ(std::memcmp(blob.data(), "GCRS", 4), 0);
  EXPECT_EQ(static_cast<int>(blob[4]), 1);   // version
  EXPECT_EQ(static_cast<int>(blob[8]), 42);  // key
  // header 8 + 3 x u64 + 2 x u32 + 2 x (2 + 4) + 2 x u32 + u8 + u32, then the first part.
  const size_t first_part = 8 + 24 + 8 + 12 + 8 + 1 + 4;
  EXPECT_EQ(static_cast<int>(blob[first_part]), 1);  // kind: node
  float first = 0;
  std::memcpy(&first, blob.data() + first_part + 1 + 4 + 8, sizeof first);
  EXPECT_EQ(first, 0.5f);
}

TEST(ResidualState, EveryTruncationAndBadFieldIsNamed) {
  const auto blob = encodeResidualState(sample());
  for (size_t n = 0; n < blob.size(); ++n) {
    auto cut = decodeResidualState(std::span(blob).first(n));
    ASSERT_FALSE(cut.ok()) << n;
    EXPECT_THAT(cut.status().message(), HasSubstr("error-feedback state: ")) << n;
  }
  auto longer = blob;
  longer.push_back(std::byte{0});
  EXPECT_THAT(decodeResidualState(longer).status().message(), HasSubstr("1 trailing bytes"));
  ResidualState s = sample();
  s.parts[1].slice = 3;  // a tensor of 2500 elements by 1000 has 3 slices
  EXPECT_THAT(decodeResidualState(encodeResidualState(s)).status().message(),
              HasSubstr("part 1: slice 3 of a tensor of 3 slices"));
  s = sample();
  s.layout.node_rank = 3;
  EXPECT_THAT(decodeResidualState(encodeResidualState(s)).status().message(), HasSubstr("node rank 3 of 3 nodes"));
  auto version = blob;
  version[4] = std::byte{2};
  EXPECT_THAT(decodeResidualState(version).status().message(), HasSubstr("version 2; this agent reads version 1"));
  // A part claiming more floats than the blob holds is truncated, not allocated.
  auto huge = blob;
  huge[8 + 24 + 8 + 12 + 8 + 1 + 4 + 1 + 4 + 7] = std::byte{0x7f};
  EXPECT_EQ(decodeResidualState(huge).status().code(), StatusCode::kDataLoss);
}

TEST(ResidualState, MismatchesNameTheFieldAndOwnershipIsRankCountAndTopology) {
  const ResidualLayout a = sample().layout;
  EXPECT_EQ(mismatchOf(a, a), "");
  ResidualLayout b = a;
  b.slice_elements = 500;
  EXPECT_EQ(mismatchOf(a, b), "it was sliced by 1000 elements; this agent slices by 500 (scheduler.slice_elements)");
  b = a;
  b.node_rank = 0;
  EXPECT_EQ(mismatchOf(a, b), "");  // the node's own parts still apply
  EXPECT_FALSE(sameOwnership(a, b));
  b = a;
  b.topology = 1;
  EXPECT_FALSE(sameOwnership(a, b));
  EXPECT_TRUE(sameOwnership(a, a));
}

}  // namespace
}  // namespace gcagent::agent
