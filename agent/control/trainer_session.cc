#include "agent/control/trainer_session.h"

#include <variant>

#include "agent/control/slot_dtype.h"
#include "common/gpu_uuid.h"
#include "common/log.h"
#include "common/str_cat.h"
#include "shm/segment.h"

namespace gcagent::agent {

namespace protocol = shm::protocol;

TrainerSession::TrainerSession(SessionHost& host, asio::local::stream_protocol::socket socket, uint32_t id)
    : TrainerConnection(std::move(socket), id, {host.options().hello_timeout, host.options().body_timeout}),
      host_(host) {}

std::optional<uint32_t> TrainerSession::takeSubmit(uint64_t iteration, uint64_t key) {
  auto it = submits_.find({iteration, key});
  if (it == submits_.end()) return std::nullopt;
  uint32_t request = it->second;
  submits_.erase(it);
  return request;
}

void TrainerSession::badMessage(const Status& why) { host_.badMessage(why); }

void TrainerSession::timedOut(std::string_view what) { host_.timedOut(id(), what); }

void TrainerSession::onClosing() {
  if (segment_) segment_->unlink();  // mapped on while a send still reads it, but gone from /dev/shm
}

void TrainerSession::onClosed() { host_.sessionClosed(this); }

void TrainerSession::dispatch(const protocol::Message& m) {
  Status s;
  if (auto* hello = std::get_if<protocol::Hello>(&m.body)) s = onHello(m.request_id, *hello);
  else if (auto* declare = std::get_if<protocol::Declare>(&m.body)) s = onDeclare(m.request_id, *declare);
  else if (auto* device = std::get_if<protocol::DeclareDevice>(&m.body)) s = onDeclareDevice(m.request_id, *device);
  else if (auto* submit = std::get_if<protocol::Submit>(&m.body)) s = onSubmit(m.request_id, *submit);
  else if (std::holds_alternative<protocol::Ping>(m.body)) return send({m.request_id, protocol::Pong{}});
  else if (auto* get = std::get_if<protocol::StateGet>(&m.body)) s = onStateGet(m.request_id, *get);
  else if (auto* part = std::get_if<protocol::StatePart>(&m.body)) s = onStatePart(m.request_id, std::move(*part));
  else if (auto* query = std::get_if<protocol::IterationQuery>(&m.body)) s = onIterationQuery(m.request_id, *query);
  else s = Status::invalidArgument(strCat("control message '", protocol::messageTypeName(static_cast<protocol::MessageType>(m.body.index() + 1)),
                                          "' is not one a trainer sends"));
  if (!s.ok()) {
    host_.badMessage(s);
    GC_LOG(kWarn, "control", "trainer ", id(), ": ", s.message());
    sendError(m.request_id, s);
  }
}

Status TrainerSession::onHello(uint32_t request, const protocol::Hello& h) {
  if (job_) return Status::failedPrecondition(strCat("trainer already joined job '", job_->name, "'"));
  Status error;
  auto job = host_.jobs().findOrCreate(h.job, h.local_size, &error);
  if (!job) return error;
  TrainerSession* held = job->members[h.local_rank];
  // The process that holds the rank connecting again (its client gave up on this agent as
  // frozen and could not tell it so): the new connection takes the old one's place. Any
  // other process is a second trainer claiming the rank.
  if (held != nullptr && (peerPid() <= 0 || held->peerPid() != peerPid()))
    return Status::failedPrecondition(strCat("job '", h.job, "': local rank ", h.local_rank, " is already connected (",
                                             "trainer ", held->id(), held->peerPid() > 0 ? strCat(", pid ", held->peerPid()) : "",
                                             "); only that process may connect again in its place"));
  job_ = job;
  local_rank_ = h.local_rank;
  if (held != nullptr) {
    GC_LOG(kInfo, "control", "trainer ", id(), " (pid ", h.pid, ") is local rank ", h.local_rank, " of job '", h.job,
           "' again, in place of trainer ", held->id(), " (the same process); that connection is closed");
    host_.replaceMember(job, *held, *this);
  } else {
    job->members[h.local_rank] = this;
    host_.stats().job(job->name).trainers->Increment();
    GC_LOG(kInfo, "control", "trainer ", id(), " (pid ", h.pid, ") joined job '", h.job, "' as local rank ",
           h.local_rank, " of ", h.local_size);
  }
  const auto timeout_ms = std::min<int64_t>(host_.options().reduction_timeout.count(), UINT32_MAX);
  send({request, protocol::Welcome{id(), host_.options().node_rank, host_.options().node_count,
                                   static_cast<uint32_t>(timeout_ms)}});
  if (host_.membership().epoch != 0) send({0, host_.membership()});  // the nodes changed since the start
  return {};
}

void TrainerSession::forgetSlots() {
  if (segment_) segment_->unlink();  // a re-declaration replaces the old segment under the same name
  segment_.reset();                  // (sends in flight may pin the old mapping a while)
  device_.reset();
  slots_.clear();
}

Status TrainerSession::onDeclare(uint32_t request, const protocol::Declare& d) {
  if (!job_) return Status::failedPrecondition("declare before hello");
  if (staging_count_ != 0)
    return Status::failedPrecondition("declare while device gradients are still being copied in");
  GC_RETURN_IF_ERROR(job_->checkSlots(local_rank_, MemberSlots{}));
  std::vector<uint64_t> bytes;
  for (const auto& t : d.tensors) bytes.push_back(t.elements * protocol::dtypeBytes(t.dtype));
  shm::SlotLayout layout = shm::layoutSlots(bytes);
  // The new segment first: a declare refused for want of memory (a full /dev/shm) leaves
  // the previous declaration, its segment and its slots in force. The old name goes (the
  // new segment takes it); its mapping stays until the old slots are forgotten.
  if (segment_) segment_->unlink();
  auto segment = shm::Segment::create(shm::segmentName(host_.options().shm_prefix, id()), layout.total_bytes,
                                      host_.options().mode, peerUid(), host_.options().group);
  if (!segment.ok()) return segment.status();
  GC_RETURN_IF_ERROR(host_.jobs().declare(*job_, d.tensors));
  forgetSlots();
  segment_ = std::make_shared<shm::Segment>(std::move(segment).value());
  for (size_t i = 0; i < d.tensors.size(); ++i) {
    const protocol::TensorDecl& t = d.tensors[i];
    std::byte* at = segment_->bytes().data() + layout.offsets[i];
    Slot slot{reinterpret_cast<float*>(at), t.elements, i, t.dtype, nullptr, nullptr};
    if (t.dtype != protocol::DType::kFloat32) {
      slot.narrow = at;
      slot.wide = std::make_shared<FloatBuffer>(t.elements);
      slot.data = slot.wide->data();
    }
    slots_[t.key] = std::move(slot);
  }
  generation_ = job_->generation;
  job_->declareSlots(local_rank_, MemberSlots{});
  send({request, protocol::Declared{segment_->name(), layout.total_bytes, layout.offsets}});
  return {};
}

Status TrainerSession::onDeclareDevice(uint32_t request, const protocol::DeclareDevice& d) {
  if (!job_) return Status::failedPrecondition("declare before hello");
  if (staging_count_ != 0)
    return Status::failedPrecondition("declare while device gradients are still being copied in");
  for (const auto& t : d.tensors)
    if (t.dtype != protocol::DType::kFloat32)
      return Status::invalidArgument(strCat("tensor ", t.key, ": device tensors are float32; a ", protocol::dtypeName(t.dtype),
                                            " tensor needs a host slot (declare)"));
  std::vector<uint64_t> bytes;
  for (const auto& t : d.tensors) bytes.push_back(t.elements * sizeof(float));
  // The GPU check comes first: a refused trainer must not disturb the job's declaration.
  auto device = host_.devicePath().allocate(d.gpu, bytes);
  if (!device.ok()) {
    // Not a malformed message: this agent cannot serve that GPU. Counted apart.
    host_.deviceRefused(device.status());
    GC_LOG(kWarn, "control", "trainer ", id(), ": device declare refused: ", device.status().message());
    sendError(request, device.status());
    return {};
  }
  const MemberSlots mine{true, (*device)->coder()};
  GC_RETURN_IF_ERROR(job_->checkSlots(local_rank_, mine));
  GC_RETURN_IF_ERROR(host_.jobs().declare(*job_, d.tensors));
  forgetSlots();
  device_ = std::move(device).value();
  for (size_t i = 0; i < d.tensors.size(); ++i)
    slots_[d.tensors[i].key] = {device_->hostBuffer(i), d.tensors[i].elements, i, protocol::DType::kFloat32, nullptr,
                                nullptr};
  generation_ = job_->generation;
  job_->declareSlots(local_rank_, mine);
  GC_LOG(kInfo, "control", "trainer ", id(), ": ", d.tensors.size(), " device tensors on ", gpuUuidText(d.gpu));
  send({request, device_->offer()}, device_->fd());
  return {};
}

void TrainerSession::complete(uint32_t request, uint64_t iteration, uint64_t key, bool coded,
                              std::optional<uint32_t> reload_root) {
  auto it = slots_.find(key);
  if (it != slots_.end() && it->second.narrow != nullptr)  // the fp32 result, rounded into the slot
    narrowSlot(it->second.dtype, it->second.data, it->second.narrow, it->second.elements);
  if (!device_ || it == slots_.end()) return send({request, protocol::Complete{iteration, {key}, reload_root}});
  auto self = shared_from_this();
  DeviceSlots* device = device_.get();
  auto reply = [this, self, device, request, iteration, key, reload_root](const Status& st) {
    if (closed() || device_.get() != device) return;
    if (st.ok()) return send({request, protocol::Complete{iteration, {key}, reload_root}});
    GC_LOG(kWarn, "control", "trainer ", id(), ": ", st.message());
    sendError(request, Status(st.code(), strCat("tensor ", key, " iteration ", iteration, ": ", st.message())));
  };
  if (coded) return host_.devicePath().signalDone(*device_, std::move(reply));
  host_.stats().gpuCopy(false).Increment(static_cast<double>(it->second.elements * sizeof(float)));
  host_.devicePath().stageOut(*device_, it->second.index, it->second.elements, std::move(reply));
}

void TrainerSession::stageIn(size_t index, uint64_t elements, DevicePath::Done done) {
  if (closed() || !device_) return done(Status::unavailable(strCat("trainer ", id(), " left")));
  ++staging_count_;
  host_.stats().gpuCopy(true).Increment(static_cast<double>(elements * sizeof(float)));
  auto self = shared_from_this();
  host_.devicePath().stageIn(*device_, index, elements, [this, self, done = std::move(done)](const Status& st) {
    --staging_count_;
    done(st);
  });
}

Status TrainerSession::onSubmit(uint32_t request, const protocol::Submit& s) {
  if (!job_ || (!segment_ && !device_)) return Status::failedPrecondition("submit before declare");
  LocalJob& job = *job_;
  if (!job.lost.ok() && s.iteration > job.lost_after)
    return Status(job.lost.code(), strCat("iteration ", s.iteration, " cannot complete: ", job.lost.message()));
  if (generation_ != job.generation)
    return Status::failedPrecondition("the job's tensors were re-declared by another trainer: declare again");
  for (uint64_t key : s.keys) {
    if (slots_.count(key) == 0) return Status::invalidArgument(strCat("tensor ", key, " is not declared"));
    GC_RETURN_IF_ERROR(job.checkContributor(local_rank_, key));
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
      if (Status ready = host_.devicePath().awaitReady(*device_); !ready.ok()) {
        takeSubmit(s.iteration, key);
        GC_LOG(kWarn, "control", "trainer ", id(), ": ", ready.message());
        sendError(request, Status(ready.code(), strCat("tensor ", key, " iteration ", s.iteration, ": ",
                                                       ready.message())));
        continue;
      }
    }
    contribute(s.iteration, key);
  }
  return {};
}

