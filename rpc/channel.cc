// SPDX-License-Identifier: Apache-2.0
#include "rpc/channel.h"

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <optional>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/cord.h"
#include "rpc/framed_socket.h"
#include "rpc/handshake.h"
#include "rpc/leader.h"
#include "rpc/server.h"
#include "util/clock.h"
#include "util/errno_status.h"
#include "util/log.h"
#include "util/mutex.h"
#include "util/strings.h"

namespace sroute {

using rpc_internal::FramedSocket;
using rpc_internal::Strand;
using rpc_internal::tcp;

absl::Status ReplyStatus(const proto::RpcReply& reply) {
  if (reply.code() == 0) return absl::OkStatus();
  absl::Status s = StatusWithErrno(static_cast<absl::StatusCode>(reply.code()),
                                   reply.message(), reply.errno_value());
  return reply.has_leader() ? WithLeader(std::move(s), reply.leader()) : s;
}

namespace {
constexpr char kNotSentPayload[] = "sroute.rpc/not-sent";
absl::Status MarkNotSent(absl::Status s) {
  s.SetPayload(kNotSentPayload, absl::Cord("1"));
  return s;
}
}  // namespace

bool NotSent(const absl::Status& s) {
  return !s.ok() && s.GetPayload(kNotSentPayload).has_value();
}

namespace rpc_internal {
namespace {

std::chrono::nanoseconds ToChrono(absl::Duration d) {
  return std::chrono::nanoseconds(absl::ToInt64Nanoseconds(d));
}

}  // namespace

struct ChannelShared {
  RpcChannel::Options options;
  std::string host;
  uint16_t port = 0;
  // Guards peer_name. A leaf.
  mutable Mutex mu;
  std::string peer_name ABSL_GUARDED_BY(mu);
};

// One connection of a channel's pool and the calls waiting on it.
class ClientConnection : public std::enable_shared_from_this<ClientConnection> {
 public:
  ClientConnection(IoThreads* threads, std::shared_ptr<ChannelShared> shared)
      : shared_(std::move(shared)),
        strand_(boost::asio::make_strand(threads->context())),
        timer_(strand_),
        backoff_(shared_->options.min_backoff) {}

  bool ready() const {
    MutexLock l(&mu_);
    return state_ == State::kReady;
  }

  void Call(uint64_t id, std::string_view frame, absl::Duration timeout,
            RpcChannel::Callback done, uint64_t* sent_ns) {
    ReleasableMutexLock l(&mu_);
    if (closed_) {
      l.Unlock();
      Finish(std::move(done), absl::CancelledError("channel closed"));
      return;
    }
    bool start = false;
    if (state_ == State::kIdle) {
      const absl::Time now = absl::Now();
      if (now < next_attempt_) {
        absl::Status s = absl::UnavailableError(
            StrCat(shared_->options.address, " is unreachable (",
                   last_error_.message(), "); next attempt in ",
                   absl::FormatDuration(absl::Trunc(next_attempt_ - now,
                                                    absl::Milliseconds(1)))));
        l.Unlock();
        Finish(std::move(done), MarkNotSent(std::move(s)));
        return;
      }
      state_ = State::kConnecting;
      ++attempt_;
      start = true;
    }
    pending_.emplace(id,
                     Pending{std::move(done), absl::Now() + timeout, timeout});
    if (state_ != State::kReady) {
      queued_.push_back(Queued{id, std::string(frame), sent_ns});
      const uint64_t attempt = attempt_;
      l.Unlock();
      if (start) {
        boost::asio::post(strand_, [self = shared_from_this(), attempt] {
          self->DoConnect(attempt);
        });
      }
      return;
    }
    std::shared_ptr<FramedSocket> socket = socket_;
    l.Unlock();
    // If the socket closed meanwhile, its close handler fails this call.
    socket->Send(frame);
  }

  // Fails the calls whose deadline passed; returns how many remain.
  size_t Sweep(absl::Time now) {
    std::vector<Pending> expired;
    size_t left;
    {
      MutexLock l(&mu_);
      for (auto it = pending_.begin(); it != pending_.end();) {
        if (it->second.deadline <= now) {
          expired.push_back(std::move(it->second));
          pending_.erase(it++);
        } else {
          ++it;
        }
      }
      left = pending_.size();
    }
    for (Pending& p : expired) {
      Finish(std::move(p.done),
             absl::DeadlineExceededError(
                 StrCat("no reply from ", shared_->options.address, " within ",
                        absl::FormatDuration(p.timeout))));
    }
    return left;
  }

