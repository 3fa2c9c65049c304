#include "transport/ucx/ucx_backend.h"

#include <ucp/api/ucp.h>

#include <cstdlib>
#include <cstring>
#include <set>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "common/clock.h"
#include "common/log.h"
#include "common/str_cat.h"
#include "transport/ucx/buffer_pool.h"
#include "transport/ucx/source_filter.h"

namespace gcagent::transport {
namespace {

Status ucsError(std::string_view what, ucs_status_t status) {
  return Status::unavailable(strCat("ucx: ", what, ": ", ucs_status_string(status)));
}

class UcxBackend;

// One endpoint: a link, created by the peer's worker address.
struct EpContext {
  UcxBackend* self;
  LinkId id;
  Rank peer;
  ucp_ep_h ep = nullptr;
  bool closing = false;  // retired: its errors no longer matter
  bool failed = false;   // UCX reported an error on it: UCX is done with its connection
};

struct SendContext {
  UcxBackend* self;
  Transport::SendDone done;
  Rank to;
};

struct RecvContext {
  UcxBackend* self;
  std::vector<std::byte> header;
  Buffer payload;
};

// A received data frame. `owner` keeps `payload` valid: a pool buffer (back to the pool when
// let go of) or UCX's own descriptor (back to UCX).
struct Envelope {
  std::vector<std::byte> header;
  std::span<const std::byte> payload;
  std::shared_ptr<const void> owner;
};

class UcxBackend final : public LinkBackend {
 public:
  explicit UcxBackend(const UcxBackendOptions& options) : options_(options) {}

  ~UcxBackend() override {
    events_ = {};  // the link layer is going: nothing is reported from here on
    std::vector<ucp_ep_h> eps;
    for (auto& [id, ctx] : links_) eps.push_back(ctx->ep);
    for (auto& d : dead_) eps.push_back(d->ep);
    for (auto& d : parked_) eps.push_back(d->ep);
    closeEndpoints(eps);
    // Descriptors still lent go back before the worker does; their holders' releases, if any
    // come later, find the backend gone and do nothing.
    alive_.reset();
    if (worker_)
      for (void* data : lent_) ucp_am_data_release(worker_, data);
    // Completions still queued belong to an owner that is going away: drop them.
    if (worker_) ucp_worker_destroy(worker_);
    if (context_) ucp_cleanup(context_);
  }

  Status init() {
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
    // UCX's TCP interfaces listen at a port of this range.
    if (configured.ok()) configured = modify("TCP_PORT_RANGE", options_.data_ports, "the data ports");
    // TCP fragments as large as a receiving peer's segment (64K, UCX's receive default) rather
    // than UCX's 8K: a slice crosses in 3 fragments instead of 20, each with its header, send
    // call and reassembly step (ResNet-50 at 10 Gbit/s, 4 nodes: sync 0.46 -> 0.41 s on a
    // CPU-bound host).
    if (configured.ok()) configured = modify("TCP_TX_SEG_SIZE", "64K", "the TCP fragment size");
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
    for (int fd : listeningTcpSockets())  // the worker's TCP interfaces: filtered in admitOnly()
      if (!listening_before.contains(fd)) ucx_listeners_.push_back(fd);
    st = ucp_worker_get_efd(worker_, &efd_);
    if (st != UCS_OK) return ucsError("ucp_worker_get_efd", st);
    ucp_address_t* address = nullptr;
    size_t address_length = 0;
    st = ucp_worker_get_address(worker_, &address, &address_length);
    if (st != UCS_OK) return ucsError("ucp_worker_get_address", st);
    address_.assign(reinterpret_cast<const std::byte*>(address),
                    reinterpret_cast<const std::byte*>(address) + address_length);
    ucp_worker_release_address(worker_, address);

    GC_RETURN_IF_ERROR(setAmHandler(FrameKind::kData, &UcxBackend::onData));
    GC_RETURN_IF_ERROR(setAmHandler(FrameKind::kHello, &UcxBackend::onControl<FrameKind::kHello>));
    GC_RETURN_IF_ERROR(setAmHandler(FrameKind::kHelloAck, &UcxBackend::onControl<FrameKind::kHelloAck>));
    GC_RETURN_IF_ERROR(setAmHandler(FrameKind::kHeartbeat, &UcxBackend::onControl<FrameKind::kHeartbeat>));
    GC_RETURN_IF_ERROR(setAmHandler(FrameKind::kGoodbye, &UcxBackend::onControl<FrameKind::kGoodbye>));
    if (!options_.net_devices.empty())
      GC_LOG(kInfo, "transport", "rank ", options_.rank, ": UCX on ", options_.net_devices);
    return {};
  }

