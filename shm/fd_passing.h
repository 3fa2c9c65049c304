// File descriptors over a connected Unix stream socket (SCM_RIGHTS): how the agent hands a
// trainer its exported GPU memory. The fd rides on the first byte of a frame; the receiver
// collects every fd that arrives, in order, while it reads the byte stream as usual.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <span>
#include <vector>

#include "common/status.h"

namespace gcagent::shm {

// Sends the start of `payload` with `fd` attached. Returns how many bytes went; the caller
// writes the rest as plain stream data. 0 means a non-blocking socket is full: nothing went,
// fd included, and the caller retries once it is writable.
Result<size_t> sendWithFd(int socket, int fd, std::span<const std::byte> payload);

// recv(2) that keeps the descriptors that came with the bytes: appends them to `fds` (with
// close-on-exec set). Returns what recv would, errno included. Descriptors the kernel had to
// drop (more than kMaxFdsPerRead at once) make it fail with EMSGSIZE.
inline constexpr size_t kMaxFdsPerRead = 8;
ssize_t receiveWithFds(int socket, std::span<std::byte> buffer, int flags, std::vector<int>& fds);

// The whole payload with the fd; blocking sockets only.
Status sendFd(int socket, int fd, std::span<const std::byte> payload);
// Receives exactly payload.size() bytes and the one fd that came with them.
Result<int> receiveFd(int socket, std::span<std::byte> payload);

}  // namespace gcagent::shm
