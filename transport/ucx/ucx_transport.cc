#include "transport/ucx/ucx_transport.h"

#include <ucp/api/ucp.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <set>

#include "common/log.h"
#include "common/str_cat.h"
#include "transport/link_gate.h"
#include "transport/ucx/source_filter.h"

namespace gcagent::transport {
namespace {

constexpr uint32_t kWireMagic = 0x54414347;  // "GCAT"
// A link starts at the gate (link_gate.h: a TCP handshake of our own, authenticated); its
// result, the peer's UCX worker address and the link's two keys, starts the UCX part:
//   hello  C -> A  the connector's endpoint works; the acceptor marks the link up
//   ack    A -> C  and so does the acceptor's; the connector marks it up
// Every message carries the sender's rank and its direction's link key: one whose key is
// not the current link's (a stranger's, or a replaced link's) is dropped.
constexpr unsigned kAmData = 1;
constexpr unsigned kAmHello = 2;
constexpr unsigned kAmHelloAck = 3;
constexpr unsigned kAmHeartbeat = 6;
constexpr size_t kMaxUserHeader = 1024;

// Prefixes every active-message header.
struct WireHeader {
  uint32_t magic;
  uint32_t from;
  uint64_t key;  // the link key of the direction from -> us
};

using Clock = std::chrono::steady_clock;

Status ucsError(std::string_view what, ucs_status_t status) {
  return Status::unavailable(strCat("ucx: ", what, ": ", ucs_status_string(status)));
}

class UcxTransport;

// One endpoint to a peer, created by address once the gate admitted the link.
struct EpContext {
  UcxTransport* self;
  Rank peer;
  Clock::time_point opened;  // when the gate admitted the link
  ucp_ep_h ep = nullptr;
  bool closing = false;  // no longer the peer's link: its errors no longer matter
  bool failed = false;   // UCX reported an error on it: UCX is done with its connection
};

struct SendContext {
  UcxTransport* self;
  std::vector<std::byte> header;  // must outlive the send (UCX 1.13 does not copy it)
  Transport::SendDone done;
  bool internal;  // hello or heartbeat: a failure shows up as an endpoint error
  Rank to;
};

// A received payload's memory. Uninitialised on purpose: it is written whole by UCX or by
// one copy before anyone reads it.
struct Buffer {
  std::unique_ptr<std::byte[]> data;
  size_t capacity = 0;
  size_t size = 0;
  std::span<const std::byte> bytes() const { return {data.get(), size}; }
};

// Recycles receive buffers: fresh large allocations cost page faults and zeroing on every
// message, which showed up as a third of the receive time.
class BufferPool {
 public:
  Buffer take(size_t size) {
    for (size_t i = 0; i < free_.size(); ++i) {
      if (free_[i].capacity < size) continue;
      Buffer b = std::move(free_[i]);
      free_[i] = std::move(free_.back());
      free_.pop_back();
      free_bytes_ -= b.capacity;
      b.size = size;
      return b;
    }
    Buffer b;
    b.capacity = std::max<size_t>(size, 4096);
    b.data.reset(new std::byte[b.capacity]);
    b.size = size;
    return b;
  }
  void give(Buffer b) {
    if (!b.data || free_bytes_ + b.capacity > kMaxFreeBytes) return;
    free_bytes_ += b.capacity;
    free_.push_back(std::move(b));
  }

 private:
  static constexpr size_t kMaxFreeBytes = 256u << 20;
  std::vector<Buffer> free_;
  size_t free_bytes_ = 0;
};

struct RecvContext {
  UcxTransport* self;
  Rank from;
  std::vector<std::byte> header;
  Buffer payload;
};

struct Envelope {
  Rank from;
  std::vector<std::byte> header;
  Buffer payload;
};

// The lower rank of each pair dials and the higher accepts; each then sends on its own
// endpoint to the other.
struct Peer {
  std::string address;
  std::unique_ptr<EpContext> ep;
  bool up = false;
  std::optional<Clock::time_point> reconnect_at;  // none: dial at once
  uint64_t send_key = 0;  // this link's keys, set when the gate admits it
  uint64_t recv_key = 0;
  // Set when the link comes up and read only while it is up.
  Clock::time_point last_heard;  // any message from the peer's endpoint
  Clock::time_point next_heartbeat;
};

class UcxTransport final : public Transport {
 public:
  explicit UcxTransport(const UcxOptions& options) : options_(options), peers_(options.size) {}

