#include "client.h"

#include <poll.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>

#include <algorithm>
#include <numeric>
#include <type_traits>
#include <utility>
#include <variant>

#include "common/str_cat.h"

namespace gcagent::client {
namespace protocol = shm::protocol;
namespace {

bool readable(int fd) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, 0) > 0 && (p.revents & (POLLIN | POLLHUP | POLLERR)) != 0;
}

protocol::MessageType typeOf(const protocol::Message& m) {
  return static_cast<protocol::MessageType>(m.body.index() + 1);
}

// Runs a request through the same validation the agent will apply, so that a bad argument is
// reported here, with the field named, instead of coming back as an agent error.
Outcome validateLocally(const protocol::Message& message) {
  const std::vector<std::byte> frame = protocol::encode(message);
  auto header = protocol::parseHeader(std::span(frame).first(protocol::kHeaderBytes));
  if (!header.ok())
    return failure(GCAGENT_ERR_INVALID_ARGUMENT, strCat("request too large: ", header.status().message()));
  auto decoded = protocol::decode(*header, std::span(frame).subspan(protocol::kHeaderBytes));
  if (!decoded.ok()) return failure(GCAGENT_ERR_INVALID_ARGUMENT, decoded.status().message());
  return success();
}

// Lengths are checked before encoding: the wire carries them as u16.
Outcome checkLength(std::string_view field, std::string_view value, size_t max) {
  if (value.size() > max)
    return failure(GCAGENT_ERR_INVALID_ARGUMENT, strCat(field, " of ", value.size(), " bytes exceeds ", max));
  return success();
}

std::string agentError(const protocol::Error& e) { return Status(e.code, e.message).toString(); }

}  // namespace

Outcome checkSlots(const std::vector<protocol::TensorDecl>& tensors, const std::vector<uint64_t>& offsets,
                   uint64_t size, const std::string& region);

uint32_t Client::nextRequestId() {
  const uint32_t id = next_request_id_++;
  if (next_request_id_ == 0) next_request_id_ = 1;  // 0 means "the whole connection"
  return id;
}

Outcome Client::breakWith(Outcome outcome) {
  if (broken_.ok()) broken_ = outcome;
  return outcome;
}

Outcome Client::connect(const ConnectOptions& options, std::unique_ptr<Client>* out) {
  GCAGENT_CLIENT_RETURN_IF_FAILED(checkLength("job name", options.job, protocol::kMaxJobName));
  protocol::Message hello{0, protocol::Hello{options.job, options.local_rank, options.local_size,
                                             static_cast<uint32_t>(::getpid())}};
  GCAGENT_CLIENT_RETURN_IF_FAILED(validateLocally(hello));

  const Deadline deadline = Deadline::after(options.timeout_ms);
  ControlChannel channel;
  GCAGENT_CLIENT_RETURN_IF_FAILED(ControlChannel::connect(options.socket_path, deadline, options.wait_for_agent, &channel));
  std::unique_ptr<Client> client(new Client(std::move(channel)));
  protocol::Message reply;
  Outcome r = client->request(std::move(hello), protocol::MessageType::kWelcome,
                              Deadline::latest(deadline, Deadline::after(kMinHandshakeMs)), &reply);
  if (!r.ok()) {
    r.message = strCat("joining job '", options.job, "' at ", options.socket_path, ": ", r.message);
    return r;
  }
  client->welcome_ = std::get<protocol::Welcome>(reply.body);
  if (const char* liveness = std::getenv("GCAGENT_CLIENT_LIVENESS_TIMEOUT"); liveness != nullptr && *liveness != '\0') {
    char* end = nullptr;
    const double seconds = std::strtod(liveness, &end);
    if (*end != '\0' || !(seconds >= 0) || seconds > 86400)
      return failure(GCAGENT_ERR_INVALID_ARGUMENT, strCat("GCAGENT_CLIENT_LIVENESS_TIMEOUT: '", liveness,
                                                          "' is not a number of seconds in [0, 86400] (0: no limit)"));
    client->setLivenessTimeout(static_cast<int>(seconds * 1000));
  }
  *out = std::move(client);
  return success();
}

