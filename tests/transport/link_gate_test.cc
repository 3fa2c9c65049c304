// The gate on real TCP sockets over 127.0.0.1: two gates admit each other; strangers that
// send garbage, stop half way or come in crowds are refused, counted by kind, and the gate
// goes on admitting real peers. Deadlines are reached by jumping the gates' clock.
#include "transport/link_gate.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <map>

#include "tests/common/epoch_clock.h"

namespace gcagent::transport {
namespace {

using namespace std::chrono_literals;

class LinkGateTest : public ::testing::Test {
 protected:
  struct Outcome {
    std::vector<Admitted> admitted;
    std::map<Refusal, int> refused;
    std::vector<std::string> refusal_messages;
    std::vector<std::pair<Rank, bool>> dial_failed;
  };

  std::unique_ptr<LinkGate> makeGate(Rank rank, Rank size, std::string token = "secret", size_t cap = 64,
                                     size_t per_address = 8) {
    GateOptions o;
    o.self = {std::move(token), rank, size, {std::byte{static_cast<unsigned char>('A' + rank)}}};
    o.listen = "127.0.0.1:0";
    o.timeout_seconds = 5;
    o.max_handshakes = cap;
    o.max_per_address = per_address;
    o.now = clock_.now();
    Outcome* out = &outcomes_[rank];
    GateEvents e;
    e.admitted = [out](Admitted a) { out->admitted.push_back(std::move(a)); };
    e.refused = [out](const Refused& r, std::string_view) {
      ++out->refused[r.kind];
      out->refusal_messages.push_back(r.why.message());
    };
    e.dial_failed = [out](Rank peer, const Status&, bool refused) { out->dial_failed.push_back({peer, refused}); };
    auto gate = LinkGate::open(std::move(o), std::move(e));
    EXPECT_TRUE(gate.ok()) << gate.status().toString();
    return std::move(gate).value();
  }

  bool runUntil(const std::function<bool()>& done, const std::vector<LinkGate*>& gates) {
    for (int i = 0; i < 20000; ++i) {
      for (LinkGate* g : gates) g->poll();
      if (done()) return true;
      ::usleep(100);
    }
    return false;
  }

  // A raw client connection to `address` (host:port on 127.0.0.1).
  static int connectTo(const std::string& address) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(static_cast<uint16_t>(std::stoi(address.substr(address.rfind(':') + 1))));
    ::inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0);
    return fd;
  }