  ~UcxTransport() override {
    gate_.reset();  // its callbacks point here
    std::vector<ucp_ep_h> eps;
    for (auto& p : peers_)
      if (p.ep && p.ep->ep) eps.push_back(p.ep->ep);
    for (auto& d : dead_) eps.push_back(d->ep);
    for (auto& d : parked_) eps.push_back(d->ep);
    closeEndpoints(eps);
    // Completions still queued belong to an owner that is going away: drop them.
    if (worker_) ucp_worker_destroy(worker_);
    if (context_) ucp_cleanup(context_);
  }

  Status init() {
    if (options_.rank >= options_.size)
      return Status::invalidArgument(strCat("ucx: rank ", options_.rank, " is not below the size ", options_.size));
    // UCX's TCP interfaces listen at a port of this range (an environment setting only: the
    // configuration API does not reach transport settings in UCX 1.13).
    if (!options_.data_ports.empty()) ::setenv("UCX_TCP_PORT_RANGE", options_.data_ports.c_str(), 0);
    ucp_config_t* config = nullptr;
    ucs_status_t st = ucp_config_read(nullptr, nullptr, &config);
    if (st != UCS_OK) return ucsError("reading the configuration", st);
    auto modify = [&](const char* key, const std::string& value, std::string_view what) -> Status {
      if (value.empty() || std::getenv(strCat("UCX_", key).c_str()) != nullptr) return {};
      const ucs_status_t m = ucp_config_modify(config, key, value.c_str());
      return m == UCS_OK ? Status{} : ucsError(strCat("setting ", what, " to '", value, "'"), m);
    };
    Status configured = modify("RNDV_THRESH", options_.eager_bytes == 0 ? "" : std::to_string(options_.eager_bytes),
                               "the rendezvous threshold");
    if (configured.ok()) configured = modify("NET_DEVICES", options_.net_devices, "the network devices");
    if (!configured.ok()) {
      ucp_config_release(config);
      return configured;
    }
    ucp_params_t params{};
    params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_NAME;
    params.features = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
    params.name = "gcagent";
    st = ucp_init(&params, config, &context_);
    ucp_config_release(config);
    if (st != UCS_OK) return ucsError("ucp_init", st);

    ucp_worker_params_t wp{};
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_SINGLE;
    const std::set<int> listening_before = listeningTcpSockets();
    st = ucp_worker_create(context_, &wp, &worker_);
    if (st != UCS_OK) return ucsError("ucp_worker_create", st);
    for (int fd : listeningTcpSockets())  // the worker's TCP interfaces: filtered in connect()
      if (!listening_before.contains(fd)) ucx_listeners_.push_back(fd);
    st = ucp_worker_get_efd(worker_, &efd_);
    if (st != UCS_OK) return ucsError("ucp_worker_get_efd", st);
    ucp_address_t* address = nullptr;
    size_t address_length = 0;
    st = ucp_worker_get_address(worker_, &address, &address_length);
    if (st != UCS_OK) return ucsError("ucp_worker_get_address", st);
    std::vector<std::byte> my_address(reinterpret_cast<const std::byte*>(address),
                                      reinterpret_cast<const std::byte*>(address) + address_length);
    ucp_worker_release_address(worker_, address);

    GC_RETURN_IF_ERROR(setAmHandler(kAmData, &UcxTransport::onData));
    GC_RETURN_IF_ERROR(setAmHandler(kAmHello, &UcxTransport::onHello));
    GC_RETURN_IF_ERROR(setAmHandler(kAmHelloAck, &UcxTransport::onHelloAck));
    GC_RETURN_IF_ERROR(setAmHandler(kAmHeartbeat, &UcxTransport::onHeartbeat));

    GateOptions gate;
    gate.self = {options_.token, options_.rank, options_.size, std::move(my_address)};
    gate.listen = options_.listen;
    gate.timeout_seconds = options_.peer_timeout_seconds;
    gate.max_handshakes = options_.max_handshakes;
    gate.max_per_address = options_.max_handshakes_per_address;
    gate.now = options_.now;
    GateEvents events;
    events.admitted = [this](Admitted a) { onAdmitted(std::move(a)); };
    events.refused = [this](const Refused& r, std::string_view) {
      if (options_.on_refused) options_.on_refused(r);
    };
    events.dial_failed = [this](Rank peer, const Status& why, bool refused) {
      GC_LOG(kDebug, "transport", "rank ", options_.rank, ": ", why.message());
      // A refused link (another token) is retried slowly; it will not heal by itself.
      peers_[peer].reconnect_at = options_.now() + (refused ? std::max(reconnectDelay(), seconds(1.0)) : reconnectDelay());
    };
    events.accept_failed = options_.on_accept_failed;
    GC_ASSIGN_OR_RETURN(gate_, LinkGate::open(std::move(gate), std::move(events)));
    GC_LOG(kInfo, "transport", "rank ", options_.rank, " accepting peers on ", gate_->listenAddress(),
           options_.net_devices.empty() ? std::string() : strCat("; UCX on ", options_.net_devices));
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
      return Status::invalidArgument(strCat("ucx: ", peers.size(), " peer addresses for ", options_.size, " ranks"));
    for (Rank r = 0; r < options_.size; ++r) {
      if (r == options_.rank) continue;
      // The ranks this one dials must resolve now: a misspelt name fails the start.
      GC_RETURN_IF_ERROR(r > options_.rank ? checkResolvable(peers[r]) : splitHostPort(peers[r]).status());
      peers_[r].address = peers[r];
    }
    filterUcxListeners(peers);
    (void)retryConnections();
    return {};
  }

