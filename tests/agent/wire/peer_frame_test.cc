// The one frame format between agents: every kind round-trips, its bytes are the documented
// ones (golden offsets), and every malformed frame is an error naming the kind and the problem.
#include "agent/wire/peer_frame.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>

namespace gcagent::agent {
namespace {

using ::testing::HasSubstr;
using Kind = MembershipNotice::Kind;
constexpr uint32_t kWorld = 4;

template <class T>
T at(const std::vector<std::byte>& bytes, size_t offset) {
  T v;
  std::memcpy(&v, bytes.data() + offset, sizeof v);
  return v;
}

std::string error(const std::vector<std::byte>& bytes, uint32_t world = kWorld) {
  return parsePeerFrame(bytes, world).status().message();
}

template <class M>
void expectRoundTrip(const M& m) {
  const auto bytes = encodePeerFrame(m);
  auto back = parsePeerFrame(bytes, kWorld);
  ASSERT_TRUE(back.ok()) << back.status().toString();
  ASSERT_TRUE(std::holds_alternative<M>(*back));
  EXPECT_EQ(std::get<M>(*back), m);
}

TEST(PeerFrameTest, TheHeaderIsMagicVersionKindAndBodyLength) {
  const SliceMessage m{SliceKind::kResult, 1, 2, 3, 4, 5, 100, 0xabcdef, 6, 7, Topology::kRing, 3};
  const auto bytes = encodePeerFrame(m);
  ASSERT_EQ(bytes.size(), kPeerFrameHeaderBytes + 58);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(bytes.data()), 4), "GCAP");
  EXPECT_EQ(at<uint8_t>(bytes, 4), 2);  // version
  EXPECT_EQ(at<uint8_t>(bytes, 5), 1);  // kind: slice
  EXPECT_EQ(at<uint16_t>(bytes, 6), 0);
  EXPECT_EQ(at<uint32_t>(bytes, 8), 58u);  // body bytes
  EXPECT_EQ(peerFrameKind(bytes), FrameKind::kSlice);
  expectRoundTrip(m);
}

TEST(PeerFrameTest, ASliceCarriesItsFieldsInOrder) {
  const SliceMessage m{SliceKind::kContribution, 0x1111, 0x2222, 0x3333, 4, 5, 100, 0xabcdef, 6, 7, Topology::kPs, 2};
  const auto bytes = encodePeerFrame(m);
  const size_t body = kPeerFrameHeaderBytes;
  EXPECT_EQ(at<uint8_t>(bytes, body), 1);      // kind: contribution
  EXPECT_EQ(at<uint8_t>(bytes, body + 1), 0);  // topology: ps
  EXPECT_EQ(at<uint64_t>(bytes, body + 2), 0x1111u);
  EXPECT_EQ(at<uint64_t>(bytes, body + 10), 0x2222u);
  EXPECT_EQ(at<uint64_t>(bytes, body + 18), 0x3333u);
  EXPECT_EQ(at<uint32_t>(bytes, body + 26), 4u);
  EXPECT_EQ(at<uint32_t>(bytes, body + 30), 5u);
  EXPECT_EQ(at<uint64_t>(bytes, body + 34), 100u);
  EXPECT_EQ(at<uint32_t>(bytes, body + 42), 0xabcdefu);
  EXPECT_EQ(at<uint32_t>(bytes, body + 46), 6u);
  EXPECT_EQ(at<uint32_t>(bytes, body + 50), 7u);  // the view's epoch
  EXPECT_EQ(at<uint32_t>(bytes, body + 54), 2u);  // and proposer

  SliceMessage bad = m;
  bad.slice = 5;
  EXPECT_EQ(error(encodePeerFrame(bad)), "slice frame: slice 5 of 5");
  bad = m;
  bad.contributors = 0;
  EXPECT_EQ(error(encodePeerFrame(bad)), "slice frame: zero contributors");
  bad = m;
  bad.tensor_elements = 3;
  EXPECT_EQ(error(encodePeerFrame(bad)), "slice frame: 3 elements in 5 slices");
  bad = m;
  bad.view_proposer = 4;
  EXPECT_EQ(error(encodePeerFrame(bad)), "slice frame: view proposer 4 of 4 nodes");
  auto kind = bytes;
  kind[body] = std::byte{3};
  EXPECT_EQ(error(kind), "slice frame: unknown kind 3");
  auto topology = bytes;
  topology[body + 1] = std::byte{9};
  EXPECT_EQ(error(topology), "slice frame: unknown topology 9");
}

