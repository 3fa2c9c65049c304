// Every backend through one suite: a group of ranks in this process, each with its own
// transport. "group" is the ideal in-process wire (loopback.h) that tests above the transport
// use; "loopback" and "ucx" are the link layer (link_supervisor.h) over the loopback backend
// (memory) and over UCX (its own context, worker and TCP connections over 127.0.0.1), both
// behind the same gate on 127.0.0.1. The link-layer ranks run on a clock that starts one
// second after its epoch, as steady_clock does on a machine that just booted; timeouts are
// reached by jumping that clock, not by waiting.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <map>
#include <numeric>

#include "tests/common/epoch_clock.h"
#include "transport/loopback/loopback.h"
#include "transport/loopback/loopback_backend.h"
#include "transport/transport.h"
#include "transport/ucx/ucx_transport.h"

namespace gcagent::transport {
namespace {

using namespace std::chrono_literals;

struct Received {
  Rank from;
  std::vector<std::byte> header;
  std::vector<std::byte> payload;
};

class TransportTest : public ::testing::TestWithParam<std::string> {
 protected:
  void makeGroup(Rank size, bool wait_up = true) {
    inbox_.assign(size, {});
    events_.assign(size, {});
    group_.clear();
    if (GetParam() == "group") {
      group_ = makeLoopbackGroup(size);
    } else {
      for (Rank r = 0; r < size; ++r) {
        auto t = makeRank(r, size, "127.0.0.1:0");
        ASSERT_TRUE(t.ok()) << t.status().toString();
        group_.push_back(std::move(t).value());
      }
    }
    addresses_.clear();
    for (auto& t : group_) addresses_.push_back(t->listenAddress());
    for (Rank r = 0; r < size; ++r) install(r);
    for (auto& t : group_) ASSERT_TRUE(t->connect(addresses_).ok());
    if (!wait_up) return;
    ASSERT_TRUE(runUntil([&] {
      for (auto& t : group_)
        if (t && !t->allPeersUp()) return false;
      return true;
    })) << "peers never came up";
  }

  // One rank of the link layer over the backend under test.
  Result<std::unique_ptr<Transport>> makeRank(Rank r, Rank size, const std::string& listen) {
    UcxOptions o;
    o.rank = r;
    o.size = size;
    o.listen = listen;
    o.reconnect_seconds = 0.05;
    o.now = clock_.now();
    o.eager_bytes = eager_bytes_;
    if (tweak_) tweak_(o);
    if (GetParam() == "loopback") return makeLoopbackTransport(net_, o);
    return makeUcxTransport(o);
  }

  void install(Rank r) {
    group_[r]->setHandlers(
        [this, r](const Message& m) {
          inbox_[r].push_back({m.from, {m.header.begin(), m.header.end()}, {m.payload.begin(), m.payload.end()}});
        },
        [this, r](Rank peer, PeerEvent e, const Status&) { events_[r].push_back({peer, e}); });
  }

  // Waits for an event; the limit is only there so a broken build fails instead of hanging.
  bool runUntil(const std::function<bool()>& done, std::chrono::milliseconds limit = 60s) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < deadline) {
      for (auto& t : group_)
        if (t) t->progress();
      if (done()) return true;
    }
    return false;
  }

  static std::vector<std::byte> pattern(size_t n, int seed) {
    std::vector<std::byte> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = static_cast<std::byte>((i * 131 + seed) & 0xff);
    return v;
  }

  std::shared_ptr<LoopbackNet> net_ = makeLoopbackNet();
  std::vector<std::unique_ptr<Transport>> group_;
  std::vector<std::string> addresses_;
  std::vector<std::vector<Received>> inbox_;
  std::vector<std::vector<std::pair<Rank, PeerEvent>>> events_;
  std::function<void(LinkOptions&)> tweak_;  // adjusts each link-layer rank's options
  uint64_t eager_bytes_ = 0;                 // UCX's rendezvous threshold (0: UCX's choice)
  testing::EpochClock clock_;
};