  Status send(Rank to, std::span<const std::byte> header, std::span<const std::byte> payload,
              SendDone done) override {
    if (to >= options_.size || to == options_.rank)
      return Status::invalidArgument(strCat("ucx: rank ", options_.rank, " cannot send to rank ", to));
    if (header.size() > kMaxUserHeader)
      return Status::invalidArgument(strCat("ucx: header of ", header.size(), " bytes exceeds ", kMaxUserHeader));
    Peer& peer = peers_[to];
    if (!peer.up) return Status::unavailable(strCat("ucx: peer ", to, " is not connected"));
    return post(peer, to, kAmData, header, payload, std::move(done), false);
  }

  bool progress() override {
    bool worked = gate_->poll();
    while (ucp_worker_progress(worker_) != 0) worked = true;
    worked |= retryConnections();
    worked |= checkLiveness();
    worked |= !dead_.empty() || !events_.empty() || !completions_.empty() || !received_.empty();
    closeRetired();
    // Deliver after UCX returns, so handlers may call send() freely.
    for (auto& [peer, event, why] : std::exchange(events_, {}))
      if (on_peer_) on_peer_(peer, event, why);
    for (auto& [done, status] : std::exchange(completions_, {}))
      if (done) done(status);
    for (Envelope& e : std::exchange(received_, {})) {
      if (on_message_) on_message_({e.from, e.header, e.payload.bytes()});
      pool_.give(std::move(e.payload));
    }
    return worked;
  }

  int eventFd() override { return efd_; }

  bool arm() override {
    if (!events_.empty() || !completions_.empty() || !received_.empty() || !dead_.empty()) return false;
    return ucp_worker_arm(worker_) == UCS_OK;
  }

  bool peerUp(Rank peer) const override { return peer < peers_.size() && peers_[peer].up; }
  std::string listenAddress() const override { return gate_->listenAddress(); }

 private:
  Status setAmHandler(unsigned id, ucp_am_recv_callback_t cb) {
    ucp_am_handler_param_t hp{};
    hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG;
    hp.id = id;
    hp.cb = cb;
    hp.arg = this;
    ucs_status_t st = ucp_worker_set_am_recv_handler(worker_, &hp);
    return st == UCS_OK ? Status{} : ucsError("setting an active-message handler", st);
  }

