#include "agent/coding/host_stream.h"

namespace gcagent::agent {

HostStream::HostStream(asio::io_context& io, Mode mode) : io_(io) {
  if (mode == Mode::kThread) worker_ = std::thread([this] { run(); });
}

HostStream::~HostStream() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  wake_.notify_one();
  if (worker_.joinable()) {
    worker_.join();
  } else {
    drain();
  }
}

void HostStream::drain() {
  for (;;) {
    Item item;
    {
      std::lock_guard lock(mu_);
      if (queue_.empty()) return;
      item = std::move(const_cast<Item&>(queue_.top()));
      queue_.pop();
    }
    execute(std::move(item));
  }
}

std::shared_ptr<void> HostStream::guard() {
  return std::make_shared<asio::executor_work_guard<asio::io_context::executor_type>>(io_.get_executor());
}

void HostStream::push(Item item) {
  outstanding_->fetch_add(1);
  {
    std::lock_guard lock(mu_);
    item.seq = seq_++;
    queue_.push(std::move(item));
  }
  wake_.notify_one();
}

void HostStream::enqueue(uint64_t tag, int64_t priority, Task task) {
  push({priority, 0, tag, std::move(task), nullptr, nullptr, nullptr});
}

void HostStream::after(uint64_t tag, int64_t priority, Done done) {
  push({priority, 0, tag, nullptr, std::move(done), nullptr, guard()});
}

void HostStream::cancel(uint64_t tag, int64_t priority, Done done) {
  outstanding_->fetch_add(1);
  {
    std::lock_guard lock(mu_);
    Item item{priority, seq_++, tag, nullptr, std::move(done), nullptr, guard()};
    item.ends_cancel = true;
    cancelled_[tag] = item.seq;
    ++cancels_;
    queue_.push(std::move(item));
  }
  wake_.notify_one();
}

void HostStream::hold(uint64_t tag, int64_t priority, std::shared_ptr<const void> pin) {
  if (!pin) return;  // nothing to keep (an item without task, done or pin would be a report)
  push({priority, 0, tag, nullptr, nullptr, std::move(pin), guard()});
}

void HostStream::run() {
  for (;;) {
    Item item;
    {
      std::unique_lock lock(mu_);
      wake_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and everything queued has run
      item = std::move(const_cast<Item&>(queue_.top()));
      queue_.pop();
    }
    execute(std::move(item));
  }
}

void HostStream::execute(Item item) {
  // The lock only while a cancel is pending: every slice's task passes here.
  if ((item.task || item.ends_cancel) && cancels_.load(std::memory_order_acquire) > 0) {
    std::lock_guard lock(mu_);
    if (item.ends_cancel) --cancels_;
    auto c = cancelled_.find(item.tag);
    if (c != cancelled_.end() && item.ends_cancel && item.seq == c->second) cancelled_.erase(c);
    else if (c != cancelled_.end() && item.task && item.seq < c->second) {
      outstanding_->fetch_sub(1);
      return;
    }
  }
  if (item.ends_cancel) failures_.erase(item.tag);  // the cancelled work's: moot
  if (item.task) {
    Status s = item.task();
    if (!s.ok()) failures_.try_emplace(item.tag, std::move(s));
    outstanding_->fetch_sub(1);
    return;
  }
  if (item.pin) {
    asio::post(io_, [outstanding = outstanding_, pin = std::move(item.pin), guard = std::move(item.guard)]() mutable {
      pin.reset();
      guard.reset();
      outstanding->fetch_sub(1);
    });
    return;
  }
  Status first;
  if (auto f = failures_.find(item.tag); f != failures_.end()) {
    first = std::move(f->second);
    failures_.erase(f);
  }
  asio::post(io_, [outstanding = outstanding_, done = std::move(item.done), first = std::move(first),
                   guard = std::move(item.guard)]() mutable {
    done(first);
    guard.reset();
    outstanding->fetch_sub(1);
  });
}

}  // namespace gcagent::agent
