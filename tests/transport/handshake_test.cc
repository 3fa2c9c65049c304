// The peer handshake without I/O: both sides driven frame by frame, good and hostile.
#include "transport/handshake.h"

#include <gtest/gtest.h>

#include <cstring>

namespace gcagent::transport {
namespace {

std::vector<std::byte> bytes(std::string_view s) {
  const auto* p = reinterpret_cast<const std::byte*>(s.data());
  return {p, p + s.size()};
}

HandshakeSide side(std::string token, Rank rank, Rank size, std::string_view address) {
  return {std::move(token), rank, size, bytes(address)};
}

struct Frame {
  FrameType type;
  std::vector<std::byte> body;
};

Frame parse(const std::vector<std::byte>& wire) {
  EXPECT_GE(wire.size(), kFrameHeaderBytes);
  auto header = parseFrameHeader(std::span(wire).first(kFrameHeaderBytes));
  EXPECT_TRUE(header.ok()) << header.status().toString();
  EXPECT_EQ(wire.size(), kFrameHeaderBytes + header->body_bytes);
  return {header->type, {wire.begin() + kFrameHeaderBytes, wire.end()}};
}

// Runs a whole handshake; returns both sides' last steps.
std::pair<Step, Step> run(ConnectorHandshake& c, AcceptorHandshake& a) {
  auto hello = c.start();
  EXPECT_TRUE(hello.ok());
  Frame f = parse(*hello);
  Step challenge = a.onFrame(f.type, f.body);
  if (challenge.refused) return {Step{}, std::move(challenge)};
  f = parse(challenge.reply);
  Step proof = c.onFrame(f.type, f.body);
  if (proof.refused) return {std::move(proof), Step{}};
  f = parse(proof.reply);
  Step welcome = a.onFrame(f.type, f.body);
  if (welcome.refused) return {Step{}, std::move(welcome)};
  f = parse(welcome.reply);
  Step done = c.onFrame(f.type, f.body);
  return {std::move(done), std::move(welcome)};
}

TEST(HandshakeTest, SameTokenAdmitsBothSidesWithEachOthersAddressAndTheSameKeys) {
  ConnectorHandshake c(side("secret", 1, 4, "ucx-address-of-1"), 3);
  AcceptorHandshake a(side("secret", 3, 4, "ucx-address-of-3"));
  auto [connector, acceptor] = run(c, a);
  ASSERT_TRUE(connector.admitted.has_value());
  ASSERT_TRUE(acceptor.admitted.has_value());
  EXPECT_EQ(connector.admitted->peer, 3u);
  EXPECT_EQ(acceptor.admitted->peer, 1u);
  EXPECT_EQ(connector.admitted->peer_address, bytes("ucx-address-of-3"));
  EXPECT_EQ(acceptor.admitted->peer_address, bytes("ucx-address-of-1"));
  EXPECT_EQ(connector.admitted->keys.connector_to_acceptor, acceptor.admitted->keys.connector_to_acceptor);
  EXPECT_EQ(connector.admitted->keys.acceptor_to_connector, acceptor.admitted->keys.acceptor_to_connector);
  EXPECT_NE(connector.admitted->keys.connector_to_acceptor, connector.admitted->keys.acceptor_to_connector);
}

TEST(HandshakeTest, EveryLinkGetsFreshKeys) {
  ConnectorHandshake c1(side("secret", 0, 2, "a"), 1), c2(side("secret", 0, 2, "a"), 1);
  AcceptorHandshake a1(side("secret", 1, 2, "b")), a2(side("secret", 1, 2, "b"));
  auto first = run(c1, a1).first.admitted->keys;
  auto second = run(c2, a2).first.admitted->keys;
  EXPECT_NE(first.connector_to_acceptor, second.connector_to_acceptor);
}

TEST(HandshakeTest, TheConnectorRefusesAnAcceptorWithAnotherToken) {
  ConnectorHandshake c(side("token-a", 0, 2, "a"), 1);
  AcceptorHandshake a(side("token-b", 1, 2, "b"));
  auto [connector, acceptor] = run(c, a);
  ASSERT_TRUE(connector.refused.has_value());
  EXPECT_EQ(connector.refused->kind, Refusal::kUnauthenticated);
  EXPECT_NE(connector.refused->why.message().find("did not prove knowledge of the cluster token"), std::string::npos);
  EXPECT_EQ(connector.refused->why.message().find("token-"), std::string::npos);
  EXPECT_EQ(parse(connector.reply).type, FrameType::kRefusal) << "the other side hears why";
}

TEST(HandshakeTest, TheAcceptorRefusesAConnectorWithoutTheToken) {
  ConnectorHandshake c(side("", 0, 2, "a"), 1);  // checks nothing, proves nothing
  AcceptorHandshake a(side("token-b", 1, 2, "b"));
  auto [connector, acceptor] = run(c, a);
  ASSERT_TRUE(acceptor.refused.has_value());
  EXPECT_EQ(acceptor.refused->kind, Refusal::kUnauthenticated);
  EXPECT_FALSE(acceptor.admitted.has_value());
  // The refusal reaches the connector, which reports it in its own words.
  Frame f = parse(acceptor.reply);
  ASSERT_EQ(f.type, FrameType::kRefusal);
  Step heard = c.onFrame(f.type, f.body);
  ASSERT_TRUE(heard.refused.has_value());
  EXPECT_NE(heard.refused->why.message().find("rank 1 refused the link: peer authentication failed"),
            std::string::npos)
      << heard.refused->why.message();
}

TEST(HandshakeTest, AProofCannotBeReflected) {
  // A stranger that replays the acceptor's own proof as the connector's proof is refused.
  ConnectorHandshake c(side("secret", 0, 2, "a"), 1);
  AcceptorHandshake a(side("secret", 1, 2, "b"));
  Frame hello = parse(*c.start());
  Frame challenge = parse(a.onFrame(hello.type, hello.body).reply);
  std::vector<std::byte> reflected(challenge.body.begin() + 4 + sizeof(Nonce),
                                   challenge.body.begin() + 4 + sizeof(Nonce) + sizeof(Digest));
  reflected.push_back(std::byte{1});
  Step step = a.onFrame(FrameType::kProof, reflected);
  ASSERT_TRUE(step.refused.has_value());
  EXPECT_EQ(step.refused->kind, Refusal::kUnauthenticated);
}

TEST(HandshakeTest, MisconfiguredPeersAreRefusedWithTheCause) {
  {
    ConnectorHandshake c(side("", 0, 3, "a"), 1);
    AcceptorHandshake a(side("", 1, 2, "b"));
    Frame hello = parse(*c.start());
    Step step = a.onFrame(hello.type, hello.body);
    ASSERT_TRUE(step.refused.has_value());
    EXPECT_EQ(step.refused->kind, Refusal::kMalformed);
    EXPECT_NE(step.refused->why.message().find("has 3 agents in transport.peers, this one 2"), std::string::npos)
        << step.refused->why.message();
  }
  {
    ConnectorHandshake c(side("", 2, 3, "a"), 1);  // a higher rank dials a lower one
    AcceptorHandshake a(side("", 1, 3, "b"));
    Frame hello = parse(*c.start());
    Step step = a.onFrame(hello.type, hello.body);
    ASSERT_TRUE(step.refused.has_value());
    EXPECT_NE(step.refused->why.message().find("only lower ranks connect to rank 1"), std::string::npos);
  }
  {
    ConnectorHandshake c(side("", 0, 3, "a"), 2);  // dials rank 2's address, rank 1 answers
    AcceptorHandshake a(side("", 1, 3, "b"));
    Frame hello = parse(*c.start());
    Frame challenge = parse(a.onFrame(hello.type, hello.body).reply);
    Step step = c.onFrame(challenge.type, challenge.body);
    ASSERT_TRUE(step.refused.has_value());
    EXPECT_NE(step.refused->why.message().find("rank 2's address answered as rank 1"), std::string::npos);
  }
}

TEST(HandshakeTest, FramesOutOfOrderOrOfTheWrongSizeAreMalformed) {
  AcceptorHandshake a(side("", 1, 2, "b"));
  Step step = a.onFrame(FrameType::kProof, std::vector<std::byte>(40));
  ASSERT_TRUE(step.refused.has_value());
  EXPECT_EQ(step.refused->kind, Refusal::kMalformed);
  AcceptorHandshake b(side("", 1, 2, "b"));
  step = b.onFrame(FrameType::kHello, std::vector<std::byte>(23));
  ASSERT_TRUE(step.refused.has_value());
  EXPECT_NE(step.refused->why.message().find("a hello of 23 bytes"), std::string::npos);
  ConnectorHandshake c(side("", 0, 2, "a"), 1);
  ASSERT_TRUE(c.start().ok());
  step = c.onFrame(FrameType::kWelcome, {});
  ASSERT_TRUE(step.refused.has_value());
  step = c.onFrame(FrameType::kChallenge, std::vector<std::byte>(4 + sizeof(Nonce) + sizeof(Digest)));  // no address
  ASSERT_TRUE(step.refused.has_value());
}

TEST(HandshakeTest, HeadersAreCheckedBeforeAnyBodyIsRead) {
  const auto good = encodeFrame(FrameType::kHello, std::vector<std::byte>(24));
  ASSERT_TRUE(parseFrameHeader(std::span(good).first(kFrameHeaderBytes)).ok());
  auto with = [&](size_t at, std::byte value) {
    auto h = std::vector<std::byte>(good.begin(), good.begin() + kFrameHeaderBytes);
    h[at] = value;
    return parseFrameHeader(h);
  };
  EXPECT_NE(with(0, std::byte{0}).status().message().find("bad magic"), std::string::npos);
  EXPECT_NE(with(4, std::byte{9}).status().message().find("version 9"), std::string::npos);
  EXPECT_NE(with(5, std::byte{0}).status().message().find("unknown frame type 0"), std::string::npos);
  EXPECT_NE(with(5, std::byte{6}).status().message().find("unknown frame type 6"), std::string::npos);
  // 64 zero bytes (what crashed UCX's own listener) are not a frame.
  EXPECT_FALSE(parseFrameHeader(std::vector<std::byte>(kFrameHeaderBytes)).ok());
  // A body over the cap is refused from its header.
  auto big = std::vector<std::byte>(good.begin(), good.begin() + kFrameHeaderBytes);
  const uint32_t too_many = kMaxFrameBody + 1;
  std::memcpy(big.data() + 8, &too_many, 4);
  EXPECT_NE(parseFrameHeader(big).status().message().find("at most 16384"), std::string::npos);
  EXPECT_FALSE(parseFrameHeader(std::vector<std::byte>(5)).ok());
}

TEST(HandshakeTest, ARefusalTextIsShortAndPrintable) {
  ConnectorHandshake c(side("", 0, 2, "a"), 1);
  ASSERT_TRUE(c.start().ok());
  std::vector<std::byte> text(5000, std::byte{'x'});
  text[3] = std::byte{0x07};
  Step step = c.onFrame(FrameType::kRefusal, text);
  ASSERT_TRUE(step.refused.has_value());
  const std::string m = step.refused->why.message();
  EXPECT_LT(m.size(), 600u);
  EXPECT_NE(m.find("xxx?x"), std::string::npos) << m;
  EXPECT_TRUE(step.reply.empty()) << "a refusal is not answered";
}

}  // namespace
}  // namespace gcagent::transport
