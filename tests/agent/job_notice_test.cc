#include "agent/job_notice.h"

#include <gtest/gtest.h>

#include "agent/slice_message.h"

namespace gcagent::agent {
namespace {

TEST(JobNoticeTest, RoundTripsAndIsToldApartFromSliceHeaders) {
  const JobNotice notice{0x1234567890abcdefull, 41, "node 2: trainer local rank 1 of job 'bert' left"};
  const auto bytes = encodeJobNotice(notice);
  EXPECT_EQ(bytes.size(), 24 + notice.reason.size());
  EXPECT_TRUE(isJobNotice(bytes));
  auto parsed = parseJobNotice(bytes);
  ASSERT_TRUE(parsed.ok()) << parsed.status().toString();
  EXPECT_EQ(*parsed, notice);
  EXPECT_FALSE(isJobNotice(encodeSliceHeader({})));
  EXPECT_FALSE(isJobNotice(std::span(bytes).first(3)));
}

TEST(JobNoticeTest, LongReasonsAreCut) {
  const auto bytes = encodeJobNotice({1, 2, std::string(2000, 'x')});
  auto parsed = parseJobNotice(bytes);
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(parsed->reason.size(), kMaxNoticeReason);
}

TEST(JobNoticeTest, MalformedNoticesAreErrorsNamingTheProblem) {
  auto bytes = encodeJobNotice({1, 2, "why"});
  EXPECT_EQ(parseJobNotice(std::span(bytes).first(20)).status().message(),
            "job notice: 20 bytes, expected at least 24");
  auto longer = bytes;
  longer.push_back(std::byte{0});
  EXPECT_EQ(parseJobNotice(longer).status().message(), "job notice: reason of 3 bytes, but 4 follow");
  auto version = bytes;
  version[4] = std::byte{9};
  EXPECT_EQ(parseJobNotice(version).status().message(), "job notice: version 9, expected 1");
  auto huge = bytes;
  huge[6] = std::byte{0xff};
  huge[7] = std::byte{0xff};
  EXPECT_EQ(parseJobNotice(huge).status().message(), "job notice: reason of 65535 bytes exceeds 512");
}

TEST(JobNoticeTest, RealignNoticesRoundTripAndAreToldApart) {
  const RealignNotice notice{0x1234567890abcdefull, 700};
  const auto bytes = encodeRealignNotice(notice);
  EXPECT_EQ(bytes.size(), 24u);
  EXPECT_TRUE(isRealignNotice(bytes));
  EXPECT_FALSE(isJobNotice(bytes));
  EXPECT_FALSE(isRealignNotice(encodeJobNotice({1, 2, "x"})));
  EXPECT_FALSE(isRealignNotice(encodeSliceHeader({})));
  auto parsed = parseRealignNotice(bytes);
  ASSERT_TRUE(parsed.ok()) << parsed.status().toString();
  EXPECT_EQ(*parsed, notice);
  EXPECT_EQ(parseRealignNotice(std::span(bytes).first(20)).status().message(), "realign notice: 20 bytes, expected 24");
  auto version = bytes;
  version[4] = std::byte{3};
  EXPECT_EQ(parseRealignNotice(version).status().message(), "realign notice: version 3, expected 1");
}

}  // namespace
}  // namespace gcagent::agent
