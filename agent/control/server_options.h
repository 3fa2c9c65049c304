// How the control server serves its trainers: where its socket and segments are, who may
// use them, what the trainers are told of the node, and what a stranger on the socket can hold.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "agent/coding/device_path.h"
#include "common/status.h"

namespace gcagent::agent {

struct ServerOptions {
  std::string socket_path;
  std::string shm_prefix = "gcagent";
  mode_t mode = 0600;  // of the socket and the segments
  std::optional<gid_t> group;  // group of the socket and the segments (with mode 0660)
  uint32_t node_rank = 0;
  uint32_t node_count = 1;
  // transport.reduction_timeout, told to trainers (protocol::Welcome); 0: none.
  std::chrono::milliseconds reduction_timeout{0};
  // A trainer left a job (exited or was killed): the job's nodes must hear of it. Gets the
  // job's last iteration this node completed and the reason.
  std::function<void(uint64_t job, uint64_t last_completed, const Status& why)> on_trainer_left;
  // Serves trainers whose tensors live on a GPU; null: makeDevicePath(io) at start().
  std::shared_ptr<DevicePath> device_path;
  // What a stranger on the socket can hold: connections beyond max_connections are closed
  // at once; a connection that says no hello within hello_timeout, or announces a frame
  // and does not finish its body within body_timeout, is closed. Before its hello a
  // connection may announce at most kUnidentifiedBodyBytes (trainer_connection.h).
  size_t max_connections = 256;
  std::chrono::milliseconds hello_timeout{10000};
  std::chrono::milliseconds body_timeout{30000};
  // The socket stopped (false: accept failed, e.g. out of descriptors) or resumed (true)
  // accepting trainers.
  std::function<void(bool accepting)> on_accepting;
};

}  // namespace gcagent::agent