  // Only the peers' addresses may reach UCX's own listening ports (source_filter.h).
  void filterUcxListeners(const std::vector<std::string>& peers) {
    std::vector<std::string> hosts;
    for (Rank r = 0; r < options_.size; ++r)
      if (r != options_.rank) hosts.push_back(splitHostPort(peers[r])->first);
    for (int fd : ucx_listeners_) {
      if (Status s = admitOnly(fd, hosts); !s.ok())
        GC_LOG(kWarn, "transport", "rank ", options_.rank, ": UCX's port stays open to every address: ", s.message());
    }
    GC_LOG(kInfo, "transport", "rank ", options_.rank, ": ", ucx_listeners_.size(),
           " UCX listening port(s) admit the peers' addresses only");
  }

  // The gate admitted a link: connect UCX to the peer's worker address. A link that
  // replaces an old one (the peer restarted) ends the old one first.
  void onAdmitted(Admitted admitted) {
    const Rank r = admitted.peer;
    Peer& p = peers_[r];
    if (p.ep) dropPeer(r, Status::unavailable(strCat("link to rank ", r, ": replaced by a new link (the peer restarted)")));
    auto ctx = std::make_unique<EpContext>(EpContext{this, r, options_.now()});
    ucp_ep_params_t ep{};
    ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                    UCP_EP_PARAM_FIELD_ERR_HANDLER;
    ep.address = reinterpret_cast<const ucp_address_t*>(admitted.peer_address.data());
    ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    ep.err_handler.cb = &UcxTransport::onEndpointError;
    ep.err_handler.arg = ctx.get();
    const ucs_status_t st = ucp_ep_create(worker_, &ep, &ctx->ep);
    if (st != UCS_OK) {
      GC_LOG(kWarn, "transport", "rank ", options_.rank, ": ", ucsError(strCat("connecting to rank ", r), st).message());
      p.reconnect_at = options_.now() + reconnectDelay();
      return;
    }
    const bool connector = r > options_.rank;
    p.send_key = connector ? admitted.keys.connector_to_acceptor : admitted.keys.acceptor_to_connector;
    p.recv_key = connector ? admitted.keys.acceptor_to_connector : admitted.keys.connector_to_acceptor;
    p.ep = std::move(ctx);
    if (connector) (void)post(p, r, kAmHello, {}, {}, nullptr, true);
  }

  Status post(Peer& peer, Rank to, unsigned am_id, std::span<const std::byte> header,
              std::span<const std::byte> payload, SendDone done, bool internal) {
    auto* ctx = new SendContext{this, {}, std::move(done), internal, to};
    ctx->header.resize(sizeof(WireHeader) + header.size());
    const WireHeader wire{kWireMagic, options_.rank, peer.send_key};
    std::memcpy(ctx->header.data(), &wire, sizeof wire);
    if (!header.empty()) std::memcpy(ctx->header.data() + sizeof wire, header.data(), header.size());
    ucp_request_param_t rp{};
    rp.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_MEMORY_TYPE;
    rp.memory_type = UCS_MEMORY_TYPE_HOST;  // spares UCX a memory-type lookup per message
    rp.cb.send = &UcxTransport::onSendDone;
    rp.user_data = ctx;
    ucs_status_ptr_t req = ucp_am_send_nbx(peer.ep->ep, am_id, ctx->header.data(), ctx->header.size(),
                                           payload.data(), payload.size(), &rp);
    if (req == nullptr) {
      finishSend(ctx, UCS_OK);
    } else if (UCS_PTR_IS_ERR(req)) {
      finishSend(ctx, UCS_PTR_STATUS(req));
    }
    return {};
  }

  void finishSend(SendContext* ctx, ucs_status_t st) {
    std::unique_ptr<SendContext> owned(ctx);
    if (ctx->internal) return;
    completions_.emplace_back(std::move(ctx->done),
                              st == UCS_OK ? Status{} : ucsError(strCat("send to rank ", ctx->to), st));
  }

  void markUp(Rank r) {
    Peer& p = peers_[r];
    if (!p.up) {
      p.up = true;
      p.last_heard = options_.now();
      p.next_heartbeat = p.last_heard + seconds(options_.heartbeat_seconds);
      GC_LOG(kInfo, "transport", "rank ", options_.rank, ": peer ", r, " is up");
      events_.push_back({r, PeerEvent::kUp, {}});
    }
  }

