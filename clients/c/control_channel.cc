#include "control_channel.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <thread>
#include <utility>

#include "common/str_cat.h"
#include "shm/fd_passing.h"

namespace gcagent::client {
namespace protocol = shm::protocol;
namespace {

constexpr size_t kReadChunk = 64 * 1024;

std::string errnoText(int err) { return std::strerror(err); }

// Errors that mean "no agent listening there yet".
bool retriable(int err) { return err == ENOENT || err == ECONNREFUSED || err == EAGAIN || err == EINTR; }

}  // namespace

Deadline Deadline::after(int timeout_ms, Clock::time_point now) {
  Deadline d;
  if (timeout_ms >= 0) {
    d.infinite_ = false;
    d.at_ = now + std::chrono::milliseconds(timeout_ms);
  }
  return d;
}

Deadline Deadline::latest(const Deadline& a, const Deadline& b) {
  if (a.infinite_ || b.infinite_) return never();
  return a.at_ >= b.at_ ? a : b;
}

Deadline Deadline::earliest(const Deadline& a, const Deadline& b) {
  if (a.infinite_) return b;
  if (b.infinite_) return a;
  return a.at_ <= b.at_ ? a : b;
}

int Deadline::pollTimeoutMs(Clock::time_point now) const {
  if (infinite_) return -1;
  const auto left = at_ - now;
  if (left <= Clock::duration::zero()) return 0;
  const auto ms = std::chrono::ceil<std::chrono::milliseconds>(left).count();
  return static_cast<int>(std::min<decltype(ms)>(ms, INT_MAX));
}

ControlChannel::ControlChannel(ControlChannel&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)),
      path_(std::move(other.path_)),
      in_(std::move(other.in_)),
      in_begin_(std::exchange(other.in_begin_, 0)),
      eof_(std::exchange(other.eof_, false)),
      fds_(std::move(other.fds_)) {}

ControlChannel& ControlChannel::operator=(ControlChannel&& other) noexcept {
  if (this != &other) {
    close();
    fd_ = std::exchange(other.fd_, -1);
    path_ = std::move(other.path_);
    in_ = std::move(other.in_);
    in_begin_ = std::exchange(other.in_begin_, 0);
    eof_ = std::exchange(other.eof_, false);
    fds_ = std::move(other.fds_);
  }
  return *this;
}

ControlChannel::~ControlChannel() { close(); }

void ControlChannel::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  for (int fd : fds_) ::close(fd);
  fds_.clear();
}

int ControlChannel::takeFd() {
  if (fds_.empty()) return -1;
  const int fd = fds_.front();
  fds_.pop_front();
  return fd;
}

Outcome ControlChannel::connect(const std::string& path, Deadline deadline, bool wait_for_path, ControlChannel* out) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof addr.sun_path)
    return failure(GCAGENT_ERR_INVALID_ARGUMENT,
                   strCat("agent socket path '", path, "' must hold 1 to ", sizeof addr.sun_path - 1, " bytes"));
  std::memcpy(addr.sun_path, path.data(), path.size());

  auto backoff = std::chrono::milliseconds(5);
  int attempts = 0;
  for (;;) {
    ++attempts;
    // Non-blocking from the start: a full listen backlog gives EAGAIN instead of blocking
    // past the deadline.
    int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return failure(GCAGENT_ERR_IO, strCat("cannot create a unix socket: ", errnoText(errno)));
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0) {
      ControlChannel channel;
      channel.fd_ = fd;
      channel.path_ = path;
      *out = std::move(channel);
      return success();
    }
    const int err = errno;
    ::close(fd);
    // No socket file: no agent has started there. Said at once unless asked to wait for one.
    if (err == ENOENT && !wait_for_path)
      return failure(GCAGENT_ERR_IO, strCat("no gcagent agent at ", path, ": the socket does not exist; start the "
                                            "agent first, or check that this is its agent.socket"));
    if (!retriable(err))
      return failure(GCAGENT_ERR_IO, strCat("cannot connect to the gcagent agent at ", path, ": ", errnoText(err)));
    if (deadline.passed())
      return failure(GCAGENT_ERR_TIMEOUT,
                     strCat("no gcagent agent answered at ", path, " (", attempts, " attempts until the timeout; last: ",
                            errnoText(err), "); is the agent running, and is this its socket path?"));
    const int left = deadline.pollTimeoutMs();
    auto pause = backoff;
    if (left >= 0) pause = std::min(pause, std::chrono::milliseconds(left));
    std::this_thread::sleep_for(pause);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(100));
  }
}

