// Stage kind "replica_set" (issue 23, first slice): keeps each file it is
// sent on several members, endpoints of its host (ReplicaSetOptions in
// proto/config.proto). Changes (writes, truncates, creates, deletes, O_TRUNC
// opens) go to every member still in the set, and complete once the ack
// policy is met by the answers (all, or a majority); reads and other
// read-only ops go to one member (the primary, or one at random) and, when
// it fails with anything but ENOENT, to the next, the failed member leaving
// the set at once. Overlapping changes to a file go one at a time, in the
// order they came, so every member applies them in the same order.
//
// Not yet (see issue 23): ordering across hosts (the stage orders what
// passes it: put it where every writer's IOs pass), the dirty-region
// log, resync, hedged and least-loaded reads, `sroutectl replicas`.
#ifndef SROUTE_STAGES_REPLICA_SET_REPLICA_SET_STAGE_H_
#define SROUTE_STAGES_REPLICA_SET_REPLICA_SET_STAGE_H_

#include "stages/stage.h"

namespace sroute {

void RegisterReplicaSetStage(StageRegistry& registry);

}  // namespace sroute

#endif  // SROUTE_STAGES_REPLICA_SET_REPLICA_SET_STAGE_H_
