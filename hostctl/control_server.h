// SPDX-License-Identifier: Apache-2.0
// ControlServer: a host's control port. Listens on a unix stream socket
// (mode 0600: the file's permissions are the authentication) and serves
// RpcRequests carrying a ControlRequest, in the RPC framing
// (rpc/fd_frames.h, the same frames and messages a storage server answers
// on TCP after its handshake), by
// calling the sSwitch's control API: list, add and delete rules, quiesce,
// drain and stats.
//
// Thread safety: one accept thread and one thread per connection; the
// sSwitch's control API is thread-safe. on_rules_changed runs on a
// connection thread after every successful add or delete.
#ifndef SROUTE_HOSTCTL_CONTROL_SERVER_H_
#define SROUTE_HOSTCTL_CONTROL_SERVER_H_

#include <atomic>
#include <functional>
#include <list>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "hostctl/control_handler.h"
#include "proto/hostctl.pb.h"
#include "rpc/frame.h"
#include "sswitch/sswitch.h"
#include "util/mutex.h"

namespace sroute {

// The control socket's frames: messages as large as the RPC's (a listing of
// a big rule table), never a payload.
inline constexpr FrameLimits kControlFrameLimits{FrameLimits().max_header, 0};

class ControlServer {
 public:
  // Removes a stale socket file at `socket_path` (nothing listening), and
  // refuses (FailedPrecondition) if another process is listening there.
  // REQUIRES: `sw` outlives the server.
  // `add_stats`, if set, adds the host's gauges to every stats response.
  static absl::StatusOr<std::unique_ptr<ControlServer>> Start(
      SSwitch* sw, const std::string& socket_path,
      std::function<void()> on_rules_changed,
      std::function<void(proto::ControlResponse*)> add_stats = nullptr);

  // Stops accepting, closes connections, joins threads and removes the
  // socket file.
  ~ControlServer();
  ControlServer(const ControlServer&) = delete;
  ControlServer& operator=(const ControlServer&) = delete;

  const std::string& socket_path() const { return path_; }

  // Serves one request (what a connection does with each frame).
  proto::ControlResponse Handle(const proto::ControlRequest& request);

 private:
  struct Connection {
    int fd = -1;
    std::thread thread;
    std::atomic<bool> done{false};
  };

  ControlServer(SSwitch* sw, std::string path, int listen_fd, int cancel_r,
                int cancel_w, std::function<void()> on_rules_changed,
                std::function<void(proto::ControlResponse*)> add_stats);
  void AcceptLoop();
  void Serve(Connection* conn);
  // Joins finished connections (threads that have returned or are about
  // to: a short wait).
  void ReapDone() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  SSwitch* const sw_;
  const std::string path_;
  const int listen_fd_;
  // Written once at shutdown; readable from then on.
  const int cancel_r_;
  const int cancel_w_;
  const std::function<void()> on_rules_changed_;
  const std::function<void(proto::ControlResponse*)> add_stats_;
  std::thread accept_thread_;
  // Guards conns_. A leaf: requests are served without it.
  Mutex mu_;
  std::list<Connection> conns_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sroute

#endif  // SROUTE_HOSTCTL_CONTROL_SERVER_H_