  void setEvents(BackendEvents events) override { events_ = std::move(events); }
  std::vector<std::byte> address() const override { return address_; }

  // Only the peers' addresses may reach UCX's own listening ports (source_filter.h).
  void admitOnly(const std::vector<std::string>& hosts) override {
    for (int fd : ucx_listeners_) {
      if (Status s = transport::admitOnly(fd, hosts); !s.ok())
        GC_LOG(kWarn, "transport", "rank ", options_.rank, ": UCX's port stays open to every address: ", s.message());
    }
    GC_LOG(kInfo, "transport", "rank ", options_.rank, ": ", ucx_listeners_.size(),
           " UCX listening port(s) admit the peers' addresses only");
  }

  Result<LinkId> open(Rank peer, std::span<const std::byte> address) override {
    const LinkId id = next_id_++;
    auto ctx = std::make_unique<EpContext>(EpContext{this, id, peer});
    ucp_ep_params_t ep{};
    ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                    UCP_EP_PARAM_FIELD_ERR_HANDLER;
    ep.address = reinterpret_cast<const ucp_address_t*>(address.data());
    ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    ep.err_handler.cb = &UcxBackend::onEndpointError;
    ep.err_handler.arg = ctx.get();
    const ucs_status_t st = ucp_ep_create(worker_, &ep, &ctx->ep);
    if (st != UCS_OK) return ucsError(strCat("connecting to rank ", peer), st);
    links_.emplace(id, std::move(ctx));
    return id;
  }

  void send(LinkId id, FrameKind kind, std::vector<std::byte> header, std::span<const std::byte> payload,
            Transport::SendDone done) override {
    auto it = links_.find(id);
    if (it == links_.end()) {  // the link layer sends on its current links only
      if (done) completions_.emplace_back(std::move(done), Status::internal("ucx: send on a retired link"));
      return;
    }
    auto* ctx = new SendContext{this, std::move(done), it->second->peer};
    ucp_request_param_t rp{};
    rp.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_MEMORY_TYPE |
                      UCP_OP_ATTR_FIELD_FLAGS;
    rp.memory_type = UCS_MEMORY_TYPE_HOST;  // spares UCX a memory-type lookup per message
    rp.flags = UCP_AM_SEND_FLAG_COPY_HEADER;  // the header may go when this returns
    rp.cb.send = &UcxBackend::onSendDone;
    rp.user_data = ctx;
    ucs_status_ptr_t req = ucp_am_send_nbx(it->second->ep, static_cast<unsigned>(kind), header.data(), header.size(),
                                           payload.data(), payload.size(), &rp);
    if (req == nullptr) {
      finishSend(ctx, UCS_OK);
    } else if (UCS_PTR_IS_ERR(req)) {
      finishSend(ctx, UCS_PTR_STATUS(req));
    }
  }

  // An endpoint UCX reported failed is closed in deliver(). One the link layer gave up on
  // (a silent peer, a replaced link) is parked open instead: force-closing a TCP endpoint
  // whose cut link later comes back made UCX 1.13 run freed memory (SIGSEGV in libuct, in
  // about one cut in four under load), and on UCX 1.22 left links that never came back in
  // some runs (tests/integration/test_link_churn.py). A parked endpoint is closed once UCX
  // reports it failed (its own timeout), when more than kMaxParked are parked, or at shutdown.
  void retire(LinkId id) override {
    auto it = links_.find(id);
    if (it == links_.end()) return;
    std::unique_ptr<EpContext> ctx = std::move(it->second);
    links_.erase(it);
    ctx->closing = true;
    (ctx->failed ? dead_ : parked_).push_back(std::move(ctx));
  }

