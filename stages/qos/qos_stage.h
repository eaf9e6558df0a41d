// SPDX-License-Identifier: Apache-2.0
// Stage kind "qos": per-tenant queues in front of a device, served by a
// TokenScheduler (stages/qos/token_scheduler.h) with the options of
// QosOptions (proto/config.proto). An IO that may go now goes on the
// caller's thread; the others wait in their tenant's queue and a dispatcher
// thread of the stage hands them on as tokens come (on completions, and on
// a timer within 5 % of the strictest latency target). Each IO's latency is
// measured from its arrival at the stage to its completion, queueing
// included: what a tenant's SLO covers.
//
//   --stage 'q=qos:tokens_per_s=8400,write_cost=10,tenant=a/lc/2400/100/5000'
//   --rule  '<*, *, //S1/db/*> -> <IO, stage:q>'
//
// Counters per tenant ("TENANT.iops", "TENANT.p95_us", "TENANT.queued",
// ...) in the stage's stats, and the device's ("tokens_per_s",
// "lc_reserved", ...).
#ifndef SROUTE_STAGES_QOS_QOS_STAGE_H_
#define SROUTE_STAGES_QOS_QOS_STAGE_H_

#include "stages/stage.h"

namespace sroute {

void RegisterQosStage(StageRegistry& registry);

}  // namespace sroute

#endif  // SROUTE_STAGES_QOS_QOS_STAGE_H_
