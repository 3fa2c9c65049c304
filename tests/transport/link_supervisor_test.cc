// The link layer's own rules, seen through a backend that wraps a loopback one: it records
// what the layer asks of it, can lose frames of one kind on their way out, and can hand the
// layer forged frames. Time passes by jumps of an injected clock, never by sleeping.
#include <gtest/gtest.h>

#include <chrono>
#include <functional>

#include "tests/common/epoch_clock.h"
#include "transport/link_frame.h"
#include "transport/link_supervisor.h"
#include "transport/loopback/loopback_backend.h"

namespace gcagent::transport {
namespace {

using namespace std::chrono_literals;

struct Record {
  int opened = 0;
  int retired = 0;
  std::vector<std::vector<std::string>> admitted;  // every admitOnly() call's hosts
  std::optional<FrameKind> lose;  // frames of this kind sent by this rank never arrive
  BackendEvents events;           // the layer's, to forge arrivals with
};

class RecordingBackend final : public LinkBackend {
 public:
  RecordingBackend(std::unique_ptr<LinkBackend> inner, std::shared_ptr<Record> record)
      : inner_(std::move(inner)), record_(std::move(record)) {}
  void setEvents(BackendEvents events) override {
    record_->events = events;
    inner_->setEvents(std::move(events));
  }
  std::vector<std::byte> address() const override { return inner_->address(); }
  Result<LinkId> open(Rank peer, std::span<const std::byte> address) override {
    ++record_->opened;
    return inner_->open(peer, address);
  }
  void send(LinkId id, FrameKind kind, std::vector<std::byte> header, std::span<const std::byte> payload,
            Transport::SendDone done) override {
    if (record_->lose == kind) return;
    inner_->send(id, kind, std::move(header), payload, std::move(done));
  }
  void retire(LinkId id) override {
    ++record_->retired;
    inner_->retire(id);
  }
  void admitOnly(const std::vector<std::string>& hosts) override { record_->admitted.push_back(hosts); }
  bool poll() override { return inner_->poll(); }
  bool deliver() override { return inner_->deliver(); }
  int eventFd() override { return inner_->eventFd(); }
  bool arm() override { return inner_->arm(); }

 private:
  std::unique_ptr<LinkBackend> inner_;
  std::shared_ptr<Record> record_;
};

class LinkSupervisorTest : public ::testing::Test {
 protected:
  static constexpr double kTimeout = 5;

  // `hosts`: each rank's host in the peer list (default: its gate's address) in the peer list as "HOST:"; the port is its gate's.
  void make(const std::vector<std::string>& hosts = {}) {
    for (Rank r = 0; r < 2; ++r) {
      LinkOptions o;
      o.rank = r;
      o.size = 2;
      o.listen = "127.0.0.1:0";
      o.reconnect_seconds = 0.05;
      o.peer_timeout_seconds = kTimeout;
      o.heartbeat_seconds = 0.1;
      o.now = clock_.now();
      auto t = superviseLinks(o, std::make_unique<RecordingBackend>(makeLoopbackBackend(net_), records_[r]),
                              "loopback");
      ASSERT_TRUE(t.ok()) << t.status().toString();
      ranks_.push_back(std::move(t).value());
      ranks_.back()->setHandlers([this, r](const Message& m) { received_[r].push_back(m.from); },
                                 [this, r](Rank peer, PeerEvent e, const Status&) { events_[r].push_back({peer, e}); });
    }
    std::vector<std::string> addresses = {ranks_[0]->listenAddress(), ranks_[1]->listenAddress()};
    for (size_t r = 0; r < hosts.size(); ++r)
      addresses[r] = hosts[r] + addresses[r].substr(addresses[r].rfind(':'));
    for (auto& t : ranks_) ASSERT_TRUE(t->connect(addresses).ok());
  }

  // Progress until `done`; the limit only turns a hang into a failure.
  bool runUntil(const std::function<bool()>& done) {
    const auto deadline = std::chrono::steady_clock::now() + 60s;
    while (std::chrono::steady_clock::now() < deadline) {
      for (auto& t : ranks_) t->progress();
      if (done()) return true;
    }
    return false;
  }

