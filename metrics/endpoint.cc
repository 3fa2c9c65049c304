#include "metrics/endpoint.h"

#include <utility>  // before Asio: g++ 12 with C++20 needs std::exchange declared first

#include <prometheus/text_serializer.h>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <charconv>
#include <thread>

#include "common/log.h"
#include "common/retry_delay.h"
#include "common/str_cat.h"

namespace gcagent::metrics {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

constexpr std::string_view kPrometheusText = "text/plain; version=0.0.4; charset=utf-8";
constexpr std::string_view kJson = "application/json";

struct Reply {
  http::status status;
  std::string_view content_type;
  std::string body;
};

Reply route(std::string_view target, Stats& stats) {
  const std::string_view path = target.substr(0, target.find('?'));
  if (path == "/metrics") {
    prometheus::TextSerializer serializer;
    return {http::status::ok, kPrometheusText, serializer.Serialize(stats.registry()->Collect())};
  }
  if (path == "/healthz" || path == "/readyz") {
    const HealthSnapshot s = stats.health().snapshot();
    const bool fine = path == "/healthz" || s.ready();
    return {fine ? http::status::ok : http::status::service_unavailable, kJson,
            healthJson(s, std::chrono::system_clock::now())};
  }
  return {http::status::not_found, "text/plain", strCat("no such path '", path, "': try /metrics, /healthz or /readyz\n")};
}

// One connection: read a request, answer it, repeat while the client keeps it alive.
class Session : public std::enable_shared_from_this<Session> {
 public:
  // `open` counts the live sessions, so the endpoint can cap them.
  Session(tcp::socket socket, Stats& stats, std::shared_ptr<size_t> open)
      : stream_(std::move(socket)), stats_(stats), open_(std::move(open)) {
    ++*open_;
  }
  ~Session() { --*open_; }

  void read() {
    request_ = {};
    stream_.expires_after(std::chrono::seconds(30));  // an idle or stuck client lets go of its socket
    http::async_read(stream_, buffer_, request_, [self = shared_from_this()](beast::error_code ec, size_t) {
      if (ec) return self->close();
      self->answer();
    });
  }

 private:
  void answer() {
    Reply reply = request_.method() == http::verb::get || request_.method() == http::verb::head
                      ? route(std::string_view(request_.target().data(), request_.target().size()), stats_)
                      : Reply{http::status::method_not_allowed, "text/plain", "only GET and HEAD\n"};
    auto response = std::make_shared<http::response<http::string_body>>(reply.status, request_.version());
    response->set(http::field::content_type, beast::string_view(reply.content_type.data(), reply.content_type.size()));
    response->set(http::field::cache_control, "no-store");
    response->keep_alive(request_.keep_alive());
    if (request_.method() != http::verb::head) response->body() = std::move(reply.body);
    response->prepare_payload();
    http::async_write(stream_, *response, [self = shared_from_this(), response](beast::error_code ec, size_t) {
      if (ec || !response->keep_alive()) return self->close();
      self->read();
    });
  }

  void close() {
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
  }

  beast::tcp_stream stream_;
  Stats& stats_;
  std::shared_ptr<size_t> open_;
  beast::flat_buffer buffer_;
  http::request<http::string_body> request_;
};

}  // namespace

struct Endpoint::Impl {
  // Scrapers are few; more than this many open connections are strangers holding sockets.
  static constexpr size_t kMaxSessions = 64;

  Impl(Stats& s) : stats(s), acceptor(io), retry(io) {}

  void accept() {
    acceptor.async_accept([this](beast::error_code ec, tcp::socket socket) {
      if (ec == asio::error::operation_aborted) return;
      if (ec) return acceptFailed(ec);
      if (delay.succeeded()) GC_LOG(kInfo, "metrics", "accepting scrapes again");
      if (*open >= kMaxSessions) {
        beast::error_code ignored;
        socket.close(ignored);  // the 30 s idle limit frees the held ones
      } else {
        std::make_shared<Session>(std::move(socket), stats, open)->read();
      }
      accept();
    });
  }

  // Out of descriptors: wait and try again (a retry at once would spin on the error).
  void acceptFailed(const beast::error_code& ec) {
    stats.recordError(ErrorKind::kAcceptFailed, strCat("metrics endpoint: accept: ", ec.message()));
    if (!delay.failing()) GC_LOG(kWarn, "metrics", "accept failed: ", ec.message(), "; retrying until it works again");
    retry.expires_after(delay.next());
    retry.async_wait([this](beast::error_code wait) {
      if (!wait) accept();
    });
  }

  Stats& stats;
  asio::io_context io{1};
  tcp::acceptor acceptor;
  asio::steady_timer retry;
  RetryDelay delay;
  std::shared_ptr<size_t> open = std::make_shared<size_t>(0);
  std::string host;
  uint16_t port = 0;
  std::thread thread;
};

Endpoint::Endpoint(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Endpoint::~Endpoint() {
  impl_->io.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
}

uint16_t Endpoint::port() const { return impl_->port; }

std::string Endpoint::address() const { return strCat(impl_->host, ":", impl_->port); }

Result<std::unique_ptr<Endpoint>> Endpoint::start(const std::string& listen, Stats& stats) {
  const size_t colon = listen.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == listen.size())
    return Status::invalidArgument(strCat("metrics.listen '", listen, "' is not host:port"));
  const std::string port_text = listen.substr(colon + 1);
  unsigned port = 0;
  const auto [end, parse_error] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (parse_error != std::errc() || end != port_text.data() + port_text.size() || port > 65535)
    return Status::invalidArgument(strCat("metrics.listen '", listen, "': port '", port_text, "' is not in [0, 65535]"));
  std::string host = listen.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  auto impl = std::make_unique<Impl>(stats);
  // A host name (localhost, the pod's name) resolves to its first address.
  beast::error_code ec;
  tcp::resolver resolver(impl->io);
  const auto found = resolver.resolve(host, port_text, tcp::resolver::passive | tcp::resolver::numeric_service, ec);
  if (ec || found.empty())
    return Status::invalidArgument(strCat("metrics.listen '", listen, "': cannot resolve: ", ec.message()));
  const tcp::endpoint where = found.begin()->endpoint();
  impl->acceptor.open(where.protocol(), ec);
  if (!ec) impl->acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) impl->acceptor.bind(where, ec);
  if (!ec) impl->acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return Status::unavailable(strCat("metrics.listen '", listen, "': ", ec.message()));
  impl->host = listen.substr(0, colon);
  impl->port = impl->acceptor.local_endpoint().port();
  impl->accept();
  impl->thread = std::thread([raw = impl.get()] { raw->io.run(); });
  return std::unique_ptr<Endpoint>(new Endpoint(std::move(impl)));
}

}  // namespace gcagent::metrics
