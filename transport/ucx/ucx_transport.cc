#include "transport/ucx/ucx_transport.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <ucp/api/ucp.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <optional>

#include "common/log.h"
#include "common/str_cat.h"
#include "transport/auth.h"

namespace gcagent::transport {
namespace {

constexpr uint32_t kWireMagic = 0x54414347;  // "GCAT"
// The handshake on every new link, connector (lower rank) to acceptor (higher rank):
//   hello     C -> A  connector's nonce
//   challenge A -> C  acceptor's nonce, acceptor's proof over both nonces
//   proof     C -> A  connector's proof over both nonces
//   ack       A -> C  the link works both ways and both sides know the token
// Until a link is up, nothing but the handshake is accepted on it. Every message travels
// with its reply endpoint, so the receiver knows which link (not which claimed rank) sent it.
constexpr unsigned kAmData = 1;
constexpr unsigned kAmHello = 2;
constexpr unsigned kAmHelloAck = 3;
constexpr unsigned kAmChallenge = 4;
constexpr unsigned kAmProof = 5;
constexpr unsigned kAmHeartbeat = 6;
constexpr size_t kMaxUserHeader = 1024;

// Prefixes every active-message header: who sent it.
struct WireHeader {
  uint32_t magic;
  uint32_t from;
};

using Clock = std::chrono::steady_clock;

Status ucsError(std::string_view what, ucs_status_t status) {
  return Status::unavailable(strCat("ucx: ", what, ": ", ucs_status_string(status)));
}

Result<sockaddr_storage> resolve(const std::string& address, bool passive, socklen_t* length) {
  GC_ASSIGN_OR_RETURN(auto host_port, splitHostPort(address));
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  addrinfo* found = nullptr;
  const std::string port = std::to_string(host_port.second);
  int rc = ::getaddrinfo(host_port.first.c_str(), port.c_str(), &hints, &found);
  if (rc != 0 || found == nullptr)
    return Status::unavailable(strCat("address '", address, "': cannot resolve: ", gai_strerror(rc)));
  sockaddr_storage out{};
  std::memcpy(&out, found->ai_addr, found->ai_addrlen);
  *length = found->ai_addrlen;
  ::freeaddrinfo(found);
  return out;
}

class UcxTransport;

// One endpoint: created by this rank (to a higher rank), or accepted (from a lower rank,
// whose identity the hello reveals).
struct EpContext {
  UcxTransport* self;
  Rank peer;         // for an accepted endpoint: the rank its hello claimed
  bool identified;   // in peers_ (as opposed to unidentified_)
  Clock::time_point opened;  // when the endpoint was created or accepted
  ucp_ep_h ep = nullptr;
  bool closing = false;  // handed to progress() for closing: its errors no longer matter
  enum class Stage { kHello, kChallenged, kProved, kUp } stage = Stage::kHello;
  Nonce connector_nonce{};
  Nonce acceptor_nonce{};
};

struct ChallengeBody {
  Nonce acceptor_nonce;
  Digest proof;
};

struct SendContext {
  UcxTransport* self;
  std::vector<std::byte> header;  // must outlive the send (UCX 1.13 does not copy it)
  Transport::SendDone done;
  bool internal;  // handshake or heartbeat: a failure shows up as an endpoint error
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

// The lower rank of each pair connects and the higher accepts; both then use the one
// endpoint in both directions.
struct Peer {
  std::string address;
  std::unique_ptr<EpContext> ep;
  bool up = false;
  std::optional<Clock::time_point> reconnect_at;  // none: connect at once
  // Set when the link comes up and read only while it is up.
  Clock::time_point last_heard;  // any message from the peer's endpoint
  Clock::time_point next_heartbeat;
};

class UcxTransport final : public Transport {
 public:
  explicit UcxTransport(const UcxOptions& options) : options_(options), peers_(options.size) {}