Outcome Client::request(protocol::Message message, protocol::MessageType reply, Deadline deadline,
                        protocol::Message* out) {
  const uint32_t id = nextRequestId();
  message.request_id = id;
  const std::string_view what = protocol::messageTypeName(typeOf(message));
  Outcome sent = channel_.send(message, deadline);
  if (!sent.ok()) return breakWith(std::move(sent));
  for (;;) {
    protocol::Message m;
    Outcome r = channel_.receive(deadline, &m);
    if (r.code == GCAGENT_ERR_TIMEOUT)
      // A late reply would be mistaken for a stray message: the connection cannot be trusted.
      return breakWith(failure(GCAGENT_ERR_TIMEOUT,
                               strCat("the agent did not answer the ", what, " request in time; close this client "
                                      "and connect again")));
    if (!r.ok()) return breakWith(std::move(r));
    // A reply is valid only while its request is outstanding, and only one is at a time,
    // so the reply's own request id is not relied on.
    if (typeOf(m) == reply) {
      *out = std::move(m);
      return success();
    }
    if (auto* e = std::get_if<protocol::Error>(&m.body); e != nullptr && m.request_id == id)
      return failure(GCAGENT_ERR_AGENT, strCat("the agent rejected the ", what, ": ", agentError(*e)));
    GCAGENT_CLIENT_RETURN_IF_FAILED(handle(std::move(m)));
  }
}

Outcome Client::keepAlive(Deadline* next_check) {
  *next_check = Deadline::never();
  if (liveness_ms_ <= 0) return success();
  const auto now = Deadline::Clock::now();
  const auto half = std::chrono::milliseconds(std::max(1, liveness_ms_ / 2));
  if (ping_id_ == 0 && now - last_heard_ >= half) {
    ping_id_ = nextRequestId();
    ping_sent_ = now;
    Outcome sent = channel_.send({ping_id_, protocol::Ping{}}, Deadline::after(liveness_ms_));
    if (!sent.ok()) return breakWith(std::move(sent));
  }
  if (ping_id_ != 0 && now - ping_sent_ >= half) {
    // A trainer that polls seldom finds the answer waiting unread: read what came first.
    for (;;) {
      protocol::Message m;
      Outcome r = channel_.receive(Deadline::after(0, now), &m);
      if (r.code == GCAGENT_ERR_TIMEOUT) break;
      if (!r.ok()) return breakWith(std::move(r));
      GCAGENT_CLIENT_RETURN_IF_FAILED(handle(std::move(m)));
    }
  }
  if (ping_id_ != 0 && now - last_heard_ >= half && now - ping_sent_ >= half)
    return breakWith(failure(GCAGENT_ERR_IO, strCat("the agent has not answered for ", liveness_ms_ / 1000.0,
                                                    " s: it is stopped or hung (GCAGENT_CLIENT_LIVENESS_TIMEOUT)")));
  const auto due = ping_id_ != 0 ? ping_sent_ + half : last_heard_ + half;
  *next_check = Deadline::after(
      static_cast<int>(std::chrono::ceil<std::chrono::milliseconds>(due - now).count()), now);
  return success();
}

