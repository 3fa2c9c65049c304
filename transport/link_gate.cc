#include "transport/link_gate.h"

#include <utility>  // before Asio: g++ 12 in C++20 mode needs it

#include <boost/asio.hpp>

#include <array>
#include <list>
#include <map>
#include <variant>

#include "common/log.h"
#include "common/retry_delay.h"
#include "common/str_cat.h"

namespace gcagent::transport {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

// Says each kind of refusal once, then at most once per interval with how many came since:
// a flood of strangers must not flood the log (each is still counted).
class RefusalLog {
 public:
  void note(Refusal kind, const Status& why, std::string_view remote, SteadyTime now) {
    Entry& e = entries_[static_cast<size_t>(kind)];
    ++e.unsaid;
    if (e.last_said && now - *e.last_said < std::chrono::seconds(10)) return;
    const uint64_t more = e.unsaid - 1;
    GC_LOG(kWarn, "transport", "refused a peer link from ", remote, " (", refusalName(kind), "): ", why.message(),
           more > 0 ? strCat(" (and ", more, " more refused since the last report)") : std::string());
    e.unsaid = 0;
    e.last_said = now;
  }

 private:
  struct Entry {
    uint64_t unsaid = 0;
    std::optional<SteadyTime> last_said;
  };
  std::array<Entry, 4> entries_{};
};

class Gate;

// One handshake on one TCP connection, accepted or dialed.
struct Session : std::enable_shared_from_this<Session> {
  Session(Gate& g, tcp::socket s) : gate(g), socket(std::move(s)) {}
  Gate& gate;
  tcp::socket socket;
  std::optional<Rank> dialed;  // the peer this side dials; none for an accepted connection
  std::string remote;          // the peer's address, for logs and the per-address cap
  SteadyTime deadline{};
  std::variant<AcceptorHandshake, ConnectorHandshake> side{AcceptorHandshake({})};
  std::array<std::byte, kFrameHeaderBytes> header{};
  std::vector<std::byte> body;
  std::vector<std::byte> out;
  bool ended = false;
};

class Gate final : public LinkGate {
 public:
  Gate(GateOptions options, GateEvents events)
      : options_(std::move(options)), events_(std::move(events)), acceptor_(io_), accept_retry_(io_) {}

  ~Gate() override {
    for (auto& s : sessions_) closeSocket(*s);
    boost::system::error_code ec;
    acceptor_.close(ec);
    accept_retry_.cancel();
    io_.poll();  // lets the cancelled handlers run while their sessions still exist
  }

  Status listen() {
    GC_ASSIGN_OR_RETURN(auto host_port, splitHostPort(options_.listen));
    boost::system::error_code ec;
    auto ip = asio::ip::make_address(host_port.first, ec);
    if (ec) {  // a name (localhost, the pod's own name): its first address
      tcp::resolver resolver(io_);
      const auto found = resolver.resolve(host_port.first, std::to_string(host_port.second), ec);
      if (ec || found.empty())
        return Status::invalidArgument(strCat("transport.listen '", options_.listen, "': cannot resolve: ",
                                              ec ? ec.message() : std::string("no address")));
      ip = found.begin()->endpoint().address();
    }
    const tcp::endpoint at(ip, host_port.second);
    acceptor_.open(at.protocol(), ec);
    if (!ec) acceptor_.set_option(tcp::acceptor::reuse_address(true), ec);
    if (!ec) acceptor_.bind(at, ec);
    if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) return Status::unavailable(strCat("listening for peers on ", options_.listen, ": ", ec.message()));
    const auto bound = acceptor_.local_endpoint(ec);
    listen_address_ = bound.address().is_v6() ? strCat("[", bound.address().to_string(), "]:", bound.port())
                                              : strCat(bound.address().to_string(), ":", bound.port());
    accept();
    return {};
  }

  std::string listenAddress() const override { return listen_address_; }