  ~UcxTransport() override {
    std::vector<ucp_ep_h> eps;
    for (auto& p : peers_)
      if (p.ep && p.ep->ep) eps.push_back(p.ep->ep);
    for (auto& in : unidentified_)
      if (in->ep) eps.push_back(in->ep);
    for (auto& d : dead_) eps.push_back(d->ep);
    closeEndpoints(eps);
    if (listener_) ucp_listener_destroy(listener_);
    // Completions still queued belong to an owner that is going away: drop them.
    if (worker_) ucp_worker_destroy(worker_);
    if (context_) ucp_cleanup(context_);
  }

  Status init() {
    if (options_.rank >= options_.size)
      return Status::invalidArgument(strCat("ucx: rank ", options_.rank, " is not below the size ", options_.size));
    // A restarted agent must be able to listen on its port while old connections linger.
    ::setenv("UCX_TCP_CM_REUSEADDR", "y", 0);
    ucp_config_t* config = nullptr;
    ucs_status_t st = ucp_config_read(nullptr, nullptr, &config);
    if (st != UCS_OK) return ucsError("reading the configuration", st);
    if (options_.eager_bytes != 0 && std::getenv("UCX_RNDV_THRESH") == nullptr) {
      st = ucp_config_modify(config, "RNDV_THRESH", std::to_string(options_.eager_bytes).c_str());
      if (st != UCS_OK) {
        ucp_config_release(config);
        return ucsError(strCat("setting the rendezvous threshold to ", options_.eager_bytes, " bytes"), st);
      }
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
    st = ucp_worker_create(context_, &wp, &worker_);
    if (st != UCS_OK) return ucsError("ucp_worker_create", st);
    st = ucp_worker_get_efd(worker_, &efd_);
    if (st != UCS_OK) return ucsError("ucp_worker_get_efd", st);

    GC_RETURN_IF_ERROR(setAmHandler(kAmData, &UcxTransport::onData));
    GC_RETURN_IF_ERROR(setAmHandler(kAmHello, &UcxTransport::onHello));
    GC_RETURN_IF_ERROR(setAmHandler(kAmHelloAck, &UcxTransport::onHelloAck));
    GC_RETURN_IF_ERROR(setAmHandler(kAmChallenge, &UcxTransport::onChallenge));
    GC_RETURN_IF_ERROR(setAmHandler(kAmProof, &UcxTransport::onProof));
    GC_RETURN_IF_ERROR(setAmHandler(kAmHeartbeat, &UcxTransport::onHeartbeat));
    return listen();
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
      peers_[r].address = peers[r];
      if (r > options_.rank) GC_RETURN_IF_ERROR(openEndpoint(r));
    }
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
    return post(peer.ep->ep, to, kAmData, header, payload, std::move(done), false);
  }

