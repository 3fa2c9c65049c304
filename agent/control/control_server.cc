#include "agent/control/control_server.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "agent/config/config.h"
#include "agent/control/device_staging.h"
#include "agent/control/trainer_session.h"
#include "common/log.h"
#include "common/str_cat.h"

namespace gcagent::agent {

using asio::local::stream_protocol;

ControlServer::ControlServer(asio::io_context& io, ReductionEngine& engine, ServerOptions options)
    : io_(io),
      engine_(engine),
      options_(std::move(options)),
      acceptor_(io),
      accept_retry_(io),
      device_path_(options_.device_path),
      jobs_([&engine](uint64_t job, const std::vector<TensorSpec>& tensors) { return engine.declareJob(job, tensors); }) {
  jobs_.attach(*this);
  jobs_.attach(engine_);
}

ControlServer::~ControlServer() { stop(Status::unavailable("agent shutting down")); }

void ControlServer::deviceRefused(const Status& why) {
  ++counters_.device_refused;
  engine_.stats().recordError(metrics::ErrorKind::kDeviceUnavailable, strCat("device declare: ", why.message()));
}

void ControlServer::badMessage(const Status& why) {
  ++counters_.bad_messages;
  engine_.stats().recordError(metrics::ErrorKind::kBadMessage, strCat("trainer message: ", why.message()));
}

namespace {

// Removes what a crashed agent left at the socket's path: a socket and nothing else (a
// mistyped agent.socket must never delete someone's file). Also refuses a path that does
// not fit a Unix socket address.
Status removeStaleSocket(const std::string& path) {
  if (path.size() > kMaxSocketPathBytes)
    return Status::invalidArgument(strCat("control socket ", path, ": ", path.size(), " bytes, more than the ",
                                          kMaxSocketPathBytes, " a Unix socket path can hold"));
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return {};  // nothing there
  if (!S_ISSOCK(st.st_mode))
    return Status::failedPrecondition(strCat("control socket ", path, ": a file that is not a socket is there; "
                                             "not removing it (check agent.socket)"));
  ::unlink(path.c_str());
  return {};
}

}  // namespace

Status ControlServer::start() {
  if (!device_path_) device_path_ = makeDevicePath(io_);
  GC_RETURN_IF_ERROR(removeStaleSocket(options_.socket_path));
  boost::system::error_code ec;
  acceptor_.open(stream_protocol(), ec);
  if (!ec) acceptor_.bind(stream_protocol::endpoint(options_.socket_path), ec);
  if (ec) return Status::unavailable(strCat("control socket ", options_.socket_path, ": ", ec.message()));
  if (::chmod(options_.socket_path.c_str(), options_.mode) != 0)
    return Status::unavailable(strCat("control socket ", options_.socket_path, ": chmod: ", std::strerror(errno)));
  if (options_.group && ::chown(options_.socket_path.c_str(), static_cast<uid_t>(-1), *options_.group) != 0)
    return Status::unavailable(strCat("control socket ", options_.socket_path, ": chown to gid ", *options_.group, ": ",
                                      std::strerror(errno)));
  acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return Status::unavailable(strCat("control socket ", options_.socket_path, ": listen: ", ec.message()));
  GC_LOG(kInfo, "control", "accepting trainers on ", options_.socket_path);
  accept();
  return {};
}

void ControlServer::accept() {
  acceptor_.async_accept([this](boost::system::error_code ec, stream_protocol::socket socket) {
    if (ec == asio::error::operation_aborted || stopping_) return;
    if (ec) return acceptFailed(ec);
    if (accept_delay_.succeeded()) {
      GC_LOG(kInfo, "control", "accepting trainers again on ", options_.socket_path);
      if (options_.on_accepting) options_.on_accepting(true);
    }
    if (sessions_.size() >= options_.max_connections) {
      ++counters_.connections_refused;
      if (!std::exchange(refusing_, true))
        GC_LOG(kWarn, "control", options_.max_connections, " trainer connections are open; refusing more until "
               "some close");
      boost::system::error_code ignored;
      socket.close(ignored);
      return accept();
    }
    refusing_ = false;
    auto session = std::make_shared<TrainerSession>(static_cast<SessionHost&>(*this), std::move(socket), next_trainer_id_++);
    sessions_[session.get()] = session;
    ++counters_.trainers_connected;
    engine_.stats().trainersConnected().Increment();
    session->start();
    accept();
  });
}

// Out of descriptors (EMFILE, ENFILE) or memory: the listener stays, and accepting resumes
// after a delay, as soon as the system lets it. Logged once per streak; /readyz says not
// serving meanwhile.
void ControlServer::acceptFailed(const boost::system::error_code& ec) {
  ++counters_.accept_errors;
  engine_.stats().recordError(metrics::ErrorKind::kAcceptFailed, strCat("control socket: accept: ", ec.message()));
  if (!accept_delay_.failing()) {
    GC_LOG(kWarn, "control", "accept failed: ", ec.message(), "; retrying until it works again");
    if (options_.on_accepting) options_.on_accepting(false);
  }
  accept_retry_.expires_after(accept_delay_.next());
  accept_retry_.async_wait([this](boost::system::error_code wait) {
    if (!wait && !stopping_) accept();
  });
}

void ControlServer::timedOut(uint32_t trainer, std::string_view what) {
  ++counters_.sessions_timed_out;
  engine_.stats().recordError(metrics::ErrorKind::kTimeout, strCat("trainer ", trainer, ": ", what, " in time"));
  GC_LOG(kWarn, "control", "trainer ", trainer, ": ", what, " in time; disconnecting");
}

void ControlServer::onReduced(uint64_t job_id, uint64_t iteration, uint64_t key, const Status& status,
                              std::optional<uint32_t> reload_root) {
  std::shared_ptr<LocalJob> job = jobs_.find(job_id);
  if (!job) return;
  if (job->inFlight > 0) --job->inFlight;
  // Trainers that connect from now on hold the weights loaded after the first step completed
  // under a membership that took nodes in: they are told no joiners.
  if (status.ok()) membership_.joined.clear();
  notify(*job, iteration, key, status, reload_root);
}

void ControlServer::onJobLost(uint64_t job_id, uint64_t last_completed, const Status& why) {
  std::shared_ptr<LocalJob> job = jobs_.find(job_id);
  if (!job) return;
  job->loseAfter(last_completed, why);
  // Iterations up to last_completed still complete here: the other node sent its part.
  bool later = false;
  for (TrainerSession* member : job->members) later |= member != nullptr && member->submittedAfter(last_completed);
  if (!later) return;
  GC_LOG(kWarn, "control", "job '", job->name, "': ", why.message());
  jobs_.fail(job->id, why);
}

void ControlServer::onMembership(shm::protocol::Membership membership) {
  membership_ = std::move(membership);
  for (auto& [raw, session] : sessions_)
    if (session->job()) session->send({0, membership_});
}

void ControlServer::notify(LocalJob& job, uint64_t iteration, uint64_t key, const Status& status,
                           std::optional<uint32_t> reload_root) {
  for (TrainerSession* member : job.members) {
    if (member == nullptr) continue;
    auto request = member->takeSubmit(iteration, key);
    if (!request) continue;
    if (status.ok()) {
      member->complete(*request, iteration, key, job.placementOf(key).where == Placement::kDevice, reload_root);
    } else {
      member->sendError(*request, Status(status.code(), strCat("tensor ", key, " iteration ", iteration, ": ",
                                                               status.message())));
    }
  }
  if (!status.ok()) {
    if (uint64_t held = 0; job.failure_log.allow(steadyNow(), &held))
      GC_LOG(kWarn, "control", "job '", job.name, "' tensor ", key, " iteration ", iteration, " failed: ", status.message(),
             held > 0 ? strCat(" (and ", held, " more failures since the last line)") : std::string());
    job.keys_done.erase(iteration);
    return;
  }
  if (job.keyCompleted(iteration)) {
    ++counters_.iterations_completed;
    engine_.stats().iterationsCompleted().Increment();
    engine_.stats().job(job.name).iterations->Increment();
  }
}

void ControlServer::failJob(uint64_t job_id, const Status& why) {
  if (std::shared_ptr<LocalJob> job = jobs_.find(job_id)) failPending(*job, why);
}

void ControlServer::dropJob(uint64_t job_id) {
  if (std::shared_ptr<LocalJob> job = jobs_.find(job_id)) engine_.stats().retireJob(job->name);
}

void ControlServer::failPending(LocalJob& job, const Status& why) {
  for (auto& [entry, buffers] : std::exchange(job.pending, {})) notify(job, entry.first, entry.second, why);
}

void ControlServer::reduce(const std::shared_ptr<LocalJob>& job, uint64_t iteration, uint64_t key,
                           std::vector<Contribution> ready) {
  ++job->inFlight;
  job->reductionStarted(iteration);
  const TensorPlacement& place = job->placementOf(key);
  // Decided at declare time (tensor_placement.h); a contribution that disagrees would put the
  // result where nobody reads it.
  const bool agrees = std::all_of(ready.begin(), ready.end(), [&](const Contribution& c) {
    switch (place.where) {
      case Placement::kHost: return c.device == nullptr;
      case Placement::kDevice: return c.device != nullptr && c.coder == place.coder;
      case Placement::kStaged: return true;
    }
    return false;
  });
  if (!agrees) {
    const Status why = Status::internal(strCat("tensor ", key, ": the local trainers' slots are not where the job's "
                                               "declaration placed them (", describe(place.where), ")"));
    GC_LOG(kError, "control", "job '", job->name, "': ", why.message());
    return onReduced(job->id, iteration, key, why);
  }
  std::vector<float*> buffers;
  for (const Contribution& c : ready) buffers.push_back(place.where == Placement::kDevice ? c.device : c.host);
  if (place.where == Placement::kDevice) {
    Status st = engine_.reduce(job->id, iteration, key, std::move(buffers), place.coder);
    if (!st.ok()) onReduced(job->id, iteration, key, st);
    return;
  }
  auto pins = std::make_shared<std::vector<std::shared_ptr<const void>>>();
  for (const Contribution& c : ready) pins->push_back(c.pin);
  if (place.where == Placement::kHost) {
    Status st = engine_.reduce(job->id, iteration, key, std::move(buffers), nullptr, pins);
    if (!st.ok()) onReduced(job->id, iteration, key, st);
    return;
  }
  // Device slots of several GPUs, or beside host trainers: through the host buffers.
  const uint64_t generation = job->generation;
  stageDeviceSlots(ready, [this, job, iteration, key, generation, pins, buffers = std::move(buffers)](
                              const Status& staged) mutable {
    if (jobs_.find(job->id) != job) return;  // every trainer left meanwhile
    Status why = staged;
    if (why.ok() && generation != job->generation)
      why = Status::failedPrecondition("the job's tensors were re-declared by another trainer: declare again");
    if (why.ok()) why = engine_.reduce(job->id, iteration, key, std::move(buffers), nullptr, pins);
    if (!why.ok()) onReduced(job->id, iteration, key, why);
  });
}

void ControlServer::replaceMember(const std::shared_ptr<LocalJob>& job, TrainerSession& old, TrainerSession& now) {
  job->members[now.localRank()] = &now;  // first: closing old is then no leave
  ++counters_.trainers_reconnected;
  engine_.stats().recovery(metrics::Stats::kTrainerReconnected).Increment();
  const Status why = Status::unavailable(strCat("local rank ", now.localRank(), " of job '", job->name,
                                                "' connected again: its iteration in flight is given up"));
  failPending(*job, why);
  engine_.giveUp(job->id, why);
  old.close();
}

void ControlServer::sessionClosed(TrainerSession* session) {
  auto owned = sessions_.find(session);
  if (owned == sessions_.end()) return;
  std::shared_ptr<TrainerSession> keep = owned->second;  // alive until its buffers are out of the engine
  sessions_.erase(owned);
  --counters_.trainers_connected;
  engine_.stats().trainersConnected().Decrement();
  std::shared_ptr<LocalJob> job = session->job();
  if (!job || job->members[session->localRank()] != session) return;  // never joined, or replaced
  GC_LOG(kInfo, "control", "trainer ", session->id(), " left job '", job->name, "' (local rank ",
         session->localRank(), ")");
  job->members[session->localRank()] = nullptr;
  engine_.stats().job(job->name).trainers->Decrement();
  const Status why = Status::unavailable(strCat("trainer local rank ", session->localRank(), " of job '", job->name,
                                                "' left"));
  // Its shared memory is about to go: nothing may still point into it.
  jobs_.fail(job->id, why);
  job->loseAfter(job->last_completed, why);
  if (options_.on_trainer_left && !stopping_) options_.on_trainer_left(job->id, job->last_completed, why);
  if (job->deserted()) jobs_.drop(job->id);
}

void ControlServer::stop(const Status& why) {
  if (stopping_) return;
  stopping_ = true;
  accept_retry_.cancel();
  boost::system::error_code ec;
  acceptor_.close(ec);
  jobs_.failAll(why);
  while (!sessions_.empty()) sessions_.begin()->second->flushAndClose();
  (void)removeStaleSocket(options_.socket_path);  // ours: a socket, unless replaced meanwhile
}

}  // namespace gcagent::agent
