#include "transport/loopback/loopback_backend.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <deque>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/str_cat.h"
#include "transport/loopback/mailbox.h"

namespace gcagent::transport {

struct LoopbackFrame {
  FrameKind kind;
  std::vector<std::byte> header;
  std::vector<std::byte> payload;
};

// One backend's receiving end.
struct LoopbackPort : Mailbox<LoopbackFrame> {
  std::atomic<bool> closed{false};  // its backend is gone: links to it are broken
  // False if the port is closed: the frame is lost with the link.
  bool push(LoopbackFrame f) {
    return post(std::move(f), [this] { return closed.load(); });
  }
};

class LoopbackNet {
 public:
  std::pair<uint64_t, std::shared_ptr<LoopbackPort>> add() {
    std::lock_guard lock(mu_);
    const uint64_t id = next_++;
    return {id, ports_[id] = std::make_shared<LoopbackPort>()};
  }
  std::shared_ptr<LoopbackPort> find(uint64_t id) {
    std::lock_guard lock(mu_);
    auto it = ports_.find(id);
    return it == ports_.end() ? nullptr : it->second;
  }
  // Closes port `id` and wakes every other, so links to it are found broken at once.
  void remove(uint64_t id) {
    std::lock_guard lock(mu_);
    auto it = ports_.find(id);
    if (it == ports_.end()) return;
    it->second->locked([&] { it->second->closed = true; });
    ports_.erase(it);
    for (auto& [other, port] : ports_) port->wake();
  }

 private:
  std::mutex mu_;
  uint64_t next_ = 1;
  std::unordered_map<uint64_t, std::shared_ptr<LoopbackPort>> ports_;
};

std::shared_ptr<LoopbackNet> makeLoopbackNet() { return std::make_shared<LoopbackNet>(); }

namespace {

struct Link {
  Rank peer;
  std::shared_ptr<LoopbackPort> to;
  bool reported = false;  // its failure was reported
};

class LoopbackBackend final : public LinkBackend {
 public:
  explicit LoopbackBackend(std::shared_ptr<LoopbackNet> net) : net_(std::move(net)) {
    std::tie(id_, port_) = net_->add();
  }
  ~LoopbackBackend() override { net_->remove(id_); }

  void setEvents(BackendEvents events) override { events_ = std::move(events); }

  std::vector<std::byte> address() const override {
    std::vector<std::byte> out(sizeof id_);
    std::memcpy(out.data(), &id_, sizeof id_);
    return out;
  }

  Result<LinkId> open(Rank peer, std::span<const std::byte> address) override {
    uint64_t port_id = 0;
    if (address.size() != sizeof port_id)
      return Status::invalidArgument(strCat("loopback: connecting to rank ", peer, ": a ", address.size(),
                                            "-byte address"));
    std::memcpy(&port_id, address.data(), sizeof port_id);
    auto port = net_->find(port_id);
    if (!port) return Status::unavailable(strCat("loopback: connecting to rank ", peer, ": no backend at that address"));
    const LinkId id = next_link_++;
    links_.emplace(id, Link{peer, std::move(port)});
    return id;
  }

  void send(LinkId id, FrameKind kind, std::vector<std::byte> header, std::span<const std::byte> payload,
            Transport::SendDone done) override {
    auto it = links_.find(id);
    Status status;
    if (it == links_.end()) {
      status = Status::internal("loopback: send on a retired link");
    } else if (!it->second.to->push({kind, std::move(header), {payload.begin(), payload.end()}})) {
      status = Status::unavailable(strCat("loopback: send to rank ", it->second.peer, ": the peer is gone"));
    }
    if (done) completions_.emplace_back(std::move(done), std::move(status));
  }

  void retire(LinkId id) override { links_.erase(id); }

  bool poll() override {
    bool worked = false;
    for (auto& [id, link] : links_) {
      if (link.reported || !link.to->closed) continue;
      link.reported = true;
      worked = true;
      broken_.push_back(id);
    }
    // Reported after the scan: the link layer retires links from inside the event.
    for (LinkId id : std::exchange(broken_, {}))
      if (events_.failed) events_.failed(id, Status::unavailable("the peer closed its end"));
    std::deque<LoopbackFrame> batch = port_->take();
    for (LoopbackFrame& f : batch) {
      worked = true;
      const bool wanted = events_.arrived && events_.arrived(f.kind, f.header);
      if (wanted && f.kind == FrameKind::kData) received_.push_back(std::move(f));
    }
    return worked;
  }

  bool deliver() override {
    const bool worked = !completions_.empty() || !received_.empty();
    for (auto& [done, status] : std::exchange(completions_, {})) done(status);
    for (const LoopbackFrame& f : std::exchange(received_, {}))
      if (events_.received) events_.received(f.header, f.payload, nullptr);
    return worked;
  }

  int eventFd() override { return port_->eventFd(); }

  bool arm() override {
    if (!completions_.empty() || !received_.empty()) return false;
    for (const auto& [id, link] : links_)
      if (!link.reported && link.to->closed) return false;
    return port_->empty();
  }

 private:
  std::shared_ptr<LoopbackNet> net_;
  uint64_t id_ = 0;
  std::shared_ptr<LoopbackPort> port_;
  BackendEvents events_;
  LinkId next_link_ = 1;
  std::unordered_map<LinkId, Link> links_;
  std::vector<LinkId> broken_;
  std::vector<std::pair<Transport::SendDone, Status>> completions_;
  std::vector<LoopbackFrame> received_;
};

}  // namespace

std::unique_ptr<LinkBackend> makeLoopbackBackend(std::shared_ptr<LoopbackNet> net) {
  return std::make_unique<LoopbackBackend>(std::move(net));
}

Result<std::unique_ptr<Transport>> makeLoopbackTransport(std::shared_ptr<LoopbackNet> net,
                                                         const LinkOptions& options) {
  return superviseLinks(options, makeLoopbackBackend(std::move(net)), "loopback");
}

}  // namespace gcagent::transport
