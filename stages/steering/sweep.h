// SPDX-License-Identifier: Apache-2.0
// Profiling an endpoint through a host's sSwitch (issue 49; proto
// ProfileEndpoint): Sandook's agent profiles its SSDs the same way (§6.1),
// load raised in 1 % steps at each read/write mix, p50/p90/p99 at each.
//
// The sweep's IOs are the sSwitch's own (SSwitch::SubmitOwn) on
// `.sroute/profile-sweep` of the endpoint: on a local endpoint they
// measure the device and its file system; on a storage server's, the
// network and the server's route to its device too. Each step offers
// Poisson arrivals planned before it starts, and a request's latency
// counts from its planned arrival (a backlog shows, as a user's would
// see it); the first `warmup_ms` of a step are not measured.
//
// A call runs until its budget is spent and returns what it measured; the
// next call goes on from it (ProfileEndpoint.so_far), so no host keeps a
// sweep's state and a long sweep crosses no call timeout.
#ifndef SROUTE_STAGES_STEERING_SWEEP_H_
#define SROUTE_STAGES_STEERING_SWEEP_H_

#include "absl/status/status.h"
#include "proto/hostctl.pb.h"
#include "sswitch/sswitch.h"
#include "stages/steering/sweep_wait.h"

namespace sroute {

// NotFound for an unknown endpoint, InvalidArgument for options out of
// range or a `so_far` of another sweep, the IO error (with its errno text)
// if the file cannot be made or an IO fails, DeadlineExceeded if IOs do
// not come back within 30 s of a step's end.
absl::Status ProfileSweep(SSwitch& sw, const proto::ProfileEndpoint& request,
                          proto::ProfileProgress* out);

}  // namespace sroute

#endif  // SROUTE_STAGES_STEERING_SWEEP_H_