Outcome ControlChannel::readAvailable() {
  for (;;) {
    const size_t old = in_.size();
    in_.resize(old + kReadChunk);
    std::vector<int> fds;
    const ssize_t n = shm::receiveWithFds(fd_, std::span(in_).subspan(old, kReadChunk), 0, fds);
    const int err = errno;
    fds_.insert(fds_.end(), fds.begin(), fds.end());
    in_.resize(old + static_cast<size_t>(std::max<ssize_t>(n, 0)));
    if (n > 0) {
      if (static_cast<size_t>(n) < kReadChunk) return success();
      continue;
    }
    if (n == 0 || err == ECONNRESET) {
      eof_ = true;
      return success();
    }
    if (err == EINTR) continue;
    if (err == EAGAIN || err == EWOULDBLOCK) return success();
    return failure(GCAGENT_ERR_IO, strCat("reading from the agent's socket ", path_, " failed: ", errnoText(err)));
  }
}

Outcome ControlChannel::send(const protocol::Message& message, Deadline deadline) {
  if (fd_ < 0) return failure(GCAGENT_ERR_IO, "the connection to the agent is closed");
  const std::vector<std::byte> frame = protocol::encode(message);
  size_t sent = 0;
  while (sent < frame.size()) {
    const ssize_t n = ::send(fd_, frame.data() + sent, frame.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<size_t>(n);
      continue;
    }
    const int err = errno;
    if (n < 0 && err == EINTR) continue;
    if (n < 0 && (err == EAGAIN || err == EWOULDBLOCK)) {
      pollfd p{fd_, POLLOUT | POLLIN, 0};
      const int rc = ::poll(&p, 1, deadline.pollTimeoutMs());
      if (rc < 0 && errno == EINTR) continue;
      if (rc < 0) return failure(GCAGENT_ERR_IO, strCat("poll on the agent's socket failed: ", errnoText(errno)));
      if (rc == 0)
        return failure(GCAGENT_ERR_TIMEOUT, strCat("the agent at ", path_, " stopped reading: sending a '",
                                                   protocol::messageTypeName(static_cast<protocol::MessageType>(
                                                       message.body.index() + 1)),
                                                   "' message timed out"));
      if (p.revents & POLLIN) GCAGENT_CLIENT_RETURN_IF_FAILED(readAvailable());
      continue;
    }
    if (err == EPIPE || err == ECONNRESET)
      return failure(GCAGENT_ERR_IO, strCat("the agent at ", path_, " closed the connection (did it exit?)"));
    return failure(GCAGENT_ERR_IO, strCat("writing to the agent's socket ", path_, " failed: ", errnoText(err)));
  }
  return success();
}

Outcome ControlChannel::receive(Deadline deadline, protocol::Message* out) { return receive(deadline, -1, out); }

Outcome ControlChannel::receive(Deadline deadline, int wake_fd, protocol::Message* out) {
  if (fd_ < 0) return failure(GCAGENT_ERR_IO, "the connection to the agent is closed");
  for (;;) {
    const size_t available = in_.size() - in_begin_;
    if (available >= protocol::kHeaderBytes) {
      const auto bytes = std::span<const std::byte>(in_).subspan(in_begin_);
      auto header = protocol::parseHeader(bytes.first(protocol::kHeaderBytes));
      if (!header.ok())
        return failure(GCAGENT_ERR_PROTOCOL, strCat("the agent sent a bad message: ", header.status().message()));
      const size_t frame = protocol::kHeaderBytes + header->body_bytes;
      if (available >= frame) {
        auto message = protocol::decode(*header, bytes.subspan(protocol::kHeaderBytes, header->body_bytes));
        in_begin_ += frame;
        if (in_begin_ == in_.size()) {
          in_.clear();
          in_begin_ = 0;
        } else if (in_begin_ >= kReadChunk) {
          in_.erase(in_.begin(), in_.begin() + static_cast<std::ptrdiff_t>(in_begin_));
          in_begin_ = 0;
        }
        if (!message.ok())
          return failure(GCAGENT_ERR_PROTOCOL, strCat("the agent sent a bad message: ", message.status().message()));
        *out = std::move(message).value();
        return success();
      }
    }
    if (eof_)
      return failure(GCAGENT_ERR_IO,
                     available == 0
                         ? strCat("the agent at ", path_, " closed the connection (did it exit?)")
                         : strCat("the agent at ", path_, " closed the connection in the middle of a message"));
    pollfd p[2] = {{fd_, POLLIN, 0}, {wake_fd, POLLIN, 0}};
    const int rc = ::poll(p, wake_fd >= 0 ? 2 : 1, deadline.pollTimeoutMs());
    if (rc < 0 && errno == EINTR) continue;
    if (rc < 0) return failure(GCAGENT_ERR_IO, strCat("poll on the agent's socket failed: ", errnoText(errno)));
    if (p[1].revents & POLLNVAL)
      return failure(GCAGENT_ERR_INVALID_ARGUMENT, strCat("wake_fd ", wake_fd, " is not an open descriptor"));
    if (rc == 0 || (p[0].revents == 0 && p[1].revents != 0)) return failure(GCAGENT_ERR_TIMEOUT, "");
    GCAGENT_CLIENT_RETURN_IF_FAILED(readAvailable());
  }
}

}  // namespace gcagent::client