TEST_P(TransportTest, EveryPeerComesUpOnce) {
  makeGroup(3);
  for (Rank r = 0; r < 3; ++r) {
    std::map<Rank, int> ups;
    for (auto [peer, e] : events_[r])
      if (e == PeerEvent::kUp) ups[peer]++;
    EXPECT_EQ(ups, (std::map<Rank, int>{{(r + 1) % 3, 1}, {(r + 2) % 3, 1}})) << "rank " << r;
  }
}

TEST_P(TransportTest, DeliversSmallAndLargeMessagesIntactAndInOrder) {
  makeGroup(3);
  const std::vector<size_t> sizes = {0, 1, 4096, 100000, 4u << 20};
  std::vector<std::vector<std::byte>> payloads;
  for (size_t i = 0; i < sizes.size(); ++i) payloads.push_back(pattern(sizes[i], static_cast<int>(i)));
  int done = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    auto header = pattern(8 + i, 100 + static_cast<int>(i));
    ASSERT_TRUE(group_[0]->send(2, header, payloads[i], [&](const Status& s) {
      EXPECT_TRUE(s.ok()) << s.toString();
      ++done;
    }).ok());
  }
  ASSERT_TRUE(runUntil([&] { return done == static_cast<int>(sizes.size()) && inbox_[2].size() == sizes.size(); }));
  for (size_t i = 0; i < sizes.size(); ++i) {
    EXPECT_EQ(inbox_[2][i].from, 0u);
    EXPECT_EQ(inbox_[2][i].header, pattern(8 + i, 100 + static_cast<int>(i)));
    EXPECT_EQ(inbox_[2][i].payload, payloads[i]) << "message " << i;
  }
  EXPECT_TRUE(inbox_[1].empty());
}

// The engine merges a contribution later, on another thread, where the transport received it:
// a payload whose owner is held stays intact while later messages arrive, and is let go of when
// released (UCX: its assembled descriptor goes back to UCX; a transport dropped first takes
// what is still held back with it).
TEST_P(TransportTest, APayloadKeptPastItsHandlerStaysIntact) {
  eager_bytes_ = 2u << 20;  // as the agent sends slices: eager, in fragments UCX reassembles
  makeGroup(2);
  struct Kept {
    std::vector<std::byte> header;
    std::span<const std::byte> payload;
    std::shared_ptr<const void> owner;
    std::vector<std::byte> copy;  // where the backend lends nothing
  };
  std::vector<Kept> kept;
  group_[1]->setHandlers(
      [&](const Message& m) {
        Kept k{{m.header.begin(), m.header.end()}, m.payload, m.payload_owner, {}};
        if (!m.payload_owner) k.copy.assign(m.payload.begin(), m.payload.end());
        kept.push_back(std::move(k));
        if (!kept.back().owner) kept.back().payload = kept.back().copy;
      },
      nullptr);
  // Messages of one fragment, a few and many; UCX may deliver a short one ahead of a long one
  // sent before it, so each is known by its header.
  constexpr int kMessages = 12;
  const std::vector<size_t> sizes = {3, 70000, 1u << 20};
  std::vector<std::vector<std::byte>> payloads;
  for (int i = 0; i < kMessages; ++i) payloads.push_back(pattern(sizes[i % sizes.size()], i));
  for (int i = 0; i < kMessages; ++i) ASSERT_TRUE(group_[0]->send(1, pattern(4, i), payloads[i], nullptr).ok());
  ASSERT_TRUE(runUntil([&] { return kept.size() == kMessages; }));
  auto intact = [&](const Kept& k) {
    for (int i = 0; i < kMessages; ++i)
      if (k.header == pattern(4, i)) return std::ranges::equal(k.payload, payloads[i]);
    return false;
  };
  for (const Kept& k : kept) EXPECT_TRUE(intact(k)) << "a payload of " << k.payload.size() << " bytes";
  // Half let go of while the transport lives (UCX takes its descriptors back), half held past
  // it (a transport dropped first takes what is still held back with it).
  for (size_t i = 0; i < kept.size(); i += 2) kept[i].owner.reset();
  ASSERT_TRUE(group_[0]->send(1, pattern(4, 2), payloads[2], nullptr).ok());
  ASSERT_TRUE(runUntil([&] { return kept.size() == kMessages + 1; }));
  EXPECT_TRUE(intact(kept.back()));
  for (size_t i = 1; i < kMessages; i += 2) EXPECT_TRUE(intact(kept[i])) << "message " << i;
  group_.clear();
  kept.clear();
}