Outcome Client::handle(protocol::Message&& message) {
  last_heard_ = Deadline::Clock::now();
  if (message.request_id != 0 && message.request_id == ping_id_) {
    ping_id_ = 0;  // a pong, or an older agent's error for a ping: alive either way
    if (std::holds_alternative<protocol::Pong>(message.body) || std::holds_alternative<protocol::Error>(message.body))
      return success();
  }
  if (auto* complete = std::get_if<protocol::Complete>(&message.body)) {
    // Completions come after the membership they were made under was told, and before the
    // next one: the view they averaged over is the one told last.
    // The first step completed under a membership that took nodes in is followed by the
    // reload; it stays said for every key of that step.
    if (completed_epoch_ != view_.epoch) {
      resync_root_.reset();
      resync_iteration_ = complete->iteration;
      if (!view_.joined.empty())
        for (uint32_t r : view_.members)
          if (!std::binary_search(view_.joined.begin(), view_.joined.end(), r)) {
            resync_root_ = r;
            break;
          }
    } else if (complete->iteration != resync_iteration_) {
      resync_root_.reset();
    }
    if (complete->reload_root) {  // an iteration was given up on some node (agent/engine/job_reload.h)
      resync_root_ = complete->reload_root;
      resync_iteration_ = complete->iteration;
    }
    completed_epoch_ = view_.epoch;
    completed_view_ = view_;
    for (uint64_t key : complete->keys) {
      auto it = slots_.find(key);
      // Anything else is a late or repeated completion of a submit that has already ended.
      if (it == slots_.end() || it->second.state != KeyState::kPending || it->second.iteration != complete->iteration)
        continue;
      it->second.state = KeyState::kComplete;
      --pending_;
    }
    return success();
  }
  if (auto* membership = std::get_if<protocol::Membership>(&message.body)) {
    welcome_.node_count = membership->node_count;  // averages divide by these nodes' trainers now
    view_ = std::move(*membership);
    return success();
  }
  if (auto* error = std::get_if<protocol::Error>(&message.body)) {
    if (message.request_id == 0)
      return breakWith(failure(GCAGENT_ERR_AGENT, strCat("the agent failed this trainer's job: ", agentError(*error))));
    std::shared_ptr<const std::string> text;
    for (auto& [key, slot] : slots_) {
      if (slot.state != KeyState::kPending || slot.request_id != message.request_id) continue;
      if (text == nullptr)
        text = std::make_shared<const std::string>(
            strCat("the agent failed the submit of iteration ", slot.iteration, ": ", agentError(*error)));
      slot.state = KeyState::kFailed;
      slot.error = text;
      --pending_;
      if (slot.iteration == resync_iteration_) resync_root_.reset();  // the step failed: a later one reloads
    }
    return success();  // an error for a request no longer pending has nothing left to fail
  }
  return breakWith(failure(GCAGENT_ERR_PROTOCOL, strCat("the agent sent an unexpected '",
                                                        protocol::messageTypeName(typeOf(message)), "' message")));
}

// A declaration is refused locally while keys are in flight or when a name would not fit
// its u16 length on the wire.
Outcome Client::checkDeclarable(const std::vector<protocol::TensorDecl>& tensors) const {
  if (!broken_.ok()) return broken_;
  if (pending_ != 0)
    return failure(GCAGENT_ERR_STATE, strCat(pending_, " submitted keys are still in flight; wait for them before "
                                                       "declaring again"));
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& t = tensors[i];
    const std::string at = strCat("tensor ", i, " (key ", t.key, "): ");
    GCAGENT_CLIENT_RETURN_IF_FAILED(checkLength(at + "codec name", t.codec, protocol::kMaxCodecName));
    for (const auto& [k, v] : t.params) {
      GCAGENT_CLIENT_RETURN_IF_FAILED(checkLength(at + "parameter name", k, protocol::kMaxParamKey));
      GCAGENT_CLIENT_RETURN_IF_FAILED(checkLength(at + "parameter '" + k + "' value", v, protocol::kMaxParamValue));
    }
  }
  return success();
}

Outcome Client::declare(std::vector<protocol::TensorDecl> tensors) {
  GCAGENT_CLIENT_RETURN_IF_FAILED(checkDeclarable(tensors));
  protocol::Message message{0, protocol::Declare{std::move(tensors)}};
  GCAGENT_CLIENT_RETURN_IF_FAILED(validateLocally(message));

  protocol::Message reply;
  GCAGENT_CLIENT_RETURN_IF_FAILED(
      request(message, protocol::MessageType::kDeclared, Deadline::after(reply_timeout_ms_), &reply));
  // The agent has switched to the new declaration: the old one goes, whatever happens next.
  slots_.clear();
  segment_.reset();
  return adopt(std::get<protocol::Declare>(message.body).tensors, std::get<protocol::Declared>(reply.body));
}

// Every slot inside the region, aligned, and none overlapping another.
Outcome checkSlots(const std::vector<protocol::TensorDecl>& tensors, const std::vector<uint64_t>& offsets,
                   uint64_t size, const std::string& region) {
  std::vector<size_t> order(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const uint64_t offset = offsets[i];
    const uint64_t bytes = tensors[i].elements * protocol::dtypeBytes(tensors[i].dtype);  // <= 2^42: no overflow
    if (offset % alignof(float) != 0 || offset > size || bytes > size - offset)
      return failure(GCAGENT_ERR_PROTOCOL, strCat("the agent placed key ", tensors[i].key, " (", bytes,
                                                  " bytes) at offset ", offset, " of its ", size, "-byte ", region));
    order[i] = i;
  }
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return offsets[a] < offsets[b]; });
  for (size_t j = 1; j < order.size(); ++j) {
    const size_t prev = order[j - 1], cur = order[j];
    if (offsets[prev] + tensors[prev].elements * protocol::dtypeBytes(tensors[prev].dtype) > offsets[cur])
      return failure(GCAGENT_ERR_PROTOCOL, strCat("the agent gave keys ", tensors[prev].key, " and ", tensors[cur].key,
                                                  " overlapping slots in ", region));
  }
  return success();
}