  void Close() {
    std::shared_ptr<FramedSocket> socket;
    {
      MutexLock l(&mu_);
      closed_ = true;
      socket = socket_;
    }
    if (socket) socket->Close(absl::CancelledError("channel closed"));
    boost::asio::post(strand_, [self = shared_from_this()] {
      self->Fail(std::nullopt, absl::CancelledError("channel closed"));
    });
  }

  size_t outstanding() const {
    MutexLock l(&mu_);
    return pending_.size();
  }

 private:
  enum class State { kIdle, kConnecting, kHandshake, kReady };
  struct Pending {
    RpcChannel::Callback done;
    absl::Time deadline;
    absl::Duration timeout;
  };

  static void Finish(RpcChannel::Callback done, const absl::Status& s) {
    proto::RpcReply empty;
    done(s, empty, {});
  }

  // On the strand.
  void DoConnect(uint64_t attempt) {
    const RpcChannel::Options& o = shared_->options;
    tcp::resolver resolver(strand_);
    boost::system::error_code ec;
    auto endpoints =
        resolver.resolve(shared_->host, std::to_string(shared_->port), ec);
    if (ec) {
      Fail(attempt, absl::UnavailableError(StrCat("cannot resolve ", o.address,
                                                  ": ", ec.message())));
      return;
    }
    auto socket = std::make_shared<tcp::socket>(strand_);
    timer_.expires_after(ToChrono(o.connect_timeout));
    timer_.async_wait([self = shared_from_this(), attempt,
                       socket](boost::system::error_code e) {
      if (e) return;  // cancelled: the handshake finished or failed
      boost::system::error_code ignored;
      socket->close(ignored);
      self->Fail(
          attempt,
          absl::DeadlineExceededError(StrCat(
              "no connection and handshake with ",
              self->shared_->options.address, " within ",
              absl::FormatDuration(self->shared_->options.connect_timeout))));
    });
    boost::asio::async_connect(
        *socket, endpoints,
        boost::asio::bind_executor(
            strand_, [self = shared_from_this(), attempt, socket](
                         boost::system::error_code e, const tcp::endpoint&) {
              if (e) {
                self->Fail(attempt, absl::UnavailableError(
                                        StrCat("cannot connect to ",
                                               self->shared_->options.address,
                                               ": ", e.message())));
                return;
              }
              self->Connected(attempt, std::move(*socket));
            }));
  }

  void Connected(uint64_t attempt, tcp::socket socket) {
    auto fs = std::make_shared<FramedSocket>(std::move(socket), strand_,
                                             kHandshakeLimits);
    {
      MutexLock l(&mu_);
      if (attempt != attempt_) return;
      socket_ = fs;
      state_ = State::kHandshake;
    }
    client_nonce_ = NewNonce();
    got_hello_ = false;
    // The socket's handlers must not keep this connection alive: it owns
    // the socket, and a cycle would outlive the channel.
    std::weak_ptr<ClientConnection> weak = weak_from_this();
    fs->Start(
        [weak, attempt](const Frame& f) {
          auto self = weak.lock();
          return self && self->OnFrame(attempt, f);
        },
        [weak, attempt](const absl::Status& why) {
          if (auto self = weak.lock()) self->OnClose(attempt, why);
        });
    proto::Hello hello;
    hello.set_protocol_version(kRpcProtocolVersion);
    hello.set_nonce(client_nonce_);
    hello.set_name(shared_->options.name);
    hello.set_role(shared_->options.role);
    std::string out;
    (void)AppendFrame(hello, {}, kHandshakeLimits, &out);
    fs->Send(out);
  }

