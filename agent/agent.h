// The gcagent daemon: configuration in, then the comm thread's event loop running the
// control server, the transport and the reduction engine until SIGINT or SIGTERM.
#pragma once

#include <memory>

#include "agent/config/config.h"
#include "common/status.h"

namespace gcagent::agent {

class Agent {
 public:
  // Checks everything that can be checked without sockets: codecs and their parameters,
  // peer addresses, this agent's rank. `--validate` stops here.
  static Result<std::unique_ptr<Agent>> create(const Config& config);
  ~Agent();

  // Connects to the peers, serves trainers, and returns after a clean shutdown.
  Status run();

 private:
  struct Impl;
  explicit Agent(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace gcagent::agent
