// The gate every peer link passes before UCX hears of it: a TCP listener of the agent's own
// (Boost.Asio) and outgoing dials, each running the bounded handshake of handshake.h under a
// deadline, with caps on handshakes at once, in all and per remote address. Only an
// admitted link's UCX worker address reaches the transport, which then connects UCX by
// address: UCX's own sockaddr listener, which aborts the process on a malformed packet,
// never runs. The gate owns its io_context and runs only inside poll(), on the transport's
// thread.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "common/clock.h"
#include "common/status.h"
#include "transport/handshake.h"

namespace gcagent::transport {

struct GateOptions {
  HandshakeSide self;
  std::string listen = "127.0.0.1:0";  // host:port; port 0 picks one (listenAddress())
  double timeout_seconds = 10;         // a handshake that takes longer is refused
  size_t max_handshakes = 64;          // accepted handshakes at once; more are closed at once
  size_t max_per_address = 8;          // of those, from one remote address
  SteadyNow now = steadyNow;           // the clock of the deadlines
};

struct GateEvents {
  std::function<void(Admitted)> admitted;
  // A refused link, accepted or dialed; `remote` is the peer's address. Logged by the gate.
  std::function<void(const Refused&, std::string_view remote)> refused;
  // A dial that ended without a link (unreachable, closed, or `refused`: another token, a
  // misconfigured peer): the transport retries.
  std::function<void(Rank peer, const Status&, bool refused)> dial_failed;
  // The listener could not accept (out of descriptors); it retries with a growing delay.
  std::function<void(const Status&)> accept_failed;
};

class LinkGate {
 public:
  static Result<std::unique_ptr<LinkGate>> open(GateOptions options, GateEvents events);
  virtual ~LinkGate() = default;

  virtual std::string listenAddress() const = 0;
  // Starts a handshake with `peer` at `address` unless one is under way.
  virtual void dial(Rank peer, const std::string& address) = 0;
  virtual bool dialing(Rank peer) const = 0;
  // Runs the I/O that is ready and ends handshakes past their deadline, without blocking.
  // Returns whether anything happened.
  virtual bool poll() = 0;
  // Handshakes open now (accepted and dialed).
  virtual size_t handshakesOpen() const = 0;
};

}  // namespace gcagent::transport
