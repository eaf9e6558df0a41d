// SPDX-License-Identifier: Apache-2.0
// The stages of a host, driven by configs and control requests: making
// them from the registry, changing and removing them live through the
// sSwitch's update protocol for stages (SSwitch::ChangeStage, RemoveStage),
// their stats, and stopping them at shutdown.
#ifndef SROUTE_STAGES_HOST_STAGES_H_
#define SROUTE_STAGES_HOST_STAGES_H_

#include "absl/status/status.h"
#include "proto/config.pb.h"
#include "proto/hostctl.pb.h"
#include "sswitch/sswitch.h"

namespace sroute {

// Makes the stage `config` describes and adds it to `sw`. Errors name the
// stage and the option.
absl::Status AddConfiguredStage(SSwitch& sw, const proto::StageConfig& config);

// Makes stage `want.name()` be there with `want`'s options: added if
// missing, reconfigured (through the update protocol) if its options
// differ. A stage of that name of another kind is an error.
absl::Status EnsureStage(SSwitch& sw, const proto::StageConfig& want,
                         absl::Duration timeout);

// Who sent a control request.
enum class ControlOrigin {
  kLocal,    // the host's own config, flags or control socket (root's)
  kNetwork,  // a peer that holds the cluster secret: a server's RPC port,
             // or the controller
};

// Serves a Stages control request (list, add, set, remove); the stages'
// state goes to resp->stages. A request from the network may not point a
// stage at a directory of this machine (a cache's tier_dir): that is for
// whoever administers the machine (PermissionDenied).
absl::Status HandleStagesRequest(SSwitch& sw, const proto::Stages& request,
                                 proto::ControlResponse* resp,
                                 ControlOrigin origin);

// Every stage's config and counters, into resp->stages, by name.
void AddStageStats(const SSwitch& sw, proto::ControlResponse* resp);

// Every endpoint's gauges (Endpoint::Gauges) into `gauges`.
void AddEndpointGauges(const SSwitch& sw,
                       google::protobuf::Map<std::string, int64_t>* gauges);

// Stops every stage of `sw` (write-back caches write back). The first
// error, naming its stage.
// REQUIRES: no IO in flight (the host is idle).
absl::Status StopStages(SSwitch& sw);

}  // namespace sroute

#endif  // SROUTE_STAGES_HOST_STAGES_H_
