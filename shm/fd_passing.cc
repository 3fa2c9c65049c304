#include "shm/fd_passing.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/str_cat.h"

namespace gcagent::shm {

Result<size_t> sendWithFd(int socket, int fd, std::span<const std::byte> payload) {
  if (payload.empty()) return Status::invalidArgument("a file descriptor needs at least one byte to ride on");
  iovec iov{const_cast<std::byte*>(payload.data()), payload.size()};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(c), &fd, sizeof fd);
  for (;;) {
    const ssize_t sent = ::sendmsg(socket, &msg, MSG_NOSIGNAL);
    if (sent > 0) return static_cast<size_t>(sent);
    if (sent < 0 && errno == EINTR) continue;
    if (sent < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return size_t{0};
    return Status::unavailable(strCat("sending a file descriptor failed: ", sent < 0 ? std::strerror(errno) : "nothing sent"));
  }
}

ssize_t receiveWithFds(int socket, std::span<std::byte> buffer, int flags, std::vector<int>& fds) {
  iovec iov{buffer.data(), buffer.size()};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFdsPerRead)] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  const ssize_t got = ::recvmsg(socket, &msg, flags | MSG_CMSG_CLOEXEC);
  if (got < 0) return got;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int fd = -1;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
      fds.push_back(fd);
    }
  }
  if (msg.msg_flags & MSG_CTRUNC) {
    errno = EMSGSIZE;
    return -1;
  }
  return got;
}

Status sendFd(int socket, int fd, std::span<const std::byte> payload) {
  GC_ASSIGN_OR_RETURN(size_t sent, sendWithFd(socket, fd, payload));
  if (sent == 0) return Status::unavailable("sending a file descriptor: the socket is non-blocking and full");
  while (sent < payload.size()) {
    const ssize_t n = ::send(socket, payload.data() + sent, payload.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      return Status::unavailable(strCat("sending a file descriptor failed: ", n < 0 ? std::strerror(errno) : "short write"));
    sent += static_cast<size_t>(n);
  }
  return {};
}

Result<int> receiveFd(int socket, std::span<std::byte> payload) {
  std::vector<int> fds;
  size_t got = 0;
  while (got < payload.size()) {
    const ssize_t n = receiveWithFds(socket, payload.subspan(got), 0, fds);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      for (int fd : fds) ::close(fd);
      return Status::unavailable(strCat("receiving a file descriptor failed: ", n < 0 ? std::strerror(errno) : "short read"));
    }
    got += static_cast<size_t>(n);
  }
  if (fds.empty()) return Status::dataLoss("the message carried no file descriptor");
  for (size_t i = 1; i < fds.size(); ++i) ::close(fds[i]);
  return fds.front();
}

}  // namespace gcagent::shm