  void dial(Rank peer, const std::string& address) override {
    if (dialing(peer)) return;
    auto failed = [&](const Status& s) {
      if (events_.dial_failed) events_.dial_failed(peer, s, false);
    };
    auto host_port = splitHostPort(address);
    if (!host_port.ok()) return failed(host_port.status());
    boost::system::error_code ec;
    tcp::resolver resolver(io_);
    auto found = resolver.resolve(host_port->first, std::to_string(host_port->second), ec);
    if (ec || found.empty())
      return failed(Status::unavailable(strCat("rank ", peer, " at ", address, ": cannot resolve: ", ec.message())));
    auto connector = ConnectorHandshake(options_.self, peer);
    auto hello = connector.start();
    if (!hello.ok()) return failed(hello.status());
    auto s = std::make_shared<Session>(*this, tcp::socket(io_));
    s->dialed = peer;
    s->remote = address;
    s->deadline = options_.now() + steadySeconds(options_.timeout_seconds);
    s->side = std::move(connector);
    s->out = std::move(hello).value();
    sessions_.push_back(s);
    asio::async_connect(s->socket, found, [this, s](boost::system::error_code e, const tcp::endpoint&) {
      if (s->ended) return;
      if (e) return end(*s, Status::unavailable(strCat("rank ", *s->dialed, " at ", s->remote, ": ", e.message())));
      s->socket.set_option(tcp::no_delay(true), e);
      write(s, [this, s] { readHeader(s); });
    });
  }

  bool dialing(Rank peer) const override {
    for (const auto& s : sessions_)
      if (!s->ended && s->dialed == peer) return true;
    return false;
  }

  bool poll() override {
    size_t ran = io_.poll();
    if (io_.stopped()) io_.restart();
    const SteadyTime now = options_.now();
    for (auto& s : sessions_) {
      if (s->ended || now < s->deadline) continue;
      ++ran;
      const Status why = Status::deadlineExceeded(
          strCat("the handshake did not finish within ", options_.timeout_seconds, " s (transport.peer_timeout)"));
      refuse(*s, {Refusal::kTimedOut, why});
    }
    ran += reap();
    return ran != 0;
  }

  size_t handshakesOpen() const override {
    size_t open = 0;
    for (const auto& s : sessions_) open += s->ended ? 0 : 1;
    return open;
  }

 private:
  void accept() {
    acceptor_.async_accept([this](boost::system::error_code ec, tcp::socket socket) {
      if (ec == asio::error::operation_aborted) return;
      if (ec) return acceptFailed(ec);
      if (accept_delay_.succeeded()) GC_LOG(kInfo, "transport", "accepting peers again on ", listen_address_);
      admitConnection(std::move(socket));
      accept();
    });
  }

  void acceptFailed(const boost::system::error_code& ec) {
    const Status why = Status::unavailable(strCat("peer listener ", listen_address_, ": accept: ", ec.message()));
    if (!accept_delay_.failing()) GC_LOG(kWarn, "transport", why.message(), "; retrying until it works again");
    if (events_.accept_failed) events_.accept_failed(why);
    accept_retry_.expires_after(accept_delay_.next());
    accept_retry_.async_wait([this](boost::system::error_code e) {
      if (!e) accept();
    });
  }

  void admitConnection(tcp::socket socket) {
    boost::system::error_code ec;
    const auto peer = socket.remote_endpoint(ec);
    if (ec) return;  // already gone
    const std::string remote = peer.address().to_string();
    size_t accepted = 0, from_here = 0;
    for (const auto& s : sessions_) {
      if (s->dialed || s->ended) continue;
      ++accepted;
      if (s->remote == remote) ++from_here;
    }
    if (accepted >= options_.max_handshakes || from_here >= options_.max_per_address) {
      socket.close(ec);
      const Status why = Status::resourceExhausted(
          accepted >= options_.max_handshakes
              ? strCat(accepted, " handshakes are already open (at most ", options_.max_handshakes, ")")
              : strCat(from_here, " handshakes from ", remote, " are already open (at most ", options_.max_per_address,
                       " per address)"));
      return noteRefusal({Refusal::kOverCapacity, why}, remote);
    }
    socket.set_option(tcp::no_delay(true), ec);
    auto s = std::make_shared<Session>(*this, std::move(socket));
    s->remote = remote;
    s->deadline = options_.now() + steadySeconds(options_.timeout_seconds);
    s->side = AcceptorHandshake(options_.self);
    sessions_.push_back(s);
    readHeader(s);
  }