Status TrainerSession::onIterationQuery(uint32_t request, const protocol::IterationQuery& q) {
  if (!job_) return Status::failedPrecondition("iteration query before hello");
  send({request, protocol::IterationAnswer{q.iteration, host_.jobIteration(job_->id, q.iteration)}});
  return {};
}

Status TrainerSession::onStateGet(uint32_t request, const protocol::StateGet& g) {
  if (!job_ || (!segment_ && !device_)) return Status::failedPrecondition("state get before declare");
  if (slots_.count(g.key) == 0) return Status::invalidArgument(strCat("tensor ", g.key, " is not declared"));
  if (g.offset != 0) {
    if (!state_out_ || state_out_->key != g.key || g.offset >= state_out_->bytes.size())
      return Status::invalidArgument(strCat("state get of tensor ", g.key, " from offset ", g.offset,
                                            " without a read of it from offset 0 that long"));
    sendStatePart(request, g.offset);
    return {};
  }
  state_out_.reset();
  auto self = std::static_pointer_cast<TrainerSession>(shared_from_this());
  host_.exportState(job_->id, g.key, [this, self, request, key = g.key](Result<std::vector<std::byte>> blob) {
    if (closed()) return;
    if (!blob.ok()) {
      GC_LOG(kWarn, "control", "trainer ", id(), ": ", blob.status().message());
      return sendError(request, blob.status());
    }
    const uint64_t total = blob->size();
    state_out_ = StateBytes{key, total, std::move(blob).value()};
    sendStatePart(request, 0);
  });
  return {};
}

