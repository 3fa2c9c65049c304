#include "transport/link_supervisor.h"

#include <algorithm>
#include <optional>
#include <utility>
#include <vector>

#include "common/log.h"
#include "common/str_cat.h"
#include "transport/link_frame.h"
#include "transport/link_gate.h"
#include "transport/peer_link.h"

namespace gcagent::transport {
namespace {

// A link starts at the gate (link_gate.h: a TCP handshake of our own, authenticated); its
// result, the peer's backend address and the link's two keys, starts the backend part:
//   hello  C -> A  the connector's link works; the acceptor marks the peer up
//   ack    A -> C  and so does the acceptor's; the connector marks it up
// Every frame carries the sender's rank and its direction's link key (link_frame.h): one
// whose key is not the current link's (a stranger's, or a replaced link's) is dropped.
constexpr size_t kMaxUserHeader = 1024;
constexpr size_t kMaxGoodbye = 512;  // bytes of a goodbye's reason

const char* frameName(FrameKind kind) {
  switch (kind) {
    case FrameKind::kData: return "message";
    case FrameKind::kHello: return "hello";
    case FrameKind::kHelloAck: return "hello ack";
    case FrameKind::kHeartbeat: return "heartbeat";
    case FrameKind::kGoodbye: return "goodbye";
  }
  return "frame";
}

class LinkSupervisor final : public Transport {
 public:
  LinkSupervisor(const LinkOptions& options, std::unique_ptr<LinkBackend> backend, std::string name)
      : options_(options), backend_(std::move(backend)), name_(std::move(name)), peers_(options.size),
        authenticated_from_(options.size) {}

  ~LinkSupervisor() override {
    gate_.reset();     // its callbacks point here
    backend_.reset();  // so do its events: it closes its links before this goes
  }

  Status init() {
    if (options_.rank >= options_.size)
      return Status::invalidArgument(
          strCat(name_, ": rank ", options_.rank, " is not below the size ", options_.size));
    BackendEvents events;
    events.arrived = [this](FrameKind kind, std::span<const std::byte> header) { return onArrived(kind, header); };
    events.received = [this](std::span<const std::byte> header, std::span<const std::byte> payload,
                             std::shared_ptr<const void> owner) { onReceived(header, payload, std::move(owner)); };
    events.failed = [this](LinkId id, const Status& why) { onLinkFailed(id, why); };
    backend_->setEvents(std::move(events));

    GateOptions gate;
    gate.self = {options_.token, options_.rank, options_.size, backend_->address()};
    gate.listen = options_.listen;
    gate.timeout_seconds = options_.peer_timeout_seconds;
    gate.max_handshakes = options_.max_handshakes;
    gate.max_per_address = options_.max_handshakes_per_address;
    gate.now = options_.now;
    GateEvents gate_events;
    gate_events.admitted = [this](Admitted a) { onAdmitted(std::move(a)); };
    gate_events.refused = [this](const Refused& r, std::string_view) {
      if (options_.on_refused) options_.on_refused(r);
    };
    gate_events.dial_failed = [this](Rank peer, const Status& why, bool refused) { onDialFailed(peer, why, refused); };
    gate_events.accept_failed = options_.on_accept_failed;
    GC_ASSIGN_OR_RETURN(gate_, LinkGate::open(std::move(gate), std::move(gate_events)));
    GC_LOG(kInfo, "transport", "rank ", options_.rank, " accepting peers on ", gate_->listenAddress(), " (", name_,
           ")");
    return {};
  }

  Rank rank() const override { return options_.rank; }
  Rank size() const override { return options_.size; }

  void setHandlers(MessageHandler on_message, PeerHandler on_peer) override {
    on_message_ = std::move(on_message);
    on_peer_ = std::move(on_peer);
  }

  Status connect(const std::vector<std::string>& peers) override {
    if (peers.size() != options_.size)
      return Status::invalidArgument(strCat(name_, ": ", peers.size(), " peer addresses for ", options_.size, " ranks"));
    for (Rank r = 0; r < options_.size; ++r) {
      if (r == options_.rank) continue;
      // The ranks this one dials must resolve now: a misspelt name fails the start.
      GC_RETURN_IF_ERROR(r > options_.rank ? checkResolvable(peers[r]) : splitHostPort(peers[r]).status());
      peers_[r].address = peers[r];
      listed_hosts_.push_back(splitHostPort(peers[r])->first);
    }
    admitted_hosts_ = listed_hosts_;
    backend_->admitOnly(admitted_hosts_);
    (void)retryConnections();
    return {};
  }

