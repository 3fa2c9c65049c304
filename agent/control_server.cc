#include "agent/control_server.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <deque>
#include <optional>
#include <set>
#include <variant>

#include "agent/config.h"
#include "common/log.h"
#include "common/str_cat.h"
#include "shm/fd_passing.h"
#include "shm/protocol.h"
#include "shm/segment.h"

namespace gcagent::agent {

namespace protocol = shm::protocol;
using asio::local::stream_protocol;

// One local trainer's gradient of an (iteration, key), ready to reduce.
struct ControlServer::Contribution {
  float* host = nullptr;    // its shared-memory slot, or the host buffer a device slot stages to
  float* device = nullptr;  // its device slot; null for a host trainer
  std::shared_ptr<LocalCoder> coder;  // of the device slot's GPU; null: staged through the host
  std::weak_ptr<Session> session;
  std::shared_ptr<const void> pin;  // the memory of host: its segment, or its device slots' staging
  size_t index = 0;  // the slot, in the trainer's declaration
  uint64_t elements = 0;
};

struct ControlServer::Job {
  std::string name;
  uint64_t id = 0;
  uint32_t local_size = 0;
  std::vector<Session*> members;  // by local rank
  std::vector<protocol::TensorDecl> tensors;
  uint64_t generation = 0;
  // Submissions of an (iteration, key) so far, by local rank.
  std::map<std::pair<uint64_t, uint64_t>, std::vector<Contribution>> pending;
  // Reductions in flight that run on a GPU's coder: their averages are in the device slots.
  std::set<std::pair<uint64_t, uint64_t>> coded;
  std::map<uint64_t, size_t> keys_done;  // iteration -> keys completed
  size_t inFlight = 0;                   // reductions handed to the engine, not yet done
  uint64_t last_completed = 0;           // the last iteration whose every key completed
  // Set once a trainer of the job left, here or on another node: iterations after
  // lost_after can never complete.
  Status lost;
  uint64_t lost_after = 0;
};

class ControlServer::Session : public std::enable_shared_from_this<Session> {
 public:
  Session(ControlServer& server, stream_protocol::socket socket, uint32_t id)
      : server_(server), socket_(std::move(socket)), id_(id) {
    // The kernel's word on who the trainer is: its segments are made out to that user.
    ucred cred{};
    socklen_t length = sizeof cred;
    if (::getsockopt(socket_.native_handle(), SOL_SOCKET, SO_PEERCRED, &cred, &length) == 0) peer_uid_ = cred.uid;
  }

  void start() {
    arm(hello_deadline_, server_.options_.hello_timeout, [this] { return job_ == nullptr; }, "no hello");
    readHeader();
  }

  // `fd`, when given, rides on the frame's first byte (SCM_RIGHTS); it must stay open until
  // the frame is written.
  void send(const protocol::Message& m, int fd = -1) {
    if (closed_) return;
    out_.push_back({protocol::encode(m), fd});
    if (!writing_) writeNext();
  }

  void sendError(uint32_t request, const Status& why) {
    send({request, protocol::Error{why.code(), why.message()}});
  }

  // Writes what is queued, synchronously, then closes: the agent is stopping.
  void flushAndClose() {
    boost::system::error_code ec;
    while (!out_.empty() && !ec) {
      if (out_.front().fd < 0) asio::write(socket_, asio::buffer(out_.front().bytes), ec);
      out_.pop_front();  // a descriptor cannot be worth waiting for: the agent is stopping
    }
    close();
  }

  void close() {
    if (closed_) return;
    closed_ = true;
    if (segment_) segment_->unlink();  // mapped on while a send still reads it, but gone from /dev/shm
    hello_deadline_.cancel();
    body_deadline_.cancel();
    boost::system::error_code ec;
    socket_.close(ec);
    server_.sessionClosed(this);
  }

  uint32_t id() const { return id_; }
  bool closed() const { return closed_; }
  uint32_t localRank() const { return local_rank_; }
  const std::shared_ptr<Job>& job() const { return job_; }

  // The request that submitted (iteration, key), if this trainer did; forgets it.
  bool submittedAfter(uint64_t iteration) const {
    return !submits_.empty() && std::prev(submits_.end())->first.first > iteration;
  }

