// SPDX-License-Identifier: Apache-2.0
// ControllerAgent: a host's side of the controller (docs/design.md §6-§7), in
// every sroute-fuse and sroute-server started with --controller.
//
// Start registers the host and applies what the controller says before it
// returns: the host's managed rules (persisted at the controller) and the
// delegate-made rules recovered from the storage servers' records, so a
// restarted host routes as before it served its first IO. Then, in the
// background, it carries out the controller's commands (the two phases of
// updates, quiesce, drain, reconcile), reports statistics every interval
// (its heartbeat), and carries the controller-bound detours: headers and
// delegate values are queued while the controller is away; IOs sent to the
// controller wait (up to a deadline) for their turn.
//
// If the controller goes away, IO goes on by the rules in place; the agent
// registers again when it is back.
//
// Thread safety: thread-safe.
#ifndef SROUTE_HOST_AGENT_H_
#define SROUTE_HOST_AGENT_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/controller.pb.h"
#include "rpc/io_threads.h"
#include "sswitch/sswitch.h"

namespace sroute {

struct AgentOptions {
  // The controller's HOST:PORT, or several, comma-separated, of controllers
  // sharing a store: the agent follows the one that leads.
  std::string address;
  std::string secret;    // the cluster secret
  proto::HostInfo host;  // sswitch (the sSwitch's name), role, endpoints...
  // How long Start waits for the controller.
  absl::Duration register_timeout = absl::Seconds(10);
  // How long a controller-bound detour waits for an absent controller.
  absl::Duration detour_timeout = absl::Seconds(30);
  // A fresh host (the process just started) gets its delegate-made rules
  // restored from the records; a host that registered once already in this
  // life (e.g. before a daemon's fork) does not need them again.
  bool fresh = true;
  // Whether Start fails when the controller cannot be reached in time;
  // without, the agent keeps trying in the background.
  bool require_registration = true;
};

class ControllerAgent {
 public:
  // REQUIRES: `sw` and `threads` outlive the agent.
  static absl::StatusOr<std::unique_ptr<ControllerAgent>> Start(
      SSwitch* sw, IoThreads* threads, AgentOptions options);
  // Stops the background work and detaches from the sSwitch.
  ~ControllerAgent();
  ControllerAgent(const ControllerAgent&) = delete;
  ControllerAgent& operator=(const ControllerAgent&) = delete;

  bool connected() const;
  // Host-level numbers for a host's stats: delegate records restored at
  // start, controller-bound events dropped.
  size_t records_restored() const;

  struct Impl;

 private:
  explicit ControllerAgent(std::shared_ptr<Impl> impl);
  std::shared_ptr<Impl> impl_;
};

}  // namespace sroute

#endif  // SROUTE_HOST_AGENT_H_
