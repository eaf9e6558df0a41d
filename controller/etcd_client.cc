// SPDX-License-Identifier: Apache-2.0
#include "controller/etcd_client.h"

#include <google/protobuf/util/json_util.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <optional>

#include "absl/strings/ascii.h"
#include "util/mutex.h"
#include "util/strings.h"

namespace sroute {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

absl::StatusOr<tcp::endpoint> ParseEndpoint(std::string address) {
  if (address.rfind("http://", 0) == 0) address = address.substr(7);
  std::string host;
  uint16_t port = 0;
  if (absl::Status s = SplitHostPort(address, &host, &port, "etcd address");
      !s.ok()) {
    return s;
  }
  boost::system::error_code ec;
  const asio::ip::address ip = asio::ip::make_address(host, ec);
  if (ec) {
    return absl::InvalidArgumentError(StrCat("etcd address '", address, "': '",
                                             host, "' is not an IP address"));
  }
  return tcp::endpoint(ip, port);
}

std::string ToJson(const google::protobuf::Message& m) {
  google::protobuf::util::JsonPrintOptions o;
  o.preserve_proto_field_names = true;  // etcd's names: ID, TTL, range_end
  std::string out;
  (void)google::protobuf::util::MessageToJsonString(m, &out, o);
  return out;
}

absl::Status FromJson(const std::string& json, google::protobuf::Message* m,
                      std::string_view what) {
  google::protobuf::util::JsonParseOptions o;
  o.ignore_unknown_fields = true;
  auto s = google::protobuf::util::JsonStringToMessage(json, m, o);
  if (!s.ok()) {
    return absl::DataLossError(StrCat("etcd ", what, ": an answer that does ",
                                      "not parse (", s.ToString(),
                                      "): ", json.substr(0, 200)));
  }
  return absl::OkStatus();
}

}  // namespace

struct EtcdClient::Impl {
  Options options;
  std::vector<tcp::endpoint> addresses;
  Mutex mu;
  asio::io_context io ABSL_GUARDED_BY(mu);
  // The connection, to addresses[current], when open.
  std::optional<beast::tcp_stream> stream ABSL_GUARDED_BY(mu);
  size_t current ABSL_GUARDED_BY(mu) = 0;
  beast::flat_buffer buffer ABSL_GUARDED_BY(mu);

  // One exchange with the member at `index`: the HTTP status and body, or
  // why there was none (the connection is closed then).
  absl::StatusOr<std::pair<int, std::string>> Exchange(size_t index,
                                                       const std::string& path,
                                                       const std::string& body)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // POSTs `req` to `path` on the members from the current one on (or on
  // `only` alone, if not npos) and parses the answer into `reply`.
  absl::Status Call(const std::string& path,
                    const google::protobuf::Message& req,
                    google::protobuf::Message* reply,
                    size_t only = std::string::npos);
};

absl::StatusOr<std::pair<int, std::string>> EtcdClient::Impl::Exchange(
    size_t index, const std::string& path, const std::string& body) {
  const auto deadline =
      std::chrono::milliseconds(absl::ToInt64Milliseconds(options.timeout));
  beast::error_code failed;
  if (!stream || current != index) {
    stream.reset();
    buffer.clear();
    current = index;
    stream.emplace(io);
    stream->expires_after(deadline);
    stream->async_connect(addresses[index],
                          [&](beast::error_code ec) { failed = ec; });
    io.restart();
    io.run();
    if (failed) {
      stream.reset();
      if (failed == beast::error::timeout) {
        return absl::DeadlineExceededError(
            StrCat("no connection in ", absl::FormatDuration(options.timeout)));
      }
      return absl::UnavailableError(failed.message());
    }
  }
  http::request<http::string_body> req(http::verb::post, path, 11);
  req.set(http::field::host, options.endpoints[index]);
  req.set(http::field::content_type, "application/json");
  req.keep_alive(true);
  req.body() = body;
  req.prepare_payload();
  http::response<http::string_body> res;
  stream->expires_after(deadline);
  // The handlers run in io.run() below, on this thread, with mu held (the
  // analysis cannot see that inside a lambda).
  beast::tcp_stream& conn = *stream;
  beast::flat_buffer* in = &buffer;
  http::async_write(conn, req, [&](beast::error_code ec, size_t) {
    if (ec) {
      failed = ec;
      return;
    }
    http::async_read(conn, *in, res,
                     [&](beast::error_code ec, size_t) { failed = ec; });
  });
  io.restart();
  io.run();
  if (failed) {
    stream.reset();
    buffer.clear();
    if (failed == beast::error::timeout) {
      return absl::DeadlineExceededError(
          StrCat("no answer in ", absl::FormatDuration(options.timeout)));
    }
    return absl::UnavailableError(failed.message());
  }
  if (!res.keep_alive()) {
    stream.reset();
    buffer.clear();
  }
  return std::make_pair(res.result_int(), std::move(res.body()));
}