  bool OnFrame(uint64_t attempt, const Frame& f) {
    std::shared_ptr<FramedSocket> fs;
    State state;
    {
      MutexLock l(&mu_);
      if (attempt != attempt_) return false;
      fs = socket_;
      state = state_;
    }
    if (state == State::kReady) {
      if (!reply_.ParseFromArray(f.header.data(),
                                 static_cast<int>(f.header.size()))) {
        fs->Close(absl::DataLossError(
            StrCat(shared_->options.address, " sent a frame of ",
                   f.header.size(), " bytes that is not an RpcReply")));
        return false;
      }
      RpcChannel::Callback done;
      {
        MutexLock l(&mu_);
        auto it = pending_.find(reply_.id());
        if (it == pending_.end()) return true;  // timed out already
        done = std::move(it->second.done);
        pending_.erase(it);
      }
      done(absl::OkStatus(), reply_, f.payload);
      return true;
    }
    // The handshake.
    if (!got_hello_) {
      proto::Hello hello;
      if (!hello.ParseFromArray(f.header.data(),
                                static_cast<int>(f.header.size())) ||
          hello.nonce().size() != kNonceBytes) {
        fs->Close(absl::PermissionDeniedError(
            StrCat(shared_->options.address, " answered with a bad Hello")));
        return false;
      }
      if (hello.protocol_version() != kRpcProtocolVersion) {
        fs->Close(absl::FailedPreconditionError(StrCat(
            shared_->options.address, " speaks protocol version ",
            hello.protocol_version(), ", this host ", kRpcProtocolVersion)));
        return false;
      }
      got_hello_ = true;
      server_nonce_ = hello.nonce();
      {
        MutexLock l(&shared_->mu);
        shared_->peer_name = hello.name();
      }
      proto::Auth auth;
      auth.set_proof(
          ClientProof(shared_->options.secret, client_nonce_, server_nonce_));
      std::string out;
      (void)AppendFrame(auth, {}, kHandshakeLimits, &out);
      return fs->Send(out);
    }
    proto::Auth auth;
    if (!auth.ParseFromArray(f.header.data(),
                             static_cast<int>(f.header.size())) ||
        !ProofMatches(
            ServerProof(shared_->options.secret, client_nonce_, server_nonce_),
            auth.proof())) {
      fs->Close(absl::PermissionDeniedError(
          StrCat(shared_->options.address,
                 " failed to prove it knows the cluster secret")));
      return false;
    }
    fs->set_limits(shared_->options.limits);
    timer_.cancel();
    std::vector<Queued> queued;
    std::string out;
    {
      MutexLock l(&mu_);
      state_ = State::kReady;
      backoff_ = shared_->options.min_backoff;
      queued.swap(queued_);
      // Calls that timed out while we connected are not sent at all (nor
      // is their sent_ns written: their caller may be gone).
      const uint64_t now = MonotonicNanos();
      for (Queued& q : queued) {
        if (!pending_.contains(q.id)) continue;
        out += q.frame;
        if (q.sent_ns != nullptr) *q.sent_ns = now;
      }
    }
    if (!out.empty()) fs->Send(out);
    return true;
  }

  void OnClose(uint64_t attempt, const absl::Status& why) {
    State state;
    {
      MutexLock l(&mu_);
      if (attempt != attempt_) return;
      state = state_;
    }
    const std::string& addr = shared_->options.address;
    absl::Status s;
    if (state == State::kReady) {
      s = absl::UnavailableError(
          StrCat("connection to ", addr, " lost: ", why.message()));
    } else if (absl::IsUnavailable(why)) {
      // The server hangs up on a peer that fails its handshake.
      s = absl::PermissionDeniedError(
          StrCat(addr,
                 " closed the connection during the handshake "
                 "(is the cluster secret the same on both hosts?)"));
    } else {
      s = why;
    }
    Fail(attempt, s);
  }

  // On the strand. Ends attempt `attempt` (any attempt if nullopt: the
  // channel closes): every call waiting fails with `why`, and the next call
  // reconnects after the backoff.
  void Fail(std::optional<uint64_t> attempt, absl::Status why) {
    absl::flat_hash_map<uint64_t, Pending> failed;
    absl::flat_hash_set<uint64_t> not_sent;  // still queued: never written
    std::shared_ptr<FramedSocket> socket;
    {
      MutexLock l(&mu_);
      if (attempt && *attempt != attempt_) return;
      ++attempt_;  // late handlers of this attempt are ignored
      state_ = State::kIdle;
      socket.swap(socket_);
      failed.swap(pending_);
      for (const Queued& q : queued_) not_sent.insert(q.id);
      queued_.clear();
      last_error_ = why;
      next_attempt_ = absl::Now() + backoff_;
      backoff_ = std::min(backoff_ * 2, shared_->options.max_backoff);
    }
    timer_.cancel();
    if (socket) socket->Close(why);
    for (auto& [id, p] : failed) {
      Finish(std::move(p.done), not_sent.contains(id) ? MarkNotSent(why) : why);
    }
  }