void TrainerSession::sendStatePart(uint32_t request, uint64_t offset) {
  const std::vector<std::byte>& all = state_out_->bytes;
  const uint64_t n = std::min<uint64_t>(protocol::kMaxStatePartBytes, all.size() - offset);
  send({request, protocol::StatePart{state_out_->key, all.size(), offset,
                                     {all.begin() + static_cast<ptrdiff_t>(offset),
                                      all.begin() + static_cast<ptrdiff_t>(offset + n)}}});
  if (offset + n == all.size()) state_out_.reset();  // read whole
}

Status TrainerSession::onStatePart(uint32_t request, protocol::StatePart p) {
  if (!job_ || (!segment_ && !device_)) return Status::failedPrecondition("state part before declare");
  if (slots_.count(p.key) == 0) return Status::invalidArgument(strCat("tensor ", p.key, " is not declared"));
  if (p.offset == 0) {
    state_in_ = StateBytes{p.key, p.total, {}};
  } else if (!state_in_ || state_in_->key != p.key || state_in_->total != p.total ||
             state_in_->bytes.size() != p.offset) {
    state_in_.reset();
    return Status::invalidArgument(strCat("state part of tensor ", p.key, " at offset ", p.offset,
                                          " does not continue the parts before it"));
  }
  state_in_->bytes.insert(state_in_->bytes.end(), p.bytes.begin(), p.bytes.end());
  const uint64_t received = state_in_->bytes.size();
  if (received < p.total) {
    send({request, protocol::StateStored{p.key, received, 0}});
    return {};
  }
  StateBytes whole = std::move(*state_in_);
  state_in_.reset();
  uint32_t dropped = 0;
  GC_RETURN_IF_ERROR(host_.importState(job_->id, p.key, whole.bytes, &dropped));
  GC_LOG(kDebug, "control", "trainer ", id(), ": tensor ", p.key, " continues with the error-feedback state of a checkpoint (",
         whole.total, " bytes", dropped > 0 ? strCat(", ", dropped, " owner parts left out") : std::string(), ")");
  send({request, protocol::StateStored{p.key, received, dropped}});
  return {};
}