Outcome Client::adopt(const std::vector<protocol::TensorDecl>& tensors, const protocol::Declared& declared) {
  if (declared.slot_offsets.size() != tensors.size())
    return breakWith(failure(GCAGENT_ERR_PROTOCOL, strCat("the agent declared ", declared.slot_offsets.size(),
                                                          " slots for ", tensors.size(), " tensors")));
  auto segment = shm::Segment::open(declared.segment);
  if (!segment.ok())
    return failure(GCAGENT_ERR_IO, strCat("cannot map the agent's shared segment: ", segment.status().message()));
  const uint64_t mapped = segment->bytes().size();
  if (mapped < declared.segment_bytes)
    return failure(GCAGENT_ERR_PROTOCOL, strCat("shared segment ", declared.segment, " holds ", mapped,
                                                " bytes, the agent declared ", declared.segment_bytes));
  GCAGENT_CLIENT_RETURN_IF_FAILED(
      checkSlots(tensors, declared.slot_offsets, declared.segment_bytes, strCat("segment ", declared.segment)));
  std::byte* base = segment->bytes().data();
  std::unordered_map<uint64_t, Slot> slots;
  slots.reserve(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    Slot slot;
    slot.data = reinterpret_cast<float*>(base + declared.slot_offsets[i]);
    slot.elements = tensors[i].elements;
    slots.emplace(tensors[i].key, std::move(slot));
  }
  slots_ = std::move(slots);
  segment_ = std::move(segment).value();
  return success();
}

Outcome Client::declareDevice(std::vector<protocol::TensorDecl> tensors, const protocol::GpuUuidBytes& gpu) {
  GCAGENT_CLIENT_RETURN_IF_FAILED(checkDeclarable(tensors));
  protocol::Message message{0, protocol::DeclareDevice{gpu, std::move(tensors)}};
  GCAGENT_CLIENT_RETURN_IF_FAILED(validateLocally(message));
  protocol::Message reply;
  GCAGENT_CLIENT_RETURN_IF_FAILED(
      request(message, protocol::MessageType::kDeclaredDevice, Deadline::after(reply_timeout_ms_), &reply));
  const auto& offer = std::get<protocol::DeclaredDevice>(reply.body);
  // The descriptor came with the reply's first byte, so it is here by now.
  int fd = -1;
  if (offer.kind == protocol::DeviceHandleKind::kPosixFd && (fd = channel_.takeFd()) < 0)
    return breakWith(failure(GCAGENT_ERR_PROTOCOL, "the agent's device offer came without its file descriptor"));
  slots_.clear();
  segment_.reset();
  device_.reset();
  Outcome adopted = adoptDevice(std::get<protocol::DeclareDevice>(message.body).tensors, offer, fd);
  if (fd >= 0) ::close(fd);
  return adopted;
}

Outcome Client::adoptDevice(const std::vector<protocol::TensorDecl>& tensors, const protocol::DeclaredDevice& offer,
                            int fd) {
  if (offer.slot_offsets.size() != tensors.size())
    return breakWith(failure(GCAGENT_ERR_PROTOCOL, strCat("the agent offered ", offer.slot_offsets.size(),
                                                          " device slots for ", tensors.size(), " tensors")));
  GCAGENT_CLIENT_RETURN_IF_FAILED(
      checkSlots(tensors, offer.slot_offsets, offer.allocation_bytes, std::string("device allocation")));
  std::shared_ptr<DeviceMapping> mapping;
  GCAGENT_CLIENT_RETURN_IF_FAILED(mapDevice(offer, fd, &mapping));
  const uint64_t base = deviceBase(*mapping);
  std::unordered_map<uint64_t, Slot> slots;
  slots.reserve(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    Slot slot;
    slot.device = base + offer.slot_offsets[i];
    slot.elements = tensors[i].elements;
    slots.emplace(tensors[i].key, std::move(slot));
  }
  slots_ = std::move(slots);
  device_ = std::move(mapping);
  return success();
}