  std::optional<uint32_t> takeSubmit(uint64_t iteration, uint64_t key) {
    auto it = submits_.find({iteration, key});
    if (it == submits_.end()) return std::nullopt;
    uint32_t request = it->second;
    submits_.erase(it);
    return request;
  }

 private:
  struct Slot {
    float* data;
    uint64_t elements;
    size_t index;  // in the declaration
  };
  struct Outgoing {
    std::vector<std::byte> bytes;
    int fd = -1;
  };

  void readHeader() {
    auto self = shared_from_this();
    asio::async_read(socket_, asio::buffer(header_), [this, self](boost::system::error_code ec, size_t) {
      if (ec) return close();
      auto header = protocol::parseHeader(header_);
      if (!header.ok()) {
        // The stream cannot be resynchronised after a bad header: answer and hang up.
        server_.badMessage(header.status());
        GC_LOG(kWarn, "control", "trainer ", id_, ": ", header.status().message(), "; disconnecting");
        sendError(0, header.status());
        close_after_write_ = true;
        return;
      }
      if (job_ == nullptr && header->body_bytes > kUnidentifiedBodyBytes) {
        const Status why = Status::invalidArgument(strCat("a frame of ", header->body_bytes, " bytes before hello (at most ",
                                                          kUnidentifiedBodyBytes, ")"));
        server_.badMessage(why);
        GC_LOG(kWarn, "control", "trainer ", id_, ": ", why.message(), "; disconnecting");
        sendError(header->request_id, why);
        close_after_write_ = true;
        return;
      }
      body_.clear();
      arm(body_deadline_, server_.options_.body_timeout, [] { return true; }, "a message not finished");
      readBody(*header);
    });
  }

  // Reads the body a chunk at a time, so what the agent holds grows with the bytes that
  // arrived, never with what a header announced.
  void readBody(protocol::Header header) {
    static constexpr size_t kChunk = 256 * 1024;
    const size_t received = body_.size();
    if (received == header.body_bytes) return dispatchBody(header);
    body_.resize(received + std::min<size_t>(kChunk, header.body_bytes - received));
    auto self = shared_from_this();
    asio::async_read(socket_, asio::buffer(body_.data() + received, body_.size() - received),
                     [this, self, header](boost::system::error_code ec, size_t) {
                       if (ec) return close();
                       readBody(header);
                     });
  }

  void dispatchBody(const protocol::Header& header) {
    body_deadline_.cancel();
    auto message = protocol::decode(header, body_);
    if (!message.ok()) {
      server_.badMessage(message.status());
      GC_LOG(kWarn, "control", "trainer ", id_, ": ", message.status().message());
      sendError(header.request_id, message.status());
    } else {
      dispatch(*message);
    }
    if (!closed_) readHeader();
  }

  // Closes the connection unless `still` has become false within `limit`.
  void arm(asio::steady_timer& deadline, std::chrono::milliseconds limit, std::function<bool()> still,
           std::string_view what) {
    deadline.expires_after(limit);
    std::weak_ptr<Session> weak = weak_from_this();
    deadline.async_wait([weak, still = std::move(still), what](boost::system::error_code ec) {
      auto self = weak.lock();
      if (ec || !self || self->closed_ || !still()) return;
      self->server_.timedOut(self->id_, what);
      self->close();
    });
  }

  void writeNext() {
    if (out_.empty()) {
      writing_ = false;
      if (close_after_write_) close();
      return;
    }
    writing_ = true;
    auto self = shared_from_this();
    if (Outgoing& front = out_.front(); front.fd >= 0) {
      // The descriptor goes with the first bytes; asio writes the rest.
      auto sent = shm::sendWithFd(socket_.native_handle(), front.fd, front.bytes);
      if (!sent.ok()) {
        GC_LOG(kWarn, "control", "trainer ", id_, ": ", sent.status().message());
        return close();
      }
      if (*sent == 0) {  // the socket is full
        socket_.async_wait(stream_protocol::socket::wait_write, [this, self](boost::system::error_code ec) {
          if (ec) return close();
          writeNext();
        });
        return;
      }
      front.bytes.erase(front.bytes.begin(), front.bytes.begin() + static_cast<std::ptrdiff_t>(*sent));
      front.fd = -1;
      if (front.bytes.empty()) {
        out_.pop_front();
        return writeNext();
      }
    }
    asio::async_write(socket_, asio::buffer(out_.front().bytes), [this, self](boost::system::error_code ec, size_t) {
      out_.pop_front();
      if (ec) return close();
      writeNext();
    });
  }