void TrainerSession::contribute(uint64_t iteration, uint64_t key) {
  const Slot& slot = slots_[key];
  Contribution mine;
  mine.host = slot.data;
  mine.device = device_ ? device_->deviceBuffer(slot.index) : nullptr;
  mine.coder = device_ ? device_->coder() : nullptr;
  mine.session = std::static_pointer_cast<TrainerSession>(shared_from_this());
  mine.pin = device_ ? std::shared_ptr<const void>(device_) : std::shared_ptr<const void>(segment_);
  if (slot.narrow != nullptr) {  // reduced in its fp32 twin, which the reduction pins
    widenSlot(slot.dtype, slot.narrow, slot.data, slot.elements);
    mine.pin = std::shared_ptr<const void>(slot.wide);
  }
  mine.index = slot.index;
  mine.elements = slot.elements;
  Joined joined = job_->contribute(local_rank_, iteration, key, std::move(mine));
  for (uint64_t passed : joined.given_up)
    host_.notify(*job_, passed, key, Status::unavailable(strCat("local rank ", local_rank_, " moved on to iteration ",
                                                                  iteration, " (local trainers realign)")));
  if (joined.behind)
    return host_.notify(*job_, iteration, key, Status::unavailable("another local trainer of the job is past this "
                                                                     "iteration (local trainers realign)"));
  if (joined.ready) host_.reduce(job_, iteration, key, std::move(*joined.ready));
}

}  // namespace gcagent::agent