TEST(PeerFrameTest, JobAndRealignNoticesRoundTripAndLongReasonsAreCut) {
  const JobNotice notice{0x1234567890abcdefull, 41, "node 2: trainer local rank 1 of job 'bert' left"};
  const auto bytes = encodePeerFrame(notice);
  EXPECT_EQ(bytes.size(), kPeerFrameHeaderBytes + 16 + 2 + notice.reason.size());
  EXPECT_EQ(peerFrameKind(bytes), FrameKind::kJobNotice);
  expectRoundTrip(notice);
  auto cut = parsePeerFrame(encodePeerFrame(JobNotice{1, 2, std::string(2000, 'x')}), kWorld);
  ASSERT_TRUE(cut.ok());
  EXPECT_EQ(std::get<JobNotice>(*cut).reason.size(), kMaxNoticeReason);
  auto huge = bytes;
  huge[kPeerFrameHeaderBytes + 16] = std::byte{0xff};
  huge[kPeerFrameHeaderBytes + 17] = std::byte{0xff};
  EXPECT_EQ(error(huge), "job notice: a text of 65535 bytes, more than 512");

  const RealignNotice realign{0x1234567890abcdefull, 700, 698};
  EXPECT_EQ(encodePeerFrame(realign).size(), kPeerFrameHeaderBytes + 24);
  EXPECT_EQ(peerFrameKind(encodePeerFrame(realign)), FrameKind::kRealign);
  expectRoundTrip(realign);
}

MembershipView view(uint32_t epoch, uint32_t proposer, uint32_t parent, std::vector<uint32_t> members,
                    std::vector<uint32_t> joined = {}) {
  return {epoch, proposer, parent, std::move(members), std::move(joined)};
}

TEST(PeerFrameTest, MembershipNoticesCarryAViewWhereTheirKindNeedsOne) {
  const MembershipNotice install{Kind::kInstall, {7, 2}, {}, {}, view(7, 2, 1, {0, 2}, {2})};
  const auto bytes = encodePeerFrame(install);
  const size_t body = kPeerFrameHeaderBytes;
  ASSERT_EQ(bytes.size(), body + 25 + 1 + 12 + 2 + 8 + 2 + 4);
  EXPECT_EQ(at<uint8_t>(bytes, body), 1);          // kind: install
  EXPECT_EQ(at<uint32_t>(bytes, body + 1), 7u);    // slot epoch
  EXPECT_EQ(at<uint8_t>(bytes, body + 25), 1);     // a view follows
  EXPECT_EQ(at<uint32_t>(bytes, body + 26), 7u);   // its epoch
  EXPECT_EQ(at<uint16_t>(bytes, body + 38), 2u);   // member count
  EXPECT_EQ(at<uint32_t>(bytes, body + 44), 2u);   // second member
  EXPECT_EQ(at<uint16_t>(bytes, body + 48), 1u);   // joined count
  EXPECT_EQ(at<uint32_t>(bytes, body + 50), 2u);   // the joiner
  expectRoundTrip(install);
  expectRoundTrip(MembershipNotice{Kind::kPrepare, {3, 0}, {9, 1}, {}, std::nullopt});
  expectRoundTrip(MembershipNotice{Kind::kPromise, {3, 0}, {9, 1}, {8, 2}, view(4, 2, 0, {0, 1, 2})});

  EXPECT_EQ(error(bytes, 2), "membership notice: member rank 2 of 2 nodes");
  auto bad = [](MembershipView v) { return error(encodePeerFrame(MembershipNotice{Kind::kInstall, {}, {}, {}, v})); };
  EXPECT_EQ(bad(view(1, 0, 0, {2, 0})), "membership notice: member ranks not ascending");
  EXPECT_EQ(bad(view(1, 0, 0, {})), "membership notice: no members");
  EXPECT_EQ(bad(view(1, 0, 0, {0}, {1})), "membership notice: joined rank 1 is no member");
  EXPECT_EQ(bad(view(1, 5, 0, {0})), "membership notice: proposer 5 of 4 nodes");
  EXPECT_EQ(error(encodePeerFrame(MembershipNotice{Kind::kAccept, {}, {}, {}, std::nullopt})),
            "membership notice: accept without a view");
  auto kind = bytes;
  kind[body] = std::byte{9};
  EXPECT_EQ(error(kind), "membership notice: unknown kind 9");
  auto flag = bytes;
  flag[body + 25] = std::byte{2};
  EXPECT_EQ(error(flag), "membership notice: optional part flag 2, not 0 or 1");
}