  bool progress() override {
    bool worked = false;
    while (ucp_worker_progress(worker_) != 0) worked = true;
    worked |= retryConnections();
    worked |= checkLiveness();
    worked |= !dead_.empty() || !events_.empty() || !completions_.empty() || !received_.empty();
    if (!dead_.empty()) {
      auto dead = std::exchange(dead_, {});
      std::vector<ucp_ep_h> eps;
      for (auto& d : dead) eps.push_back(d->ep);
      closeEndpoints(eps);
    }
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
  std::string listenAddress() const override { return listen_address_; }

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

  Status listen() {
    socklen_t length = 0;
    GC_ASSIGN_OR_RETURN(sockaddr_storage addr, resolve(options_.listen, true, &length));
    ucp_listener_params_t lp{};
    lp.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;
    lp.sockaddr.addr = reinterpret_cast<const sockaddr*>(&addr);
    lp.sockaddr.addrlen = length;
    lp.conn_handler.cb = &UcxTransport::onConnectionRequest;
    lp.conn_handler.arg = this;
    ucs_status_t st = ucp_listener_create(worker_, &lp, &listener_);
    if (st != UCS_OK) return ucsError(strCat("listening on ", options_.listen), st);
    ucp_listener_attr_t attr{};
    attr.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR;
    st = ucp_listener_query(listener_, &attr);
    if (st != UCS_OK) return ucsError("ucp_listener_query", st);
    char host[INET6_ADDRSTRLEN] = {};
    uint16_t port = 0;
    if (attr.sockaddr.ss_family == AF_INET6) {
      auto* a = reinterpret_cast<const sockaddr_in6*>(&attr.sockaddr);
      ::inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
      port = ntohs(a->sin6_port);
      listen_address_ = strCat("[", host, "]:", port);
    } else {
      auto* a = reinterpret_cast<const sockaddr_in*>(&attr.sockaddr);
      ::inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
      port = ntohs(a->sin_port);
      listen_address_ = strCat(host, ":", port);
    }
    GC_LOG(kInfo, "transport", "rank ", options_.rank, " listening on ", listen_address_);
    return {};
  }

  Status openEndpoint(Rank r) {
    Peer& peer = peers_[r];
    socklen_t length = 0;
    GC_ASSIGN_OR_RETURN(sockaddr_storage addr, resolve(peer.address, false, &length));
    peer.ep = std::make_unique<EpContext>(EpContext{this, r, true, options_.now()});
    Status random = randomBytes(peer.ep->connector_nonce);
    if (!random.ok()) {
      peer.ep.reset();
      return random;
    }
    ucp_ep_params_t ep{};
    ep.field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR |
                    UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
    ep.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
    ep.sockaddr.addr = reinterpret_cast<const sockaddr*>(&addr);
    ep.sockaddr.addrlen = length;
    ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    ep.err_handler.cb = &UcxTransport::onEndpointError;
    ep.err_handler.arg = peer.ep.get();
    ucs_status_t st = ucp_ep_create(worker_, &ep, &peer.ep->ep);
    if (st != UCS_OK) {
      peer.ep.reset();
      peer.reconnect_at = options_.now() + reconnectDelay();
      return ucsError(strCat("connecting to rank ", r, " at ", peer.address), st);
    }
    return postInternal(peer.ep->ep, r, kAmHello, std::as_bytes(std::span(peer.ep->connector_nonce)));
  }

  Status postInternal(ucp_ep_h ep, Rank to, unsigned am_id, std::span<const std::byte> body) {
    return post(ep, to, am_id, body, {}, nullptr, true);
  }

  Status post(ucp_ep_h ep, Rank to, unsigned am_id, std::span<const std::byte> header,
              std::span<const std::byte> payload, SendDone done, bool internal) {
    auto* ctx = new SendContext{this, {}, std::move(done), internal, to};
    ctx->header.resize(sizeof(WireHeader) + header.size());
    const WireHeader wire{kWireMagic, options_.rank};
    std::memcpy(ctx->header.data(), &wire, sizeof wire);
    if (!header.empty()) std::memcpy(ctx->header.data() + sizeof wire, header.data(), header.size());
    ucp_request_param_t rp{};
    rp.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS |
                      UCP_OP_ATTR_FIELD_MEMORY_TYPE;
    rp.memory_type = UCS_MEMORY_TYPE_HOST;  // spares UCX a memory-type lookup per message
    rp.cb.send = &UcxTransport::onSendDone;
    rp.user_data = ctx;
    // Every message carries its reply endpoint: the receiver checks which link it came on.
    rp.flags = UCP_AM_SEND_FLAG_REPLY;
    ucs_status_ptr_t req = ucp_am_send_nbx(ep, am_id, ctx->header.data(), ctx->header.size(),
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
  // peer lost if it was up; the lower rank reconnects after the usual pause.
  void dropPeer(Rank r, const Status& why) {
    Peer& p = peers_[r];
    if (p.ep) retire(std::move(p.ep));
    peerLost(r, why);
  }

  void retire(std::unique_ptr<EpContext> ctx) {
    ctx->closing = true;
    dead_.push_back(std::move(ctx));
  }

  // Sends heartbeats that are due, and gives up on peers and handshakes that stayed silent
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
        GC_LOG(kInfo, "transport", "rank ", options_.rank, ": handshake with rank ", r, " at ", p.address,
               " timed out; retrying");
        dropPeer(r, Status::deadlineExceeded("handshake timed out"));
      } else if (p.up && now >= p.next_heartbeat) {
        worked = true;
        p.next_heartbeat = now + seconds(options_.heartbeat_seconds);
        (void)postInternal(p.ep->ep, r, kAmHeartbeat, {});
      }
    }
    for (auto it = unidentified_.begin(); it != unidentified_.end();) {
      if (now - (*it)->opened > timeout) {
        worked = true;
        GC_LOG(kWarn, "transport", "rank ", options_.rank, ": an accepted link finished no handshake within ",
               options_.peer_timeout_seconds, " s; closing it");
        retire(std::move(*it));
        it = unidentified_.erase(it);
      } else {
        ++it;
      }
    }
    return worked;
  }

