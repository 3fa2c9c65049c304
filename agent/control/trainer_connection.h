// One trainer's connection as frames of the control protocol (shm/protocol.h). Apart from
// the requests (trainer_session.h) because what a stranger on the socket can make the agent
// hold is one concern whatever it asks: a hello within a deadline, few bytes before it, a
// frame's body within a deadline, read as it arrives; and replies, some with a descriptor,
// written in order.
#pragma once

#include <sys/types.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "agent/io.h"
#include "common/status.h"
#include "shm/protocol.h"

namespace gcagent::agent {

// A hello is a few hundred bytes: an unidentified connection cannot make the agent hold more.
inline constexpr size_t kUnidentifiedBodyBytes = 64 * 1024;

class TrainerConnection : public std::enable_shared_from_this<TrainerConnection> {
 public:
  struct Deadlines {
    std::chrono::milliseconds hello;  // from the connection to its hello
    std::chrono::milliseconds body;   // from a frame's header to the end of its body
  };

  TrainerConnection(asio::local::stream_protocol::socket socket, uint32_t id, Deadlines deadlines);
  virtual ~TrainerConnection() = default;

  // Arms the hello deadline and reads frames, each handed to dispatch().
  void start();

  // `fd`, when given, rides on the frame's first byte (SCM_RIGHTS); it must stay open until
  // the frame is written.
  void send(const shm::protocol::Message& m, int fd = -1);
  void sendError(uint32_t request, const Status& why);
  // Writes what is queued, synchronously, then closes: the agent is stopping.
  void flushAndClose();
  void close();

  uint32_t id() const { return id_; }
  bool closed() const { return closed_; }

 protected:
  // The kernel's word on who the trainer is (SO_PEERCRED).
  std::optional<uid_t> peerUid() const { return peer_uid_; }
  // Its process as this agent's pid namespace sees it; 0 when it cannot (another namespace).
  pid_t peerPid() const { return peer_pid_; }

  // The trainer said hello: it may send larger frames, and the hello deadline is off.
  virtual bool identified() const = 0;
  virtual void dispatch(const shm::protocol::Message& m) = 0;
  // A frame that could not be read (it is answered here); counted by the server.
  virtual void badMessage(const Status& why) = 0;
  // A deadline passed (`what` did not happen); the connection closes next.
  virtual void timedOut(std::string_view what) = 0;
  // close() calls onClosing() before the socket goes and onClosed() after.
  virtual void onClosing() {}
  virtual void onClosed() = 0;

 private:
  struct Outgoing {
    std::vector<std::byte> bytes;
    int fd = -1;
  };

  void readHeader();
  // Reads the body a chunk at a time, so what the agent holds grows with the bytes that
  // arrived, never with what a header announced.
  void readBody(shm::protocol::Header header);
  void dispatchBody(const shm::protocol::Header& header);
  // Closes the connection unless `still` has become false within `limit`.
  void arm(asio::steady_timer& deadline, std::chrono::milliseconds limit, std::function<bool()> still,
           std::string_view what);
  void writeNext();

  asio::local::stream_protocol::socket socket_;
  uint32_t id_;
  Deadlines deadlines_;
  std::optional<uid_t> peer_uid_;
  pid_t peer_pid_ = 0;
  std::array<std::byte, shm::protocol::kHeaderBytes> header_{};
  std::vector<std::byte> body_;
  asio::steady_timer hello_deadline_{socket_.get_executor()};
  asio::steady_timer body_deadline_{socket_.get_executor()};
  std::deque<Outgoing> out_;
  bool writing_ = false;
  bool close_after_write_ = false;
  bool closed_ = false;
};

}  // namespace gcagent::agent
