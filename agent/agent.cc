#include "agent/agent.h"

#include <grp.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <functional>
#include <memory>
#include <optional>
#include <thread>
#include <utility>

#include "agent/control/control_server.h"
#include "agent/coding/gpu_coders.h"
#include "agent/coding/host_stream.h"
#include "agent/io.h"
#include "agent/wire/peer_frame.h"
#include "agent/privileges.h"
#include "agent/engine/progress_line.h"
#include "agent/engine/reduction_engine.h"
#include "agent/membership/vote_store.h"
#include "common/build_config.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/str_cat.h"
#include "common/thread_pool.h"
#include "compress/registry.h"
#include "metrics/endpoint.h"
#include "metrics/stats.h"
#include "shm/segment.h"
#include "transport/auth.h"
#include "transport/loopback/loopback.h"
#include "transport/net_devices.h"
#include "transport/ucx/ucx_transport.h"

namespace gcagent::agent {

struct Agent::Impl {
  Config config;
  EngineOptions engine_options;
  std::unique_ptr<ThreadPool> pool;
  std::shared_ptr<metrics::Stats> stats;
  std::string token;  // the cluster token; never logged
  std::optional<gid_t> group;
  std::optional<UserIds> user;  // agent.user: who the agent becomes once its ports are bound
};

namespace {

// Drives the transport from the io_context: on its event fd, and on a short timer for the
// work that has no fd event (reconnect attempts). A gap between two runs longer than
// `stall_after` (the peer timeout) means this process did not run (stopped, starved): that is
// told before anything that arrived meanwhile is delivered.
class TransportPump {
 public:
  TransportPump(asio::io_context& io, transport::Transport& t, double stall_after, std::function<void(double)> on_stall)
      : t_(t), fd_(io), timer_(io), stall_after_(steadySeconds(stall_after)), on_stall_(std::move(on_stall)) {
    if (t_.eventFd() >= 0) fd_.assign(::dup(t_.eventFd()));
  }
  void start() {
    waitFd();
    tick();
  }
  void stop() {
    stopped_ = true;
    boost::system::error_code ec;
    fd_.cancel(ec);
    timer_.cancel();
  }

 private:
  void drain() {
    const SteadyTime now = steadyNow();
    if (last_run_ && now - *last_run_ > stall_after_) on_stall_(secondsBetween(*last_run_, now));
    last_run_ = now;
    while (t_.progress()) {
    }
  }
  void waitFd() {
    if (stopped_ || !fd_.is_open()) return;
    fd_.async_wait(asio::posix::stream_descriptor::wait_read, [this](boost::system::error_code ec) {
      if (ec || stopped_) return;
      do drain();
      while (!t_.arm());
      waitFd();
    });
  }
  void tick() {
    if (stopped_) return;
    timer_.expires_after(std::chrono::milliseconds(5));
    timer_.async_wait([this](boost::system::error_code ec) {
      if (ec || stopped_) return;
      drain();
      tick();
    });
  }