  void dispatch(const protocol::Message& m) {
    Status s;
    if (auto* hello = std::get_if<protocol::Hello>(&m.body)) s = onHello(m.request_id, *hello);
    else if (auto* declare = std::get_if<protocol::Declare>(&m.body)) s = onDeclare(m.request_id, *declare);
    else if (auto* device = std::get_if<protocol::DeclareDevice>(&m.body)) s = onDeclareDevice(m.request_id, *device);
    else if (auto* submit = std::get_if<protocol::Submit>(&m.body)) s = onSubmit(m.request_id, *submit);
    else s = Status::invalidArgument(strCat("control message '", protocol::messageTypeName(static_cast<protocol::MessageType>(m.body.index() + 1)),
                                            "' is not one a trainer sends"));
    if (!s.ok()) {
      server_.badMessage(s);
      GC_LOG(kWarn, "control", "trainer ", id_, ": ", s.message());
      sendError(m.request_id, s);
    }
  }

  Status onHello(uint32_t request, const protocol::Hello& h) {
    if (job_) return Status::failedPrecondition(strCat("trainer already joined job '", job_->name, "'"));
    Status error;
    auto job = server_.findOrCreateJob(h.job, h.local_size, &error);
    if (!job) return error;
    if (job->members[h.local_rank] != nullptr)
      return Status::failedPrecondition(strCat("job '", h.job, "': local rank ", h.local_rank, " is already connected"));
    job->members[h.local_rank] = this;
    server_.engine_.stats().job(job->name).trainers->Increment();
    job_ = std::move(job);
    local_rank_ = h.local_rank;
    GC_LOG(kInfo, "control", "trainer ", id_, " (pid ", h.pid, ") joined job '", h.job, "' as local rank ",
           h.local_rank, " of ", h.local_size);
    send({request, protocol::Welcome{id_, server_.options_.node_rank, server_.options_.node_count}});
    return {};
  }

  // Hands the job's declaration to the engine when it changed.
  Status declareTensors(const std::vector<protocol::TensorDecl>& tensors) {
    Job& job = *job_;
    if (tensors == job.tensors) return {};
    if (!job.pending.empty() || job.inFlight != 0)
      return Status::failedPrecondition(strCat("job '", job.name, "': tensors cannot change while a reduction is in flight"));
    std::vector<TensorSpec> specs;
    for (const auto& t : tensors) {
      compress::Params params(t.params.begin(), t.params.end());
      auto policy = takeReductionPolicy(params);  // what is left is the codec's
      if (!policy.ok()) return Status::invalidArgument(strCat("tensor ", t.key, ": ", policy.status().message()));
      specs.push_back({t.key, t.elements, t.priority, {t.codec, std::move(params)}, *policy});
    }
    GC_RETURN_IF_ERROR(server_.engine_.declareJob(job.id, specs));
    job.tensors = tensors;
    ++job.generation;
    GC_LOG(kInfo, "control", "job '", job.name, "': ", tensors.size(), " tensors declared (generation ",
           job.generation, ")");
    return {};
  }

  void forgetSlots() {
    if (segment_) segment_->unlink();  // a re-declaration replaces the old segment under the same name
    segment_.reset();                  // (sends in flight may pin the old mapping a while)
    device_.reset();
    slots_.clear();
  }

