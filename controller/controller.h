// SPDX-License-Identifier: Apache-2.0
// Controller: the heart of `sroute-controller` (docs/design.md §6-§7).
//
// Hosts register over the RPC (host/agent.h) and are reconciled to
// their persisted rules, plus the delegate-made rules recovered from the
// records on the storage servers their endpoints name. Every rule is
// persisted (RocksDB, controller/store.h) before it is installed; updates
// run in two phases across any set of sSwitches (Update); statistics come
// in every interval; controller-bound detours are delivered to control
// applications, which run in-process (ControlApp) or out of process
// (controller/client.h) against the same ControllerApi.
//
// Thread safety: thread-safe. Lock order (controller_impl.h, at each
// lock's declaration): Impl::update_mu > Impl::mu; Impl::update_mu >
// ControllerStore::mu_; Impl::channels_mu, PendingCommand::mu and
// AppRunner::mu_ are leaves. Only update_mu is held while waiting for hosts
// (it serializes whole two-phase updates, and a new host's adoption of its
// rules waits behind one); no other lock is held while waiting for a host.
#ifndef SROUTE_CONTROLLER_CONTROLLER_H_
#define SROUTE_CONTROLLER_CONTROLLER_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "controller/app_api.h"

namespace sroute {

struct ControllerOptions {
  std::string listen = "127.0.0.1:7500";
  std::string secret;  // the cluster secret
  // Where the controller's state lives: "rocksdb:DIR" (one controller; the
  // default, with db_dir as DIR) or "etcd://HOST:PORT[,HOST:PORT...]
  // [/PREFIX]" (several controllers share it, one leads:
  // controller/leadership.h; PREFIX defaults to /sroute/).
  std::string store;
  std::string db_dir;  // RocksDB, when `store` is empty
  // etcd: this member's id (default: its address) and the address hosts
  // and clients reach it at (default: the address it listens on, which
  // must then be a specific one).
  std::string id;
  std::string advertise;
  // etcd: the leader's lease; a dead leader is replaced within about this.
  absl::Duration leader_ttl = absl::Seconds(3);
  // etcd: the most keys one change may write (etcd's --max-txn-ops).
  size_t etcd_max_txn_ops = 128;
  // etcd: how long Start waits for the cluster to answer (members starting
  // with the controller, as at boot) before it gives up.
  absl::Duration store_wait = absl::Seconds(30);
  // etcd: called (on the election's thread) once this controller's
  // leadership is gone. sroute-controller exits, for its supervisor to
  // start it again as a follower; without it the controller answers as a
  // follower until destroyed (its apps stop, its store writes nothing).
  std::function<void(const std::string& why)> on_leadership_lost;
  absl::Duration stats_interval = absl::Seconds(1);
  // A host that sends nothing for this long counts as disconnected.
  absl::Duration host_timeout = absl::Seconds(5);
  // How long a host may take to answer one command of an update.
  absl::Duration command_timeout = absl::Seconds(10);
  int io_threads = 2;
  // Control applications to run, "NAME" or "NAME:ARGS" (see
  // ControlAppRegistry; load plug-ins before Start).
  std::vector<std::string> apps;
  // Serve Prometheus metrics at http://HOST:PORT/metrics ("": none).
  std::string metrics;
};

class Controller {
 public:
  // Opens the database, starts listening and starts the apps.
  static absl::StatusOr<std::unique_ptr<Controller>> Start(
      ControllerOptions options);
  // Stops the apps and the RPC, then waits for requests in progress.
  ~Controller();
  Controller(const Controller&) = delete;
  Controller& operator=(const Controller&) = delete;

  uint16_t port() const;
  std::string address() const;
  // Whether this controller leads (always, on RocksDB), and the leader's
  // address as this controller last saw it ("" if none).
  bool leading() const;
  std::string leader_address() const;
  // The API as an administrator sees it (updates owned by "api").
  ControllerApi& api();
  // Bytes the controller received and sent on the wire (control-plane
  // overhead).
  uint64_t bytes_in() const;
  uint64_t bytes_out() const;
  // Where /metrics is served ("" without options.metrics).
  std::string metrics_address() const;

  struct Impl;

 private:
  explicit Controller(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace sroute

#endif  // SROUTE_CONTROLLER_CONTROLLER_H_