uint64_t Client::deviceBuffer(uint64_t key) const {
  auto it = slots_.find(key);
  return it == slots_.end() ? 0 : it->second.device;
}

Outcome Client::submitDevice(uint64_t iteration, std::span<const uint64_t> keys, void* stream) {
  if (!broken_.ok()) return broken_;
  if (!device_)
    return failure(GCAGENT_ERR_STATE, segment_ ? "the tensors are declared on the host: submit them with gcagent_submit"
                                               : "no tensors are declared: declare before submitting");
  // Recorded before the submit leaves: the agent's copy waits for everything queued so far.
  GCAGENT_CLIENT_RETURN_IF_FAILED(recordReady(*device_, stream));
  return submitSlots(iteration, keys);
}

Outcome Client::waitDevice(uint64_t iteration, std::span<const uint64_t> keys, int timeout_ms, void* stream) {
  if (!broken_.ok()) return broken_;
  if (!device_)
    return failure(GCAGENT_ERR_STATE, "the tensors are not declared on the device: wait for them with gcagent_wait");
  GCAGENT_CLIENT_RETURN_IF_FAILED(wait(iteration, keys, timeout_ms));
  return waitDone(*device_, stream);
}

float* Client::buffer(uint64_t key) const {
  auto it = slots_.find(key);
  return it == slots_.end() ? nullptr : it->second.data;
}

uint64_t Client::elements(uint64_t key) const {
  auto it = slots_.find(key);
  return it == slots_.end() ? 0 : it->second.elements;
}

Outcome Client::submit(uint64_t iteration, std::span<const uint64_t> keys) {
  if (!broken_.ok()) return broken_;
  if (device_)
    return failure(GCAGENT_ERR_STATE, "the tensors are declared on the device: submit them with gcagent_submit_device");
  if (!segment_) return failure(GCAGENT_ERR_STATE, "no tensors are declared: declare before submitting");
  return submitSlots(iteration, keys);
}

Outcome Client::submitSlots(uint64_t iteration, std::span<const uint64_t> keys) {
  if (keys.empty()) return failure(GCAGENT_ERR_INVALID_ARGUMENT, "submit lists no keys");
  std::vector<Slot*> slots;
  slots.reserve(keys.size());
  for (uint64_t key : keys) {
    auto it = slots_.find(key);
    if (it == slots_.end()) return failure(GCAGENT_ERR_NOT_FOUND, strCat("key ", key, " is not declared"));
    if (it->second.state == KeyState::kPending)
      return failure(GCAGENT_ERR_STATE, strCat("key ", key, " is still in flight from iteration ",
                                               it->second.iteration, "; wait for it before submitting it again"));
    slots.push_back(&it->second);
  }
  std::vector<uint64_t> sorted(keys.begin(), keys.end());
  std::sort(sorted.begin(), sorted.end());
  if (auto dup = std::adjacent_find(sorted.begin(), sorted.end()); dup != sorted.end())
    return failure(GCAGENT_ERR_INVALID_ARGUMENT, strCat("key ", *dup, " is listed twice"));

  const uint32_t id = nextRequestId();
  protocol::Message message{id, protocol::Submit{iteration, std::vector<uint64_t>(keys.begin(), keys.end())}};
  Outcome sent = channel_.send(message, Deadline::after(reply_timeout_ms_));
  if (!sent.ok()) return breakWith(std::move(sent));
  for (Slot* slot : slots) {
    slot->state = KeyState::kPending;
    slot->iteration = iteration;
    slot->request_id = id;
    slot->error.reset();
  }
  pending_ += slots.size();
  return success();
}

Outcome Client::waitable(uint64_t iteration, uint64_t key, const Slot** out) const {
  auto it = slots_.find(key);
  if (it == slots_.end()) return failure(GCAGENT_ERR_NOT_FOUND, strCat("key ", key, " is not declared"));
  const Slot& slot = it->second;
  if (slot.state == KeyState::kIdle) return failure(GCAGENT_ERR_STATE, strCat("key ", key, " was never submitted"));
  if (slot.iteration != iteration)
    return failure(GCAGENT_ERR_STATE, strCat("key ", key, " was not submitted for iteration ", iteration,
                                             " (its last submit was for iteration ", slot.iteration, ")"));
  *out = &slot;
  return success();
}