  const std::shared_ptr<ChannelShared> shared_;
  Strand strand_;
  boost::asio::steady_timer timer_;  // connect + handshake deadline
  // On the strand:
  bool got_hello_ = false;
  std::string client_nonce_, server_nonce_;
  proto::RpcReply reply_;  // reused for every reply

  // Guards the connection's state, socket and calls (below). A leaf: no
  // socket operation and no callback runs under it.
  mutable Mutex mu_;
  // Each connection attempt has a number; handlers of an older one are
  // ignored.
  uint64_t attempt_ ABSL_GUARDED_BY(mu_) = 0;
  State state_ ABSL_GUARDED_BY(mu_) = State::kIdle;
  std::shared_ptr<FramedSocket> socket_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, Pending> pending_ ABSL_GUARDED_BY(mu_);
  // Calls made while connecting, sent once the handshake is done.
  struct Queued {
    uint64_t id;
    std::string frame;
    uint64_t* sent_ns;  // RpcChannel::Call's
  };
  std::vector<Queued> queued_ ABSL_GUARDED_BY(mu_);
  absl::Time next_attempt_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  absl::Duration backoff_ ABSL_GUARDED_BY(mu_);
  absl::Status last_error_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace rpc_internal

using rpc_internal::ChannelShared;
using rpc_internal::ClientConnection;

struct RpcChannel::Impl : std::enable_shared_from_this<RpcChannel::Impl> {
  Impl(IoThreads* t, std::shared_ptr<ChannelShared> s)
      : threads(t),
        shared(std::move(s)),
        sweep_strand(boost::asio::make_strand(t->context())),
        sweep_timer(sweep_strand) {}

  std::shared_ptr<ClientConnection> Pick() {
    const size_t n = conns.size();
    const uint32_t start = next_conn.fetch_add(1, std::memory_order_relaxed);
    for (size_t i = 0; i < n; ++i) {
      auto& c = conns[(start + i) % n];
      if (c->ready()) return c;
    }
    return conns[start % n];
  }

  void StartSweeping() {
    if (sweeping.exchange(true)) return;
    boost::asio::post(sweep_strand,
                      [self = shared_from_this()] { self->ArmSweep(); });
  }
  void ArmSweep() {
    sweep_timer.expires_after(std::chrono::milliseconds(10));
    sweep_timer.async_wait(
        [w = weak_from_this()](boost::system::error_code ec) {
          auto self = w.lock();
          if (ec || !self) return;
          size_t left = 0;
          const absl::Time now = absl::Now();
          for (auto& c : self->conns) left += c->Sweep(now);
          if (left > 0 && !self->closing.load()) {
            self->ArmSweep();
            return;
          }
          self->sweeping.store(false);
          // A call may have come in between the sweep and the store.
          size_t now_left = 0;
          for (auto& c : self->conns) now_left += c->outstanding();
          if (now_left > 0 && !self->closing.load()) self->StartSweeping();
        });
  }

