#include "compress/sparse/sparse_format.h"

#include <gtest/gtest.h>

#include <vector>

#include "compress/bytes.h"
#include "tests/compress/codec_test_util.h"

namespace gcagent::compress {
namespace {

using testing::pairs;

TEST(SparseFormatTest, RoundTripsPairs) {
  auto bytes = pairs({3, 0, 9}, {1.5f, -2.0f, 0.25f});
  EXPECT_EQ(bytes.size(), 28u);
  std::vector<float> acc(10, 1.0f);
  ASSERT_TRUE(sparse::decodeAdd(bytes, acc, "topk").ok());
  EXPECT_EQ(acc, (std::vector<float>{-1, 1, 1, 2.5f, 1, 1, 1, 1, 1, 1.25f}));
}

TEST(SparseFormatTest, EmptyEncodingIsJustTheCount) {
  auto bytes = pairs({}, {});
  EXPECT_EQ(bytes.size(), 4u);
  std::vector<float> acc(3, 0.0f);
  EXPECT_TRUE(sparse::decodeAdd(bytes, acc, "topk").ok());
}

TEST(SparseFormatTest, RejectsIndexOutOfRange) {
  auto bytes = pairs({1, 10}, {1, 1});
  std::vector<float> acc(10, 0.0f);
  Status s = sparse::decodeAdd(bytes, acc, "dgc");
  EXPECT_EQ(s.message(), "dgc: pair 1 has index 10, outside the slice of 10 elements");
  EXPECT_EQ(acc, std::vector<float>(10, 0.0f));
}

TEST(SparseFormatTest, RejectsDuplicateIndex) {
  auto bytes = pairs({4, 4}, {1, 1});
  std::vector<float> acc(10, 0.0f);
  EXPECT_EQ(sparse::decodeAdd(bytes, acc, "topk").message(), "topk: pair 1 repeats index 4");
}

TEST(SparseFormatTest, RejectsCountLargerThanSliceOrBuffer) {
  std::vector<float> acc(2, 0.0f);
  auto bytes = pairs({0, 1, 2}, {1, 1, 1});
  EXPECT_EQ(sparse::decodeAdd(bytes, acc, "topk").message(),
            "topk: encoded count 3 exceeds the slice length 2");
  std::vector<float> acc5(5, 0.0f);
  bytes.pop_back();
  EXPECT_EQ(sparse::decodeAdd(bytes, acc5, "topk").message(),
            "topk: encoded buffer holds 27 bytes, but 3 pairs need 28");
  std::vector<std::byte> tiny(3);
  EXPECT_EQ(sparse::decodeAdd(tiny, acc5, "topk").message(),
            "topk: encoded buffer holds 3 bytes, less than the 4-byte count header");
}

}  // namespace
}  // namespace gcagent::compress