TEST(PeerFrameTest, OutcomeQueriesAndAnswersRoundTripAndTheirRangesAreChecked) {
  const OutcomeQuery query{42, 7, 9};
  const auto bytes = encodePeerFrame(query);
  ASSERT_EQ(bytes.size(), kPeerFrameHeaderBytes + 24);
  EXPECT_EQ(peerFrameKind(bytes), FrameKind::kOutcomeQuery);
  EXPECT_EQ(at<uint64_t>(bytes, kPeerFrameHeaderBytes + 8), 7u);  // from
  expectRoundTrip(query);
  const OutcomeAnswer answer{42, 7, 9, 1, 8, 0};
  ASSERT_EQ(encodePeerFrame(answer).size(), kPeerFrameHeaderBytes + 34);
  EXPECT_EQ(peerFrameKind(encodePeerFrame(answer)), FrameKind::kOutcomeAnswer);
  expectRoundTrip(answer);
  expectRoundTrip(OutcomeAnswer{42, 7, 9, 0, 0, 0});
  expectRoundTrip(OutcomeAnswer{42, 7, 9, 0, 0, 1});

  EXPECT_EQ(error(encodePeerFrame(OutcomeQuery{42, 9, 7})), "outcome query: iterations from 9 to 7: an empty range");
  EXPECT_EQ(error(encodePeerFrame(OutcomeAnswer{42, 7, 9, 2, 8})), "outcome answer: gave_up flag 2, not 0 or 1");
  EXPECT_EQ(error(encodePeerFrame(OutcomeAnswer{42, 7, 9, 1, 10})),
            "outcome answer: iteration given up 10 is outside the asked range 7..9");
  EXPECT_EQ(error(encodePeerFrame(OutcomeAnswer{42, 7, 9, 1, 8, 1})),
            "outcome answer: gave_up set for a job it says it does not hold");
}

TEST(PeerFrameTest, MalformedFramesAreErrorsNamingTheProblem) {
  const auto bytes = encodePeerFrame(RealignNotice{1, 2});
  EXPECT_EQ(error({bytes.begin(), bytes.begin() + 10}), "peer frame: 10 bytes, shorter than its 12-byte header");
  EXPECT_FALSE(peerFrameKind({bytes.begin(), bytes.begin() + 10}).has_value());
  auto magic = bytes;
  magic[0] = std::byte{0};
  EXPECT_EQ(error(magic), "peer frame: bad magic 0x50414300");
  EXPECT_FALSE(peerFrameKind(magic).has_value());
  auto version = bytes;
  version[4] = std::byte{1};
  EXPECT_EQ(error(version), "peer frame: version 1, expected 2") << "an agent of an earlier release";
  auto kind = bytes;
  kind[5] = std::byte{7};
  EXPECT_EQ(error(kind), "peer frame: unknown kind 7");
  auto reserved = bytes;
  reserved[6] = std::byte{1};
  EXPECT_EQ(error(reserved), "peer frame: reserved field 1, not zero");
  auto longer = bytes;
  longer.push_back(std::byte{0});
  EXPECT_EQ(error(longer), "peer frame: body of 24 bytes, but 25 follow the header");
  // A body length that agrees with a frame cut inside its fields, and one with bytes to spare.
  auto cut = std::vector<std::byte>(bytes.begin(), bytes.end() - 4);
  cut[8] = std::byte{20};
  EXPECT_EQ(error(cut), "realign notice: body of 20 bytes ends inside its fields");
  longer[8] = std::byte{25};
  EXPECT_EQ(error(longer), "realign notice: 1 bytes after its fields");
  // A rank count larger than what follows is refused before anything is allocated.
  auto members = encodePeerFrame(MembershipNotice{Kind::kInstall, {}, {}, {}, view(1, 0, 0, {0})});
  members[kPeerFrameHeaderBytes + 38] = std::byte{0xff};
  members[kPeerFrameHeaderBytes + 39] = std::byte{0xff};
  EXPECT_THAT(error(members), HasSubstr("membership notice: body of"));
}

}  // namespace
}  // namespace gcagent::agent
