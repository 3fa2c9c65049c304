#include "scripted_agent.h"

#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <stdexcept>

#include "common/str_cat.h"
#include "shm/fd_passing.h"
#include "tests/common/wait_for.h"

namespace gcagent::client::testing {
namespace protocol = shm::protocol;

ScriptedAgent::ScriptedAgent(const std::string& dir) : path_(dir + "/agent.sock") {
  if (::pipe(stop_pipe_) != 0) throw std::runtime_error("pipe failed");
}

ScriptedAgent::~ScriptedAgent() {
  stop();
  ::close(stop_pipe_[0]);
  ::close(stop_pipe_[1]);
}

void ScriptedAgent::start() {
  listen_fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path_.c_str(), sizeof addr.sun_path - 1);
  if (listen_fd_ < 0 || ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::listen(listen_fd_, 8) != 0)
    throw std::runtime_error(strCat("scripted agent cannot listen on ", path_, ": ", std::strerror(errno)));
  thread_ = std::thread([this] { run(); });
}

void ScriptedAgent::stop() {
  if (thread_.joinable()) {
    const char byte = 's';
    (void)!::write(stop_pipe_[1], &byte, 1);
    thread_.join();
  }
  if (listen_fd_ >= 0) {
    ::close(listen_fd_);
    ::unlink(path_.c_str());
    listen_fd_ = -1;
  }
}

std::string ScriptedAgent::segmentName() {
  std::lock_guard lock(mu_);
  return segment_ ? segment_->name() : "";
}

void ScriptedAgent::run() {
  for (;;) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {stop_pipe_[0], POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) continue;
    if (fds[1].revents != 0) return;
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    const bool keep_going = serve(fd);
    ::close(fd);
    held_.clear();
    if (!keep_going) return;
  }
}