  bool poll() override {
    bool worked = false;
    while (ucp_worker_progress(worker_) != 0) worked = true;
    return worked;
  }

  bool deliver() override {
    const bool worked = !dead_.empty() || !completions_.empty() || !received_.empty();
    closeRetired();
    for (auto& [done, status] : std::exchange(completions_, {}))
      if (done) done(status);
    // The handler may keep the payload (the engine merges it later, on another thread); its
    // memory goes back when the last holder lets go, on this thread (holders release on the
    // comm thread).
    for (Envelope& e : std::exchange(received_, {}))
      if (events_.received) events_.received(e.header, e.payload, std::move(e.owner));
    return worked;
  }

  int eventFd() override { return efd_; }

  bool arm() override {
    if (!completions_.empty() || !received_.empty() || !dead_.empty()) return false;
    return ucp_worker_arm(worker_) == UCS_OK;
  }

 private:
  static constexpr size_t kMaxParked = 16;

  Status setAmHandler(FrameKind kind, ucp_am_recv_callback_t cb) {
    ucp_am_handler_param_t hp{};
    hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG;
    hp.id = static_cast<unsigned>(kind);
    hp.cb = cb;
    hp.arg = this;
    ucs_status_t st = ucp_worker_set_am_recv_handler(worker_, &hp);
    return st == UCS_OK ? Status{} : ucsError("setting an active-message handler", st);
  }

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

  void closeEndpoints(const std::vector<ucp_ep_h>& eps) {
    std::vector<void*> pending;
    for (ucp_ep_h ep : eps) {
      ucp_request_param_t rp{};
      rp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
      rp.flags = UCP_EP_CLOSE_FLAG_FORCE;
      ucs_status_ptr_t req = ucp_ep_close_nbx(ep, &rp);
      if (req != nullptr && !UCS_PTR_IS_ERR(req)) pending.push_back(req);
    }
    // A bound on a busy wait, on the real clock: the link layer's may stand still.
    const auto deadline = steadyNow() + std::chrono::seconds(2);
    for (void* req : pending) {
      while (ucp_request_check_status(req) == UCS_INPROGRESS && steadyNow() < deadline) ucp_worker_progress(worker_);
      ucp_request_free(req);
    }
  }

  void finishSend(SendContext* ctx, ucs_status_t st) {
    std::unique_ptr<SendContext> owned(ctx);
    if (!ctx->done) return;  // the link layer's own frames: a failure shows up as the link's
    completions_.emplace_back(std::move(ctx->done),
                              st == UCS_OK ? Status{} : ucsError(strCat("send to rank ", ctx->to), st));
  }

  void finishReceive(RecvContext* ctx, ucs_status_t st) {
    std::unique_ptr<RecvContext> owned(ctx);
    if (st != UCS_OK) {
      GC_LOG(kWarn, "transport", "rank ", options_.rank, ": receiving a message failed: ", ucs_status_string(st));
      return;
    }
    received_.push_back(pooled(std::move(ctx->header), std::move(ctx->payload)));
  }

  // A payload in a pool buffer, which goes back to the pool (or is freed, the backend gone).
  Envelope pooled(std::vector<std::byte> header, Buffer payload) {
    auto owner = std::shared_ptr<const Buffer>(new Buffer(std::move(payload)),
                                               [pool = std::weak_ptr<BufferPool>(pool_)](const Buffer* b) {
                                                 if (auto p = pool.lock()) p->give(std::move(*const_cast<Buffer*>(b)));
                                                 delete b;
                                               });
    const std::span<const std::byte> bytes = owner->bytes();
    return {std::move(header), bytes, std::move(owner)};
  }

  // A payload in UCX's descriptor, lent until the last holder lets go (ucp_am_data_release).
  Envelope lent(std::vector<std::byte> header, void* data, size_t length) {
    lent_.insert(data);
    auto owner = std::shared_ptr<const void>(data, [this, alive = std::weak_ptr<const int>(alive_)](void* d) {
      if (alive.expired()) return;  // released with the worker
      lent_.erase(d);
      ucp_am_data_release(worker_, d);
    });
    return {std::move(header), {static_cast<const std::byte*>(data), length}, std::move(owner)};
  }