  Status onDeclare(uint32_t request, const protocol::Declare& d) {
    if (!job_) return Status::failedPrecondition("declare before hello");
    if (staging_count_ != 0)
      return Status::failedPrecondition("declare while device gradients are still being copied in");
    std::vector<uint64_t> bytes;
    for (const auto& t : d.tensors) bytes.push_back(t.elements * sizeof(float));
    shm::SlotLayout layout = shm::layoutSlots(bytes);
    // The new segment first: a declare refused for want of memory (a full /dev/shm) leaves
    // the previous declaration, its segment and its slots in force. The old name goes (the
    // new segment takes it); its mapping stays until the old slots are forgotten.
    if (segment_) segment_->unlink();
    auto segment = shm::Segment::create(shm::segmentName(server_.options_.shm_prefix, id_), layout.total_bytes,
                                        server_.options_.mode, peer_uid_, server_.options_.group);
    if (!segment.ok()) return segment.status();
    GC_RETURN_IF_ERROR(declareTensors(d.tensors));
    forgetSlots();
    segment_ = std::make_shared<shm::Segment>(std::move(segment).value());
    for (size_t i = 0; i < d.tensors.size(); ++i)
      slots_[d.tensors[i].key] = {reinterpret_cast<float*>(segment_->bytes().data() + layout.offsets[i]),
                                  d.tensors[i].elements, i};
    generation_ = job_->generation;
    send({request, protocol::Declared{segment_->name(), layout.total_bytes, layout.offsets}});
    return {};
  }

  // The tensors live on the trainer's GPU: slots in device memory the agent exports, and
  // host buffers the engine reduces in, filled from the slots after each submit.
  Status onDeclareDevice(uint32_t request, const protocol::DeclareDevice& d) {
    if (!job_) return Status::failedPrecondition("declare before hello");
    if (staging_count_ != 0)
      return Status::failedPrecondition("declare while device gradients are still being copied in");
    std::vector<uint64_t> bytes;
    for (const auto& t : d.tensors) bytes.push_back(t.elements * sizeof(float));
    // The GPU check comes first: a refused trainer must not disturb the job's declaration.
    auto device = server_.device_path_->allocate(d.gpu, bytes);
    if (!device.ok()) {
      // Not a malformed message: this agent cannot serve that GPU. Counted apart.
      server_.deviceRefused(device.status());
      GC_LOG(kWarn, "control", "trainer ", id_, ": device declare refused: ", device.status().message());
      sendError(request, device.status());
      return {};
    }
    GC_RETURN_IF_ERROR(declareTensors(d.tensors));
    forgetSlots();
    device_ = std::move(device).value();
    for (size_t i = 0; i < d.tensors.size(); ++i)
      slots_[d.tensors[i].key] = {device_->hostBuffer(i), d.tensors[i].elements, i};
    generation_ = job_->generation;
    GC_LOG(kInfo, "control", "trainer ", id_, ": ", d.tensors.size(), " device tensors on ", gpuUuidText(d.gpu));
    send({request, device_->offer()}, device_->fd());
    return {};
  }

 public:
  // Completes (iteration, key) for this trainer: device slots get the average first;
  // `coded`: the average is already in the device slot (the coder decoded it there).
  void complete(uint32_t request, uint64_t iteration, uint64_t key, bool coded) {
    auto it = slots_.find(key);
    if (!device_ || it == slots_.end()) return send({request, protocol::Complete{iteration, {key}}});
    auto self = shared_from_this();
    DeviceSlots* device = device_.get();
    auto reply = [this, self, device, request, iteration, key](const Status& st) {
      if (closed_ || device_.get() != device) return;
      if (st.ok()) return send({request, protocol::Complete{iteration, {key}}});
      GC_LOG(kWarn, "control", "trainer ", id_, ": ", st.message());
      sendError(request, Status(st.code(), strCat("tensor ", key, " iteration ", iteration, ": ", st.message())));
    };
    if (coded) return server_.device_path_->signalDone(*device_, std::move(reply));
    server_.engine_.stats().gpuCopy(false).Increment(static_cast<double>(it->second.elements * sizeof(float)));
    server_.device_path_->stageOut(*device_, it->second.index, it->second.elements, std::move(reply));
  }

  // Copies this trainer's device slot of `key` into its host buffer (a reduction that runs on
  // the host); `done` on the io thread.
  void stageIn(size_t index, uint64_t elements, DevicePath::Done done) {
    if (closed_ || !device_) return done(Status::unavailable(strCat("trainer ", id_, " left")));
    ++staging_count_;
    server_.engine_.stats().gpuCopy(true).Increment(static_cast<double>(elements * sizeof(float)));
    auto self = shared_from_this();
    server_.device_path_->stageIn(*device_, index, elements, [this, self, done = std::move(done)](const Status& st) {
      --staging_count_;
      done(st);
    });
  }

