// SPDX-License-Identifier: Apache-2.0
// HostRuntime: a daemon's host, built from its HostConfig (docs/design.md §7):
// the sSwitch with its endpoints, stages and rules, the network threads and the
// cluster secret that remote endpoints need, the controller agent and the
// control socket. sroute-fuse and sroute-server differ only in their front
// ends (a FUSE session, an RPC server), so an endpoint, a rule source or an
// option added here works in both.
//
// Order of use:
//   Build        endpoints and rules, before any front end exists;
//   StartAgent   registers with the controller: its rules are in place
//                before the front end serves its first IO;
//   StartControl the control socket, with the daemon's own gauges;
//   StopServices control socket, then agent: no control request touches
//                the front end after it returns;
//   WaitForIdle, StopStages (write-back caches write back; an error is
//   data a stage could not write), then the destructor (network threads
//   last; it stops the stages if StopStages was not called).
//
// Thread safety: Build and the Start/Stop calls from one thread (setup and
// shutdown); host() is thread-safe like the EmbeddedHost.
#ifndef SROUTE_HOST_RUNTIME_H_
#define SROUTE_HOST_RUNTIME_H_

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "embed/embedded_host.h"
#include "endpoints/remote_endpoint.h"
#include "host/agent.h"
#include "host/config.h"
#include "proto/config.pb.h"
#include "proto/hostctl.pb.h"
#include "rpc/io_threads.h"

namespace sroute {

class ControlServer;
namespace metrics {
class Exposition;
class MetricsServer;
}  // namespace metrics

class HostRuntime {
 public:
  // Builds the host of a daemon of `kind` from a checked `config`. Its
  // namespace's endpoint ("home") is, for fuse, "home" at config.backing()
  // (a directory or a server); for a server, config.name() ("server" if
  // empty) at config.root(). A local home gets the reserved folder. The
  // cluster secret is `secret` if given, else config.secret_file()'s, read
  // when some endpoint is remote, a controller is named or `kind` is a
  // server. Errors name the part (endpoint, rule FILE:LINE:COL, secret).
  static absl::StatusOr<std::unique_ptr<HostRuntime>> Build(
      const proto::HostConfig& config, HostKind kind, std::string secret = "");
  ~HostRuntime();
  HostRuntime(const HostRuntime&) = delete;
  HostRuntime& operator=(const HostRuntime&) = delete;

  EmbeddedHost& host() { return host_; }
  SSwitch& sswitch() { return host_.sswitch(); }
  const proto::HostConfig& config() const { return config_; }
  HostKind kind() const { return kind_; }
  // The endpoint holding the namespace, and where it is.
  const std::string& home_name() const { return home_name_; }
  const std::string& home_where() const { return home_where_; }
  // Where the host keeps durable state (RocksDB stores): state_dir, else
  // HOME/.sroute/state for a local home; empty for a FUSE host on a remote
  // home without state_dir.
  const std::string& state_dir() const { return state_dir_; }
  bool home_is_remote() const;
  // Network threads: null for a FUSE host without servers or controller.
  IoThreads* io_threads() { return threads_.get(); }
  const std::string& secret() const { return remote_.secret; }
  absl::Duration remote_timeout() const { return remote_.timeout; }

  // With config.controller() set, registers and applies the controller's
  // rules and the delegate-made rules recovered from the servers; a no-op
  // without. `address` is the host's own RPC address (servers).
  absl::Status StartAgent(const std::string& address = "");
  ControllerAgent* agent() { return agent_.get(); }

  // With config.control_socket() set, serves it; `add_gauges` adds the
  // daemon's gauges to each stats answer (the agent's are added here).
  absl::Status StartControl(
      std::function<void(proto::ControlResponse*)> add_gauges = nullptr);

  // With config.metrics() set, serves /metrics: the sSwitch's metrics
  // (host/host_metrics.h) and what `add_metrics` adds (the daemon's own).
  // `add_metrics` runs on the metrics thread, during a scrape.
  absl::Status StartMetrics(
      std::function<void(metrics::Exposition*)> add_metrics = nullptr);
  // The address /metrics is served on ("" without).
  std::string metrics_address() const;

  // Stops the control socket, the metrics and the agent.
  void StopServices();
  // Waits until no IO is in flight or parked, at most `limit`; true if
  // idle.
  bool WaitForIdle(std::chrono::milliseconds limit);
  // Stops the stages, once. REQUIRES: idle (WaitForIdle returned true).
  absl::Status StopStages();

  // SIGHUP: the config's rules file read again and its rules replaced
  // (EmbeddedHost::ReloadRulesFile). FailedPrecondition when the host has a
  // controller (its rules are the controller's: sroutectl changes them) or
  // no rules file.
  absl::StatusOr<size_t> ReloadRulesFile();

 private:
  HostRuntime(proto::HostConfig config, HostKind kind);
  // Build's steps, in order.
  absl::Status PlaceHome();
  absl::Status SetUpNetwork(std::string secret);
  absl::Status MakeReservedFolder();
  void PlaceState();
  absl::Status AddEndpoints();
  absl::Status AddStages();
  absl::Status LoadRules();

  const proto::HostConfig config_;
  const HostKind kind_;
  std::string home_name_;
  std::string home_where_;
  std::string state_dir_;
  RemoteContext remote_;
  // Destroyed last: remote endpoints of the host run on them.
  std::unique_ptr<IoThreads> threads_;
  EmbeddedHost host_;
  std::unique_ptr<ControllerAgent> agent_;
  std::unique_ptr<ControlServer> control_;
  std::unique_ptr<metrics::MetricsServer> metrics_;
  bool stages_stopped_ = false;
};

}  // namespace sroute

#endif  // SROUTE_HOST_RUNTIME_H_