  // Refuses a link whose peer failed authentication: log, count, close.
  void refuse(std::unique_ptr<EpContext> ctx, const Status& why) {
    GC_LOG(kError, "transport", "rank ", options_.rank, ": ", why.message());
    if (options_.on_refused) options_.on_refused(why);
    retire(std::move(ctx));
  }

  bool checkProof(const Digest& got, const Digest& want) const {
    return options_.token.empty() || digestsEqual(got, want);
  }

  bool retryConnections() {
    bool worked = false;
    const auto now = options_.now();
    for (Rank r = 0; r < options_.size; ++r) {
      Peer& p = peers_[r];
      if (r <= options_.rank || p.address.empty() || p.ep || (p.reconnect_at && now < *p.reconnect_at)) continue;
      worked = true;
      Status s = openEndpoint(r);
      if (!s.ok()) GC_LOG(kDebug, "transport", s.message());
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
    if (ctx->closing) return;
    if (ctx->identified) {
      const Rank peer = ctx->peer;
      self->retire(std::move(self->peers_[peer].ep));  // closed in progress()
      self->peerLost(peer, status);
    } else {
      auto it = std::find_if(self->unidentified_.begin(), self->unidentified_.end(),
                             [ctx](const auto& in) { return in.get() == ctx; });
      if (it != self->unidentified_.end()) {
        self->retire(std::move(*it));
        self->unidentified_.erase(it);
      }
    }
  }

  static void onConnectionRequest(ucp_conn_request_h request, void* arg) {
    auto* self = static_cast<UcxTransport*>(arg);
    auto ctx = std::make_unique<EpContext>(EpContext{self, 0, false, self->options_.now()});
    ucp_ep_params_t ep{};
    ep.field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                    UCP_EP_PARAM_FIELD_ERR_HANDLER;
    ep.conn_request = request;
    ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    ep.err_handler.cb = &UcxTransport::onEndpointError;
    ep.err_handler.arg = ctx.get();
    ucs_status_t st = ucp_ep_create(self->worker_, &ep, &ctx->ep);
    if (st != UCS_OK) {
      GC_LOG(kWarn, "transport", "rank ", self->options_.rank, ": accepting a peer failed: ", ucs_status_string(st));
      return;
    }
    self->unidentified_.push_back(std::move(ctx));
  }

  // Checks the wire header; a bad one is dropped with a log line.
  std::optional<WireHeader> checkHeader(const void* header, size_t length) {
    if (length < sizeof(WireHeader)) {
      GC_LOG(kWarn, "transport", "rank ", options_.rank, ": dropped a message with a ", length, "-byte header");
      return std::nullopt;
    }
    WireHeader wire;
    std::memcpy(&wire, header, sizeof wire);  // UCX gives no alignment guarantee
    if (wire.magic != kWireMagic || wire.from >= options_.size || wire.from == options_.rank) {
      GC_LOG(kWarn, "transport", "rank ", options_.rank, ": dropped a message with magic 0x", std::hex, wire.magic,
             std::dec, " from rank ", wire.from);
      return std::nullopt;
    }
    return wire;
  }

  static ucp_ep_h replyEp(const ucp_am_recv_param_t* param) {
    return (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) != 0 ? param->reply_ep : nullptr;
  }

  static std::span<const std::byte> bodyOf(const void* header, size_t length) {
    return {static_cast<const std::byte*>(header) + sizeof(WireHeader), length - sizeof(WireHeader)};
  }

  // Whether a message came on the up link of the rank it names; a message on a link that
  // finished no handshake, or naming another rank than its link's, is dropped.
  bool fromUpLink(const WireHeader& wire, const ucp_am_recv_param_t* param, const char* what) {
    Peer& p = peers_[wire.from];
    const ucp_ep_h ep = replyEp(param);
    if (!p.up || !p.ep || ep == nullptr || p.ep->ep != ep) {
      GC_LOG(kWarn, "transport", "rank ", options_.rank, ": dropped a ", what, " claiming rank ", wire.from,
             ": it did not come on that rank's authenticated link");
      return false;
    }
    p.last_heard = options_.now();
    return true;
  }

  std::vector<std::unique_ptr<EpContext>>::iterator findUnidentified(ucp_ep_h ep, EpContext::Stage stage) {
    return std::find_if(unidentified_.begin(), unidentified_.end(),
                        [&](const auto& in) { return ep != nullptr && in->ep == ep && in->stage == stage; });
  }

  // Acceptor: a connector says who it is; answer with our nonce and our proof.
  static ucs_status_t onHello(void* arg, const void* header, size_t header_length, void*, size_t,
                              const ucp_am_recv_param_t* param) {
    auto* self = static_cast<UcxTransport*>(arg);
    const auto wire = self->checkHeader(header, header_length);
    if (!wire) return UCS_OK;
    const Rank from = wire->from;
    const auto body = bodyOf(header, header_length);
    auto it = self->findUnidentified(replyEp(param), EpContext::Stage::kHello);
    if (from > self->options_.rank || it == self->unidentified_.end() || body.size() != sizeof(Nonce)) {
      GC_LOG(kWarn, "transport", "rank ", self->options_.rank, ": ignored a hello from rank ", from,
             from > self->options_.rank ? ": higher ranks accept, they do not connect"
                                        : " on an unknown endpoint or of the wrong size");
      return UCS_OK;
    }
    EpContext& c = **it;
    c.peer = from;
    std::memcpy(c.connector_nonce.data(), body.data(), sizeof(Nonce));
    Status random = randomBytes(c.acceptor_nonce);
    if (!random.ok()) {
      GC_LOG(kError, "transport", "rank ", self->options_.rank, ": ", random.message());
      self->retire(std::move(*it));
      self->unidentified_.erase(it);
      return UCS_OK;
    }
    ChallengeBody challenge{c.acceptor_nonce, handshakeProof(self->options_.token, Role::kAcceptor, from,
                                                             self->options_.rank, c.connector_nonce, c.acceptor_nonce)};
    c.stage = EpContext::Stage::kChallenged;
    (void)self->postInternal(c.ep, from, kAmChallenge, std::as_bytes(std::span(&challenge, 1)));
    return UCS_OK;
  }

  // Connector: check the acceptor's proof, then send ours.
  static ucs_status_t onChallenge(void* arg, const void* header, size_t header_length, void*, size_t,
                                  const ucp_am_recv_param_t* param) {
    auto* self = static_cast<UcxTransport*>(arg);
    const auto wire = self->checkHeader(header, header_length);
    if (!wire) return UCS_OK;
    const Rank from = wire->from;
    const auto body = bodyOf(header, header_length);
    Peer& p = self->peers_[from];
    if (from < self->options_.rank || !p.ep || p.ep->ep != replyEp(param) || p.ep->stage != EpContext::Stage::kHello ||
        body.size() != sizeof(ChallengeBody)) {
      GC_LOG(kWarn, "transport", "rank ", self->options_.rank, ": ignored a challenge claiming rank ", from);
      return UCS_OK;
    }
    ChallengeBody challenge;
    std::memcpy(&challenge, body.data(), sizeof challenge);
    const Digest want = handshakeProof(self->options_.token, Role::kAcceptor, self->options_.rank, from,
                                       p.ep->connector_nonce, challenge.acceptor_nonce);
    if (!self->checkProof(challenge.proof, want)) {
      self->refuse(std::move(p.ep), authFailure(from, p.address));
      p.reconnect_at = self->options_.now() + std::max(self->reconnectDelay(), seconds(1.0));
      return UCS_OK;
    }
    p.ep->acceptor_nonce = challenge.acceptor_nonce;
    const Digest proof = handshakeProof(self->options_.token, Role::kConnector, self->options_.rank, from,
                                        p.ep->connector_nonce, p.ep->acceptor_nonce);
    p.ep->stage = EpContext::Stage::kProved;
    (void)self->postInternal(p.ep->ep, from, kAmProof, std::as_bytes(std::span(proof)));
    return UCS_OK;
  }

  // Acceptor: check the connector's proof; the link is up once it holds.
  static ucs_status_t onProof(void* arg, const void* header, size_t header_length, void*, size_t,
                              const ucp_am_recv_param_t* param) {
    auto* self = static_cast<UcxTransport*>(arg);
    const auto wire = self->checkHeader(header, header_length);
    if (!wire) return UCS_OK;
    const Rank from = wire->from;
    const auto body = bodyOf(header, header_length);
    auto it = self->findUnidentified(replyEp(param), EpContext::Stage::kChallenged);
    if (it == self->unidentified_.end() || (*it)->peer != from || body.size() != sizeof(Digest)) {
      GC_LOG(kWarn, "transport", "rank ", self->options_.rank, ": ignored a proof claiming rank ", from);
      return UCS_OK;
    }
    Digest got;
    std::memcpy(got.data(), body.data(), got.size());
    const Digest want = handshakeProof(self->options_.token, Role::kConnector, from, self->options_.rank,
                                       (*it)->connector_nonce, (*it)->acceptor_nonce);
    if (!self->checkProof(got, want)) {
      auto ctx = std::move(*it);
      self->unidentified_.erase(it);
      self->refuse(std::move(ctx), authFailure(from, "an accepted connection"));
      return UCS_OK;
    }
    Peer& peer = self->peers_[from];
    if (peer.ep) {
      // The peer restarted before its old link failed here: the new link replaces it.
      self->retire(std::move(peer.ep));
      self->peerLost(from, UCS_ERR_CONNECTION_RESET);
    }
    peer.ep = std::move(*it);
    self->unidentified_.erase(it);
    peer.ep->identified = true;
    peer.ep->stage = EpContext::Stage::kUp;
    self->markUp(from);
    (void)self->postInternal(peer.ep->ep, from, kAmHelloAck, {});
    return UCS_OK;
  }

  static Status authFailure(Rank from, std::string_view where) {
    return Status::unavailable(strCat("peer authentication failed: the peer claiming rank ", from, " (", where,
                                      ") did not prove knowledge of the cluster token; link refused (check that "
                                      "security.token_file holds the same token on every agent)"));
  }

  static ucs_status_t onHelloAck(void* arg, const void* header, size_t header_length, void*, size_t,
                                 const ucp_am_recv_param_t* param) {
    auto* self = static_cast<UcxTransport*>(arg);
    const auto wire = self->checkHeader(header, header_length);
    if (!wire || wire->from < self->options_.rank) return UCS_OK;
    Peer& p = self->peers_[wire->from];
    if (p.ep && p.ep->ep == replyEp(param) && p.ep->stage == EpContext::Stage::kProved) {
      p.ep->stage = EpContext::Stage::kUp;
      self->markUp(wire->from);
    }
    return UCS_OK;
  }

  static ucs_status_t onHeartbeat(void* arg, const void* header, size_t header_length, void*, size_t,
                                  const ucp_am_recv_param_t* param) {
    auto* self = static_cast<UcxTransport*>(arg);
    const auto wire = self->checkHeader(header, header_length);
    if (wire) (void)self->fromUpLink(*wire, param, "heartbeat");
    return UCS_OK;
  }

  static ucs_status_t onData(void* arg, const void* header, size_t header_length, void* data, size_t length,
                             const ucp_am_recv_param_t* param) {
    auto* self = static_cast<UcxTransport*>(arg);
    const auto wire = self->checkHeader(header, header_length);
    const bool rendezvous = (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0;
    if (!wire || !self->fromUpLink(*wire, param, "message")) {
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
  ucp_listener_h listener_ = nullptr;
  int efd_ = -1;
  std::string listen_address_;
  std::vector<Peer> peers_;
  std::vector<std::unique_ptr<EpContext>> unidentified_;  // accepted, hello not yet seen
  std::vector<std::unique_ptr<EpContext>> dead_;  // closed in progress()
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
