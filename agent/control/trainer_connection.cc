#include "agent/control/trainer_connection.h"

#include <sys/socket.h>

#include <algorithm>

#include "common/log.h"
#include "common/str_cat.h"
#include "shm/fd_passing.h"

namespace gcagent::agent {

namespace protocol = shm::protocol;
using asio::local::stream_protocol;

TrainerConnection::TrainerConnection(stream_protocol::socket socket, uint32_t id, Deadlines deadlines)
    : socket_(std::move(socket)), id_(id), deadlines_(deadlines) {
  ucred cred{};
  socklen_t length = sizeof cred;
  if (::getsockopt(socket_.native_handle(), SOL_SOCKET, SO_PEERCRED, &cred, &length) == 0) {
    peer_uid_ = cred.uid;
    peer_pid_ = cred.pid;
  }
}

void TrainerConnection::start() {
  arm(hello_deadline_, deadlines_.hello, [this] { return !identified(); }, "no hello");
  readHeader();
}

void TrainerConnection::send(const protocol::Message& m, int fd) {
  if (closed_) return;
  out_.push_back({protocol::encode(m), fd});
  if (!writing_) writeNext();
}

void TrainerConnection::sendError(uint32_t request, const Status& why) {
  send({request, protocol::Error{why.code(), why.message()}});
}

void TrainerConnection::flushAndClose() {
  boost::system::error_code ec;
  while (!out_.empty() && !ec) {
    if (out_.front().fd < 0) asio::write(socket_, asio::buffer(out_.front().bytes), ec);
    out_.pop_front();  // a descriptor cannot be worth waiting for: the agent is stopping
  }
  close();
}

void TrainerConnection::close() {
  if (closed_) return;
  closed_ = true;
  onClosing();
  hello_deadline_.cancel();
  body_deadline_.cancel();
  boost::system::error_code ec;
  socket_.close(ec);
  onClosed();
}

void TrainerConnection::readHeader() {
  auto self = shared_from_this();
  asio::async_read(socket_, asio::buffer(header_), [this, self](boost::system::error_code ec, size_t) {
    if (ec) return close();
    auto header = protocol::parseHeader(header_);
    if (!header.ok()) {
      // The stream cannot be resynchronised after a bad header: answer and hang up.
      badMessage(header.status());
      GC_LOG(kWarn, "control", "trainer ", id_, ": ", header.status().message(), "; disconnecting");
      sendError(0, header.status());
      close_after_write_ = true;
      return;
    }
    if (!identified() && header->body_bytes > kUnidentifiedBodyBytes) {
      const Status why = Status::invalidArgument(strCat("a frame of ", header->body_bytes, " bytes before hello (at most ",
                                                        kUnidentifiedBodyBytes, ")"));
      badMessage(why);
      GC_LOG(kWarn, "control", "trainer ", id_, ": ", why.message(), "; disconnecting");
      sendError(header->request_id, why);
      close_after_write_ = true;
      return;
    }
    body_.clear();
    arm(body_deadline_, deadlines_.body, [] { return true; }, "a message not finished");
    readBody(*header);
  });
}

void TrainerConnection::readBody(protocol::Header header) {
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

void TrainerConnection::dispatchBody(const protocol::Header& header) {
  body_deadline_.cancel();
  auto message = protocol::decode(header, body_);
  if (!message.ok()) {
    badMessage(message.status());
    GC_LOG(kWarn, "control", "trainer ", id_, ": ", message.status().message());
    sendError(header.request_id, message.status());
  } else {
    dispatch(*message);
  }
  if (!closed_) readHeader();
}

void TrainerConnection::arm(asio::steady_timer& deadline, std::chrono::milliseconds limit, std::function<bool()> still,
                            std::string_view what) {
  deadline.expires_after(limit);
  std::weak_ptr<TrainerConnection> weak = weak_from_this();
  deadline.async_wait([weak, still = std::move(still), what](boost::system::error_code ec) {
    auto self = weak.lock();
    if (ec || !self || self->closed_ || !still()) return;
    self->timedOut(what);
    self->close();
  });
}

void TrainerConnection::writeNext() {
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

}  // namespace gcagent::agent