Outcome Client::receiveOne(Deadline deadline, int wake_fd) {
  Deadline check = Deadline::never();
  GCAGENT_CLIENT_RETURN_IF_FAILED(keepAlive(&check));
  protocol::Message message;
  Outcome r = channel_.receive(Deadline::earliest(deadline, check), wake_fd, &message);
  // A timeout: the caller tells a liveness check from its own deadline. A bad wake_fd is the
  // caller's: the connection is fine.
  if (r.code == GCAGENT_ERR_TIMEOUT || r.code == GCAGENT_ERR_INVALID_ARGUMENT) return r;
  if (!r.ok()) return breakWith(std::move(r));
  return handle(std::move(message));
}

Outcome Client::wait(uint64_t iteration, std::span<const uint64_t> keys, int timeout_ms) {
  if (!broken_.ok()) return broken_;
  if (keys.empty()) return failure(GCAGENT_ERR_INVALID_ARGUMENT, "wait lists no keys");
  // handle() never inserts into slots_, so these pointers stay valid while messages arrive.
  std::vector<const Slot*> slots(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) GCAGENT_CLIENT_RETURN_IF_FAILED(waitable(iteration, keys[i], &slots[i]));
  const Deadline deadline = Deadline::after(timeout_ms);
  for (;;) {
    size_t incomplete = 0;
    uint64_t first = 0;
    for (size_t i = 0; i < slots.size(); ++i) {
      if (slots[i]->state == KeyState::kFailed)
        return failure(GCAGENT_ERR_AGENT, strCat("key ", keys[i], ": ", *slots[i]->error));
      if (slots[i]->state == KeyState::kPending && incomplete++ == 0) first = keys[i];
    }
    if (incomplete == 0) return success();
    Outcome r = receiveOne(deadline, -1);
    if (r.code == GCAGENT_ERR_TIMEOUT && !deadline.passed()) continue;  // time to check on the agent
    if (r.code == GCAGENT_ERR_TIMEOUT)
      return failure(GCAGENT_ERR_TIMEOUT, strCat("iteration ", iteration, " is not complete after ", timeout_ms,
                                                 " ms: ", incomplete, " of ", keys.size(),
                                                 " keys still pending (first: key ", first, ")"));
    GCAGENT_CLIENT_RETURN_IF_FAILED(r);
  }
}

Outcome Client::waitAny(std::span<const Step> steps, int timeout_ms, int wake_fd, size_t* index) {
  *index = steps.size();
  if (!broken_.ok()) return broken_;
  if (steps.empty()) return failure(GCAGENT_ERR_INVALID_ARGUMENT, "wait lists no keys");
  std::vector<const Slot*> slots(steps.size());
  for (size_t i = 0; i < steps.size(); ++i)
    GCAGENT_CLIENT_RETURN_IF_FAILED(waitable(steps[i].iteration, steps[i].key, &slots[i]));
  const Deadline deadline = Deadline::after(timeout_ms);
  for (;;) {
    for (size_t i = 0; i < slots.size(); ++i) {
      if (slots[i]->state == KeyState::kPending) continue;
      *index = i;
      if (slots[i]->state == KeyState::kFailed)
        return failure(GCAGENT_ERR_AGENT, strCat("key ", steps[i].key, ": ", *slots[i]->error));
      return success();
    }
    Outcome r = receiveOne(deadline, wake_fd);
    if (r.code != GCAGENT_ERR_TIMEOUT) {
      GCAGENT_CLIENT_RETURN_IF_FAILED(r);
      continue;
    }
    // Woken, or the deadline passed; otherwise it was time to check on the agent.
    if (deadline.passed() || (wake_fd >= 0 && readable(wake_fd)))
      return failure(GCAGENT_ERR_TIMEOUT, strCat("none of ", steps.size(), " keys completed (woken or timed out)"));
  }
}

Outcome Client::bufferFd(uint64_t key, int* fd, uint64_t* offset) const {
  auto it = slots_.find(key);
  if (it == slots_.end()) return failure(GCAGENT_ERR_NOT_FOUND, strCat("key ", key, " is not declared"));
  if (!segment_ || it->second.data == nullptr)
    return failure(GCAGENT_ERR_STATE, strCat("key ", key, " is declared on the device: it has no host slot"));
  auto opened = segment_->duplicateDescriptor();
  if (!opened.ok())
    return failure(GCAGENT_ERR_IO, strCat("cannot give out the shared segment's descriptor: ", opened.status().message()));
  *fd = *opened;
  *offset = static_cast<uint64_t>(reinterpret_cast<std::byte*>(it->second.data) - segment_->bytes().data());
  return success();
}