  Status send(Rank to, std::span<const std::byte> header, std::span<const std::byte> payload,
              SendDone done) override {
    if (to >= options_.size || to == options_.rank)
      return Status::invalidArgument(strCat(name_, ": rank ", options_.rank, " cannot send to rank ", to));
    if (header.size() > kMaxUserHeader)
      return Status::invalidArgument(strCat(name_, ": header of ", header.size(), " bytes exceeds ", kMaxUserHeader));
    PeerLink& p = peers_[to];
    if (!p.up()) return Status::unavailable(strCat(name_, ": peer ", to, " is not connected"));
    backend_->send(*p.link, FrameKind::kData, encodeLinkHeader(options_.rank, p.send_key, header), payload,
                   std::move(done));
    return {};
  }

  bool progress() override {
    bool worked = gate_->poll();
    worked |= backend_->poll();
    worked |= retryConnections();
    worked |= checkLiveness();
    worked |= !events_.empty();
    // Peer events before the backend's completions and messages, as they happened; all after
    // the backend's I/O returned, so handlers may call send() freely.
    for (auto& [peer, event, why] : std::exchange(events_, {}))
      if (on_peer_) on_peer_(peer, event, why);
    worked |= backend_->deliver();
    return worked;
  }

  int eventFd() override { return backend_->eventFd(); }
  bool arm() override { return events_.empty() && backend_->arm(); }

  bool peerUp(Rank peer) const override { return peer < peers_.size() && peers_[peer].up(); }

  void goodbye(std::string_view why) override {
    const auto* bytes = reinterpret_cast<const std::byte*>(why.data());
    const std::span<const std::byte> reason(bytes, std::min(why.size(), kMaxGoodbye));
    for (Rank r = 0; r < options_.size; ++r) {
      PeerLink& p = peers_[r];
      if (p.up()) backend_->send(*p.link, FrameKind::kGoodbye, encodeLinkHeader(options_.rank, p.send_key, reason), {}, nullptr);
    }
  }
  std::string listenAddress() const override { return gate_->listenAddress(); }

 private:
  SteadyClock::duration reconnectDelay() const { return steadySeconds(options_.reconnect_seconds); }

  // ---- Connection state ----

  // The lower rank of each pair dials the higher; a failed or paused attempt waits out its
  // pause first.
  bool retryConnections() {
    bool worked = false;
    const auto now = options_.now();
    for (Rank r = options_.rank + 1; r < options_.size; ++r) {
      PeerLink& p = peers_[r];
      if (p.address.empty() || p.link || gate_->dialing(r) || (p.retry_at && now < *p.retry_at)) continue;
      worked = true;
      p.retry_at = now + reconnectDelay();  // the gate reports a failure, if any, later
      p.state = LinkState::kAuthenticating;
      gate_->dial(r, p.address);
    }
    return worked;
  }

  void onDialFailed(Rank r, const Status& why, bool refused) {
    GC_LOG(kDebug, "transport", "rank ", options_.rank, ": ", why.message());
    PeerLink& p = peers_[r];
    // A refused link (another token) is retried slowly; it will not heal by itself.
    p.retry_at = options_.now() + (refused ? std::max(reconnectDelay(), steadySeconds(1.0)) : reconnectDelay());
    if (p.state == LinkState::kAuthenticating) p.state = LinkState::kPaused;
  }

  // The gate admitted a link: open the backend's link to the peer's address. A link that
  // replaces an old one (the peer restarted) ends the old one first.
  void onAdmitted(Admitted admitted) {
    const Rank r = admitted.peer;
    PeerLink& p = peers_[r];
    if (p.link) dropPeer(r, Status::unavailable(strCat("link to rank ", r, ": replaced by a new link (the peer restarted)")));
    auto link = backend_->open(r, admitted.peer_address);
    if (!link.ok()) {
      GC_LOG(kWarn, "transport", "rank ", options_.rank, ": ", link.status().message());
      p.state = LinkState::kPaused;
      p.retry_at = options_.now() + reconnectDelay();
      return;
    }
    admitHost(r, admitted.remote_host);
    const bool connector = r > options_.rank;
    p.send_key = connector ? admitted.keys.connector_to_acceptor : admitted.keys.acceptor_to_connector;
    p.recv_key = connector ? admitted.keys.acceptor_to_connector : admitted.keys.connector_to_acceptor;
    p.link = *link;
    p.state = LinkState::kConnecting;
    p.opened = options_.now();
    if (connector) sendControl(r, FrameKind::kHello);
  }