  std::shared_ptr<LoopbackNet> net_ = makeLoopbackNet();
  std::shared_ptr<Record> records_[2] = {std::make_shared<Record>(), std::make_shared<Record>()};
  std::vector<std::unique_ptr<Transport>> ranks_;
  std::vector<Rank> received_[2];
  std::vector<std::pair<Rank, PeerEvent>> events_[2];
  testing::EpochClock clock_;
};

// Rank 1's acks are lost: rank 1 hears rank 0's hello and has the peer up, rank 0 never
// does. At the set-up timeout rank 0 gives the link back and dials again; rank 1 sees the
// new link replace its old one.
TEST_F(LinkSupervisorTest, ALinkThatNeverComesUpIsGivenBackAtTheTimeoutAndMadeAgain) {
  records_[1]->lose = FrameKind::kHelloAck;
  make();
  ASSERT_TRUE(runUntil([&] { return ranks_[1]->peerUp(0); }));
  for (int i = 0; i < 100; ++i)
    for (auto& t : ranks_) t->progress();
  EXPECT_FALSE(ranks_[0]->peerUp(1));
  EXPECT_EQ(records_[0]->opened, 1);
  EXPECT_EQ(records_[0]->retired, 0);

  clock_.jump(std::chrono::milliseconds(static_cast<int>(kTimeout * 1000) + 100));
  ranks_[0]->progress();
  EXPECT_EQ(records_[0]->retired, 1) << "the link was not given back at the set-up timeout";
  ASSERT_TRUE(runUntil([&] { return records_[0]->opened == 2 && records_[1]->retired >= 1; }))
      << "no second link";
  EXPECT_TRUE(events_[0].empty()) << "a peer that never came up cannot go down";
  EXPECT_EQ(events_[1].front(), (std::pair<Rank, PeerEvent>{0, PeerEvent::kUp}));
  // Once acks flow again, the next attempt (after the next set-up timeout) comes up.
  records_[1]->lose.reset();
  clock_.jump(std::chrono::milliseconds(static_cast<int>(kTimeout * 1000) + 100));
  ASSERT_TRUE(runUntil([&] { return ranks_[0]->peerUp(1) && ranks_[1]->peerUp(0); }));
}

// Only frames of the sender's current link count: a forged rank, a wrong key or a short
// header is dropped, and does not keep a silent peer alive.
TEST_F(LinkSupervisorTest, FramesOfNoCurrentLinkAreDropped) {
  make();
  ASSERT_TRUE(runUntil([&] { return ranks_[0]->peerUp(1) && ranks_[1]->peerUp(0); }));
  const BackendEvents& at0 = records_[0]->events;
  const std::byte user[4] = {};
  EXPECT_FALSE(at0.arrived(FrameKind::kData, encodeLinkHeader(1, 0x1234, user))) << "wrong key";
  EXPECT_FALSE(at0.arrived(FrameKind::kData, encodeLinkHeader(0, 0, user))) << "from itself";
  EXPECT_FALSE(at0.arrived(FrameKind::kData, encodeLinkHeader(7, 0, user))) << "no such rank";
  EXPECT_FALSE(at0.arrived(FrameKind::kData, std::span<const std::byte>(user, 3))) << "short header";

  // Rank 1 falls silent; forged heartbeats arriving at rank 0 do not keep it up.
  for (int step = 0; step < 60; ++step) {
    clock_.jump(100ms);
    (void)at0.arrived(FrameKind::kHeartbeat, encodeLinkHeader(1, 0x1234, {}));
    ranks_[0]->progress();
  }
  EXPECT_FALSE(ranks_[0]->peerUp(1));
  EXPECT_EQ(events_[0].back(), (std::pair<Rank, PeerEvent>{1, PeerEvent::kDown}));
  EXPECT_TRUE(received_[0].empty());
}

// UCX's listening ports admit the peer list's hosts, then also the address each peer
// authenticated from: a name in the list resolves to an address the filter learns from the
// gate's connection (the address a restarted peer moved to, in a cluster).
TEST_F(LinkSupervisorTest, ThePortFilterAdmitsTheAddressAPeerAuthenticatedFrom) {
  make({"localhost", "localhost"});
  ASSERT_TRUE(runUntil([&] { return ranks_[0]->peerUp(1) && ranks_[1]->peerUp(0); }));
  for (Rank r = 0; r < 2; ++r) {
    const auto& calls = records_[r]->admitted;
    ASSERT_EQ(calls.size(), 2u) << "rank " << r;
    EXPECT_EQ(calls[0], (std::vector<std::string>{"localhost"}));
    EXPECT_EQ(calls[1], (std::vector<std::string>{"localhost", "127.0.0.1"}));
  }
}

}  // namespace
}  // namespace gcagent::transport