absl::Status EtcdClient::Impl::Call(const std::string& path,
                                    const google::protobuf::Message& req,
                                    google::protobuf::Message* reply,
                                    size_t only) {
  const std::string body = ToJson(req);
  MutexLock l(&mu);
  std::string why;
  const size_t n = only != std::string::npos ? 1 : addresses.size();
  const size_t first = current;  // Exchange moves `current`
  for (size_t i = 0; i < n; ++i) {
    const size_t index =
        only != std::string::npos ? only : (first + i) % addresses.size();
    // A kept connection the member closed meanwhile fails at once: one
    // more try on a new one (not after a timeout: the member is slow).
    const bool reused = stream.has_value() && current == index;
    auto got = Exchange(index, path, body);
    if (!got.ok() && reused && !absl::IsDeadlineExceeded(got.status())) {
      got = Exchange(index, path, body);
    }
    if (!got.ok()) {
      why += StrCat(why.empty() ? "" : "; ", options.endpoints[index], ": ",
                    got.status().message());
      continue;
    }
    auto& [code, text] = *got;
    if (code != 200) {
      etcd::GatewayError e;
      if (!FromJson(text, &e, path).ok() || e.code() == 0) {
        e.set_code(static_cast<int>(absl::StatusCode::kUnknown));
        e.set_message(StrCat("HTTP ", code, ": ",
                             absl::StripAsciiWhitespace(text.substr(0, 200))));
        // etcd started with --config-file serves no gateway unless told to.
        if (code == 404) {
          e.set_message(StrCat(e.message(), " from ", options.endpoints[index],
                               path,
                               ": is the member's v3 JSON gateway off? (a "
                               "config file needs enable-grpc-gateway: true)"));
        }
      }
      // A member without a leader (or shutting down) may not be the only
      // one: the next may answer.
      if (e.code() == static_cast<int>(absl::StatusCode::kUnavailable)) {
        why += StrCat(why.empty() ? "" : "; ", options.endpoints[index], ": ",
                      e.message());
        stream.reset();
        continue;
      }
      return absl::Status(static_cast<absl::StatusCode>(e.code()),
                          StrCat("etcd: ", e.message()));
    }
    return FromJson(text, reply, path);
  }
  return absl::UnavailableError(
      StrCat("etcd ", path, ": no member answered (", why, ")"));
}

absl::StatusOr<std::unique_ptr<EtcdClient>> EtcdClient::Create(
    Options options) {
  if (options.endpoints.empty()) {
    return absl::InvalidArgumentError("etcd: no member address");
  }
  auto impl = std::make_unique<Impl>();
  for (const std::string& e : options.endpoints) {
    auto where = ParseEndpoint(e);
    if (!where.ok()) return where.status();
    impl->addresses.push_back(*where);
  }
  impl->options = std::move(options);
  return std::unique_ptr<EtcdClient>(new EtcdClient(std::move(impl)));
}

EtcdClient::EtcdClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
EtcdClient::~EtcdClient() = default;

