#include "shm/protocol.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>

namespace gcagent::shm::protocol {
namespace {

using ::testing::HasSubstr;

Result<Message> roundTrip(std::span<const std::byte> frame) {
  if (frame.size() < kHeaderBytes) return Status::dataLoss("short frame");
  auto header = parseHeader(frame.first(kHeaderBytes));
  if (!header.ok()) return header.status();
  return decode(*header, frame.subspan(kHeaderBytes));
}

GpuUuidBytes gpu(uint8_t seed) {
  GpuUuidBytes u{};
  for (size_t i = 0; i < u.size(); ++i) u[i] = static_cast<uint8_t>(seed + i);
  return u;
}

IpcHandleBytes handle(uint8_t seed) {
  IpcHandleBytes h{};
  for (size_t i = 0; i < h.size(); ++i) h[i] = static_cast<uint8_t>(seed ^ i);
  return h;
}

DeclaredDevice posixFdOffer() {
  DeclaredDevice d;
  d.kind = DeviceHandleKind::kPosixFd;
  d.gpu = gpu(0x5a);
  d.allocation_bytes = 2 << 20;
  d.ready_event = handle(1);
  d.done_event = handle(2);
  d.slot_offsets = {0, 4096};
  return d;
}

DeclaredDevice legacyOffer() {
  DeclaredDevice d = posixFdOffer();
  d.kind = DeviceHandleKind::kLegacyIpc;
  d.mem_handle = handle(3);
  return d;
}

std::vector<Message> samples() {
  TensorDecl a{7, 1000, DType::kFloat32, -3, "2bit", {{"threshold", "0.5"}}};
  TensorDecl b{8, 1, DType::kBFloat16, 0, "", {}};
  return {
      {1, Hello{"resnet50", 1, 4, 4242}},
      {2, Welcome{3, 0, 2, 60000}},
      {3, Declare{{a, b}}},
      {4, Declared{"gcagent-0-3", 1 << 20, {0, 4096}}},
      {5, Submit{17, {7, 8}}},
      {6, Complete{17, {8}, {}}},
      {7, Error{StatusCode::kInvalidArgument, "tensor 7: wrong size"}},
      {8, DeclareDevice{gpu(0x5a), {a, b}}},
      {9, posixFdOffer()},
      {10, legacyOffer()},
      {11, StateGet{7, 4096}},
      {12, StatePart{7, 10, 6, {std::byte{1}, std::byte{2}, std::byte{3}, std::byte{4}}}},
      {13, StateStored{7, 10, 2}},
      {14, IterationQuery{41}},
      {15, IterationAnswer{41, 97}},
  };
}

TEST(ProtocolTest, EveryMessageRoundTrips) {
  for (const Message& m : samples()) {
    auto frame = encode(m);
    auto back = roundTrip(frame);
    ASSERT_TRUE(back.ok()) << back.status().toString();
    EXPECT_EQ(*back, m) << "type index " << m.body.index();
  }
}

TEST(ProtocolTest, ACompletionCarriesTheReloadRootOnlyWhenItHasOne) {
  const Message plain{6, Complete{17, {8}, {}}};
  const Message reload{6, Complete{17, {8}, 3}};
  EXPECT_EQ(encode(reload).size(), encode(plain).size() + 4) << "a u32 after the keys";
  for (const Message& m : {plain, reload}) {
    auto back = roundTrip(encode(m));
    ASSERT_TRUE(back.ok()) << back.status().toString();
    EXPECT_EQ(*back, m);
  }
  Message bad = reload;
  std::get<Complete>(bad.body).reload_root = kMaxNodes;
  EXPECT_NE(roundTrip(encode(bad)).status().message().find("reload root 65536"), std::string::npos)
      << roundTrip(encode(bad)).status().toString();
}

TEST(ProtocolTest, HeaderLayoutIsFixed) {
  auto frame = encode({0x01020304, Submit{1, {2}}});
  ASSERT_EQ(frame.size(), kHeaderBytes + 8 + 4 + 8);
  const unsigned char expected[16] = {'G', 'C', 'A', 'C', 1, 0, 5, 0, 20, 0, 0, 0, 4, 3, 2, 1};
  for (size_t i = 0; i < 16; ++i) EXPECT_EQ(static_cast<unsigned char>(frame[i]), expected[i]) << i;
}

TEST(ProtocolTest, BadHeadersAreNamed) {
  auto frame = encode({1, Submit{1, {2}}});
  auto header = std::span(frame).first(kHeaderBytes);
  auto mutate = [&](size_t at, unsigned char v) {
    std::vector<std::byte> h(header.begin(), header.end());
    h[at] = static_cast<std::byte>(v);
    return parseHeader(h).status().message();
  };
  EXPECT_EQ(mutate(0, 'X'), "control header: bad magic 0x43414358 (not a gcagent client?)");
  EXPECT_EQ(mutate(4, 9), "control header: protocol version 9, this agent speaks 1");
  EXPECT_EQ(mutate(6, 99), "control header: unknown message type 99");
  EXPECT_EQ(mutate(11, 0x10), "control header: body of 268435476 bytes exceeds the 16777216-byte limit");
  EXPECT_EQ(parseHeader(header.first(15)).status().message(), "control header: expected 16 bytes, got 15");
}

TEST(ProtocolTest, EveryTruncationIsRejected) {
  for (const Message& m : samples()) {
    auto frame = encode(m);
    auto header = parseHeader(std::span(frame).first(kHeaderBytes));
    ASSERT_TRUE(header.ok());
    auto body = std::span(frame).subspan(kHeaderBytes);
    for (size_t len = 0; len < body.size(); ++len) {
      if (std::holds_alternative<Welcome>(m.body) && len == 12) continue;  // an older agent's welcome
      Header h = *header;
      h.body_bytes = static_cast<uint32_t>(len);
      auto decoded = decode(h, body.first(len));
      ASSERT_FALSE(decoded.ok()) << "type " << m.body.index() << " accepted " << len << " of " << body.size();
      EXPECT_EQ(decoded.status().code(), StatusCode::kDataLoss) << decoded.status().toString();
    }
    auto longer = std::vector<std::byte>(body.begin(), body.end());
    longer.push_back(std::byte{0});
    Header h = *header;
    h.body_bytes = static_cast<uint32_t>(longer.size());
    EXPECT_NE(decode(h, longer).status().message().find("1 trailing bytes"), std::string::npos);
  }
}

std::string errorOf(const Message& m) {
  auto back = roundTrip(encode(m));
  EXPECT_FALSE(back.ok());
  return back.ok() ? "" : back.status().message();
}

TEST(ProtocolTest, FieldsAreValidated) {
  EXPECT_EQ(errorOf({1, Hello{"", 0, 1, 1}}), "control message 'hello': job name is empty");
  EXPECT_EQ(errorOf({1, Hello{"job", 4, 4, 1}}), "control message 'hello': local rank 4 is not below the local size 4");
  EXPECT_EQ(errorOf({1, Hello{"job", 0, 0, 1}}), "control message 'hello': local size 0 is outside [1, 1024]");
  EXPECT_EQ(errorOf({1, Hello{std::string(200, 'j'), 0, 1, 1}}),
            "control message 'hello': job name is longer than 128 bytes");
  EXPECT_EQ(errorOf({1, Hello{"a\nb", 0, 1, 1}}), "control message 'hello': job name contains a control character");
  EXPECT_EQ(errorOf({1, Declare{}}), "control message 'declare': tensor count 0 is outside [1, 65536]");
  TensorDecl t{1, 0, DType::kFloat32, 0, "none", {}};
  EXPECT_EQ(errorOf({1, Declare{{t}}}),
            "control message 'declare': tensor 0: element count 0 is outside [1, 2^40]");
  t.elements = 10;
  EXPECT_EQ(errorOf({1, Declare{{t, t}}}), "control message 'declare': tensor 1: repeats key 1");
  t.dtype = static_cast<DType>(9);
  EXPECT_EQ(errorOf({1, Declare{{t}}}),
            "control message 'declare': tensor 0: unknown dtype 9 (1 = float32, 2 = bfloat16, 3 = float16)");
  t.dtype = DType::kFloat32;
  t.params.assign(17, {"k", "v"});
  EXPECT_EQ(errorOf({1, Declare{{t}}}), "control message 'declare': tensor 0: 17 codec parameters exceed 16");
  EXPECT_EQ(errorOf({1, Submit{3, {}}}), "control message 'submit': no keys");
  EXPECT_EQ(errorOf({1, Submit{3, {5, 5}}}), "control message 'submit': key repeats key 5");
  EXPECT_EQ(errorOf({1, Declared{"seg", 100, {0, 100}}}), "control message 'declared': slot offset 100 is beyond the segment");
  EXPECT_EQ(errorOf({1, Welcome{0, 2, 2}}), "control message 'welcome': node rank 2 is not below the node count 2");
  EXPECT_EQ(errorOf({1, Error{static_cast<StatusCode>(0), "x"}}), "control message 'error': unknown error code 0");
}

TEST(ProtocolTest, DeviceFieldsAreValidated) {
  TensorDecl t{1, 10, DType::kFloat32, 0, "", {}};
  EXPECT_EQ(errorOf({1, DeclareDevice{GpuUuidBytes{}, {t}}}), "control message 'declare device': gpu uuid is all zeros");
  EXPECT_EQ(errorOf({1, DeclareDevice{gpu(1), {}}}),
            "control message 'declare device': tensor count 0 is outside [1, 65536]");
  EXPECT_EQ(errorOf({1, DeclareDevice{gpu(1), {t, t}}}), "control message 'declare device': tensor 1: repeats key 1");
  DeclaredDevice d = posixFdOffer();
  d.kind = static_cast<DeviceHandleKind>(3);
  EXPECT_EQ(errorOf({1, d}), "control message 'declared device': unknown device handle kind 3 (1 = posix fd, 2 = legacy ipc)");
  d = posixFdOffer();
  d.gpu = {};
  EXPECT_EQ(errorOf({1, d}), "control message 'declared device': gpu uuid is all zeros");
  d = posixFdOffer();
  d.allocation_bytes = 0;
  EXPECT_EQ(errorOf({1, d}), "control message 'declared device': allocation of 0 bytes is outside [1, 2^42]");
  d.allocation_bytes = (uint64_t{1} << 42) + 1;
  EXPECT_EQ(errorOf({1, d}), "control message 'declared device': allocation of 4398046511105 bytes is outside [1, 2^42]");
  d = posixFdOffer();
  d.mem_handle[63] = 1;
  EXPECT_EQ(errorOf({1, d}), "control message 'declared device': a posix fd allocation carries a legacy memory handle");
  d = legacyOffer();
  d.mem_handle = {};
  EXPECT_EQ(errorOf({1, d}), "control message 'declared device': legacy ipc memory handle is all zeros");
  d = posixFdOffer();
  d.slot_offsets = {};
  EXPECT_EQ(errorOf({1, d}), "control message 'declared device': no slots");
  d.slot_offsets = {0, 2 << 20};
  EXPECT_EQ(errorOf({1, d}), "control message 'declared device': slot offset 2097152 is beyond the allocation");
}

TEST(ProtocolTest, DeviceMessagesHaveAFixedLayout) {
  // kind, uuid, allocation bytes, three 64-byte handles, then the offsets: the trainer's
  // client and the agent may be built apart, so the layout is pinned here.
  auto frame = encode({1, posixFdOffer()});
  ASSERT_EQ(frame.size(), kHeaderBytes + 1 + 16 + 8 + 3 * 64 + 4 + 2 * 8);
  EXPECT_EQ(static_cast<int>(frame[6]), 9);                     // type
  EXPECT_EQ(static_cast<int>(frame[kHeaderBytes]), 1);          // kind: posix fd
  EXPECT_EQ(static_cast<int>(frame[kHeaderBytes + 1]), 0x5a);   // uuid[0]
  EXPECT_EQ(static_cast<int>(frame[kHeaderBytes + 19]), 0x20);  // 2 MiB, little-endian
  EXPECT_EQ(static_cast<int>(frame[kHeaderBytes + 25 + 64 + 5]), 1 ^ 5);  // ready_event[5]
  EXPECT_EQ(messageTypeName(MessageType::kDeclareDevice), "declare device");
  EXPECT_EQ(messageTypeName(MessageType::kDeclaredDevice), "declared device");
  auto header = std::vector<std::byte>(frame.begin(), frame.begin() + kHeaderBytes);
  header[6] = std::byte{18};
  EXPECT_EQ(parseHeader(header).status().message(), "control header: unknown message type 18");
}

TEST(ProtocolTest, PingAndPongAreBareHeaders) {
  // Types 10 and 11 with no body: a trainer's liveness check and the agent's answer.
  for (const Message& m : {Message{5, Ping{}}, Message{5, Pong{}}}) {
    const auto frame = encode(m);
    ASSERT_EQ(frame.size(), kHeaderBytes);
    EXPECT_EQ(static_cast<int>(frame[6]), std::holds_alternative<Ping>(m.body) ? 10 : 11);
    auto header = parseHeader(frame);
    ASSERT_TRUE(header.ok()) << header.status().toString();
    auto decoded = decode(*header, {});
    ASSERT_TRUE(decoded.ok()) << decoded.status().toString();
    EXPECT_EQ(decoded->body, m.body);
    EXPECT_EQ(decoded->request_id, 5u);
  }
}

TEST(ProtocolTest, WelcomeCarriesTheReductionTimeoutAndAnOlderAgentsWelcomeParses) {
  // Type 2: u32 trainer id, u32 node rank, u32 node count, then (added later, absent from an
  // older agent's) u32 transport.reduction_timeout in ms.
  const auto frame = encode({0, Welcome{3, 1, 2, 60000}});
  ASSERT_EQ(frame.size(), kHeaderBytes + 16);
  auto old_form = frame;
  old_form.resize(kHeaderBytes + 12);
  old_form[8] = std::byte{12};  // the body length, little-endian
  auto back = roundTrip(old_form);
  ASSERT_TRUE(back.ok()) << back.status().toString();
  EXPECT_EQ(back->body, (Body{Welcome{3, 1, 2, 0}})) << "0: the agent did not say";
  back = roundTrip(frame);
  ASSERT_TRUE(back.ok()) << back.status().toString();
  EXPECT_EQ(std::get<Welcome>(back->body).reduction_timeout_ms, 60000u);
}

TEST(ProtocolTest, MembershipCarriesEpochNodeCountMembersAndJoiners) {
  // Type 12: u32 epoch, u32 node count, little-endian; zero nodes is refused. Then (added
  // later, absent from an older agent's) u32 ranks[node count], u32 joined count, u32 ranks.
  const auto old_form = encode({0, Membership{3, 2, {}, {}}});
  ASSERT_EQ(old_form.size(), kHeaderBytes + 8);
  EXPECT_EQ(static_cast<int>(old_form[6]), 12);
  EXPECT_EQ(static_cast<int>(old_form[kHeaderBytes]), 3);
  EXPECT_EQ(static_cast<int>(old_form[kHeaderBytes + 4]), 2);
  auto back = roundTrip(old_form);
  ASSERT_TRUE(back.ok()) << back.status().toString();
  EXPECT_EQ(back->body, (Body{Membership{3, 2, {}, {}}}));
  EXPECT_EQ(messageTypeName(MessageType::kMembership), "membership");
  EXPECT_THAT(roundTrip(encode({0, Membership{3, 0, {}, {}}})).status().message(), HasSubstr("zero nodes"));

  const auto frame = encode({0, Membership{4, 2, {1, 3}, {3}}});
  ASSERT_EQ(frame.size(), kHeaderBytes + 8 + 8 + 4 + 4);
  EXPECT_EQ(static_cast<int>(frame[kHeaderBytes + 8]), 1);
  EXPECT_EQ(static_cast<int>(frame[kHeaderBytes + 12]), 3);
  EXPECT_EQ(static_cast<int>(frame[kHeaderBytes + 16]), 1);  // one joiner
  EXPECT_EQ(static_cast<int>(frame[kHeaderBytes + 20]), 3);
  back = roundTrip(frame);
  ASSERT_TRUE(back.ok()) << back.status().toString();
  EXPECT_EQ(back->body, (Body{Membership{4, 2, {1, 3}, {3}}}));
  EXPECT_THAT(roundTrip(encode({0, Membership{4, 2, {3, 1}, {}}})).status().message(), HasSubstr("member ranks not ascending"));
  EXPECT_THAT(roundTrip(encode({0, Membership{4, 2, {1, 3}, {2}}})).status().message(), HasSubstr("joined node 2 is no member"));
  EXPECT_THAT(roundTrip(encode({0, Membership{4, 2, {1, 3}, {1, 2, 3}}})).status().message(), HasSubstr("3 joined nodes of 2"));
}

TEST(ProtocolTest, StatePartsStayInsideTheirTotalAndTheLimits) {
  EXPECT_EQ(messageTypeName(MessageType::kStateGet), "state get");
  EXPECT_EQ(messageTypeName(MessageType::kStatePart), "state part");
  EXPECT_EQ(messageTypeName(MessageType::kStateStored), "state stored");
  EXPECT_EQ(messageTypeName(MessageType::kIterationQuery), "iteration query");
  EXPECT_EQ(messageTypeName(MessageType::kIterationAnswer), "iteration answer");
  const std::vector<std::byte> four(4, std::byte{9});
  EXPECT_TRUE(roundTrip(encode({1, StatePart{3, 0, 0, {}}})).ok());  // an empty state: one empty part
  EXPECT_THAT(roundTrip(encode({1, StatePart{3, 8, 6, four}})).status().message(),
              HasSubstr("state part': part [6, 10) is beyond the total of 8 bytes"));
  EXPECT_THAT(roundTrip(encode({1, StatePart{3, 8, 0, {}}})).status().message(),
              HasSubstr("empty part of a non-empty state"));
  EXPECT_THAT(roundTrip(encode({1, StatePart{3, kMaxStateBytes + 1, 0, four}})).status().message(),
              HasSubstr("total of 1099511627777 bytes is beyond 2^40"));
  EXPECT_THAT(roundTrip(encode({1, StateGet{3, kMaxStateBytes}})).status().message(), HasSubstr("beyond 2^40"));
  // A part claiming more bytes than the frame holds is truncated, not allocated.
  auto frame = encode({1, StatePart{3, 8, 0, four}});
  frame[kHeaderBytes + 24] = std::byte{8};
  EXPECT_EQ(roundTrip(frame).status().code(), StatusCode::kDataLoss);
  frame[kHeaderBytes + 24 + 3] = std::byte{1};  // 16 MiB + 8: beyond a part's limit
  EXPECT_THAT(roundTrip(frame).status().message(), HasSubstr("is beyond 4194304"));
}

TEST(ProtocolTest, HugeCountsAreRejectedBeforeAllocating) {
  // A submit claiming 65536 keys with none present must fail as truncated, not allocate.
  auto frame = encode({1, Submit{1, {1}}});
  frame[kHeaderBytes + 8] = std::byte{0};
  frame[kHeaderBytes + 10] = std::byte{1};  // count = 65536
  auto back = roundTrip(frame);
  ASSERT_FALSE(back.ok());
  EXPECT_EQ(back.status().code(), StatusCode::kDataLoss);
}

TEST(ProtocolTest, RandomCorruptionNeverCrashes) {
  std::mt19937 rng(7);
  for (const Message& m : samples()) {
    auto frame = encode(m);
    for (int trial = 0; trial < 500; ++trial) {
      auto bad = frame;
      for (int k = 0; k < 1 + trial % 3; ++k) bad[kHeaderBytes + rng() % (bad.size() - kHeaderBytes)] ^= static_cast<std::byte>(1 + rng() % 255);
      (void)roundTrip(bad);  // must return, ok or not, without touching memory it does not own
    }
  }
}

}  // namespace
}  // namespace gcagent::shm::protocol