Outcome Client::getState(uint64_t key, std::vector<std::byte>* out) {
  if (!broken_.ok()) return broken_;
  if (slots_.count(key) == 0) return failure(GCAGENT_ERR_NOT_FOUND, strCat("key ", key, " is not declared"));
  out->clear();
  uint64_t total = 0;
  do {
    protocol::Message reply;
    GCAGENT_CLIENT_RETURN_IF_FAILED(request({0, protocol::StateGet{key, out->size()}}, protocol::MessageType::kStatePart,
                                            Deadline::after(reply_timeout_ms_), &reply));
    const auto& part = std::get<protocol::StatePart>(reply.body);
    if (part.key != key || part.offset != out->size() || (!out->empty() && part.total != total) ||
        (part.bytes.empty() && part.total != 0))
      return breakWith(failure(GCAGENT_ERR_PROTOCOL, strCat("the agent answered the state of key ", key, " from byte ",
                                                            out->size(), " with key ", part.key, " bytes [", part.offset,
                                                            ", ", part.offset + part.bytes.size(), ") of ", part.total)));
    total = part.total;
    out->insert(out->end(), part.bytes.begin(), part.bytes.end());
  } while (out->size() < total);
  return success();
}

Outcome Client::jobIteration(uint64_t iteration, uint64_t* job_iteration) {
  if (!broken_.ok()) return broken_;
  protocol::Message reply;
  GCAGENT_CLIENT_RETURN_IF_FAILED(request({0, protocol::IterationQuery{iteration}},
                                          protocol::MessageType::kIterationAnswer, Deadline::after(reply_timeout_ms_),
                                          &reply));
  const auto& answer = std::get<protocol::IterationAnswer>(reply.body);
  if (answer.iteration != iteration)
    return breakWith(failure(GCAGENT_ERR_PROTOCOL, strCat("the agent answered a query of iteration ", iteration,
                                                          " for iteration ", answer.iteration)));
  *job_iteration = answer.job_iteration;
  return success();
}

Outcome Client::putState(uint64_t key, std::span<const std::byte> blob, uint32_t* dropped) {
  if (!broken_.ok()) return broken_;
  if (slots_.count(key) == 0) return failure(GCAGENT_ERR_NOT_FOUND, strCat("key ", key, " is not declared"));
  if (blob.size() > protocol::kMaxStateBytes)
    return failure(GCAGENT_ERR_INVALID_ARGUMENT, strCat("a state of ", blob.size(), " bytes is beyond 2^40"));
  uint64_t offset = 0;
  do {
    const uint64_t n = std::min<uint64_t>(protocol::kMaxStatePartBytes, blob.size() - offset);
    protocol::StatePart part{key, blob.size(), offset, {blob.begin() + static_cast<ptrdiff_t>(offset),
                                                        blob.begin() + static_cast<ptrdiff_t>(offset + n)}};
    protocol::Message reply;
    GCAGENT_CLIENT_RETURN_IF_FAILED(
        request({0, std::move(part)}, protocol::MessageType::kStateStored, Deadline::after(reply_timeout_ms_), &reply));
    const auto& stored = std::get<protocol::StateStored>(reply.body);
    if (stored.key != key || stored.received != offset + n)
      return breakWith(failure(GCAGENT_ERR_PROTOCOL, strCat("the agent acknowledged ", stored.received,
                                                            " bytes of the state of key ", stored.key, " for ",
                                                            offset + n, " bytes of key ", key)));
    offset += n;
    *dropped = stored.dropped;
  } while (offset < blob.size());
  return success();
}

std::vector<uint32_t> Client::resultNodes() const {
  if (!completed_epoch_) return {};
  if (!completed_view_.members.empty()) return completed_view_.members;
  std::vector<uint32_t> all(completed_view_.node_count != 0 ? completed_view_.node_count : welcome_.node_count);
  for (uint32_t r = 0; r < all.size(); ++r) all[r] = r;
  return all;
}

}  // namespace gcagent::client