bool ScriptedAgent::readFrame(int fd, protocol::Message* out) {
  std::vector<std::byte> buf(protocol::kHeaderBytes);
  size_t have = 0;
  std::optional<protocol::Header> header;
  for (;;) {
    if (have == buf.size()) {
      if (!header) {
        auto h = protocol::parseHeader(buf);
        if (!h.ok()) return false;
        header = *h;
        buf.resize(protocol::kHeaderBytes + header->body_bytes);
        if (have < buf.size()) continue;
      }
      auto m = protocol::decode(*header, std::span(buf).subspan(protocol::kHeaderBytes));
      if (!m.ok()) return false;
      *out = std::move(*m);
      return true;
    }
    pollfd fds[2] = {{fd, POLLIN, 0}, {stop_pipe_[0], POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) continue;
    if (fds[1].revents != 0) return false;
    const ssize_t n = ::recv(fd, buf.data() + have, buf.size() - have, 0);
    if (n <= 0) return false;
    have += static_cast<size_t>(n);
  }
}

bool ScriptedAgent::send(int fd, const protocol::Message& message) {
  const auto frame = protocol::encode(message);
  return ::send(fd, frame.data(), frame.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(frame.size());
}

bool ScriptedAgent::answer(int fd, const HeldSubmit& held) {
  const OnSubmit mode = on_submit.load();
  const uint64_t failing = fail_key.load();
  const uint64_t iteration = held.submit.iteration;
  const float delta = add.load();
  std::vector<uint64_t> done;
  bool failed = false;
  {
    std::lock_guard lock(mu_);
    for (uint64_t key : held.submit.keys) {
      if (key == failing) {
        failed = true;
        continue;
      }
      const Slot& slot = slots_.at(key);
      for (uint64_t i = 0; i < slot.elements; ++i) slot.data[i] += delta;
      done.push_back(key);
    }
  }
  switch (mode) {
    case OnSubmit::kSilent: return true;
    case OnSubmit::kClose:
      std::this_thread::sleep_for(std::chrono::milliseconds(100));  // let the client start waiting
      return false;
    case OnSubmit::kJobError:
      return send(fd, {0, protocol::Error{StatusCode::kUnavailable, "peer node 1 left the job"}});
    case OnSubmit::kGarbage: {
      auto frame = protocol::encode({held.request_id, protocol::Complete{iteration, done, {}}});
      frame[0] = std::byte{'X'};
      return ::send(fd, frame.data(), frame.size(), MSG_NOSIGNAL) > 0;
    }
    case OnSubmit::kCompleteSlowly: {
      const auto frame = protocol::encode({held.request_id, protocol::Complete{iteration, done, {}}});
      if (::send(fd, frame.data(), 10, MSG_NOSIGNAL) != 10) return false;
      // The rest once the test saw its client time out holding the first part.
      if (!gcagent::testing::waitFor([&] { return release_rest.load(); })) return false;
      if (::send(fd, frame.data() + 10, frame.size() - 10, MSG_NOSIGNAL) != static_cast<ssize_t>(frame.size() - 10))
        return false;
      break;
    }
    case OnSubmit::kComplete:
      if (!done.empty() && !send(fd, {held.request_id, protocol::Complete{iteration, done, {}}})) return false;
      break;
    case OnSubmit::kCompleteSplitReversed:
      for (auto it = done.rbegin(); it != done.rend(); ++it)
        if (!send(fd, {held.request_id, protocol::Complete{iteration, {*it}, {}}})) return false;
      break;
  }
  if (failed)
    return send(fd, {held.request_id, protocol::Error{StatusCode::kInternal, strCat("codec exploded on key ", failing)}});
  return true;
}

bool ScriptedAgent::serve(int fd) {
  protocol::Message m;
  while (readFrame(fd, &m)) {
    const uint32_t id = m.request_id;
    if (auto* hello = std::get_if<protocol::Hello>(&m.body)) {
      if (hello->job == reject_job) {
        if (!send(fd, {id, protocol::Error{StatusCode::kNotFound, strCat("job '", hello->job, "' is not known here")}}))
          return true;
        continue;
      }
      if (!send(fd, {id, protocol::Welcome{7, 1, 2}})) return true;
    } else if (auto* part = std::get_if<protocol::StatePart>(&m.body)) {
      // Kept as written; the last part reports `state_dropped` owner parts left out.
      std::lock_guard lock(state_mutex_);
      auto& kept = states_[part->key];
      if (part->offset == 0) kept.clear();
      kept.insert(kept.end(), part->bytes.begin(), part->bytes.end());
      ++state_parts_seen;
      const bool last = kept.size() == part->total;
      if (!send(fd, {id, protocol::StateStored{part->key, kept.size(), last ? state_dropped.load() : 0u}})) return true;
    } else if (auto* get = std::get_if<protocol::StateGet>(&m.body)) {
      std::lock_guard lock(state_mutex_);
      const auto& kept = states_[get->key];
      const size_t n = std::min<size_t>(protocol::kMaxStatePartBytes, kept.size() - get->offset);
      std::vector<std::byte> bytes(kept.begin() + get->offset, kept.begin() + get->offset + n);
      if (!send(fd, {id, protocol::StatePart{get->key, kept.size(), get->offset, std::move(bytes)}})) return true;
    } else if (auto* query = std::get_if<protocol::IterationQuery>(&m.body)) {
      if (!send(fd, {id, protocol::IterationAnswer{query->iteration, query->iteration + iteration_offset.load()}}))
        return true;
    } else if (std::holds_alternative<protocol::Ping>(m.body)) {
      ++pings_seen;
      if (answer_pings.load()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(pong_delay_ms.load()));
        if (!send(fd, {id, protocol::Pong{}})) return true;
        ++pongs_sent;
      }
    } else if (auto* declare = std::get_if<protocol::Declare>(&m.body)) {
      bool reject = false;
      for (const auto& t : declare->tensors) reject |= t.codec == reject_codec;
      if (reject) {
        if (!send(fd, {id, protocol::Error{StatusCode::kNotFound, strCat("unknown codec '", reject_codec, "'")}}))
          return true;
        continue;
      }
      std::vector<uint64_t> bytes;
      for (const auto& t : declare->tensors) bytes.push_back(t.elements * sizeof(float));
      const shm::SlotLayout layout = shm::layoutSlots(bytes);
      protocol::Declared declared;
      {
        std::lock_guard lock(mu_);
        segment_.reset();  // the old name goes away, as the agent's would
        slots_.clear();
        auto seg = shm::Segment::create(shm::segmentName(strCat("gcagent-client-test-", declares_++), 7),
                                        layout.total_bytes);
        if (!seg.ok()) throw std::runtime_error(seg.status().toString());
        segment_ = std::move(seg).value();
        for (size_t i = 0; i < declare->tensors.size(); ++i)
          slots_[declare->tensors[i].key] = {
              reinterpret_cast<float*>(segment_->bytes().data() + layout.offsets[i]), declare->tensors[i].elements};
        declared = {segment_->name(), layout.total_bytes, layout.offsets};
      }
      if (!send(fd, {id, declared})) return true;
    } else if (auto* device = std::get_if<protocol::DeclareDevice>(&m.body)) {
      const OnDeviceDeclare how = on_device_declare.load();
      if (how == OnDeviceDeclare::kRefuse) {
        if (!send(fd, {id, protocol::Error{StatusCode::kFailedPrecondition, "this agent has no GPU"}})) return true;
        continue;
      }
      protocol::DeclaredDevice offer;
      offer.gpu = device->gpu;
      for (const auto& t : device->tensors) {
        offer.slot_offsets.push_back(offer.allocation_bytes);
        offer.allocation_bytes += (t.elements * sizeof(float) + 255) / 256 * 256;
      }
      offer.ready_event.fill(1);
      offer.done_event.fill(2);
      if (how == OnDeviceDeclare::kOfferWithoutFd) {
        if (!send(fd, {id, offer})) return true;
        continue;
      }
      const int memfd = ::memfd_create("gcagent-client-test", MFD_CLOEXEC);
      const auto frame = protocol::encode({id, offer});
      Status sent = shm::sendFd(fd, memfd, frame);
      ::close(memfd);  // the client holds its own copy now
      ++memfd_offers_closed;
      if (!sent.ok()) return true;
    } else if (auto* submit = std::get_if<protocol::Submit>(&m.body)) {
      ++submits_seen;
      held_.push_back({id, std::move(*submit)});
      if (static_cast<int>(held_.size()) < hold_submits.load()) continue;
      std::vector<HeldSubmit> batch = std::move(held_);
      held_.clear();
      for (auto it = batch.rbegin(); it != batch.rend(); ++it)
        if (!answer(fd, *it)) return true;
    } else {
      return true;  // trainers never send anything else
    }
  }
  // readFrame fails on a closed connection or a stop request; tell them apart.
  pollfd p{stop_pipe_[0], POLLIN, 0};
  return ::poll(&p, 1, 0) == 0;
}

}  // namespace gcagent::client::testing