 private:
  Status onSubmit(uint32_t request, const protocol::Submit& s) {
    if (!job_ || (!segment_ && !device_)) return Status::failedPrecondition("submit before declare");
    Job& job = *job_;
    if (!job.lost.ok() && s.iteration > job.lost_after)
      return Status(job.lost.code(), strCat("iteration ", s.iteration, " cannot complete: ", job.lost.message()));
    if (generation_ != job.generation)
      return Status::failedPrecondition("the job's tensors were re-declared by another trainer: declare again");
    for (uint64_t key : s.keys) {
      if (slots_.count(key) == 0) return Status::invalidArgument(strCat("tensor ", key, " is not declared"));
      auto last = last_iteration_.find(key);
      if (last != last_iteration_.end() && s.iteration <= last->second)
        return Status::invalidArgument(strCat("tensor ", key, ": iteration ", s.iteration,
                                              " was already submitted or is older than iteration ", last->second));
    }
    for (uint64_t key : s.keys) {
      last_iteration_[key] = s.iteration;
      submits_[{s.iteration, key}] = request;
      if (device_) {
        // The gradient is on the GPU: whatever reads it next (the coder or a staging copy)
        // waits for the trainer's ready event.
        if (Status ready = server_.device_path_->awaitReady(*device_); !ready.ok()) {
          takeSubmit(s.iteration, key);
          GC_LOG(kWarn, "control", "trainer ", id_, ": ", ready.message());
          sendError(request, Status(ready.code(), strCat("tensor ", key, " iteration ", s.iteration, ": ",
                                                         ready.message())));
          continue;
        }
      }
      contribute(s.iteration, key);
    }
    return {};
  }

  // This trainer's buffer of (iteration, key) is ready: starts the reduction once every
  // local trainer's is.
  void contribute(uint64_t iteration, uint64_t key) {
    Job& job = *job_;
    auto& entries = job.pending[{iteration, key}];
    entries.resize(job.local_size);
    const Slot& slot = slots_[key];
    Contribution& mine = entries[local_rank_];
    mine.host = slot.data;
    mine.device = device_ ? device_->deviceBuffer(slot.index) : nullptr;
    mine.coder = device_ ? device_->coder() : nullptr;
    mine.session = weak_from_this();
    mine.pin = device_ ? std::shared_ptr<const void>(device_) : std::shared_ptr<const void>(segment_);
    mine.index = slot.index;
    mine.elements = slot.elements;
    for (const Contribution& c : entries)
      if (c.host == nullptr) return;
    std::vector<Contribution> ready = std::move(entries);
    job.pending.erase({iteration, key});
    server_.reduce(job_, iteration, key, std::move(ready));
  }