  void peerLost(Rank r, ucs_status_t why) { peerLost(r, ucsError(strCat("link to rank ", r, " at ", peers_[r].address), why)); }

  void peerLost(Rank r, const Status& status) {
    Peer& p = peers_[r];
    if (p.up) {
      GC_LOG(kWarn, "transport", "rank ", options_.rank, ": peer ", r, " is down: ", status.message());
      events_.push_back({r, PeerEvent::kDown, status});
    }
    p.up = false;
    p.reconnect_at = options_.now() + reconnectDelay();
  }

  static Clock::duration seconds(double s) {
    return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
  }
  Clock::duration reconnectDelay() const { return seconds(options_.reconnect_seconds); }

  // Closes a peer's endpoint from this side (progress() does the closing) and reports the
  // peer lost if it was up; the lower rank dials again after the usual pause.
  void dropPeer(Rank r, const Status& why) {
    Peer& p = peers_[r];
    if (p.ep) retire(std::move(p.ep));
    peerLost(r, why);
  }

  // An endpoint UCX reported failed is closed in progress(). One this side gave up on (a
  // silent peer, a replaced link) is parked open instead: force-closing a TCP endpoint whose
  // cut link later comes back made UCX 1.13 run freed memory (SIGSEGV in libuct, in about
  // one cut in four under load). A parked endpoint is closed once UCX reports it failed
  // (its own timeout), when more than kMaxParked are parked, or at shutdown.
  void retire(std::unique_ptr<EpContext> ctx) {
    ctx->closing = true;
    (ctx->failed ? dead_ : parked_).push_back(std::move(ctx));
  }

  static constexpr size_t kMaxParked = 16;

  void closeRetired() {
    for (auto it = parked_.begin(); it != parked_.end();) {
      if ((*it)->failed || parked_.size() > kMaxParked) {
        dead_.push_back(std::move(*it));
        it = parked_.erase(it);
      } else {
        ++it;
      }
    }
    if (dead_.empty()) return;
    auto dead = std::exchange(dead_, {});
    std::vector<ucp_ep_h> eps;
    for (auto& d : dead) eps.push_back(d->ep);
    closeEndpoints(eps);
  }

  // Sends heartbeats that are due, and gives up on peers and new links that stayed silent
  // longer than the peer timeout: UCX alone notices a stopped process or a cut link only
  // after tens of seconds.
  bool checkLiveness() {
    bool worked = false;
    const auto now = options_.now();
    const auto timeout = seconds(options_.peer_timeout_seconds);
    for (Rank r = 0; r < options_.size; ++r) {
      Peer& p = peers_[r];
      if (!p.ep) continue;
      if (p.up && now - p.last_heard > timeout) {
        worked = true;
        dropPeer(r, Status::deadlineExceeded(strCat("link to rank ", r, " at ", p.address, ": nothing heard for ",
                                                    options_.peer_timeout_seconds, " s (transport.peer_timeout)")));
      } else if (!p.up && now - p.ep->opened > timeout) {
        worked = true;
        GC_LOG(kInfo, "transport", "rank ", options_.rank, ": the UCX link to rank ", r, " at ", p.address,
               " did not come up within ", options_.peer_timeout_seconds, " s; retrying");
        dropPeer(r, Status::deadlineExceeded("link set-up timed out"));
      } else if (p.up && now >= p.next_heartbeat) {
        worked = true;
        p.next_heartbeat = now + seconds(options_.heartbeat_seconds);
        (void)post(p, r, kAmHeartbeat, {}, {}, nullptr, true);
      }
    }
    return worked;
  }

  bool retryConnections() {
    bool worked = false;
    const auto now = options_.now();
    for (Rank r = options_.rank + 1; r < options_.size; ++r) {
      Peer& p = peers_[r];
      if (p.address.empty() || p.ep || gate_->dialing(r) || (p.reconnect_at && now < *p.reconnect_at)) continue;
      worked = true;
      p.reconnect_at = now + reconnectDelay();  // the gate reports a failure, if any, later
      gate_->dial(r, p.address);
    }
    return worked;
  }

