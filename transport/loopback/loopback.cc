#include "transport/loopback/loopback.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <deque>
#include <mutex>

#include "common/str_cat.h"
#include "transport/loopback/mailbox.h"

namespace gcagent::transport {
namespace {

struct Envelope {
  Rank from;
  std::vector<std::byte> header;
  std::vector<std::byte> payload;
};

// What one rank receives.
using Inbox = Mailbox<Envelope>;

struct Group {
  std::vector<std::unique_ptr<Inbox>> inboxes;
};

class LoopbackTransport final : public Transport {
 public:
  LoopbackTransport(std::shared_ptr<Group> group, Rank rank) : group_(std::move(group)), rank_(rank) {}

  Rank rank() const override { return rank_; }
  Rank size() const override { return static_cast<Rank>(group_->inboxes.size()); }

  void setHandlers(MessageHandler on_message, PeerHandler on_peer) override {
    on_message_ = std::move(on_message);
    on_peer_ = std::move(on_peer);
  }

  Status connect(const std::vector<std::string>&) override {
    connected_ = true;
    announce_up_ = true;
    return {};
  }

  Status send(Rank to, std::span<const std::byte> header, std::span<const std::byte> payload,
              SendDone done) override {
    if (to >= size() || to == rank_)
      return Status::invalidArgument(strCat("loopback: rank ", rank_, " cannot send to rank ", to));
    if (!connected_) return Status::failedPrecondition("loopback: send before connect");
    group_->inboxes[to]->post({rank_, {header.begin(), header.end()}, {payload.begin(), payload.end()}});
    completions_.push_back(std::move(done));
    return {};
  }

  bool progress() override {
    bool worked = false;
    if (announce_up_) {
      announce_up_ = false;
      for (Rank r = 0; r < size(); ++r)
        if (r != rank_ && on_peer_) on_peer_(r, PeerEvent::kUp, {});
      worked = true;
    }
    const std::deque<Envelope> batch = group_->inboxes[rank_]->take();
    for (const Envelope& e : batch)
      if (on_message_) on_message_({e.from, e.header, e.payload});
    auto done = std::move(completions_);
    completions_.clear();
    for (auto& d : done)
      if (d) d({});
    return worked || !batch.empty() || !done.empty();
  }

  int eventFd() override { return group_->inboxes[rank_]->eventFd(); }

  bool arm() override {
    if (announce_up_ || !completions_.empty()) return false;
    return group_->inboxes[rank_]->empty();
  }

  bool peerUp(Rank peer) const override { return connected_ && peer < size(); }
  std::string listenAddress() const override { return strCat("loopback:", rank_); }

 private:
  std::shared_ptr<Group> group_;
  Rank rank_;
  MessageHandler on_message_;
  PeerHandler on_peer_;
  std::vector<SendDone> completions_;
  bool connected_ = false;
  bool announce_up_ = false;
};

}  // namespace

std::vector<std::unique_ptr<Transport>> makeLoopbackGroup(Rank size) {
  auto group = std::make_shared<Group>();
  for (Rank r = 0; r < size; ++r) group->inboxes.push_back(std::make_unique<Inbox>());
  std::vector<std::unique_ptr<Transport>> out;
  for (Rank r = 0; r < size; ++r) out.push_back(std::make_unique<LoopbackTransport>(group, r));
  return out;
}

}  // namespace gcagent::transport
