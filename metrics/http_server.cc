// SPDX-License-Identifier: Apache-2.0
#include "metrics/http_server.h"

#include <pthread.h>

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <optional>
#include <thread>

#include "metrics/exposition.h"
#include "util/log.h"
#include "util/strings.h"

namespace sroute::metrics {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

namespace {

constexpr auto kIdleTimeout = std::chrono::seconds(10);
constexpr uint32_t kRequestLimit = 8 * 1024;

absl::StatusOr<tcp::endpoint> EndpointOf(const std::string& address) {
  std::string host;
  uint16_t port = 0;
  if (absl::Status s = SplitHostPort(address, &host, &port, "metrics address");
      !s.ok()) {
    return s;
  }
  boost::system::error_code ec;
  const asio::ip::address ip = asio::ip::make_address(host, ec);
  if (ec) {
    return absl::InvalidArgumentError(StrCat(
        "metrics address '", address, "': '", host, "' is not an IP address"));
  }
  return tcp::endpoint(ip, port);
}

}  // namespace

struct MetricsServer::Impl {
  asio::io_context io{1};
  tcp::acceptor acceptor{io};
  Collect collect;
  std::atomic<uint64_t> scrapes{0};
  std::thread thread;

  void Accept();
};

namespace {

// One connection: read a request, answer it, and again while kept alive.
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, MetricsServer::Impl* server)
      : stream_(std::move(socket)), server_(server) {}

  void Read() {
    parser_.emplace();
    parser_->header_limit(kRequestLimit);
    parser_->body_limit(kRequestLimit);
    stream_.expires_after(kIdleTimeout);
    http::async_read(stream_, buffer_, *parser_,
                     [self = shared_from_this()](beast::error_code ec, size_t) {
                       self->OnRead(ec);
                     });
  }

 private:
  void OnRead(beast::error_code ec) {
    if (ec) {
      // The peer closed, went silent or sent too much: nothing to answer.
      stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
      return;
    }
    const http::request<http::string_body>& req = parser_->get();
    response_.emplace();
    response_->version(req.version());
    response_->keep_alive(req.keep_alive());
    const auto full = req.target();
    std::string_view target(full.data(), full.size());
    target = target.substr(0, target.find('?'));
    if (req.method() != http::verb::get && req.method() != http::verb::head) {
      response_->result(http::status::method_not_allowed);
      response_->set(http::field::allow, "GET, HEAD");
      response_->body() = "only GET /metrics\n";
    } else if (target != "/metrics") {
      response_->result(http::status::not_found);
      response_->body() = "not found: the metrics are at /metrics\n";
    } else {
      response_->result(http::status::ok);
      response_->set(http::field::content_type, kContentType);
      if (req.method() == http::verb::get) {
        response_->body() = server_->collect();
      }
      server_->scrapes.fetch_add(1, std::memory_order_relaxed);
    }
    if (response_->result() != http::status::ok) {
      response_->set(http::field::content_type, "text/plain; charset=utf-8");
    }
    response_->prepare_payload();
    stream_.expires_after(kIdleTimeout);
    http::async_write(stream_, *response_,
                      [self = shared_from_this()](
                          beast::error_code ec, size_t) { self->OnWrite(ec); });
  }

  void OnWrite(beast::error_code ec) {
    if (ec || !response_->keep_alive()) {
      stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
      return;
    }
    Read();
  }

  beast::tcp_stream stream_;
  MetricsServer::Impl* server_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::optional<http::response<http::string_body>> response_;
};

}  // namespace

void MetricsServer::Impl::Accept() {
  acceptor.async_accept([this](beast::error_code ec, tcp::socket socket) {
    if (ec == asio::error::operation_aborted) return;
    if (ec) {
      LogWarning("metrics: accept: ", ec.message());
    } else {
      std::make_shared<Session>(std::move(socket), this)->Read();
    }
    Accept();
  });
}

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(
    const std::string& address, Collect collect) {
  auto where = EndpointOf(address);
  if (!where.ok()) return where.status();
  auto impl = std::make_shared<Impl>();
  impl->collect = std::move(collect);
  beast::error_code ec;
  impl->acceptor.open(where->protocol(), ec);
  if (!ec)
    impl->acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) impl->acceptor.bind(*where, ec);
  if (!ec) impl->acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    return absl::UnavailableError(
        StrCat("metrics: cannot listen on ", address, ": ", ec.message()));
  }
  impl->Accept();
  Impl* raw = impl.get();
  impl->thread = std::thread([raw] {
    pthread_setname_np(pthread_self(), "metrics");
    raw->io.run();
  });
  return std::unique_ptr<MetricsServer>(new MetricsServer(std::move(impl)));
}

MetricsServer::MetricsServer(std::shared_ptr<Impl> impl)
    : impl_(std::move(impl)) {}

MetricsServer::~MetricsServer() {
  impl_->io.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
  // Sessions still waiting are freed with the io_context's handlers.
}

uint16_t MetricsServer::port() const {
  beast::error_code ec;
  return impl_->acceptor.local_endpoint(ec).port();
}

std::string MetricsServer::address() const {
  beast::error_code ec;
  const tcp::endpoint e = impl_->acceptor.local_endpoint(ec);
  const std::string host = e.address().to_string();
  return e.address().is_v6() ? StrCat("[", host, "]:", e.port())
                             : StrCat(host, ":", e.port());
}

uint64_t MetricsServer::scrapes() const {
  return impl_->scrapes.load(std::memory_order_relaxed);
}

absl::StatusOr<std::string> HttpGet(const std::string& address,
                                    const std::string& path) {
  auto where = EndpointOf(address);
  if (!where.ok()) return where.status();
  asio::io_context io;
  beast::tcp_stream stream(io);
  beast::flat_buffer buffer;
  http::request<http::empty_body> req(http::verb::get, path, 11);
  req.set(http::field::host, address);
  http::response<http::string_body> res;
  beast::error_code failed;
  stream.expires_after(kIdleTimeout);
  stream.async_connect(*where, [&](beast::error_code ec) {
    if (ec) {
      failed = ec;
      return;
    }
    http::async_write(stream, req, [&](beast::error_code ec, size_t) {
      if (ec) {
        failed = ec;
        return;
      }
      http::async_read(stream, buffer, res,
                       [&](beast::error_code ec, size_t) { failed = ec; });
    });
  });
  io.run();
  if (failed) {
    return absl::UnavailableError(
        StrCat("GET http://", address, path, ": ", failed.message()));
  }
  if (res.result() != http::status::ok) {
    return absl::FailedPreconditionError(StrCat("GET http://", address, path,
                                                ": ", res.result_int(), " ",
                                                std::string(res.reason())));
  }
  return std::move(res.body());
}

}  // namespace sroute::metrics