  void closeEndpoints(const std::vector<ucp_ep_h>& eps) {
    std::vector<void*> pending;
    for (ucp_ep_h ep : eps) {
      ucp_request_param_t rp{};
      rp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
      rp.flags = UCP_EP_CLOSE_FLAG_FORCE;
      ucs_status_ptr_t req = ucp_ep_close_nbx(ep, &rp);
      if (req != nullptr && !UCS_PTR_IS_ERR(req)) pending.push_back(req);
    }
    // A bound on a busy wait, on the real clock: an injected one may stand still.
    const auto deadline = steadyNow() + std::chrono::seconds(2);
    for (void* req : pending) {
      while (ucp_request_check_status(req) == UCS_INPROGRESS && steadyNow() < deadline) ucp_worker_progress(worker_);
      ucp_request_free(req);
    }
  }

  // ---- UCX callbacks: they only record what happened; progress() acts on it. ----

  static void onSendDone(void* request, ucs_status_t status, void* user_data) {
    auto* ctx = static_cast<SendContext*>(user_data);
    ctx->self->finishSend(ctx, status);
    ucp_request_free(request);
  }

  static void onEndpointError(void* arg, ucp_ep_h, ucs_status_t status) {
    auto* ctx = static_cast<EpContext*>(arg);
    UcxTransport* self = ctx->self;
    ctx->failed = true;
    if (ctx->closing) return;  // parked: closed in progress()
    const Rank peer = ctx->peer;
    if (self->peers_[peer].ep.get() != ctx) return;  // not (or no longer) the peer's link: nothing to end
    self->retire(std::move(self->peers_[peer].ep));  // closed in progress()
    self->peerLost(peer, status);
  }

  // The message's sender and link: a message from no current link (a stranger's, a
  // replaced link's, a forged rank) is dropped with a log line.
  std::optional<WireHeader> checkHeader(const void* header, size_t length, const char* what) {
    if (length < sizeof(WireHeader)) {
      GC_LOG(kWarn, "transport", "rank ", options_.rank, ": dropped a ", what, " with a ", length, "-byte header");
      return std::nullopt;
    }
    WireHeader wire;
    std::memcpy(&wire, header, sizeof wire);  // UCX gives no alignment guarantee
    if (wire.magic != kWireMagic || wire.from >= options_.size || wire.from == options_.rank) {
      GC_LOG(kWarn, "transport", "rank ", options_.rank, ": dropped a ", what, " with magic 0x", std::hex, wire.magic,
             std::dec, " from rank ", wire.from);
      return std::nullopt;
    }
    Peer& p = peers_[wire.from];
    if (!p.ep || wire.key != p.recv_key) {
      GC_LOG(kDebug, "transport", "rank ", options_.rank, ": dropped a ", what, " claiming rank ", wire.from,
             ": not of that rank's current link");
      return std::nullopt;
    }
    return wire;
  }

  // As checkHeader, and the link must be up; the peer was heard.
  std::optional<WireHeader> checkUpLink(const void* header, size_t length, const char* what) {
    auto wire = checkHeader(header, length, what);
    if (!wire) return std::nullopt;
    Peer& p = peers_[wire->from];
    if (!p.up) {
      GC_LOG(kDebug, "transport", "rank ", options_.rank, ": dropped a ", what, " from rank ", wire->from,
             " before its link was up");
      return std::nullopt;
    }
    p.last_heard = options_.now();
    return wire;
  }

  static std::span<const std::byte> bodyOf(const void* header, size_t length) {
    return {static_cast<const std::byte*>(header) + sizeof(WireHeader), length - sizeof(WireHeader)};
  }

  // Acceptor: the connector's endpoint works; so does ours once the ack arrives there.
  static ucs_status_t onHello(void* arg, const void* header, size_t header_length, void*, size_t,
                              const ucp_am_recv_param_t*) {
    auto* self = static_cast<UcxTransport*>(arg);
    const auto wire = self->checkHeader(header, header_length, "hello");
    if (!wire || wire->from > self->options_.rank || !bodyOf(header, header_length).empty()) return UCS_OK;
    Peer& p = self->peers_[wire->from];
    self->markUp(wire->from);
    (void)self->post(p, wire->from, kAmHelloAck, {}, {}, nullptr, true);
    return UCS_OK;
  }

