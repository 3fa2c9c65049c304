// A trainer's connection on its own, over a socket pair: what a peer that has not said hello
// may announce, the deadlines for the hello and for a frame's body, and the order of the
// close hooks.
#include "agent/control/trainer_connection.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <variant>
#include <vector>

namespace gcagent::agent {
namespace {

namespace protocol = shm::protocol;
using namespace std::chrono_literals;
using asio::local::stream_protocol;

class Probe : public TrainerConnection {
 public:
  using TrainerConnection::TrainerConnection;

  std::vector<protocol::Message> got;
  std::vector<std::string> bad;
  std::vector<std::string> timeouts;
  std::vector<std::string> hooks;

 private:
  bool identified() const override { return hello_; }
  void dispatch(const protocol::Message& m) override {
    got.push_back(m);
    hello_ |= std::holds_alternative<protocol::Hello>(m.body);
  }
  void badMessage(const Status& why) override { bad.push_back(why.message()); }
  void timedOut(std::string_view what) override { timeouts.emplace_back(what); }
  void onClosing() override { hooks.emplace_back("closing"); }
  void onClosed() override { hooks.emplace_back("closed"); }

  bool hello_ = false;
};

class TrainerConnectionTest : public ::testing::Test {
 protected:
  void open(std::chrono::milliseconds hello, std::chrono::milliseconds body) {
    stream_protocol::socket ours(io_);
    asio::local::connect_pair(ours, peer_);
    probe_ = std::make_shared<Probe>(std::move(ours), 7, TrainerConnection::Deadlines{hello, body});
    probe_->start();
  }

  void TearDown() override {
    if (probe_) probe_->close();
    io_.restart();
    io_.poll();  // the aborted reads and timers let go of the connection
  }

  template <class Cond>
  bool runUntil(Cond cond) {
    const auto deadline = std::chrono::steady_clock::now() + 30s;
    while (!cond()) {
      if (std::chrono::steady_clock::now() >= deadline) return false;
      io_.restart();
      io_.run_for(2ms);
    }
    return true;
  }

  void runFor(std::chrono::milliseconds span) {
    const auto until = std::chrono::steady_clock::now() + span;
    while (std::chrono::steady_clock::now() < until) {
      io_.restart();
      io_.run_for(2ms);
    }
  }

  void peerSends(std::span<const std::byte> bytes) { asio::write(peer_, asio::buffer(bytes.data(), bytes.size())); }

  static std::vector<std::byte> hello() { return protocol::encode({1, protocol::Hello{"bert", 0, 1, 42}}); }

  // A header announcing `body_bytes` (a hello's header, patched).
  static std::vector<std::byte> header(uint32_t body_bytes) {
    auto bytes = hello();
    bytes.resize(protocol::kHeaderBytes);
    for (size_t i = 0; i < 4; ++i) bytes[8 + i] = static_cast<std::byte>(body_bytes >> (8 * i));
    return bytes;
  }

  // The next frame the connection wrote to the peer.
  protocol::Message peerReceives() {
    std::array<std::byte, protocol::kHeaderBytes> head{};
    asio::read(peer_, asio::buffer(head));
    auto parsed = protocol::parseHeader(head);
    EXPECT_TRUE(parsed.ok()) << parsed.status().toString();
    std::vector<std::byte> body(parsed->body_bytes);
    asio::read(peer_, asio::buffer(body));
    auto message = protocol::decode(*parsed, body);
    EXPECT_TRUE(message.ok()) << message.status().toString();
    return *message;
  }

  bool peerSeesEof() {
    std::byte b;
    boost::system::error_code ec;
    peer_.read_some(asio::buffer(&b, 1), ec);
    return ec == asio::error::eof;
  }

  asio::io_context io_;
  stream_protocol::socket peer_{io_};
  std::shared_ptr<Probe> probe_;
};

TEST_F(TrainerConnectionTest, BeforeHelloALargeFrameIsAnsweredAndTheConnectionClosed) {
  open(30s, 30s);
  peerSends(header(kUnidentifiedBodyBytes + 1));
  ASSERT_TRUE(runUntil([&] { return probe_->closed(); }));
  EXPECT_EQ(probe_->bad, std::vector<std::string>{"a frame of 65537 bytes before hello (at most 65536)"});
  auto reply = peerReceives();
  ASSERT_TRUE(std::holds_alternative<protocol::Error>(reply.body));
  EXPECT_EQ(reply.request_id, 1u);
  EXPECT_EQ(std::get<protocol::Error>(reply.body).message, "a frame of 65537 bytes before hello (at most 65536)");
  EXPECT_TRUE(peerSeesEof());
  EXPECT_EQ(probe_->hooks, (std::vector<std::string>{"closing", "closed"}));
  EXPECT_TRUE(probe_->got.empty());
}

TEST_F(TrainerConnectionTest, AfterHelloALargeFrameIsRead) {
  open(30s, 30s);
  peerSends(hello());
  std::vector<std::byte> frame = header(kUnidentifiedBodyBytes + 1);
  frame.resize(frame.size() + kUnidentifiedBodyBytes + 1);  // not a hello body: undecodable
  peerSends(frame);
  ASSERT_TRUE(runUntil([&] { return probe_->bad.size() == 1; }));
  EXPECT_EQ(probe_->got.size(), 1u);
  EXPECT_FALSE(probe_->closed());  // a bad body is answered, the stream goes on
  auto reply = peerReceives();  // the probe answers no hello: this is the bad frame's answer
  ASSERT_TRUE(std::holds_alternative<protocol::Error>(reply.body));
  EXPECT_EQ(std::get<protocol::Error>(reply.body).message, probe_->bad.front());
}

TEST_F(TrainerConnectionTest, NoHelloInTimeClosesTheConnection) {
  open(20ms, 30s);
  ASSERT_TRUE(runUntil([&] { return probe_->closed(); }));
  EXPECT_EQ(probe_->timeouts, std::vector<std::string>{"no hello"});
  EXPECT_EQ(probe_->hooks, (std::vector<std::string>{"closing", "closed"}));
  EXPECT_TRUE(peerSeesEof());
}

TEST_F(TrainerConnectionTest, AHelloInTimeDisarmsTheHelloDeadline) {
  open(20ms, 30s);
  peerSends(hello());
  ASSERT_TRUE(runUntil([&] { return probe_->got.size() == 1; }));
  runFor(100ms);
  EXPECT_FALSE(probe_->closed());
  EXPECT_TRUE(probe_->timeouts.empty());
}

TEST_F(TrainerConnectionTest, AFrameBodyNotFinishedInTimeClosesTheConnection) {
  open(30s, 20ms);
  peerSends(hello());
  auto frame = hello();
  frame.resize(frame.size() - 3);  // the body's last bytes never come
  peerSends(frame);
  ASSERT_TRUE(runUntil([&] { return probe_->closed(); }));
  EXPECT_EQ(probe_->timeouts, std::vector<std::string>{"a message not finished"});
  EXPECT_EQ(probe_->got.size(), 1u);
}

}  // namespace
}  // namespace gcagent::agent