  IoThreads* const threads;
  std::shared_ptr<ChannelShared> shared;
  std::vector<std::shared_ptr<ClientConnection>> conns;
  std::atomic<uint64_t> next_id{1};
  std::atomic<uint32_t> next_conn{0};
  Strand sweep_strand;
  boost::asio::steady_timer sweep_timer;
  std::atomic<bool> sweeping{false};
  std::atomic<bool> closing{false};
};

absl::StatusOr<std::unique_ptr<RpcChannel>> RpcChannel::Create(
    IoThreads* threads, Options options) {
  auto shared = std::make_shared<ChannelShared>();
  if (absl::Status s = SplitHostPort(options.address, &shared->host,
                                     &shared->port, "server address");
      !s.ok()) {
    return s;
  }
  if (options.secret.size() < kMinSecretBytes) {
    return absl::InvalidArgumentError("the cluster secret is too short");
  }
  if (options.connections < 1) options.connections = 1;
  shared->options = std::move(options);
  auto impl = std::make_shared<Impl>(threads, shared);
  for (int i = 0; i < shared->options.connections; ++i) {
    impl->conns.push_back(std::make_shared<ClientConnection>(threads, shared));
  }
  return std::unique_ptr<RpcChannel>(new RpcChannel(impl));
}

RpcChannel::RpcChannel(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

void RpcChannel::Shutdown() {
  impl_->closing.store(true);
  for (auto& c : impl_->conns) c->Close();
}

RpcChannel::~RpcChannel() {
  Shutdown();
  // Wait until every call got its answer (Close fails them on the strands),
  // so no callback runs after the channel is gone.
  for (int i = 0; i < 5000 && outstanding() > 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  boost::asio::post(impl_->sweep_strand,
                    [impl = impl_] { impl->sweep_timer.cancel(); });
}

void RpcChannel::Call(proto::RpcRequest& request, std::span<const char> payload,
                      absl::Duration timeout, Callback done,
                      uint64_t* sent_ns) {
  request.set_id(impl_->next_id.fetch_add(1, std::memory_order_relaxed));
  if (timeout > absl::ZeroDuration()) {
    request.set_deadline_ms(static_cast<uint32_t>(
        std::min<int64_t>(absl::ToInt64Milliseconds(timeout), UINT32_MAX)));
  }
  thread_local std::string frame;
  frame.clear();
  if (absl::Status s =
          AppendFrame(request, payload, impl_->shared->options.limits, &frame);
      !s.ok()) {
    proto::RpcReply empty;
    done(s, empty, {});
    return;
  }
  impl_->Pick()->Call(request.id(), frame, timeout, std::move(done), sent_ns);
  if (frame.capacity() > (1u << 20)) std::string().swap(frame);
  impl_->StartSweeping();
}

absl::StatusOr<proto::RpcReply> RpcChannel::CallSync(
    proto::RpcRequest& request, absl::Duration timeout,
    std::span<const char> payload, std::string* reply_payload) {
  struct Result {
    Mutex mu;  // guards the result. A leaf.
    CondVar cv;
    bool done ABSL_GUARDED_BY(mu) = false;
    absl::Status status ABSL_GUARDED_BY(mu);
    proto::RpcReply reply ABSL_GUARDED_BY(mu);
    std::string payload ABSL_GUARDED_BY(mu);
  };
  auto r = std::make_shared<Result>();
  Call(request, payload, timeout,
       [r](const absl::Status& s, proto::RpcReply& reply,
           std::span<const char> p) {
         MutexLock l(&r->mu);
         r->status = UnsharedStatus(s);
         r->reply.Swap(&reply);
         r->payload.assign(p.data(), p.size());
         r->done = true;
         r->cv.SignalAll();
       });
  MutexLock l(&r->mu);
  while (!r->done) r->cv.Wait(&r->mu);
  if (!r->status.ok()) return r->status;
  if (absl::Status s = ReplyStatus(r->reply); !s.ok()) return s;
  if (reply_payload != nullptr) *reply_payload = std::move(r->payload);
  return std::move(r->reply);
}

absl::Status RpcChannel::Connect(absl::Duration timeout) {
  for (size_t i = 0; i < impl_->conns.size(); ++i) {
    proto::RpcRequest ping;
    ping.mutable_ping();
    // Pick() prefers ready connections; address each one directly instead.
    struct Result {
      Mutex mu;  // guards the result. A leaf.
      CondVar cv;
      bool done ABSL_GUARDED_BY(mu) = false;
      absl::Status status ABSL_GUARDED_BY(mu);
    };
    auto r = std::make_shared<Result>();
    ping.set_id(impl_->next_id.fetch_add(1));
    std::string frame;
    if (absl::Status s =
            AppendFrame(ping, {}, impl_->shared->options.limits, &frame);
        !s.ok()) {
      return s;
    }
    impl_->conns[i]->Call(
        ping.id(), frame, timeout,
        [r](const absl::Status& s, proto::RpcReply& reply,
            std::span<const char>) {
          MutexLock l(&r->mu);
          r->status = s.ok() ? ReplyStatus(reply) : UnsharedStatus(s);
          r->done = true;
          r->cv.SignalAll();
        },
        nullptr);
    impl_->StartSweeping();
    MutexLock l(&r->mu);
    while (!r->done) r->cv.Wait(&r->mu);
    if (!r->status.ok()) return r->status;
  }
  return absl::OkStatus();
}

const std::string& RpcChannel::address() const {
  return impl_->shared->options.address;
}

std::string RpcChannel::peer_name() const {
  MutexLock l(&impl_->shared->mu);
  return impl_->shared->peer_name;
}

size_t RpcChannel::outstanding() const {
  size_t n = 0;
  for (auto& c : impl_->conns) n += c->outstanding();
  return n;
}

}  // namespace sroute