  // UCX's listening ports admit the addresses named in the peer list, resolved at start, and
  // the address each peer last authenticated from: a peer restarted at a new address (a
  // rescheduled pod) proved itself in the gate's handshake, so its UCX connections may pass,
  // and the address it left stops being admitted (unless the peer list names it).
  void admitHost(Rank r, const std::string& host) {
    if (host.empty() || authenticated_from_[r] == host) return;
    authenticated_from_[r] = host;
    std::vector<std::string> hosts = listed_hosts_;
    for (const std::string& h : authenticated_from_)
      if (!h.empty() && std::find(hosts.begin(), hosts.end(), h) == hosts.end()) hosts.push_back(h);
    if (hosts == admitted_hosts_) return;  // the peer list names it already
    admitted_hosts_ = std::move(hosts);
    GC_LOG(kInfo, "transport", "rank ", options_.rank, ": rank ", r, " authenticated from ", host,
           ": UCX's listening ports admit that address");
    backend_->admitOnly(admitted_hosts_);
  }

  void markUp(Rank r) {
    PeerLink& p = peers_[r];
    if (p.up()) return;
    p.state = LinkState::kUp;
    p.last_heard = options_.now();
    p.next_heartbeat = p.last_heard + steadySeconds(options_.heartbeat_seconds);
    GC_LOG(kInfo, "transport", "rank ", options_.rank, ": peer ", r, " is up");
    events_.push_back({r, PeerEvent::kUp, {}});
  }

  // Reports the peer lost (or gone, when it said goodbye) if it was up; the lower rank dials
  // again after the pause.
  void peerLost(Rank r, const Status& status, PeerEvent event = PeerEvent::kDown) {
    PeerLink& p = peers_[r];
    if (p.up()) {
      GC_LOG(kWarn, "transport", "rank ", options_.rank, ": peer ", r, " is down: ", status.message());
      events_.push_back({r, event, status});
    }
    p.state = LinkState::kPaused;
    p.retry_at = options_.now() + reconnectDelay();
  }

  // Gives the peer's link back to the backend and reports the peer lost.
  void dropPeer(Rank r, const Status& why, PeerEvent event = PeerEvent::kDown) {
    PeerLink& p = peers_[r];
    if (p.link) backend_->retire(*std::exchange(p.link, std::nullopt));
    peerLost(r, why, event);
  }

  void onLinkFailed(LinkId id, const Status& why) {
    for (Rank r = 0; r < options_.size; ++r) {
      PeerLink& p = peers_[r];
      if (p.link != id) continue;
      dropPeer(r, Status(why.code(), strCat(name_, ": link to rank ", r, " at ", p.address, ": ", why.message())));
      return;
    }
    backend_->retire(id);  // not (or no longer) a peer's link: nothing to end
  }

  // Sends heartbeats that are due, and gives up on peers and new links that stayed silent
  // longer than the peer timeout: a backend alone may notice a stopped process or a cut
  // link only after tens of seconds (UCX does).
  bool checkLiveness() {
    bool worked = false;
    const auto now = options_.now();
    const auto timeout = steadySeconds(options_.peer_timeout_seconds);
    for (Rank r = 0; r < options_.size; ++r) {
      PeerLink& p = peers_[r];
      if (!p.link) continue;
      if (p.up() && now - p.last_heard > timeout) {
        worked = true;
        dropPeer(r, Status::deadlineExceeded(strCat("link to rank ", r, " at ", p.address, ": nothing heard for ",
                                                    options_.peer_timeout_seconds, " s (transport.peer_timeout)")));
      } else if (!p.up() && now - p.opened > timeout) {
        worked = true;
        GC_LOG(kInfo, "transport", "rank ", options_.rank, ": the ", name_, " link to rank ", r, " at ", p.address,
               " did not come up within ", options_.peer_timeout_seconds, " s; retrying");
        dropPeer(r, Status::deadlineExceeded("link set-up timed out"));
      } else if (p.up() && now >= p.next_heartbeat) {
        worked = true;
        p.next_heartbeat = now + steadySeconds(options_.heartbeat_seconds);
        sendControl(r, FrameKind::kHeartbeat);
      }
    }
    return worked;
  }

