// SPDX-License-Identifier: Apache-2.0
// Stage kind "replica_set" (issue 23): keeps each file it is sent on
// several members, endpoints of its host (ReplicaSetOptions in
// proto/config.proto). Changes go to every member in the set, overlapping
// ones to a file one at a time in arrival order; a change is acknowledged
// when the ack policy is met by members current where it writes. Reads go
// to one member current where they read, failing over on a member's
// failure. A dirty-region log (stages/replica_set/region_log.h) written
// before any data and before any acknowledgement of a change a member
// missed says where members differ; resync (resync.cc) rebuilds returning
// members region by region. The class: replica_set_impl.h.
//
// Not yet: the replica_control app, choosing a conflicting region's
// source by hand.
#ifndef SROUTE_STAGES_REPLICA_SET_REPLICA_SET_STAGE_H_
#define SROUTE_STAGES_REPLICA_SET_REPLICA_SET_STAGE_H_

#include "stages/stage.h"

namespace sroute {

void RegisterReplicaSetStage(StageRegistry& registry);

}  // namespace sroute

#endif  // SROUTE_STAGES_REPLICA_SET_REPLICA_SET_STAGE_H_
