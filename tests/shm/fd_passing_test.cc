#include "shm/fd_passing.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <numeric>

#include "shm/protocol.h"

namespace gcagent::shm {
namespace {

struct SocketPair {
  int fds[2] = {-1, -1};
  SocketPair() { EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0) << std::strerror(errno); }
  ~SocketPair() {
    for (int fd : fds)
      if (fd >= 0) ::close(fd);
  }
};

// A memfd holding `bytes` bytes counting up from 0: the CPU stand-in for an exported
// allocation's fd (both are plain files the kernel duplicates into the receiver).
int patternedMemfd(size_t bytes) {
  const int fd = ::memfd_create("gcagent-fd-test", MFD_CLOEXEC);
  EXPECT_GE(fd, 0) << std::strerror(errno);
  std::vector<unsigned char> data(bytes);
  std::iota(data.begin(), data.end(), 0);
  EXPECT_EQ(::write(fd, data.data(), data.size()), static_cast<ssize_t>(data.size()));
  return fd;
}

TEST(FdPassingTest, ReceiverMapsTheSameMemory) {
  SocketPair s;
  const int mine = patternedMemfd(4096);
  const uint64_t offer = 0x1122334455667788;
  ASSERT_TRUE(sendFd(s.fds[0], mine, std::as_bytes(std::span(&offer, 1))).ok());
  uint64_t got = 0;
  auto theirs = receiveFd(s.fds[1], std::as_writable_bytes(std::span(&got, 1)));
  ASSERT_TRUE(theirs.ok()) << theirs.status().toString();
  EXPECT_EQ(got, offer);
  EXPECT_NE(*theirs, mine);
  EXPECT_EQ(::fcntl(*theirs, F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
  auto* view = static_cast<unsigned char*>(::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, *theirs, 0));
  ASSERT_NE(view, MAP_FAILED);
  EXPECT_EQ(view[0], 0);
  EXPECT_EQ(view[200], 200);
  EXPECT_EQ(view[4095], 4095 % 256);
  view[7] = 0xab;  // a write through the received fd lands in the sender's file
  unsigned char back = 0;
  ASSERT_EQ(::pread(mine, &back, 1, 7), 1);
  EXPECT_EQ(back, 0xab);
  ::munmap(view, 4096);
  ::close(*theirs);
  ::close(mine);
}

TEST(FdPassingTest, FdRidesWithItsFrameInAByteStream) {
  // Three control frames back to back; only the middle one carries the fd, sent in two
  // pieces as the agent does when the socket is nearly full.
  SocketPair s;
  const int mine = patternedMemfd(64);
  namespace protocol = shm::protocol;
  protocol::DeclaredDevice offer;
  offer.gpu[0] = 1;
  offer.allocation_bytes = 2 << 20;
  offer.ready_event[3] = 9;
  offer.slot_offsets = {0, 4096};
  const auto before = protocol::encode({1, protocol::Welcome{1, 0, 1}});
  const auto frame = protocol::encode({2, offer});
  const auto after = protocol::encode({3, protocol::Complete{4, {5}, {}}});
  ASSERT_EQ(::send(s.fds[0], before.data(), before.size(), 0), static_cast<ssize_t>(before.size()));
  auto first = sendWithFd(s.fds[0], mine, std::span(frame).first(10));
  ASSERT_TRUE(first.ok()) << first.status().toString();
  ASSERT_EQ(*first, 10u);
  ASSERT_EQ(::send(s.fds[0], frame.data() + 10, frame.size() - 10, 0), static_cast<ssize_t>(frame.size() - 10));
  ASSERT_EQ(::send(s.fds[0], after.data(), after.size(), 0), static_cast<ssize_t>(after.size()));

  std::vector<std::byte> stream(before.size() + frame.size() + after.size());
  std::vector<int> fds;
  size_t got = 0;
  while (got < stream.size()) {
    const ssize_t n = receiveWithFds(s.fds[1], std::span(stream).subspan(got), 0, fds);
    ASSERT_GT(n, 0) << std::strerror(errno);
    got += static_cast<size_t>(n);
  }
  ASSERT_EQ(fds.size(), 1u);
  EXPECT_TRUE(std::equal(frame.begin(), frame.end(), stream.begin() + static_cast<ptrdiff_t>(before.size())));
  auto header = protocol::parseHeader(std::span(stream).subspan(before.size(), protocol::kHeaderBytes));
  ASSERT_TRUE(header.ok());
  EXPECT_EQ(header->type, protocol::MessageType::kDeclaredDevice);
  unsigned char byte = 0;
  ASSERT_EQ(::pread(fds[0], &byte, 1, 63), 1);
  EXPECT_EQ(byte, 63);
  ::close(fds[0]);
  ::close(mine);
}

TEST(FdPassingTest, MissingFdIsNamed) {
  SocketPair s;
  const uint32_t value = 5;
  ASSERT_EQ(::send(s.fds[0], &value, sizeof value, 0), 4);
  uint32_t got = 0;
  auto fd = receiveFd(s.fds[1], std::as_writable_bytes(std::span(&got, 1)));
  ASSERT_FALSE(fd.ok());
  EXPECT_EQ(fd.status().message(), "the message carried no file descriptor");
}

TEST(FdPassingTest, EmptyPayloadAndBadFdAreErrors) {
  SocketPair s;
  const int mine = patternedMemfd(8);
  auto empty = sendWithFd(s.fds[0], mine, {});
  ASSERT_FALSE(empty.ok());
  EXPECT_EQ(empty.status().message(), "a file descriptor needs at least one byte to ride on");
  const std::byte one{1};
  auto bad = sendWithFd(s.fds[0], 1 << 20, std::span(&one, 1));
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "sending a file descriptor failed: Bad file descriptor");
  ::close(mine);
}

TEST(FdPassingTest, FullNonBlockingSocketSendsNothing) {
  SocketPair s;
  ASSERT_EQ(::fcntl(s.fds[0], F_SETFL, O_NONBLOCK), 0);
  std::vector<std::byte> filler(1 << 16);
  while (::send(s.fds[0], filler.data(), filler.size(), MSG_DONTWAIT) > 0) {
  }
  const int mine = patternedMemfd(8);
  const std::byte one{1};
  auto sent = sendWithFd(s.fds[0], mine, std::span(&one, 1));
  ASSERT_TRUE(sent.ok()) << sent.status().toString();
  EXPECT_EQ(*sent, 0u);
  // Drained, the socket takes the descriptor; the receiver finds it after the filler.
  std::vector<int> fds;
  std::vector<std::byte> sink(1 << 16);
  while (::recv(s.fds[1], sink.data(), sink.size(), MSG_DONTWAIT) > 0) {
  }
  sent = sendWithFd(s.fds[0], mine, std::span(&one, 1));
  ASSERT_TRUE(sent.ok());
  EXPECT_EQ(*sent, 1u);
  std::byte got{};
  ASSERT_EQ(receiveWithFds(s.fds[1], std::span(&got, 1), 0, fds), 1);
  EXPECT_EQ(got, one);
  ASSERT_EQ(fds.size(), 1u);
  ::close(fds[0]);
  ::close(mine);
}

TEST(FdPassingTest, PeerGoneIsAnError) {
  SocketPair s;
  ::close(s.fds[1]);
  s.fds[1] = -1;
  const int mine = patternedMemfd(8);
  const std::byte one{1};
  auto sent = sendWithFd(s.fds[0], mine, std::span(&one, 1));
  ASSERT_FALSE(sent.ok());
  EXPECT_EQ(sent.status().message(), "sending a file descriptor failed: Broken pipe");
  ::close(mine);
}

}  // namespace
}  // namespace gcagent::shm
