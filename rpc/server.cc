// SPDX-License-Identifier: Apache-2.0
#include "rpc/server.h"

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <unordered_set>

#include "rpc/framed_socket.h"
#include "rpc/handshake.h"
#include "rpc/leader.h"
#include "util/errno_status.h"
#include "util/log.h"
#include "util/mutex.h"
#include "util/strings.h"

namespace sroute {

using rpc_internal::FramedSocket;
using rpc_internal::Strand;
using rpc_internal::tcp;

struct RpcServer::Impl : std::enable_shared_from_this<RpcServer::Impl> {
  Impl(IoThreads* t, Options o, Handler h)
      : threads(t),
        options(std::move(o)),
        handler(std::move(h)),
        acceptor(t->context()),
        accept_strand(boost::asio::make_strand(t->context())) {}

  void Accept();
  void Closed(rpc_internal::ServerConnection* c);
  // Runs the handler unless the server is stopping.
  void Dispatch(std::unique_ptr<Call> call);

  IoThreads* const threads;
  const Options options;
  const Handler handler;
  tcp::acceptor acceptor;
  Strand accept_strand;
  std::string address;
  uint16_t port = 0;

  // Guards conns, stopping, active_handlers. A leaf: connections start and
  // close, and handlers run, with it released.
  Mutex mu;
  CondVar cv;  // conns emptied, or active_handlers dropped to 0
  std::unordered_set<std::shared_ptr<rpc_internal::ServerConnection>> conns
      ABSL_GUARDED_BY(mu);
  bool stopping ABSL_GUARDED_BY(mu) = false;
  int active_handlers ABSL_GUARDED_BY(mu) = 0;

  std::atomic<uint64_t> accepted{0}, authenticated{0}, refused{0},
      bad_frames{0};
  std::shared_ptr<FramedSocket::Traffic> traffic =
      std::make_shared<FramedSocket::Traffic>();
};

namespace rpc_internal {

// One accepted connection: handshake first, then requests.
class ServerConnection : public std::enable_shared_from_this<ServerConnection> {
 public:
  ServerConnection(std::shared_ptr<RpcServer::Impl> server,
                   std::shared_ptr<FramedSocket> socket)
      : server_(std::move(server)),
        socket_(std::move(socket)),
        timer_(socket_->strand()) {}

  void Start() {
    auto self = shared_from_this();
    timer_.expires_after(std::chrono::nanoseconds(
        absl::ToInt64Nanoseconds(server_->options.handshake_timeout)));
    timer_.async_wait([self](boost::system::error_code ec) {
      if (ec || self->state_ == State::kReady) return;
      self->server_->refused.fetch_add(1);
      LogWarning(
          "refusing ", self->socket_->peer(), ": no handshake within ",
          absl::FormatDuration(self->server_->options.handshake_timeout));
      self->socket_->Close(absl::DeadlineExceededError("handshake timeout"));
    });
    socket_->Start([self](const Frame& f) { return self->OnFrame(f); },
                   [self](const absl::Status& why) { self->OnClose(why); });
  }

  void Close(absl::Status why) { socket_->Close(std::move(why)); }
  bool Send(std::string_view bytes) { return socket_->Send(bytes); }
  const FrameLimits& limits() const { return server_->options.limits; }
  const std::string& peer_name() const { return peer_name_; }
  const std::string& peer_role() const { return peer_role_; }

 private:
  enum class State { kWaitHello, kWaitAuth, kReady };

  bool Refuse(const std::string& why) {
    server_->refused.fetch_add(1);
    LogWarning("refusing ", socket_->peer(),
               peer_name_.empty() ? "" : StrCat(" (", peer_name_, ")"), ": ",
               why);
    socket_->Close(absl::PermissionDeniedError(why));
    return false;
  }

