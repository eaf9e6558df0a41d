// SPDX-License-Identifier: Apache-2.0
// RpcChannel: the client side of sroute's RPC to one peer (HOST:PORT): a
// small pool of connections, each authenticated with the cluster secret
// (rpc/handshake.h), carrying many outstanding requests.
//
// Every call has a deadline: a dead, stuck or unreachable peer gives an
// error (Unavailable, DeadlineExceeded, PermissionDenied for a wrong
// secret), never a hang. A lost connection fails its outstanding calls at
// once; the next call reconnects, with exponential backoff between attempts
// (calls made while backing off fail fast with the last error).
//
// Thread safety: thread-safe. Callbacks run on an io thread (or, for calls
// that fail at once, on the caller's thread); they must not block.
#ifndef SROUTE_RPC_CHANNEL_H_
#define SROUTE_RPC_CHANNEL_H_

#include <memory>
#include <span>
#include <string>

#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/rpc.pb.h"
#include "rpc/frame.h"
#include "rpc/io_threads.h"

namespace sroute {

class RpcChannel {
 public:
  struct Options {
    std::string address;  // HOST:PORT of the peer
    std::string secret;   // the cluster secret
    std::string name;     // this host's name, sent in the handshake
    std::string role = "client";
    int connections = 2;
    FrameLimits limits;
    absl::Duration connect_timeout = absl::Seconds(3);
    absl::Duration min_backoff = absl::Milliseconds(50);
    absl::Duration max_backoff = absl::Seconds(2);
  };

  // `status` is the transport's verdict: OK means `reply` is the peer's
  // answer (which may itself carry an error code). `payload` is valid only
  // during the callback.
  using Callback = absl::AnyInvocable<void(const absl::Status& status,
                                           proto::RpcReply& reply,
                                           std::span<const char> payload)>;

  // Does not connect yet (the first call or Connect does). Fails on a bad
  // address or secret.
  // REQUIRES: `threads` outlives the channel.
  static absl::StatusOr<std::unique_ptr<RpcChannel>> Create(IoThreads* threads,
                                                            Options options);
  // Closes the connections; calls still outstanding fail with Cancelled.
  ~RpcChannel();
  RpcChannel(const RpcChannel&) = delete;
  RpcChannel& operator=(const RpcChannel&) = delete;

  // Sends `request` (its id is set here) with `payload`, which is copied
  // before Call returns. `done` runs exactly once. A call that waits for a
  // connection writes the time it was sent (util/clock.h) to `*sent_ns`,
  // if given, before `done` runs; a call sent at once leaves it alone.
  void Call(proto::RpcRequest& request, std::span<const char> payload,
            absl::Duration timeout, Callback done, uint64_t* sent_ns = nullptr);

  // Waits for the reply. A reply whose code is not OK becomes the error;
  // `payload`, if given, receives the reply's payload.
  absl::StatusOr<proto::RpcReply> CallSync(
      proto::RpcRequest& request, absl::Duration timeout,
      std::span<const char> payload = {}, std::string* reply_payload = nullptr);

  // Closes the connections: calls outstanding fail with Cancelled, later
  // calls too (at once). Idempotent; the destructor does it.
  void Shutdown();

  // Connects every connection of the pool now and waits for the handshakes;
  // the first error if one fails.
  absl::Status Connect(absl::Duration timeout);

  const std::string& address() const;
  // The peer's name from its handshake ("" before the first one).
  std::string peer_name() const;
  // Calls waiting for a reply.
  size_t outstanding() const;

 private:
  struct Impl;
  explicit RpcChannel(std::shared_ptr<Impl> impl);
  std::shared_ptr<Impl> impl_;
};

// The status a failed reply carries (code, message, and errno when set).
absl::Status ReplyStatus(const proto::RpcReply& reply);

// Whether a call failed before any byte of it left for the peer (it could
// not connect, or was backing off): the peer did nothing, so the call may go
// to another peer. A call that failed after it was sent may have been
// carried out.
bool NotSent(const absl::Status& s);

}  // namespace sroute

#endif  // SROUTE_RPC_CHANNEL_H_
