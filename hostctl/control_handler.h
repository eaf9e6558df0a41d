// SPDX-License-Identifier: Apache-2.0
// The control requests of proto/hostctl.proto served against one sSwitch:
// list, add and delete rules, quiesce, drain, stats, stages and copies of
// data between its endpoints (hostctl/copy_tree.h). Every host's
// control port (a FUSE daemon's unix socket, a storage server's RPC port)
// answers with this.
#ifndef SROUTE_HOSTCTL_CONTROL_HANDLER_H_
#define SROUTE_HOSTCTL_CONTROL_HANDLER_H_

#include <functional>

#include "proto/hostctl.pb.h"
#include "sswitch/sswitch.h"
#include "stages/host_stages.h"

namespace sroute {

inline constexpr uint32_t kControlProtocolVersion = 1;

// Serves `request`. Drain blocks up to its timeout (at most 10 minutes), a
// copy up to its budget: call from a thread that may wait. `add_stats`, if set,
// adds the host's gauges to stats responses. *rules_changed tells whether rules
// were added or deleted. `origin`: what a request may do depends on who
// sent it (HandleStagesRequest).
proto::ControlResponse HandleControlRequest(
    SSwitch& sw, const proto::ControlRequest& request,
    const std::function<void(proto::ControlResponse*)>& add_stats,
    bool* rules_changed, ControlOrigin origin);

}  // namespace sroute

#endif  // SROUTE_HOSTCTL_CONTROL_HANDLER_H_