const std::vector<std::string>& EtcdClient::endpoints() const {
  return impl_->options.endpoints;
}

absl::StatusOr<etcd::RangeResponse> EtcdClient::Range(
    const etcd::RangeRequest& req) {
  etcd::RangeResponse r;
  if (absl::Status s = impl_->Call("/v3/kv/range", req, &r); !s.ok()) return s;
  return r;
}

absl::StatusOr<etcd::TxnResponse> EtcdClient::Txn(const etcd::TxnRequest& req) {
  etcd::TxnResponse r;
  if (absl::Status s = impl_->Call("/v3/kv/txn", req, &r); !s.ok()) return s;
  return r;
}

absl::StatusOr<etcd::PutResponse> EtcdClient::Put(const etcd::PutRequest& req) {
  etcd::PutResponse r;
  if (absl::Status s = impl_->Call("/v3/kv/put", req, &r); !s.ok()) return s;
  return r;
}

absl::StatusOr<etcd::DeleteRangeResponse> EtcdClient::DeleteRange(
    const etcd::DeleteRangeRequest& req) {
  etcd::DeleteRangeResponse r;
  if (absl::Status s = impl_->Call("/v3/kv/deleterange", req, &r); !s.ok()) {
    return s;
  }
  return r;
}

absl::StatusOr<etcd::LeaseGrantResponse> EtcdClient::LeaseGrant(
    int64_t ttl_seconds) {
  etcd::LeaseGrantRequest req;
  req.set_ttl(ttl_seconds);
  etcd::LeaseGrantResponse r;
  if (absl::Status s = impl_->Call("/v3/lease/grant", req, &r); !s.ok()) {
    return s;
  }
  if (!r.error().empty()) {
    return absl::UnavailableError(StrCat("etcd: lease: ", r.error()));
  }
  return r;
}

absl::StatusOr<etcd::LeaseKeepAliveResponse> EtcdClient::LeaseKeepAlive(
    int64_t id) {
  etcd::LeaseKeepAliveRequest req;
  req.set_id(id);
  // A stream through the gateway: one item per request sent.
  etcd::LeaseKeepAliveStreamItem item;
  if (absl::Status s = impl_->Call("/v3/lease/keepalive", req, &item);
      !s.ok()) {
    return s;
  }
  return item.result();
}

absl::Status EtcdClient::LeaseRevoke(int64_t id) {
  etcd::LeaseRevokeRequest req;
  req.set_id(id);
  etcd::LeaseRevokeResponse r;
  return impl_->Call("/v3/lease/revoke", req, &r);
}

absl::StatusOr<etcd::MemberListResponse> EtcdClient::MemberList() {
  etcd::MemberListRequest req;
  etcd::MemberListResponse r;
  if (absl::Status s = impl_->Call("/v3/cluster/member/list", req, &r);
      !s.ok()) {
    return s;
  }
  return r;
}

absl::StatusOr<etcd::StatusResponse> EtcdClient::MemberStatus(
    const std::string& endpoint) {
  const auto& all = impl_->options.endpoints;
  const auto it = std::find(all.begin(), all.end(), endpoint);
  if (it == all.end()) {
    return absl::InvalidArgumentError(
        StrCat("etcd: ", endpoint, " is not one of the client's members"));
  }
  etcd::StatusRequest req;
  etcd::StatusResponse r;
  if (absl::Status s = impl_->Call("/v3/maintenance/status", req, &r,
                                   static_cast<size_t>(it - all.begin()));
      !s.ok()) {
    return s;
  }
  return r;
}

std::string EtcdPrefixEnd(std::string prefix) {
  // The first key past every key that starts with prefix: its last byte
  // below 0xff incremented, what follows dropped.
  while (!prefix.empty()) {
    unsigned char& last = reinterpret_cast<unsigned char&>(prefix.back());
    if (last < 0xff) {
      ++last;
      return prefix;
    }
    prefix.pop_back();
  }
  return std::string(1, '\0');  // every key
}

}  // namespace sroute