  // Whether the gate closed `fd` (read returns 0 or an error, not EAGAIN).
  static bool closedByGate(int fd) {
    char b[256];
    const ssize_t n = ::recv(fd, b, sizeof b, MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
  }

  void admitPair(LinkGate& g0, LinkGate& g1) {
    const size_t before0 = outcomes_[0].admitted.size(), before1 = outcomes_[1].admitted.size();
    g0.dial(1, g1.listenAddress());
    ASSERT_TRUE(runUntil([&] { return outcomes_[0].admitted.size() > before0 && outcomes_[1].admitted.size() > before1; },
                         {&g0, &g1}))
        << "the two gates never admitted each other";
  }

  gcagent::testing::EpochClock clock_;
  std::map<Rank, Outcome> outcomes_;
};

TEST_F(LinkGateTest, TwoGatesAdmitEachOther) {
  auto g0 = makeGate(0, 2), g1 = makeGate(1, 2);
  admitPair(*g0, *g1);
  EXPECT_EQ(outcomes_[0].admitted[0].peer, 1u);
  EXPECT_EQ(outcomes_[0].admitted[0].peer_address, std::vector<std::byte>{std::byte{'B'}});
  EXPECT_EQ(outcomes_[1].admitted[0].peer, 0u);
  EXPECT_EQ(outcomes_[1].admitted[0].peer_address, std::vector<std::byte>{std::byte{'A'}});
  EXPECT_EQ(outcomes_[0].admitted[0].keys.connector_to_acceptor, outcomes_[1].admitted[0].keys.connector_to_acceptor);
  EXPECT_TRUE(outcomes_[1].refused.empty());
  ASSERT_TRUE(runUntil([&] { return g0->handshakesOpen() == 0 && g1->handshakesOpen() == 0; }, {g0.get(), g1.get()}));
}

TEST_F(LinkGateTest, AnotherTokenIsRefusedOnBothSides) {
  auto g0 = makeGate(0, 2, "token-a"), g1 = makeGate(1, 2, "token-b");
  g0->dial(1, g1->listenAddress());
  ASSERT_TRUE(runUntil([&] { return !outcomes_[0].dial_failed.empty() && !outcomes_[1].refused.empty(); },
                       {g0.get(), g1.get()}));
  EXPECT_EQ(outcomes_[0].refused[Refusal::kUnauthenticated], 1);
  EXPECT_EQ(outcomes_[1].refused[Refusal::kUnauthenticated], 1) << "the acceptor logs and counts it too";
  EXPECT_TRUE(outcomes_[0].dial_failed[0].second) << "reported as refused, so it is retried slowly";
  EXPECT_TRUE(outcomes_[0].admitted.empty());
  EXPECT_TRUE(outcomes_[1].admitted.empty());
}

TEST_F(LinkGateTest, GarbageIsRefusedAndTheGateGoesOn) {
  auto g0 = makeGate(0, 2), g1 = makeGate(1, 2);
  for (std::string_view garbage : {std::string_view("\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0", 16),
                                   std::string_view("GET / HTTP/1.1\r\nHost: x\r\n\r\n")}) {
    const int fd = connectTo(g1->listenAddress());
    ASSERT_EQ(::send(fd, garbage.data(), garbage.size(), 0), static_cast<ssize_t>(garbage.size()));
    ASSERT_TRUE(runUntil([&] { return closedByGate(fd); }, {g1.get()})) << "garbage kept its connection";
    ::close(fd);
  }
  EXPECT_EQ(outcomes_[1].refused[Refusal::kMalformed], 2);
  EXPECT_NE(outcomes_[1].refusal_messages[0].find("bad magic"), std::string::npos) << outcomes_[1].refusal_messages[0];
  admitPair(*g0, *g1);
}

TEST_F(LinkGateTest, AHalfHandshakeEndsAtTheDeadline) {
  auto g0 = makeGate(0, 2), g1 = makeGate(1, 2);
  // A real hello, then silence.
  ConnectorHandshake stranger(HandshakeSide{"", 0, 2, {std::byte{1}}}, 1);
  const auto hello = *stranger.start();
  const int fd = connectTo(g1->listenAddress());
  ASSERT_EQ(::send(fd, hello.data(), hello.size(), 0), static_cast<ssize_t>(hello.size()));
  ASSERT_TRUE(runUntil([&] { return g1->handshakesOpen() == 1; }, {g1.get()}));
  for (int i = 0; i < 100; ++i) g1->poll();
  EXPECT_FALSE(closedByGate(fd)) << "closed before its deadline";
  clock_.jump(5100ms);
  ASSERT_TRUE(runUntil([&] { return closedByGate(fd); }, {g1.get()}));
  ::close(fd);
  EXPECT_EQ(outcomes_[1].refused[Refusal::kTimedOut], 1);
  admitPair(*g0, *g1);
}

TEST_F(LinkGateTest, CrowdsAreCappedPerAddressAndInAll) {
  auto g0 = makeGate(0, 2), g1 = makeGate(1, 2, "secret", /*cap=*/64, /*per_address=*/3);
  std::vector<int> silent;
  for (int i = 0; i < 5; ++i) silent.push_back(connectTo(g1->listenAddress()));
  ASSERT_TRUE(runUntil([&] { return outcomes_[1].refused[Refusal::kOverCapacity] == 2; }, {g1.get()}));
  EXPECT_EQ(g1->handshakesOpen(), 3u);
  EXPECT_NE(outcomes_[1].refusal_messages[0].find("per address"), std::string::npos) << outcomes_[1].refusal_messages[0];
  // The crowd holds every slot of its address until the deadline; then a real peer gets in.
  clock_.jump(5100ms);
  ASSERT_TRUE(runUntil([&] { return g1->handshakesOpen() == 0; }, {g1.get()}));
  admitPair(*g0, *g1);
  for (int fd : silent) ::close(fd);

  auto g2 = makeGate(1, 2, "secret", /*cap=*/2, /*per_address=*/8);
  std::vector<int> more;
  for (int i = 0; i < 4; ++i) more.push_back(connectTo(g2->listenAddress()));
  ASSERT_TRUE(runUntil([&] { return outcomes_[1].refused[Refusal::kOverCapacity] == 4; }, {g2.get()}));
  EXPECT_NE(outcomes_[1].refusal_messages.back().find("(at most 2)"), std::string::npos);
  for (int fd : more) ::close(fd);
}

TEST_F(LinkGateTest, ADialToNobodyFailsAndCanBeRetried) {
  auto g0 = makeGate(0, 2);
  std::string nobody;
  {
    auto g1 = makeGate(1, 2);
    nobody = g1->listenAddress();
  }  // closed: nothing listens there now
  g0->dial(1, nobody);
  EXPECT_TRUE(g0->dialing(1));
  ASSERT_TRUE(runUntil([&] { return !outcomes_[0].dial_failed.empty(); }, {g0.get()}));
  EXPECT_FALSE(outcomes_[0].dial_failed[0].second);
  EXPECT_FALSE(g0->dialing(1));
  EXPECT_TRUE(outcomes_[0].refused.empty()) << "an unreachable peer is not a refusal";
}

}  // namespace
}  // namespace gcagent::transport