  void readHeader(const std::shared_ptr<Session>& s) {
    asio::async_read(s->socket, asio::buffer(s->header), [this, s](boost::system::error_code ec, size_t) {
      if (s->ended) return;
      if (ec) return closedEarly(*s, ec);
      auto header = parseFrameHeader(s->header);
      if (!header.ok()) return refuse(*s, {Refusal::kMalformed, header.status()});
      s->body.resize(header->body_bytes);  // at most kMaxFrameBody, checked above
      asio::async_read(s->socket, asio::buffer(s->body), [this, s, type = header->type](boost::system::error_code e, size_t) {
        if (s->ended) return;
        if (e) return closedEarly(*s, e);
        onFrame(s, type);
      });
    });
  }

  void onFrame(const std::shared_ptr<Session>& s, FrameType type) {
    Step step = std::visit([&](auto& side) { return side.onFrame(type, s->body); }, s->side);
    if (step.refused) {
      s->out = std::move(step.reply);
      return refuse(*s, *step.refused);
    }
    if (step.admitted) {
      Admitted admitted = std::move(*step.admitted);
      boost::system::error_code ec;
      const auto peer = s->socket.remote_endpoint(ec);
      if (!ec) admitted.remote_host = peer.address().to_string();
      if (step.reply.empty()) {  // the connector's last step: nothing more to say
        finish(*s);
        if (events_.admitted) events_.admitted(std::move(admitted));
        return;
      }
      // The acceptor says welcome, then hands the link over: the connector starts its UCX
      // link only once it has read the welcome, so the order cannot race.
      s->out = std::move(step.reply);
      if (events_.admitted) events_.admitted(std::move(admitted));
      return write(s, [this, s] { finish(*s); });
    }
    s->out = std::move(step.reply);
    write(s, [this, s] { readHeader(s); });
  }

  void write(const std::shared_ptr<Session>& s, std::function<void()> then) {
    asio::async_write(s->socket, asio::buffer(s->out), [this, s, then = std::move(then)](boost::system::error_code ec, size_t) {
      if (s->ended) return;
      if (ec) return closedEarly(*s, ec);
      then();
    });
  }

  // The peer closed (or reset) before the handshake ended.
  void closedEarly(Session& s, const boost::system::error_code& ec) {
    const Status why = Status::unavailable(strCat("the connection closed during the handshake: ", ec.message()));
    if (s.dialed) return end(s, Status::unavailable(strCat("rank ", *s.dialed, " at ", s.remote, ": ", why.message())));
    refuse(s, {Refusal::kMalformed, why});
  }

  // Refuses a link: the refusal frame if there is one (best effort, the socket closes now),
  // then log, count, and for a dial, retry later.
  void refuse(Session& s, const Refused& refused) {
    if (!s.out.empty()) {
      boost::system::error_code ec;
      s.socket.non_blocking(true, ec);
      if (!ec) s.socket.write_some(asio::buffer(s.out), ec);
    }
    noteRefusal(refused, s.remote);
    end(s, refused.why, refused.kind != Refusal::kTimedOut);
  }

  void noteRefusal(const Refused& refused, std::string_view remote) {
    log_.note(refused.kind, refused.why, remote, options_.now());
    if (events_.refused) events_.refused(refused, remote);
  }

  void end(Session& s, const Status& why, bool refused = false) {
    if (s.ended) return;
    closeSocket(s);
    if (s.dialed && events_.dial_failed) events_.dial_failed(*s.dialed, why, refused);
  }

  void finish(Session& s) { closeSocket(s); }

  static void closeSocket(Session& s) {
    s.ended = true;
    boost::system::error_code ec;
    s.socket.shutdown(tcp::socket::shutdown_both, ec);
    s.socket.close(ec);
  }

  // Forgets ended sessions whose handlers have all run (they hold the last references).
  size_t reap() {
    const size_t before = sessions_.size();
    sessions_.remove_if([](const std::shared_ptr<Session>& s) { return s->ended && s.use_count() == 1; });
    return before - sessions_.size();
  }

  GateOptions options_;
  GateEvents events_;
  asio::io_context io_;
  tcp::acceptor acceptor_;
  asio::steady_timer accept_retry_;
  RetryDelay accept_delay_;
  std::string listen_address_;
  std::list<std::shared_ptr<Session>> sessions_;
  RefusalLog log_;
};

}  // namespace

Result<std::unique_ptr<LinkGate>> LinkGate::open(GateOptions options, GateEvents events) {
  auto gate = std::make_unique<Gate>(std::move(options), std::move(events));
  GC_RETURN_IF_ERROR(gate->listen());
  return std::unique_ptr<LinkGate>(std::move(gate));
}

}  // namespace gcagent::transport