  bool wanted(FrameKind kind, const void* header, size_t length) {
    return events_.arrived && events_.arrived(kind, {static_cast<const std::byte*>(header), length});
  }

  // ---- UCX callbacks: they only record what happened; deliver() acts on it. ----

  static void onSendDone(void* request, ucs_status_t status, void* user_data) {
    auto* ctx = static_cast<SendContext*>(user_data);
    ctx->self->finishSend(ctx, status);
    ucp_request_free(request);
  }

  static void onEndpointError(void* arg, ucp_ep_h, ucs_status_t status) {
    auto* ctx = static_cast<EpContext*>(arg);
    ctx->failed = true;
    if (ctx->closing) return;  // retired: closed in deliver()
    // The link layer retires it in return (which moves, but keeps, this context).
    if (ctx->self->events_.failed) ctx->self->events_.failed(ctx->id, Status::unavailable(ucs_status_string(status)));
  }

  template <FrameKind kKind>
  static ucs_status_t onControl(void* arg, const void* header, size_t header_length, void* data, size_t,
                                const ucp_am_recv_param_t* param) {
    auto* self = static_cast<UcxBackend*>(arg);
    (void)self->wanted(kKind, header, header_length);
    if ((param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0) ucp_am_data_release(self->worker_, data);
    return UCS_OK;
  }

  static ucs_status_t onData(void* arg, const void* header, size_t header_length, void* data, size_t length,
                             const ucp_am_recv_param_t* param) {
    auto* self = static_cast<UcxBackend*>(arg);
    const bool rendezvous = (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0;
    if (!self->wanted(FrameKind::kData, header, header_length)) {
      if (rendezvous) ucp_am_data_release(self->worker_, data);
      return UCS_OK;
    }
    auto* bytes = static_cast<const std::byte*>(header);
    std::vector<std::byte> whole(bytes, bytes + header_length);
    if (!rendezvous && (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_DATA) != 0) {
      // A message UCX assembled from fragments into a descriptor of its own: kept, not copied.
      self->received_.push_back(self->lent(std::move(whole), data, length));
      return UCS_INPROGRESS;
    }
    if (!rendezvous) {
      Buffer copy = self->pool_->take(length);
      if (length != 0) std::memcpy(copy.data.get(), data, length);
      self->received_.push_back(self->pooled(std::move(whole), std::move(copy)));
      return UCS_OK;
    }
    auto* ctx = new RecvContext{self, std::move(whole), self->pool_->take(length)};
    ucp_request_param_t rp{};
    rp.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_MEMORY_TYPE;
    rp.memory_type = UCS_MEMORY_TYPE_HOST;
    rp.cb.recv_am = &UcxBackend::onRendezvousDone;
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

  UcxBackendOptions options_;
  BackendEvents events_;
  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  int efd_ = -1;
  std::vector<std::byte> address_;  // this worker's address, sent to peers in the handshake
  std::vector<int> ucx_listeners_;  // UCX's TCP listening sockets (UCX owns them)
  LinkId next_id_ = 1;
  std::unordered_map<LinkId, std::unique_ptr<EpContext>> links_;  // open, not retired
  std::vector<std::unique_ptr<EpContext>> dead_;                  // closed in deliver()
  std::vector<std::unique_ptr<EpContext>> parked_;                // retired, left open (see retire())
  std::vector<std::pair<Transport::SendDone, Status>> completions_;
  std::vector<Envelope> received_;
  std::shared_ptr<BufferPool> pool_ = std::make_shared<BufferPool>();
  std::unordered_set<void*> lent_;  // UCX descriptors lent to holders (see lent())
  std::shared_ptr<const int> alive_ = std::make_shared<const int>(0);  // expires with the worker
};

}  // namespace

Result<std::unique_ptr<LinkBackend>> makeUcxBackend(const UcxBackendOptions& options) {
  auto backend = std::make_unique<UcxBackend>(options);
  GC_RETURN_IF_ERROR(backend->init());
  return std::unique_ptr<LinkBackend>(std::move(backend));
}

}  // namespace gcagent::transport
