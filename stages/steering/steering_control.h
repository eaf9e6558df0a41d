// SPDX-License-Identifier: Apache-2.0
// The host's side of steering (issue 49) as control requests
// (proto/hostctl.proto): SetProfiles installs congestion watches
// (stages/steering/watch.h) on the host's endpoints, ProfileEndpoint runs
// a part of a profile sweep (stages/steering/sweep.h).
#ifndef SROUTE_STAGES_STEERING_STEERING_CONTROL_H_
#define SROUTE_STAGES_STEERING_STEERING_CONTROL_H_

#include "absl/status/status.h"
#include "proto/hostctl.pb.h"
#include "sswitch/sswitch.h"

namespace sroute {

// All or nothing: InvalidArgument naming the endpoint for a bad profile or
// option, NotFound for an endpoint the host does not have. Lists the
// profiles set after into resp->profiles.
absl::Status HandleSetProfiles(SSwitch& sw, const proto::SetProfiles& request,
                               proto::ControlResponse* resp);

absl::Status HandleProfileEndpoint(SSwitch& sw,
                                   const proto::ProfileEndpoint& request,
                                   proto::ControlResponse* resp);

}  // namespace sroute

#endif  // SROUTE_STAGES_STEERING_STEERING_CONTROL_H_
