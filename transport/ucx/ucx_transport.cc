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

namespace gcagent::transport {
namespace {

constexpr uint32_t kWireMagic = 0x54414347;  // "GCAT"
constexpr unsigned kAmData = 1;
constexpr unsigned kAmHello = 2;     // connector -> acceptor: who I am
constexpr unsigned kAmHelloAck = 3;  // acceptor -> connector: the link works both ways
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
  Rank peer;
  bool identified;
  ucp_ep_h ep = nullptr;
};

struct SendContext {
  UcxTransport* self;
  std::vector<std::byte> header;  // must outlive the send (UCX 1.13 does not copy it)
  Transport::SendDone done;
  bool handshake;
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
  Clock::time_point reconnect_at{};
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
    return post(to, kAmData, header, payload, std::move(done), false);
  }

  bool progress() override {
    bool worked = false;
    while (ucp_worker_progress(worker_) != 0) worked = true;
    worked |= retryConnections();
    worked |= !dead_eps_.empty() || !events_.empty() || !completions_.empty() || !received_.empty();
    if (!dead_eps_.empty()) closeEndpoints(std::exchange(dead_eps_, {}));
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
    if (!events_.empty() || !completions_.empty() || !received_.empty() || !dead_eps_.empty()) return false;
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
    peer.ep = std::make_unique<EpContext>(EpContext{this, r, true});
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
      peer.reconnect_at = Clock::now() + reconnectDelay();
      return ucsError(strCat("connecting to rank ", r, " at ", peer.address), st);
    }
    // The hello tells the acceptor who we are; its ack tells us the link works.
    return post(r, kAmHello, {}, {}, nullptr, true);
  }

  Status post(Rank to, unsigned am_id, std::span<const std::byte> header, std::span<const std::byte> payload,
              SendDone done, bool handshake) {
    auto* ctx = new SendContext{this, {}, std::move(done), handshake, to};
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
    // The hello carries a reply endpoint: the acceptor learns which endpoint is this rank's.
    rp.flags = am_id == kAmHello ? UCP_AM_SEND_FLAG_REPLY : 0;
    ucs_status_ptr_t req = ucp_am_send_nbx(peers_[to].ep->ep, am_id, ctx->header.data(), ctx->header.size(),
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
    if (ctx->handshake) return;  // a failed handshake shows up as an endpoint error
    completions_.emplace_back(std::move(ctx->done),
                              st == UCS_OK ? Status{} : ucsError(strCat("send to rank ", ctx->to), st));
  }

  void markUp(Rank r) {
    Peer& p = peers_[r];
    if (!p.up) {
      p.up = true;
      GC_LOG(kInfo, "transport", "rank ", options_.rank, ": peer ", r, " is up");
      events_.push_back({r, PeerEvent::kUp, {}});
    }
  }

  void peerLost(Rank r, ucs_status_t why) {
    Peer& p = peers_[r];
    Status status = ucsError(strCat("link to rank ", r, " at ", p.address), why);
    if (p.up) {
      GC_LOG(kWarn, "transport", "rank ", options_.rank, ": peer ", r, " is down: ", status.message());
      events_.push_back({r, PeerEvent::kDown, status});
    }
    p.up = false;
    p.reconnect_at = Clock::now() + reconnectDelay();
  }

  Clock::duration reconnectDelay() const {
    return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(options_.reconnect_seconds));
  }

  bool retryConnections() {
    bool worked = false;
    const auto now = Clock::now();
    for (Rank r = 0; r < options_.size; ++r) {
      Peer& p = peers_[r];
      if (r <= options_.rank || p.address.empty() || p.ep || now < p.reconnect_at) continue;
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
    const auto deadline = Clock::now() + std::chrono::seconds(2);
    for (void* req : pending) {
      while (ucp_request_check_status(req) == UCS_INPROGRESS && Clock::now() < deadline) ucp_worker_progress(worker_);
      ucp_request_free(req);
    }
  }

  // ---- UCX callbacks: they only record what happened; progress() acts on it. ----

  static void onSendDone(void* request, ucs_status_t status, void* user_data) {
    auto* ctx = static_cast<SendContext*>(user_data);
    ctx->self->finishSend(ctx, status);
    ucp_request_free(request);
  }

  static void onEndpointError(void* arg, ucp_ep_h ep, ucs_status_t status) {
    auto* ctx = static_cast<EpContext*>(arg);
    UcxTransport* self = ctx->self;
    self->dead_eps_.push_back(ep);
    if (ctx->identified) {
      const Rank peer = ctx->peer;
      self->peerLost(peer, status);
      self->peers_[peer].ep.reset();  // ctx dies here; the endpoint is closed in progress()
    } else {
      std::erase_if(self->unidentified_, [ctx](const auto& in) { return in.get() == ctx; });
    }
  }

  static void onConnectionRequest(ucp_conn_request_h request, void* arg) {
    auto* self = static_cast<UcxTransport*>(arg);
    auto ctx = std::make_unique<EpContext>(EpContext{self, 0, false});
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

  static ucs_status_t onHello(void* arg, const void* header, size_t header_length, void*, size_t,
                              const ucp_am_recv_param_t* param) {
    auto* self = static_cast<UcxTransport*>(arg);
    const auto wire = self->checkHeader(header, header_length);
    if (!wire) return UCS_OK;
    const Rank from = wire->from;
    auto it = std::find_if(self->unidentified_.begin(), self->unidentified_.end(), [&](const auto& in) {
      return (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) != 0 && in->ep == param->reply_ep;
    });
    if (from > self->options_.rank || it == self->unidentified_.end()) {
      GC_LOG(kWarn, "transport", "rank ", self->options_.rank, ": ignored a hello from rank ", from,
             from > self->options_.rank ? ": higher ranks accept, they do not connect" : " on an unknown endpoint");
      return UCS_OK;
    }
    Peer& peer = self->peers_[from];
    if (peer.ep) {
      // The peer restarted before its old link failed here: the new link replaces it.
      self->dead_eps_.push_back(peer.ep->ep);
      self->peerLost(from, UCS_ERR_CONNECTION_RESET);
    }
    peer.ep = std::move(*it);
    self->unidentified_.erase(it);
    peer.ep->identified = true;
    peer.ep->peer = from;
    self->markUp(from);
    (void)self->post(from, kAmHelloAck, {}, {}, nullptr, true);
    return UCS_OK;
  }

  static ucs_status_t onHelloAck(void* arg, const void* header, size_t header_length, void*, size_t,
                                 const ucp_am_recv_param_t*) {
    auto* self = static_cast<UcxTransport*>(arg);
    const auto wire = self->checkHeader(header, header_length);
    if (wire && wire->from > self->options_.rank && self->peers_[wire->from].ep) self->markUp(wire->from);
    return UCS_OK;
  }

  static ucs_status_t onData(void* arg, const void* header, size_t header_length, void* data, size_t length,
                             const ucp_am_recv_param_t* param) {
    auto* self = static_cast<UcxTransport*>(arg);
    const auto wire = self->checkHeader(header, header_length);
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
  ucp_listener_h listener_ = nullptr;
  int efd_ = -1;
  std::string listen_address_;
  std::vector<Peer> peers_;
  std::vector<std::unique_ptr<EpContext>> unidentified_;  // accepted, hello not yet seen
  std::vector<ucp_ep_h> dead_eps_;
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