  bool OnFrame(const Frame& f) {
    switch (state_) {
      case State::kWaitHello: {
        proto::Hello hello;
        if (!hello.ParseFromArray(f.header.data(),
                                  static_cast<int>(f.header.size()))) {
          return Refuse("the first frame is not a Hello");
        }
        if (hello.protocol_version() != kRpcProtocolVersion) {
          return Refuse(StrCat("protocol version ", hello.protocol_version(),
                               "; this server speaks ", kRpcProtocolVersion));
        }
        if (hello.nonce().size() != kNonceBytes) {
          return Refuse("bad nonce in Hello");
        }
        peer_name_ = hello.name();
        peer_role_ = hello.role();
        client_nonce_ = hello.nonce();
        server_nonce_ = NewNonce();
        proto::Hello mine;
        mine.set_protocol_version(kRpcProtocolVersion);
        mine.set_nonce(server_nonce_);
        mine.set_name(server_->options.name);
        mine.set_role("server");
        std::string out;
        (void)AppendFrame(mine, {}, kHandshakeLimits, &out);
        state_ = State::kWaitAuth;
        return socket_->Send(out);
      }
      case State::kWaitAuth: {
        proto::Auth auth;
        if (!auth.ParseFromArray(f.header.data(),
                                 static_cast<int>(f.header.size()))) {
          return Refuse("the second frame is not an Auth");
        }
        const std::string expected =
            ClientProof(server_->options.secret, client_nonce_, server_nonce_);
        if (!ProofMatches(expected, auth.proof())) {
          return Refuse("wrong cluster secret");
        }
        proto::Auth mine;
        mine.set_proof(
            ServerProof(server_->options.secret, client_nonce_, server_nonce_));
        std::string out;
        (void)AppendFrame(mine, {}, kHandshakeLimits, &out);
        state_ = State::kReady;
        timer_.cancel();
        socket_->set_limits(server_->options.limits);
        server_->authenticated.fetch_add(1);
        return socket_->Send(out);
      }
      case State::kReady: {
        auto call = std::unique_ptr<RpcServer::Call>(
            new RpcServer::Call(shared_from_this()));
        if (!call->request_.ParseFromArray(f.header.data(),
                                           static_cast<int>(f.header.size()))) {
          server_->bad_frames.fetch_add(1);
          LogWarning("closing connection from ", socket_->peer(), " (",
                     peer_name_, "): a frame of ", f.header.size(),
                     " bytes is not an RpcRequest");
          call->replied_ = true;  // nobody to answer
          socket_->Close(absl::InvalidArgumentError("bad request frame"));
          return false;
        }
        if (call->request_.has_ping()) {
          call->ReplyStatus(absl::OkStatus());
          return !socket_->closed();
        }
        call->payload_.assign(f.payload.data(), f.payload.size());
        call->received_ns_ = f.received_ns;
        server_->Dispatch(std::move(call));
        return !socket_->closed();
      }
    }
    return false;
  }

  void OnClose(const absl::Status& why) {
    timer_.cancel();
    if (state_ == State::kReady && !why.ok() &&
        why.code() != absl::StatusCode::kUnavailable) {
      // Bad frames, stuck peers: worth a line. Peers hanging up are not.
      if (why.code() == absl::StatusCode::kResourceExhausted) {
        server_->bad_frames.fetch_add(1);
      }
      LogWarning("closed connection from ", socket_->peer(), " (", peer_name_,
                 "): ", why.message());
    } else if (state_ != State::kReady &&
               why.code() == absl::StatusCode::kResourceExhausted) {
      server_->refused.fetch_add(1);
      LogWarning("refusing ", socket_->peer(),
                 ": oversized frame during the handshake");
    }
    server_->Closed(this);
  }

