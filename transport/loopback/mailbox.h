// What an in-process endpoint receives: filled by the senders' threads, drained by its
// owner's, with an eventfd that wakes the owner's event loop. Both in-process transports
// (loopback.h's ideal wire and the loopback link backend) receive through one.
#pragma once

#include <sys/eventfd.h>
#include <unistd.h>

#include <cstdint>
#include <deque>
#include <mutex>
#include <utility>

namespace gcagent::transport {

template <typename T>
class Mailbox {
 public:
  Mailbox() = default;
  Mailbox(const Mailbox&) = delete;
  Mailbox& operator=(const Mailbox&) = delete;
  ~Mailbox() { ::close(efd_); }

  // Adds `item` unless `refuse` (checked under the lock) says the mailbox is closed.
  template <typename Refuse>
  bool post(T item, Refuse refuse) {
    {
      std::lock_guard lock(mu_);
      if (refuse()) return false;
      items_.push_back(std::move(item));
    }
    wake();
    return true;
  }
  bool post(T item) {
    return post(std::move(item), [] { return false; });
  }
  // Wakes the owner's loop without a new item (something else changed).
  void wake() {
    uint64_t one = 1;
    [[maybe_unused]] ssize_t n = ::write(efd_, &one, sizeof one);
  }
  // Everything posted so far, and the wake-ups read.
  std::deque<T> take() {
    uint64_t drained;
    [[maybe_unused]] ssize_t n = ::read(efd_, &drained, sizeof drained);
    std::lock_guard lock(mu_);
    return std::exchange(items_, {});
  }
  bool empty() {
    std::lock_guard lock(mu_);
    return items_.empty();
  }
  int eventFd() const { return efd_; }
  // Runs `f` under the mailbox's lock (a sender's check and a close must not interleave).
  template <typename F>
  void locked(F f) {
    std::lock_guard lock(mu_);
    f();
  }

 private:
  std::mutex mu_;
  std::deque<T> items_;
  int efd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
};

}  // namespace gcagent::transport
