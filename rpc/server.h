// SPDX-License-Identifier: Apache-2.0
// RpcServer: accepts TCP connections, runs the handshake (rpc/handshake.h)
// and hands every request of an authenticated peer to a handler; replies go
// back on the connection, in any order, as they are ready.
//
// A peer that sends a bad frame, fails the handshake or does not finish it
// in time is logged and disconnected; the server itself goes on.
//
// Thread safety: thread-safe. The handler runs on an io thread and must not
// block for long (hand slow work to another thread); Call::Reply may be
// called from any thread.
#ifndef SROUTE_RPC_SERVER_H_
#define SROUTE_RPC_SERVER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/rpc.pb.h"
#include "rpc/frame.h"
#include "rpc/io_threads.h"
#include "util/strings.h"  // SplitHostPort

namespace sroute {

namespace rpc_internal {
class ServerConnection;
}  // namespace rpc_internal

class RpcServer {
 public:
  struct Options {
    std::string name;    // this host's name, sent in the handshake
    std::string secret;  // the cluster secret
    FrameLimits limits;
    absl::Duration handshake_timeout = absl::Seconds(5);
    int max_connections = 1024;
  };

  // One request in flight. Reply exactly once; a Call destroyed without a
  // reply answers Internal ("request dropped"), so a caller never waits
  // for nothing.
  class Call {
   public:
    ~Call();
    Call(const Call&) = delete;
    Call& operator=(const Call&) = delete;

    proto::RpcRequest& request() { return request_; }
    // The request's payload (e.g. write data), owned by the call.
    std::string& payload() { return payload_; }
    // When the request was read off the network (util/clock.h).
    uint64_t received_ns() const { return received_ns_; }
    // The peer's name and role from its handshake.
    const std::string& peer_name() const;
    const std::string& peer_role() const;
    // Sends `reply` (its id is set to the request's) with `payload`.
    // Dropped if the connection closed meanwhile.
    void Reply(proto::RpcReply& reply, std::span<const char> payload = {});
    // Replies with just a status.
    void ReplyStatus(const absl::Status& status);

   private:
    friend class rpc_internal::ServerConnection;
    explicit Call(std::shared_ptr<rpc_internal::ServerConnection> conn)
        : conn_(std::move(conn)) {}
    std::shared_ptr<rpc_internal::ServerConnection> conn_;
    proto::RpcRequest request_;
    std::string payload_;
    uint64_t received_ns_ = 0;
    bool replied_ = false;
  };

  using Handler = std::function<void(std::unique_ptr<Call>)>;

  // Listens on `address` ("HOST:PORT"; port 0 picks a free one).
  // REQUIRES: `threads` outlives the server.
  static absl::StatusOr<std::unique_ptr<RpcServer>> Start(
      IoThreads* threads, const std::string& address, Options options,
      Handler handler);
  // Stops accepting, closes every connection and waits until no handler or
  // reply of this server runs any more.
  ~RpcServer();
  RpcServer(const RpcServer&) = delete;
  RpcServer& operator=(const RpcServer&) = delete;

  uint16_t port() const;
  // "HOST:PORT" as listened on.
  std::string address() const;

  struct Counters {
    uint64_t accepted = 0;
    uint64_t authenticated = 0;
    uint64_t refused = 0;  // failed or timed-out handshakes
    uint64_t bad_frames = 0;
    int64_t open = 0;
    uint64_t bytes_in = 0;  // on the wire, frames and handshakes
    uint64_t bytes_out = 0;
  };
  Counters counters() const;

 private:
  friend class rpc_internal::ServerConnection;
  struct Impl;
  explicit RpcServer(std::shared_ptr<Impl> impl);
  std::shared_ptr<Impl> impl_;
};

}  // namespace sroute

#endif  // SROUTE_RPC_SERVER_H_