  transport::Transport& t_;
  asio::posix::stream_descriptor fd_;
  asio::steady_timer timer_;
  SteadyClock::duration stall_after_;
  std::function<void(double)> on_stall_;
  std::optional<SteadyTime> last_run_;
  bool stopped_ = false;
};

// testing.stop_after_promise: keeps the votes, then stops this process once it kept a promise
// to another node's proposal (before the promise is sent), so a test can kill it right there.
std::function<Status(const VoteRecord&)> stopAfterFirstPromise(std::function<Status(const VoteRecord&)> keep,
                                                               uint32_t self) {
  return [keep = std::move(keep), self, stopped = std::make_shared<bool>(false)](const VoteRecord& record) {
    Status kept = keep(record);
    const bool promise = record.promised != Ballot{} && record.promised.node != self &&
                         !(record.accepted && record.accepted->first == record.promised);
    if (kept.ok() && promise && !std::exchange(*stopped, true)) {
      GC_LOG(kWarn, "agent", "testing.stop_after_promise: stopping with ", describeVotes(record), " kept");
      ::raise(SIGSTOP);
    }
    return kept;
  };
}

}  // namespace

Agent::Agent(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Agent::~Agent() = default;

Result<std::unique_ptr<Agent>> Agent::create(const Config& config) {
  auto impl = std::make_unique<Impl>();
  impl->config = config;
  const auto& peers = config.transport_peers;
  if (!peers.empty() && config.agent_node_rank >= static_cast<int64_t>(peers.size()))
    return Status::invalidArgument(strCat("agent.node_rank ", config.agent_node_rank, " is not below the ",
                                          peers.size(), " entries of transport.peers"));
  for (const auto& p : peers) GC_RETURN_IF_ERROR(transport::splitHostPort(p).status());
  // The loopback backend links transports inside one process (the engine's and the
  // transport conformance tests); agents in processes of their own need UCX.
  if (config.transport_backend == "loopback" && peers.size() > 1)
    return Status::invalidArgument(strCat("transport.backend loopback links the agents of one process only; ",
                                          peers.size(), " agents in transport.peers need ucx"));
  if (config.transport_heartbeat_interval >= config.transport_peer_timeout)
    return Status::invalidArgument(strCat("transport.heartbeat_interval (", config.transport_heartbeat_interval,
                                          " s) must be below transport.peer_timeout (",
                                          config.transport_peer_timeout, " s)"));
  if (!config.agent_group.empty()) {
    const group* g = ::getgrnam(config.agent_group.c_str());
    if (g == nullptr) return Status::notFound(strCat("agent.group '", config.agent_group, "': no such group"));
    impl->group = g->gr_gid;
  }
  if (!config.security_token_file.empty()) {
    GC_ASSIGN_OR_RETURN(impl->token, transport::readTokenFile(config.security_token_file));
  } else if (peers.size() > 1 && !config.security_allow_unauthenticated) {
    return Status::invalidArgument(
        strCat("security.token_file is empty and transport.peers names ", peers.size(),
               " agents: their links would be unauthenticated. Give every node the same secret in a token file "
               "(gcagent-run and the torch backend make one per job), or set security.allow_unauthenticated = true"));
  } else if (peers.size() > 1) {
    GC_LOG(kWarn, "agent", "security.allow_unauthenticated: peer agents are not authenticated");
  }
  if (!config.agent_user.empty()) {
    GC_ASSIGN_OR_RETURN(impl->user, lookUpUser(config.agent_user));
  } else if (::geteuid() == 0) {  // least privilege: say so, once, where an operator looks
    GC_LOG(kWarn, "agent", "running as root: root is needed only to bind, to read a root-only token file and to give "
           "segments to trainers of another uid; set agent.user to drop it once the ports are bound, or run the "
           "agent as the trainers' user (with agent.group)");
  }
  // loadConfig built the codecs once already (naming the source of a bad one).
  GC_ASSIGN_OR_RETURN(compress::Params params, parseCodecParams(config.compress_params));
  impl->pool = std::make_unique<ThreadPool>(static_cast<size_t>(config.agent_codec_threads));
  EngineOptions& o = impl->engine_options;
  o.slice_elements = static_cast<uint64_t>(config.scheduler_slice_elements);
  o.reduction_timeout = config.transport_reduction_timeout;
  o.on_peer_loss = config.transport_on_peer_loss == "shrink" ? OnPeerLoss::kShrink : OnPeerLoss::kFail;
  o.shrink_grace = config.transport_shrink_grace;
  o.min_nodes = static_cast<uint32_t>(config.transport_min_nodes);
  o.quorum = config.transport_quorum == "none" ? Quorum::kNone : Quorum::kMajority;
  if (config.testing_stop_after_promise && config.agent_state_dir.empty())
    return Status::invalidArgument("testing.stop_after_promise stops the agent once a promise is kept in "
                                   "agent.state_dir, which is empty");
  if (config.agent_state_dir.empty() && o.on_peer_loss == OnPeerLoss::kShrink && o.quorum == Quorum::kMajority &&
      peers.size() > 1)
    GC_LOG(kWarn, "agent", "agent.state_dir is empty: this agent keeps its membership votes in memory only. Restarted "
           "during a membership change, it would vote again as if it had never promised or accepted, and two "
           "memberships of one epoch could form (a Paxos voter's promises must outlive it); set agent.state_dir to "
           "a directory of its own on a disk the restart keeps");
  o.default_codec = {config.compress_codec, std::move(params)};
  o.min_elements = static_cast<uint64_t>(config.compress_min_elements);
  GC_ASSIGN_OR_RETURN(o.selection, scheduler::parseSelection(config.compress_selection));
  o.refit_interval = config.scheduler_refit_interval;
  o.link_gbps = config.scheduler_link_gbps;
  o.inflight_per_peer = static_cast<uint32_t>(config.scheduler_inflight_per_peer);
  o.inflight_bytes = static_cast<uint64_t>(config.scheduler_inflight_bytes);
  o.prioritize = config.scheduler_priority;
  GC_ASSIGN_OR_RETURN(o.topology, parseTopology(config.scheduler_topology));
  o.result_codec = config.compress_result_codec;
  for (const std::string& name : config.compress_gpu_staged_codecs)
    if (Status s = compress::makeCodec(name).status(); !s.ok())
      return Status(s.code(), strCat("compress.gpu_staged_codecs: ", s.message()));
  o.gpu_staged_codecs = config.compress_gpu_staged_codecs;
  o.residual_budget_bytes = static_cast<size_t>(config.compress_residual_budget_bytes);
  o.codec_env.pool = impl->pool.get();
  impl->stats = std::make_shared<metrics::Stats>();
  std::string codecs;
  for (const auto& info : compress::codecList()) codecs += strCat(codecs.empty() ? "" : ",", info.name);
  impl->stats->setBuildInfo(GCAGENT_VERSION, codecs, GCAGENT_HAVE_CUDA != 0, /*ucx=*/true);
  o.stats = impl->stats;
  return std::unique_ptr<Agent>(new Agent(std::move(impl)));
}

Status Agent::run() {
  const Config& c = impl_->config;
  metrics::Stats& stats = *impl_->stats;
  asio::io_context io;

  // SIGINT and SIGTERM stay pending until the loop below can shut down cleanly: a signal that
  // came after the metrics endpoint answered, but before the handler existed, used to kill
  // the agent outright. Threads started meanwhile inherit the mask, so the signals reach this
  // one (main() blocks them too, before the codec pool starts).
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  // Prometheus endpoint first: a busy address fails the start, before any peer waits on us.
  std::unique_ptr<metrics::Endpoint> endpoint;
  if (!c.metrics_listen.empty()) {
    GC_ASSIGN_OR_RETURN(endpoint, metrics::Endpoint::start(c.metrics_listen, stats));
    GC_LOG(kInfo, "metrics", "metrics on ", endpoint->address());
  }

  // Transport: UCX to the configured peers, or a group of one for a node on its own.
  std::unique_ptr<transport::Transport> transport;
  const bool alone = c.transport_peers.size() <= 1;
  if (alone) {
    transport = std::move(transport::makeLoopbackGroup(1).front());
  } else {
    const auto rank = static_cast<transport::Rank>(c.agent_node_rank);
    std::string listen = c.transport_listen;
    GC_ASSIGN_OR_RETURN(auto mine, transport::splitHostPort(c.transport_peers[rank]));
    GC_ASSIGN_OR_RETURN(auto bind, transport::splitHostPort(listen));
    if (bind.second == 0) listen = strCat(bind.first, ":", mine.second);  // listen on our advertised port
    transport::UcxOptions options;
    options.rank = rank;
    options.size = static_cast<transport::Rank>(c.transport_peers.size());
    options.listen = listen;
    options.token = impl_->token;
    options.peer_timeout_seconds = c.transport_peer_timeout;
    options.heartbeat_seconds = c.transport_heartbeat_interval;
    // A whole slice in one eager message: 4 bytes an element (the largest encoding) and room
    // for the headers.
    options.eager_bytes = static_cast<uint64_t>(c.scheduler_slice_elements) * 4 + 4096;
    options.net_devices = c.transport_net_devices == "all" ? std::string() : c.transport_net_devices;
    if (c.transport_net_devices == "auto") {
      GC_ASSIGN_OR_RETURN(auto bound, transport::splitHostPort(listen));
      const bool wildcard = bound.first == "0.0.0.0" || bound.first == "::" || bound.first == "[::]";
      auto devices = transport::netDevicesFor(wildcard ? mine.first : bound.first);
      if (devices.ok()) {
        options.net_devices = *devices;
      } else {  // behind NAT the advertised address is not local: UCX keeps every device
        options.net_devices.clear();
        GC_LOG(kWarn, "agent", "transport.net_devices auto: ", devices.status().message(),
               "; UCX may listen on every device (set transport.net_devices)");
      }
    }
    options.data_ports = c.transport_data_ports;
    options.max_handshakes = static_cast<size_t>(c.transport_max_handshakes);
    options.max_handshakes_per_address = static_cast<size_t>(c.transport_max_handshakes_per_address);
    options.on_refused = [&stats](const transport::Refused& r) {
      stats.peerRefusal(static_cast<size_t>(r.kind)).Increment();
      if (r.kind == transport::Refusal::kUnauthenticated)
        stats.recordError(metrics::ErrorKind::kAuthFailed, r.why.message());
    };
    options.on_accept_failed = [&stats](const Status& why) {
      stats.recordError(metrics::ErrorKind::kAcceptFailed, why.message());
    };
    GC_ASSIGN_OR_RETURN(transport, transport::makeUcxTransport(options));
  }

  // Segments left by an agent of this prefix that was killed (SIGKILL cannot clean up).
  for (const std::string& name : shm::removeOrphanSegments(c.agent_shm_prefix))
    GC_LOG(kInfo, "agent", "removed the segment ", name, " of an agent that no longer runs");
  // Every port is bound and no peer or trainer byte has been read yet: root ends here.
  if (impl_->user && ::geteuid() != impl_->user->uid) {
    GC_RETURN_IF_ERROR(dropPrivileges(*impl_->user));
    GC_LOG(kInfo, "agent", "running as user ", impl_->user->name, " (uid ", impl_->user->uid, ", gid ",
           impl_->user->gid, ") from now on; the control socket's directory must let it create and remove the socket");
  }

  // Votes kept before a restart are read once the agent is who it stays, so it can write them.
  VoteKeeping votes;
  if (!c.agent_state_dir.empty()) {
    GC_ASSIGN_OR_RETURN(VoteStore store, VoteStore::open(c.agent_state_dir, transport->rank(), transport->size()));
    const std::optional<VoteRecord>& kept = store.kept();
    if (kept && (kept->installed.epoch > 0 || kept->promised != Ballot{}))
      GC_LOG(kWarn, "agent", "membership votes kept in ", store.path(), " before this agent restarted: ",
             describeVotes(*kept));
    votes = store.keeping();
    if (c.testing_stop_after_promise) votes.keep = stopAfterFirstPromise(std::move(votes.keep), transport->rank());
  }

  ControlServer* server_ptr = nullptr;
  // Host gradients' codec work runs on a thread of its own, in priority order, never here.
  EngineOptions engine_options = impl_->engine_options;
  engine_options.votes = std::move(votes);
  engine_options.host_stream = std::make_shared<HostStream>(io);
  engine_options.on_membership = [&server_ptr](const MembershipView& view) {
    if (server_ptr != nullptr)
      server_ptr->onMembership({view.epoch, static_cast<uint32_t>(view.members.size()), view.members, view.joined});
  };
  ReductionEngine engine(*transport, std::move(engine_options),
                         [&server_ptr](uint64_t job, uint64_t it, uint64_t key, const Status& s,
                                       std::optional<uint32_t> reload_root) {
                           if (server_ptr != nullptr) server_ptr->onReduced(job, it, key, s, reload_root);
                         });
  ServerOptions server_options;
  server_options.socket_path = c.agent_socket;
  server_options.shm_prefix = c.agent_shm_prefix;
  server_options.node_rank = transport->rank();
  server_options.node_count = transport->size();
  server_options.reduction_timeout =
      std::chrono::milliseconds(static_cast<int64_t>(c.transport_reduction_timeout * 1000));
  if (impl_->group) {
    server_options.group = impl_->group;
    server_options.mode = 0660;
  }
  // Every peer hears when a trainer of a job leaves here, so its trainers of that job fail
  // at once instead of waiting for a contribution that will never come.
  server_options.on_trainer_left = [&transport, &engine](uint64_t job, uint64_t last_completed, const Status& why) {
    const auto header = encodePeerFrame(JobNotice{job, engine.alignmentOf(job).toWire(last_completed),
                                         strCat("node ", transport->rank(), ": ", why.message())});
    for (transport::Rank r = 0; r < transport->size(); ++r)
      if (r != transport->rank() && transport->peerUp(r)) (void)transport->send(r, header, {}, nullptr);
  };
  server_options.device_path = makeDevicePath(
      io, c.compress_on_gpu ? gpuCoderFactory(io, static_cast<size_t>(c.compress_residual_budget_bytes)) : nullptr);
  server_options.max_connections = static_cast<size_t>(c.agent_max_connections);
  server_options.hello_timeout = std::chrono::milliseconds(static_cast<int64_t>(c.agent_hello_timeout * 1000));
  server_options.body_timeout = std::chrono::milliseconds(static_cast<int64_t>(c.agent_frame_timeout * 1000));
  server_options.on_accepting = [&stats](bool accepting) { stats.health().setServing(accepting); };
  ControlServer server(io, engine, server_options);
  server_ptr = &server;

  transport->setHandlers([&engine, &server, &stats, &transport](const transport::Message& m) {
                           // Job notices are the control side's; every other frame the engine's.
                           if (peerFrameKind(m.header) != FrameKind::kJobNotice) return engine.onMessage(m);
                           auto parsed = parsePeerFrame(m.header, transport->size());
                           if (!parsed.ok()) {
                             GC_LOG(kWarn, "agent", "rank ", m.from, ": ", parsed.status().message());
                             stats.error(metrics::ErrorKind::kBadMessage).Increment();
                             return;
                           }
                           const auto& notice = std::get<JobNotice>(*parsed);
                           server.onJobLost(notice.job, engine.alignmentOf(notice.job).toTrainer(notice.last_completed),
                                            Status::unavailable(strCat("the job cannot go on: ", notice.reason)));
                         },
                         [&engine, &stats, &transport](transport::Rank peer, transport::PeerEvent event,
                                                       const Status& why) {
                           if (event != transport::PeerEvent::kUp) {
                             const bool left = event == transport::PeerEvent::kLeft;
                             stats.recovery(left ? metrics::Stats::kPeerShutdown : metrics::Stats::kPeerLost).Increment();
                             return engine.onPeerDown(peer, why, left);
                           }
                           // Up again after a loss (at the start every peer comes up once).
                           if (transport->size() > 1 && stats.health().snapshot().serving)
                             stats.recovery(metrics::Stats::kPeerRejoined).Increment();
                           engine.onPeerUp(peer);
                         });
  GC_RETURN_IF_ERROR(transport->connect(alone ? std::vector<std::string>{} : c.transport_peers));
  TransportPump pump(io, *transport, c.transport_peer_timeout, [&engine](double seconds) { engine.onStalled(seconds); });
  pump.start();
  metrics::Health& health = stats.health();
  health.setRank(transport->rank(), transport->size() - 1);
  auto peers_connected = [&] {
    uint32_t up = 0;
    for (transport::Rank r = 0; r < transport->size(); ++r)
      if (r != transport->rank() && transport->peerUp(r)) ++up;
    return up;
  };

  Status failure;
  // Trainers are accepted once every peer is reachable, so no reduction starts half-wired.
  asio::steady_timer ready(io);
  const auto wait_started = std::chrono::steady_clock::now();
  auto last_notice = wait_started;
  std::function<void()> wait_for_peers = [&] {
    if (transport->allPeersUp()) {
      GC_LOG(kInfo, "agent", "rank ", transport->rank(), " of ", transport->size(), ": all peers up",
             impl_->token.empty() ? " (unauthenticated)" : " (authenticated by the cluster token)");
      failure = server.start();
      if (!failure.ok()) {
        io.stop();
        return;
      }
      health.setPeersConnected(peers_connected());
      health.setServing(true);
      return;
    }
    const auto now = std::chrono::steady_clock::now();
    if (now - last_notice > std::chrono::seconds(5)) {
      last_notice = now;
      GC_LOG(kInfo, "agent", "waiting for peers (", std::chrono::duration_cast<std::chrono::seconds>(now - wait_started).count(), " s)");
    }
    ready.expires_after(std::chrono::milliseconds(10));
    ready.async_wait([&](boost::system::error_code ec) {
      if (!ec) wait_for_peers();
    });
  };
  wait_for_peers();

  // Gauges computed from state that only this thread may read, refreshed every second.
  asio::steady_timer refresh(io);
  std::function<void()> refresh_stats = [&] {
    const size_t stalled = engine.tick();
    stats.gauge(metrics::Id::stalled_jobs, {}).Set(static_cast<double>(stalled));
    health.setStalledJobs(static_cast<uint32_t>(stalled));
    const auto lost = engine.membership().lost();
    if (lost.has_value() != health.snapshot().lost_node.has_value()) {
      if (lost) GC_LOG(kError, "agent", lost->why);
      else GC_LOG(kInfo, "agent", "every member node is reachable again");
    }
    health.setLostNode(lost ? std::optional<uint32_t>(lost->rank) : std::nullopt, lost ? lost->why : "");
    health.setAwayNodes(engine.membership().away());
    stats.updateRatios();
    const uint32_t up = peers_connected();
    stats.peersUp().Set(up);
    health.setPeersConnected(up);
    health.setTrainers(static_cast<uint32_t>(stats.trainersConnected().Value()));
    refresh.expires_after(std::chrono::seconds(1));
    refresh.async_wait([&](boost::system::error_code ec) {
      if (!ec) refresh_stats();
    });
  };
  refresh_stats();

  // The periodic one-line summary, read from the same stats Prometheus scrapes.
  asio::steady_timer summary(io);
  auto reading = [&] {
    const metrics::Stats::Totals t = stats.totals();
    return ProgressLine::Reading{stats.iterationsCompleted().Value(), t.raw_sent, t.wire_sent};
  };
  ProgressLine progress(reading(), steadyNow());
  std::function<void()> summarize = [&] {
    if (c.agent_summary_interval <= 0) return;
    summary.expires_after(steadySeconds(c.agent_summary_interval));
    summary.async_wait([&](boost::system::error_code ec) {
      if (ec) return;
      if (auto line = progress.next(reading(), steadyNow())) GC_LOG(kInfo, "agent", *line);
      summarize();
    });
  };
  summarize();

  asio::signal_set signals(io, SIGINT, SIGTERM);
  signals.async_wait([&](boost::system::error_code ec, int signal) {
    if (ec) return;
    GC_LOG(kInfo, "agent", "signal ", signal, ": shutting down");
    health.setServing(false);
    server.stop(Status::unavailable("agent shutting down"));
    // The peers hear it from us, not from a timeout; a moment of progress lets the word leave.
    transport->goodbye(strCat("agent stopping on signal ", signal));
    for (int i = 0; i < 50; ++i) {
      transport->progress();
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    pump.stop();
    ready.cancel();
    summary.cancel();
    refresh.cancel();
    io.stop();
  });
  pthread_sigmask(SIG_UNBLOCK, &stop_signals, nullptr);

  io.run();
  server.stop(Status::unavailable("agent shutting down"));
  const EngineCounters& e = engine.counters();
  GC_LOG(kInfo, "agent", "done: ", server.counters().iterations_completed, " iterations; sent ", e.raw_bytes_sent,
         " raw bytes as ", e.wire_bytes_sent, " wire bytes (ratio ",
         e.wire_bytes_sent ? static_cast<double>(e.raw_bytes_sent) / e.wire_bytes_sent : 0.0, "); ",
         e.bad_messages, " bad peer messages, ", server.counters().bad_messages, " bad trainer messages");
  return failure;
}

}  // namespace gcagent::agent