  // Hello, ack and heartbeat: a failure shows up as the link's failure, so no completion.
  void sendControl(Rank to, FrameKind kind) {
    PeerLink& p = peers_[to];
    backend_->send(*p.link, kind, encodeLinkHeader(options_.rank, p.send_key, {}), {}, nullptr);
  }

  // ---- Frames ----

  // The frame's sender, if it came by that sender's current link; anything else (a
  // stranger's, a replaced link's, a forged rank) is dropped with a log line.
  std::optional<Rank> senderOf(std::span<const std::byte> header, FrameKind kind) {
    const auto prefix = readLinkPrefix(header);
    if (!prefix) {
      GC_LOG(kWarn, "transport", "rank ", options_.rank, ": dropped a ", frameName(kind), " with a ", header.size(),
             "-byte header");
      return std::nullopt;
    }
    if (prefix->magic != kLinkMagic || prefix->from >= options_.size || prefix->from == options_.rank) {
      GC_LOG(kWarn, "transport", "rank ", options_.rank, ": dropped a ", frameName(kind), " with magic 0x", std::hex,
             prefix->magic, std::dec, " from rank ", prefix->from);
      return std::nullopt;
    }
    const PeerLink& p = peers_[prefix->from];
    if (!p.link || prefix->key != p.recv_key) {
      GC_LOG(kDebug, "transport", "rank ", options_.rank, ": dropped a ", frameName(kind), " claiming rank ",
             prefix->from, ": not of that rank's current link");
      return std::nullopt;
    }
    return prefix->from;
  }

  // Runs the link protocol on an arrived frame; true for data to deliver.
  bool onArrived(FrameKind kind, std::span<const std::byte> header) {
    const auto from = senderOf(header, kind);
    if (!from) return false;
    switch (kind) {
      case FrameKind::kHello:  // acceptor: the connector's link works; ours does once the ack lands
        if (*from < options_.rank && linkHeaderBody(header).empty()) {
          markUp(*from);
          sendControl(*from, FrameKind::kHelloAck);
        }
        return false;
      case FrameKind::kHelloAck:
        if (*from > options_.rank) markUp(*from);
        return false;
      case FrameKind::kGoodbye: {
        if (!peers_[*from].up()) return false;
        const auto body = linkHeaderBody(header);
        const std::string reason(reinterpret_cast<const char*>(body.data()), std::min(body.size(), kMaxGoodbye));
        dropPeer(*from, Status::unavailable(strCat("it shut down (", reason, ")")), PeerEvent::kLeft);
        return false;
      }
      case FrameKind::kHeartbeat:
      case FrameKind::kData: {
        PeerLink& p = peers_[*from];
        if (!p.up()) {
          GC_LOG(kDebug, "transport", "rank ", options_.rank, ": dropped a ", frameName(kind), " from rank ", *from,
                 " before its link was up");
          return false;
        }
        p.last_heard = options_.now();
        return kind == FrameKind::kData;
      }
    }
    return false;
  }

  void onReceived(std::span<const std::byte> header, std::span<const std::byte> payload,
                  std::shared_ptr<const void> owner) {
    const auto prefix = readLinkPrefix(header);  // checked when it arrived
    if (prefix && on_message_) on_message_({prefix->from, linkHeaderBody(header), payload, std::move(owner)});
  }

  struct PeerEventRecord {
    Rank peer;
    PeerEvent event;
    Status why;
  };

  LinkOptions options_;
  std::unique_ptr<LinkBackend> backend_;
  std::string name_;
  std::unique_ptr<LinkGate> gate_;
  std::vector<PeerLink> peers_;
  std::vector<std::string> listed_hosts_;        // the peer list's hosts
  std::vector<std::string> authenticated_from_;  // per rank: the address it last authenticated from
  std::vector<std::string> admitted_hosts_;      // the sources UCX's listening ports admit (admitHost)
  std::vector<PeerEventRecord> events_;
  MessageHandler on_message_;
  PeerHandler on_peer_;
};

}  // namespace

Result<std::unique_ptr<Transport>> superviseLinks(const LinkOptions& options, std::unique_ptr<LinkBackend> backend,
                                                  std::string name) {
  auto transport = std::make_unique<LinkSupervisor>(options, std::move(backend), std::move(name));
  GC_RETURN_IF_ERROR(transport->init());
  return std::unique_ptr<Transport>(std::move(transport));
}

}  // namespace gcagent::transport