  std::shared_ptr<RpcServer::Impl> server_;
  std::shared_ptr<FramedSocket> socket_;
  boost::asio::steady_timer timer_;
  State state_ = State::kWaitHello;  // on the strand
  std::string peer_name_, peer_role_;
  std::string client_nonce_, server_nonce_;
};

}  // namespace rpc_internal

using rpc_internal::ServerConnection;

void RpcServer::Impl::Accept() {
  auto self = shared_from_this();
  // The connection's strand: its socket is created on it.
  Strand strand = boost::asio::make_strand(threads->context());
  acceptor.async_accept(
      strand,
      boost::asio::bind_executor(
          accept_strand,
          [self, strand](boost::system::error_code ec, tcp::socket socket) {
            if (ec == boost::asio::error::operation_aborted) return;
            if (ec) {
              // EMFILE and friends: wait a little rather than spin.
              LogWarning("accept: ", ec.message());
              auto t = std::make_shared<boost::asio::steady_timer>(
                  self->accept_strand, std::chrono::milliseconds(50));
              t->async_wait([self, t](boost::system::error_code e) {
                if (!e) self->Accept();
              });
              return;
            }
            self->accepted.fetch_add(1);
            std::shared_ptr<ServerConnection> conn;
            {
              MutexLock l(&self->mu);
              if (self->stopping) return;
              if (static_cast<int>(self->conns.size()) >=
                  self->options.max_connections) {
                LogWarning(
                    "refusing a connection: ", self->options.max_connections,
                    " connections are open");
                self->refused.fetch_add(1);
              } else {
                auto fs = std::make_shared<FramedSocket>(
                    std::move(socket), strand, kHandshakeLimits, self->traffic);
                conn = std::make_shared<ServerConnection>(self, fs);
                self->conns.insert(conn);
              }
            }
            if (conn) conn->Start();
            self->Accept();
          }));
}

void RpcServer::Impl::Closed(ServerConnection* c) {
  MutexLock l(&mu);
  for (auto it = conns.begin(); it != conns.end(); ++it) {
    if (it->get() == c) {
      conns.erase(it);
      break;
    }
  }
  cv.SignalAll();
}

void RpcServer::Impl::Dispatch(std::unique_ptr<Call> call) {
  {
    MutexLock l(&mu);
    if (stopping) {
      call->ReplyStatus(absl::UnavailableError("server shutting down"));
      return;
    }
    ++active_handlers;
  }
  handler(std::move(call));
  MutexLock l(&mu);
  if (--active_handlers == 0) cv.SignalAll();
}

RpcServer::Call::~Call() {
  if (!replied_) ReplyStatus(absl::InternalError("request dropped"));
}

const std::string& RpcServer::Call::peer_name() const {
  return conn_->peer_name();
}
const std::string& RpcServer::Call::peer_role() const {
  return conn_->peer_role();
}

void RpcServer::Call::Reply(proto::RpcReply& reply,
                            std::span<const char> payload) {
  replied_ = true;
  reply.set_id(request_.id());
  thread_local std::string out;
  out.clear();
  absl::Status s = AppendFrame(reply, payload, conn_->limits(), &out);
  if (!s.ok()) {
    // A reply too big to send becomes an error the caller can read.
    proto::RpcReply err;
    err.set_id(request_.id());
    err.set_code(static_cast<int>(s.code()));
    err.set_message(std::string(s.message()));
    out.clear();
    (void)AppendFrame(err, {}, conn_->limits(), &out);
  }
  conn_->Send(out);
  if (out.capacity() > (1u << 20)) std::string().swap(out);
}

void RpcServer::Call::ReplyStatus(const absl::Status& status) {
  proto::RpcReply reply;
  reply.set_code(static_cast<int>(status.code()));
  reply.set_message(std::string(status.message()));
  if (IsNotLeader(status)) reply.set_leader(LeaderOf(status));
  Reply(reply);
}

absl::StatusOr<std::unique_ptr<RpcServer>> RpcServer::Start(
    IoThreads* threads, const std::string& address, Options options,
    Handler handler) {
  std::string host;
  uint16_t port = 0;
  if (absl::Status s = SplitHostPort(address, &host, &port, "listen address");
      !s.ok()) {
    return s;
  }
  if (options.secret.size() < kMinSecretBytes) {
    return absl::InvalidArgumentError("the cluster secret is too short");
  }
  auto impl =
      std::make_shared<Impl>(threads, std::move(options), std::move(handler));
  boost::system::error_code ec;
  tcp::resolver resolver(threads->context());
  auto results = resolver.resolve(host, std::to_string(port), ec);
  if (ec || results.empty()) {
    return absl::InvalidArgumentError(
        StrCat("listen address ", address, ": ", ec.message()));
  }
  const tcp::endpoint ep = results.begin()->endpoint();
  impl->acceptor.open(ep.protocol(), ec);
  if (!ec) impl->acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) impl->acceptor.bind(ep, ec);
  if (!ec)
    impl->acceptor.listen(boost::asio::socket_base::max_listen_connections, ec);
  if (ec) {
    return absl::UnavailableError(
        StrCat("cannot listen on ", address, ": ", ec.message()));
  }
  const tcp::endpoint bound = impl->acceptor.local_endpoint(ec);
  impl->port = bound.port();
  impl->address = StrCat(host, ":", bound.port());
  boost::asio::post(impl->accept_strand, [impl] { impl->Accept(); });
  return std::unique_ptr<RpcServer>(new RpcServer(impl));
}

RpcServer::RpcServer(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

RpcServer::~RpcServer() {
  std::vector<std::shared_ptr<ServerConnection>> open;
  {
    MutexLock l(&impl_->mu);
    impl_->stopping = true;
    open.assign(impl_->conns.begin(), impl_->conns.end());
  }
  // Close the acceptor on its strand, and wait until that ran.
  Mutex done_mu;
  CondVar done_cv;
  bool done = false;
  boost::asio::post(impl_->accept_strand, [&] {
    boost::system::error_code ec;
    impl_->acceptor.close(ec);
    MutexLock l(&done_mu);
    done = true;
    done_cv.SignalAll();
  });
  {
    MutexLock l(&done_mu);
    while (!done) done_cv.Wait(&done_mu);
  }
  for (auto& c : open) c->Close(absl::UnavailableError("server stopping"));
  open.clear();
  MutexLock l(&impl_->mu);
  while (!impl_->conns.empty() || impl_->active_handlers != 0) {
    impl_->cv.Wait(&impl_->mu);
  }
}

uint16_t RpcServer::port() const { return impl_->port; }

std::string RpcServer::address() const { return impl_->address; }

RpcServer::Counters RpcServer::counters() const {
  Counters c;
  c.accepted = impl_->accepted.load();
  c.authenticated = impl_->authenticated.load();
  c.refused = impl_->refused.load();
  c.bad_frames = impl_->bad_frames.load();
  c.bytes_in = impl_->traffic->in.load();
  c.bytes_out = impl_->traffic->out.load();
  MutexLock l(&impl_->mu);
  c.open = static_cast<int64_t>(impl_->conns.size());
  return c;
}

}  // namespace sroute
