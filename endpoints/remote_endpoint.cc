// SPDX-License-Identifier: Apache-2.0
#include "endpoints/remote_endpoint.h"

#include <cerrno>
#include <functional>

#include "endpoints/local_endpoint.h"
#include "rpc/io_codec.h"
#include "rpc/server.h"
#include "sswitch/trace.h"
#include "util/clock.h"
#include "util/errno_status.h"
#include "util/strings.h"

namespace sroute {

absl::StatusOr<std::shared_ptr<RemoteEndpoint>> RemoteEndpoint::Create(
    IoThreads* threads, Options options) {
  RpcChannel::Options o;
  o.address = options.address;
  o.secret = options.secret;
  o.name = options.local_name;
  o.role = options.role;
  o.connections = options.connections;
  auto channel = RpcChannel::Create(threads, std::move(o));
  if (!channel.ok()) return channel.status();
  return std::shared_ptr<RemoteEndpoint>(new RemoteEndpoint(
      *std::move(channel), options.timeout, options.local_name));
}

RemoteEndpoint::RemoteEndpoint(std::unique_ptr<RpcChannel> channel,
                               absl::Duration timeout, std::string local_name)
    : channel_(std::move(channel)),
      local_name_(std::move(local_name)),
      timeout_(timeout),
      dev_salt_(std::hash<std::string>{}(channel_->address()) << 32) {}

RemoteEndpoint::~RemoteEndpoint() = default;

void RemoteEndpoint::Submit(Io* io, std::string_view path) {
  Send(io, path, {});
}

void RemoteEndpoint::SubmitToStage(Io* io, std::string_view path,
                                   std::string_view stage) {
  Send(io, path, stage);
}

void RemoteEndpoint::Send(Io* io, std::string_view path,
                          std::string_view stage) {
  // One request object per thread, reused (a completion that runs inside
  // Call may submit again: nested calls use their own).
  thread_local proto::RpcRequest cached;
  thread_local int depth = 0;
  proto::RpcRequest local;
  proto::RpcRequest& req = depth == 0 ? cached : local;
  ++depth;
  req.Clear();
  EncodeIoRequest(*io, path, req.mutable_io());
  req.mutable_io()->set_via(local_name_);
  req.mutable_io()->set_via_version(io->routed_version());
  if (!stage.empty()) req.mutable_io()->set_stage(std::string(stage));
  const Op op = io->header.op;
  std::span<const char> payload;
  if (op == Op::kWrite || op == Op::kSetxattr) payload = io->write_data;
  // Traced: the round trip is a hop of its own (the server's hops are
  // inside it; the difference is the network's and the RPC layer's), and a
  // wait for a connection first is a "connect" hop inside it.
  uint64_t start = 0;
  std::unique_ptr<uint64_t> sent_ns;
  if (io->trace != nullptr) {
    start = MonotonicNanos();
    sent_ns = std::make_unique<uint64_t>(0);
  }
  uint64_t* sent_at = sent_ns.get();
  channel_->Call(
      req, payload, timeout_,
      [this, io, start, sent_ns = std::move(sent_ns)](
          const absl::Status& transport, proto::RpcReply& reply,
          std::span<const char> data) {
        absl::Status s;
        if (!transport.ok()) {
          const int err = absl::IsDeadlineExceeded(transport) ? ETIMEDOUT : EIO;
          s = StatusWithErrno(
              transport.code(),
              StrCat("server ", channel_->address(), ": ", transport.message()),
              err);
        } else {
          s = DecodeIoReply(reply, data, io);
          if (s.ok() && io->attr.st_ino != 0) io->attr.st_dev ^= dev_salt_;
        }
        if (io->trace != nullptr) {
          if (*sent_ns != 0) {
            io->trace->Add(TraceHop{local_name_, "connect", io->rule_id(),
                                    channel_->address(), start, *sent_ns, 0,
                                    io->copy(), absl::StatusCode::kOk});
          }
          // The server's hops (one level deeper) with the call's own, at
          // once: a reader finds them just before the call (Trace::AddCall).
          std::vector<TraceHop> inner;
          if (transport.ok()) {
            for (const proto::TraceHop& h : reply.io().trace()) {
              inner.push_back(TraceHopFromMsg(h, /*extra_depth=*/1));
            }
          }
          io->trace->AddCall(
              std::move(inner),
              TraceHop{local_name_, "rpc", io->rule_id(), channel_->address(),
                       start, MonotonicNanos(), 0, io->copy(), s.code()});
        }
        io->Complete(std::move(s));
      },
      sent_at);
  --depth;
}

bool IsServerAddress(std::string_view where) {
  if (where.empty() || where.front() == '/' || where.front() == '.') {
    return false;
  }
  std::string host;
  uint16_t port;
  return SplitHostPort(std::string(where), &host, &port).ok() && port != 0;
}

absl::Status AddEndpoint(SSwitch& sswitch, const std::string& name,
                         const std::string& where,
                         const RemoteContext& remote) {
  if (!IsServerAddress(where)) {
    auto ep = LocalEndpoint::Open(where);
    if (!ep.ok()) return ep.status();
    return sswitch.AddEndpoint(name, *std::move(ep));
  }
  if (remote.secret.empty()) {
    return absl::InvalidArgumentError(
        StrCat("endpoint ", name, "=", where,
               " is a server: give the cluster secret (--secret-file)"));
  }
  if (remote.threads == nullptr) {
    return absl::InternalError("no io threads for remote endpoints");
  }
  RemoteEndpoint::Options o;
  o.address = where;
  o.secret = remote.secret;
  o.local_name = remote.local_name;
  o.role = remote.role;
  o.timeout = remote.timeout;
  auto ep = RemoteEndpoint::Create(remote.threads, std::move(o));
  if (!ep.ok()) return ep.status();
  return sswitch.AddEndpoint(name, *std::move(ep));
}

absl::Status AddEndpointSpec(SSwitch& sswitch, const std::string& spec,
                             const RemoteContext& remote) {
  const size_t eq = spec.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size()) {
    return absl::InvalidArgumentError(
        StrCat("endpoint '", spec, "' is not NAME=DIR or NAME=HOST:PORT"));
  }
  absl::Status s =
      AddEndpoint(sswitch, spec.substr(0, eq), spec.substr(eq + 1), remote);
  if (!s.ok()) {
    return absl::Status(s.code(), StrCat("endpoint ", spec, ": ", s.message()));
  }
  return s;
}

}  // namespace sroute