  ControlServer& server_;
  stream_protocol::socket socket_;
  uint32_t id_;
  std::shared_ptr<Job> job_;
  uint32_t local_rank_ = 0;
  std::optional<uid_t> peer_uid_;
  // Shared: the engine pins them while it sends straight from them (ReductionEngine::reduce).
  std::shared_ptr<shm::Segment> segment_;
  std::shared_ptr<DeviceSlots> device_;       // instead of segment_ for a device declaration
  size_t staging_count_ = 0;                  // copies from device slots not yet finished
  uint64_t generation_ = 0;
  std::unordered_map<uint64_t, Slot> slots_;
  std::unordered_map<uint64_t, uint64_t> last_iteration_;
  std::map<std::pair<uint64_t, uint64_t>, uint32_t> submits_;
  std::array<std::byte, protocol::kHeaderBytes> header_{};
  std::vector<std::byte> body_;
  asio::steady_timer hello_deadline_{socket_.get_executor()};
  asio::steady_timer body_deadline_{socket_.get_executor()};
  std::deque<Outgoing> out_;
  bool writing_ = false;
  bool close_after_write_ = false;
  bool closed_ = false;
};

ControlServer::ControlServer(asio::io_context& io, ReductionEngine& engine, ServerOptions options)
    : io_(io),
      engine_(engine),
      options_(std::move(options)),
      acceptor_(io),
      accept_retry_(io),
      device_path_(options_.device_path) {}

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
    auto session = std::make_shared<Session>(*this, std::move(socket), next_trainer_id_++);
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

std::shared_ptr<ControlServer::Job> ControlServer::findOrCreateJob(const std::string& name, uint32_t local_size,
                                                                   Status* error) {
  const uint64_t id = jobIdOf(name);
  auto& job = jobs_[id];
  if (!job) {
    job = std::make_shared<Job>();
    job->name = name;
    job->id = id;
    job->local_size = local_size;
    job->members.assign(local_size, nullptr);
  } else if (job->name != name) {
    *error = Status::failedPrecondition(strCat("job '", name, "' collides with job '", job->name, "'"));
    return nullptr;
  } else if (job->local_size != local_size) {
    *error = Status::invalidArgument(strCat("job '", name, "' has ", job->local_size,
                                            " local trainers, this one says ", local_size));
    return nullptr;
  }
  return job;
}

void ControlServer::onReduced(uint64_t job_id, uint64_t iteration, uint64_t key, const Status& status) {
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return;
  if (it->second->inFlight > 0) --it->second->inFlight;
  notify(*it->second, iteration, key, status);
}

void ControlServer::onJobLost(uint64_t job_id, uint64_t last_completed, const Status& why) {
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return;
  std::shared_ptr<Job> job = it->second;
  if (job->lost.ok()) {
    job->lost = why;
    job->lost_after = last_completed;
  }
  // Iterations up to last_completed still complete here: the other node sent its part.
  bool later = false;
  for (Session* member : job->members) later |= member != nullptr && member->submittedAfter(last_completed);
  if (!later) return;
  GC_LOG(kWarn, "control", "job '", job->name, "': ", why.message());
  for (auto& [entry, buffers] : std::exchange(job->pending, {})) notify(*job, entry.first, entry.second, why);
  engine_.failJob(job->id, why);
}

void ControlServer::notify(Job& job, uint64_t iteration, uint64_t key, const Status& status) {
  for (Session* member : job.members) {
    if (member == nullptr) continue;
    auto request = member->takeSubmit(iteration, key);
    if (!request) continue;
    if (status.ok()) {
      member->complete(*request, iteration, key, job.coded.count({iteration, key}) != 0);
    } else {
      member->sendError(*request, Status(status.code(), strCat("tensor ", key, " iteration ", iteration, ": ",
                                                               status.message())));
    }
  }
  job.coded.erase({iteration, key});
  if (!status.ok()) {
    GC_LOG(kWarn, "control", "job '", job.name, "' tensor ", key, " iteration ", iteration, " failed: ", status.message());
    job.keys_done.erase(iteration);
    return;
  }
  if (++job.keys_done[iteration] == job.tensors.size()) {
    job.keys_done.erase(iteration);
    job.last_completed = std::max(job.last_completed, iteration);
    ++counters_.iterations_completed;
    engine_.stats().iterationsCompleted().Increment();
    engine_.stats().job(job.name).iterations->Increment();
  }
}

void ControlServer::reduce(const std::shared_ptr<Job>& job, uint64_t iteration, uint64_t key,
                           std::vector<Contribution> ready) {
  ++job->inFlight;
  // On the GPU when every local gradient is in device slots of one GPU with a coder, and the
  // GPU codes this tensor's codec faster than the CPU.
  const std::shared_ptr<LocalCoder> coder = ready.front().coder;
  const bool on_device = coder && std::all_of(ready.begin(), ready.end(), [&](const Contribution& c) {
    return c.device != nullptr && c.coder == coder;
  }) && engine_.codesOnDevice(job->id, key);
  if (on_device) {
    std::vector<float*> buffers;
    for (const Contribution& c : ready) buffers.push_back(c.device);
    job->coded.insert({iteration, key});
    Status st = engine_.reduce(job->id, iteration, key, std::move(buffers), coder);
    if (!st.ok()) onReduced(job->id, iteration, key, st);
    return;
  }
  std::vector<float*> buffers;
  for (const Contribution& c : ready) buffers.push_back(c.host);
  auto pins = std::make_shared<std::vector<std::shared_ptr<const void>>>();
  for (const Contribution& c : ready) pins->push_back(c.pin);
  size_t staging = 0;
  for (const Contribution& c : ready) staging += c.device != nullptr;
  if (staging == 0) {
    Status st = engine_.reduce(job->id, iteration, key, std::move(buffers), nullptr, pins);
    if (!st.ok()) onReduced(job->id, iteration, key, st);
    return;
  }
  // Device slots of several GPUs, or beside host trainers: through the host buffers.
  struct Staging {
    size_t left;
    Status first_error;
    std::vector<float*> buffers;
    std::vector<std::weak_ptr<Session>> owners;  // the buffers' trainers
  };
  auto staged = std::make_shared<Staging>(Staging{staging, {}, std::move(buffers), {}});
  for (const Contribution& c : ready) staged->owners.push_back(c.session);
  const uint64_t generation = job->generation;
  for (const Contribution& c : ready) {
    if (c.device == nullptr) continue;
    auto done = [this, job, staged, iteration, key, generation, pins](const Status& st) {
      if (!st.ok() && staged->first_error.ok()) staged->first_error = st;
      if (--staged->left != 0) return;
      auto live = jobs_.find(job->id);
      if (live == jobs_.end() || live->second != job) return;  // every trainer left meanwhile
      Status why = staged->first_error;
      // A trainer that left meanwhile took its buffer with it.
      for (const auto& owner : staged->owners) {
        auto session = owner.lock();
        if (why.ok() && (!session || session->closed())) why = Status::unavailable("a trainer of the job left");
      }
      if (why.ok() && generation != job->generation)
        why = Status::failedPrecondition("the job's tensors were re-declared by another trainer: declare again");
      if (why.ok()) why = engine_.reduce(job->id, iteration, key, std::move(staged->buffers), nullptr, pins);
      if (!why.ok()) onReduced(job->id, iteration, key, why);
    };
    if (auto session = c.session.lock()) {
      session->stageIn(c.index, c.elements, std::move(done));
    } else {
      done(Status::unavailable("a trainer of the job left"));
    }
  }
}

void ControlServer::sessionClosed(Session* session) {
  auto owned = sessions_.find(session);
  if (owned == sessions_.end()) return;
  std::shared_ptr<Session> keep = owned->second;  // alive until its buffers are out of the engine
  sessions_.erase(owned);
  --counters_.trainers_connected;
  engine_.stats().trainersConnected().Decrement();
  std::shared_ptr<Job> job = session->job();
  if (!job) return;
  GC_LOG(kInfo, "control", "trainer ", session->id(), " left job '", job->name, "' (local rank ",
         session->localRank(), ")");
  job->members[session->localRank()] = nullptr;
  engine_.stats().job(job->name).trainers->Decrement();
  const Status why = Status::unavailable(strCat("trainer local rank ", session->localRank(), " of job '", job->name,
                                                "' left"));
  // Its shared memory is about to go: nothing may still point into it.
  for (auto& [entry, buffers] : std::exchange(job->pending, {})) notify(*job, entry.first, entry.second, why);
  engine_.failJob(job->id, why);
  if (job->lost.ok()) {
    job->lost = why;
    job->lost_after = job->last_completed;
  }
  if (options_.on_trainer_left && !stopping_) options_.on_trainer_left(job->id, job->last_completed, why);
  if (std::all_of(job->members.begin(), job->members.end(), [](Session* s) { return s == nullptr; })) {
    engine_.dropJob(job->id);
    engine_.stats().retireJob(job->name);
    jobs_.erase(job->id);
  }
}

void ControlServer::stop(const Status& why) {
  if (stopping_) return;
  stopping_ = true;
  accept_retry_.cancel();
  boost::system::error_code ec;
  acceptor_.close(ec);
  for (auto& [id, job] : jobs_) {
    for (auto& [entry, buffers] : std::exchange(job->pending, {})) notify(*job, entry.first, entry.second, why);
    engine_.failJob(id, why);
  }
  while (!sessions_.empty()) sessions_.begin()->second->flushAndClose();
  (void)removeStaleSocket(options_.socket_path);  // ours: a socket, unless replaced meanwhile
}

}  // namespace gcagent::agent