  static ucs_status_t onHelloAck(void* arg, const void* header, size_t header_length, void*, size_t,
                                 const ucp_am_recv_param_t*) {
    auto* self = static_cast<UcxTransport*>(arg);
    const auto wire = self->checkHeader(header, header_length, "hello ack");
    if (wire && wire->from > self->options_.rank) self->markUp(wire->from);
    return UCS_OK;
  }

  static ucs_status_t onHeartbeat(void* arg, const void* header, size_t header_length, void*, size_t,
                                  const ucp_am_recv_param_t*) {
    auto* self = static_cast<UcxTransport*>(arg);
    (void)self->checkUpLink(header, header_length, "heartbeat");
    return UCS_OK;
  }

  static ucs_status_t onData(void* arg, const void* header, size_t header_length, void* data, size_t length,
                             const ucp_am_recv_param_t* param) {
    auto* self = static_cast<UcxTransport*>(arg);
    const auto wire = self->checkUpLink(header, header_length, "message");
    const bool rendezvous = (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0;
    if (!wire) {
      if (rendezvous) ucp_am_data_release(self->worker_, data);
      return UCS_OK;
    }
    auto* user_header = static_cast<const std::byte*>(header) + sizeof(WireHeader);
    std::vector<std::byte> user(user_header, user_header + header_length - sizeof(WireHeader));
    if (!rendezvous) {
      Buffer copy = self->pool_.take(length);
      if (length != 0) std::memcpy(copy.data.get(), data, length);
      self->received_.push_back({wire->from, std::move(user), std::move(copy)});
      return UCS_OK;
    }
    auto* ctx = new RecvContext{self, wire->from, std::move(user), self->pool_.take(length)};
    ucp_request_param_t rp{};
    rp.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_MEMORY_TYPE;
    rp.memory_type = UCS_MEMORY_TYPE_HOST;
    rp.cb.recv_am = &UcxTransport::onRendezvousDone;
    rp.user_data = ctx;
    ucs_status_ptr_t req = ucp_am_recv_data_nbx(self->worker_, data, ctx->payload.data.get(), length, &rp);
    if (req == nullptr) {
      self->finishReceive(ctx, UCS_OK);
    } else if (UCS_PTR_IS_ERR(req)) {
      self->finishReceive(ctx, UCS_PTR_STATUS(req));
    }
    return UCS_OK;
  }

  static void onRendezvousDone(void* request, ucs_status_t status, size_t, void* user_data) {
    auto* ctx = static_cast<RecvContext*>(user_data);
    ctx->self->finishReceive(ctx, status);
    ucp_request_free(request);
  }

  void finishReceive(RecvContext* ctx, ucs_status_t st) {
    std::unique_ptr<RecvContext> owned(ctx);
    if (st != UCS_OK) {
      GC_LOG(kWarn, "transport", "rank ", options_.rank, ": receiving from rank ", ctx->from, " failed: ",
             ucs_status_string(st));
      return;
    }
    received_.push_back({ctx->from, std::move(ctx->header), std::move(ctx->payload)});
  }

  struct PeerEventRecord {
    Rank peer;
    PeerEvent event;
    Status why;
  };

  UcxOptions options_;
  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  int efd_ = -1;
  std::unique_ptr<LinkGate> gate_;
  std::vector<int> ucx_listeners_;  // UCX's TCP listening sockets (UCX owns them)
  std::vector<Peer> peers_;
  std::vector<std::unique_ptr<EpContext>> dead_;    // closed in progress()
  std::vector<std::unique_ptr<EpContext>> parked_;  // given up on, left open (see retire())
  std::vector<PeerEventRecord> events_;
  std::vector<std::pair<SendDone, Status>> completions_;
  std::vector<Envelope> received_;
  BufferPool pool_;
  MessageHandler on_message_;
  PeerHandler on_peer_;
};

}  // namespace

Result<std::unique_ptr<Transport>> makeUcxTransport(const UcxOptions& options) {
  auto transport = std::make_unique<UcxTransport>(options);
  GC_RETURN_IF_ERROR(transport->init());
  return std::unique_ptr<Transport>(std::move(transport));
}

}  // namespace gcagent::transport