TEST_P(TransportTest, HandlersMaySendFromInsideProgress) {
  makeGroup(2);
  // Rank 1 echoes whatever it receives.
  group_[1]->setHandlers(
      [this](const Message& m) {
        auto copy = std::make_shared<std::vector<std::byte>>(m.payload.begin(), m.payload.end());
        EXPECT_TRUE(group_[1]->send(m.from, m.header, *copy, [copy](const Status&) {}).ok());
      },
      nullptr);
  auto payload = pattern(300000, 5);
  ASSERT_TRUE(group_[0]->send(1, pattern(4, 1), payload, nullptr).ok());
  ASSERT_TRUE(runUntil([&] { return inbox_[0].size() == 1; }));
  EXPECT_EQ(inbox_[0][0].payload, payload);
}

TEST_P(TransportTest, RejectsBadDestinations) {
  makeGroup(2);
  EXPECT_EQ(group_[0]->send(0, {}, {}, nullptr).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(group_[0]->send(7, {}, {}, nullptr).code(), StatusCode::kInvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(Backends, TransportTest, ::testing::Values("group", "loopback", "ucx"),
                         [](const auto& info) { return info.param; });

// What only the link layer does: a peer that goes away is reported, and a peer restarted
// at the same address rejoins.
class PeerLossTest : public TransportTest {
 protected:
  // Closes rank `lost`, checks the others notice, restarts it at the same address and
  // checks that it rejoins and carries traffic.
  void loseAndRestart(Rank lost) {
    makeGroup(3);
    for (auto& e : events_) e.clear();
    const std::string address = addresses_[lost];
    group_[lost].reset();
    const Rank a = (lost + 1) % 3, b = (lost + 2) % 3;
    ASSERT_TRUE(runUntil([&] { return !group_[a]->peerUp(lost) && !group_[b]->peerUp(lost); }))
        << "a closed peer was not detected";
    EXPECT_EQ(events_[a], (std::vector<std::pair<Rank, PeerEvent>>{{lost, PeerEvent::kDown}}));
    EXPECT_EQ(group_[a]->send(lost, {}, {}, nullptr).code(), StatusCode::kUnavailable);

    auto again = makeRank(lost, 3, address);
    ASSERT_TRUE(again.ok()) << again.status().toString();
    group_[lost] = std::move(again).value();
    install(lost);
    ASSERT_TRUE(group_[lost]->connect(addresses_).ok());
    ASSERT_TRUE(runUntil([&] { return group_[0]->allPeersUp() && group_[1]->allPeersUp() && group_[2]->allPeersUp(); }))
        << "the restarted peer did not rejoin";
    int done = 0;
    ASSERT_TRUE(group_[a]->send(lost, {}, pattern(10, 1), [&](const Status& s) { done += s.ok(); }).ok());
    ASSERT_TRUE(group_[lost]->send(b, {}, pattern(10, 2), [&](const Status& s) { done += s.ok(); }).ok());
    ASSERT_TRUE(runUntil([&] { return done == 2 && inbox_[lost].size() == 1 && inbox_[b].size() == 1; }));
  }
};

TEST_P(PeerLossTest, LostAcceptorIsReportedAndRejoins) { loseAndRestart(2); }
TEST_P(PeerLossTest, LostConnectorIsReportedAndRejoins) { loseAndRestart(0); }

INSTANTIATE_TEST_SUITE_P(Links, PeerLossTest, ::testing::Values("loopback", "ucx"),
                         [](const auto& info) { return info.param; });

// A clean shutdown is said: the peers see the rank leave at once, with its reason, and it
// rejoins like any restarted peer.
TEST_P(PeerLossTest, AGoodbyeIsSeenAtOnceWithItsReason) {
  makeGroup(3);
  for (auto& e : events_) e.clear();
  std::string why;
  group_[1]->setHandlers(nullptr, [&](Rank peer, PeerEvent e, const Status& s) {
    events_[1].push_back({peer, e});
    why = s.message();
  });
  group_[0]->goodbye("agent stopping on signal 15");
  ASSERT_TRUE(runUntil([&] { return !group_[1]->peerUp(0) && !group_[2]->peerUp(0); })) << "the goodbye was not heard";
  EXPECT_EQ(events_[1], (std::vector<std::pair<Rank, PeerEvent>>{{0, PeerEvent::kLeft}}));
  EXPECT_EQ(events_[2], (std::vector<std::pair<Rank, PeerEvent>>{{0, PeerEvent::kLeft}}));
  EXPECT_EQ(why, "it shut down (agent stopping on signal 15)");
}

// Authentication: a link comes up only when both sides prove the same cluster token.
class AuthTest : public TransportTest {
 protected:
  void makeWithTokens(std::vector<std::string> tokens) {
    refusals_.assign(tokens.size(), {});
    tweak_ = [this, tokens](LinkOptions& o) {
      o.token = tokens[o.rank];
      o.on_refused = [this, r = o.rank](const Refused& why) { refusals_[r].push_back(why.why.message()); };
    };
    makeGroup(static_cast<Rank>(tokens.size()), /*wait_up=*/false);
  }
  std::vector<std::vector<std::string>> refusals_;
};

TEST_P(AuthTest, SameTokenComesUpAndCarriesTraffic) {
  makeWithTokens({"cluster-token", "cluster-token", "cluster-token"});
  ASSERT_TRUE(runUntil([&] { return group_[0]->allPeersUp() && group_[1]->allPeersUp() && group_[2]->allPeersUp(); }));
  int done = 0;
  const auto payload = pattern(200000, 4);  // must outlive the send
  ASSERT_TRUE(group_[2]->send(0, pattern(4, 3), payload, [&](const Status& s) { done += s.ok(); }).ok());
  ASSERT_TRUE(runUntil([&] { return done == 1 && inbox_[0].size() == 1; }));
  EXPECT_EQ(inbox_[0][0].payload, payload);
  for (const auto& r : refusals_) EXPECT_TRUE(r.empty());
}

// Rank 0 connects to rank 1. Whichever side holds the token checks the other's proof.
TEST_P(AuthTest, ConnectorRefusesAnAcceptorWithAnotherToken) {
  makeWithTokens({"token-a", "token-b"});
  ASSERT_TRUE(runUntil([&] { return refusals_[0].size() >= 2; })) << "the connector never refused";
  EXPECT_NE(refusals_[0][0].find("peer authentication failed: the peer claiming rank 1"), std::string::npos)
      << refusals_[0][0];
  EXPECT_EQ(refusals_[0][0].find("token-"), std::string::npos) << "the token must never appear in a message";
  EXPECT_FALSE(group_[0]->peerUp(1));
  EXPECT_FALSE(group_[1]->peerUp(0));
  EXPECT_TRUE(events_[0].empty());
  EXPECT_TRUE(events_[1].empty());
  EXPECT_EQ(group_[0]->send(1, {}, pattern(4, 1), nullptr).code(), StatusCode::kUnavailable);
}

TEST_P(AuthTest, AcceptorRefusesAConnectorWithoutToken) {
  makeWithTokens({"", "token-b"});
  ASSERT_TRUE(runUntil([&] { return !refusals_[1].empty(); })) << "the acceptor never refused";
  EXPECT_NE(refusals_[1][0].find("did not prove knowledge of the cluster token"), std::string::npos) << refusals_[1][0];
  EXPECT_FALSE(group_[0]->peerUp(1));
  EXPECT_FALSE(group_[1]->peerUp(0));
}

INSTANTIATE_TEST_SUITE_P(Links, AuthTest, ::testing::Values("loopback", "ucx"),
                         [](const auto& info) { return info.param; });

// The heartbeat: a peer that stops answering (a stopped process, a cut link) is declared
// lost within the peer timeout, though UCX itself would notice only after tens of seconds.
// Time passes by jumps of the ranks' clock, each followed by enough progress for the
// heartbeats sent to land, so a busy machine slows the test down but cannot fail it.
class HeartbeatTest : public TransportTest {
 protected:
  static constexpr double kTimeout = 5, kHeartbeat = 0.1;
  void SetUp() override {
    tweak_ = [](LinkOptions& o) {
      o.peer_timeout_seconds = kTimeout;
      o.heartbeat_seconds = kHeartbeat;
    };
  }
  // Lets `span` of clock time pass in steps of half a heartbeat, progressing the ranks in
  // `live` after each step.
  void pass(std::chrono::milliseconds span, const std::vector<Rank>& live) {
    for (auto left = span; left > 0ms; left -= 50ms) {
      clock_.jump(50ms);
      for (int i = 0; i < 50; ++i)
        for (Rank r : live) group_[r]->progress();
    }
  }
};

TEST_P(HeartbeatTest, QuietButLivePeersStayUp) {
  makeGroup(2);
  // Three peer timeouts with no traffic but heartbeats.
  pass(15s, {0, 1});
  EXPECT_TRUE(group_[0]->peerUp(1));
  EXPECT_TRUE(group_[1]->peerUp(0));
  EXPECT_EQ(events_[0], (std::vector<std::pair<Rank, PeerEvent>>{{1, PeerEvent::kUp}}));
  EXPECT_EQ(events_[1], (std::vector<std::pair<Rank, PeerEvent>>{{0, PeerEvent::kUp}}));
}

TEST_P(HeartbeatTest, SilentPeerIsLostAtTheTimeoutAndRejoins) {
  for (Rank silent : {Rank{1}, Rank{0}}) {
    SCOPED_TRACE(silent);
    makeGroup(2);
    const Rank other = 1 - silent;
    pass(1s, {0, 1});  // heartbeats flowing: the other rank heard the silent one within 0.1 s
    for (auto& e : events_) e.clear();
    Status why;
    group_[other]->setHandlers(nullptr, [&](Rank peer, PeerEvent e, const Status& s) {
      events_[other].push_back({peer, e});
      if (e == PeerEvent::kDown) why = s;
    });
    // From here the silent rank is not progressed. Well short of the timeout it is still up;
    pass(3s, {other});
    EXPECT_TRUE(group_[other]->peerUp(silent)) << "lost before transport.peer_timeout";
    // past the timeout, the next progress reports it lost.
    clock_.jump(2100ms);
    group_[other]->progress();
    ASSERT_FALSE(group_[other]->peerUp(silent)) << "not lost after transport.peer_timeout";
    EXPECT_EQ(why.code(), StatusCode::kDeadlineExceeded);
    EXPECT_NE(why.message().find("nothing heard for 5 s (transport.peer_timeout)"), std::string::npos)
        << why.message();
    EXPECT_EQ(events_[other], (std::vector<std::pair<Rank, PeerEvent>>{{silent, PeerEvent::kDown}}));
    // The silent rank wakes up: it notices the closed link and both come back.
    install(other);
    ASSERT_TRUE(runUntil([&] { return group_[0]->peerUp(1) && group_[1]->peerUp(0); })) << "no rejoin";
    int done = 0;
    const auto payload = pattern(10, 7);
    ASSERT_TRUE(group_[silent]->send(other, {}, payload, [&](const Status& s) { done += s.ok(); }).ok());
    ASSERT_TRUE(runUntil([&] { return done == 1 && inbox_[other].size() == 1; }));
    group_.clear();
  }
}

INSTANTIATE_TEST_SUITE_P(Links, HeartbeatTest, ::testing::Values("loopback", "ucx"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace gcagent::transport
