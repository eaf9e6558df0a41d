// Stage kind "replica_set" (issue 23, first slice): keeps each file it is
// sent on several members, endpoints of its host (ReplicaSetOptions in
// proto/config.proto). Changes (writes, truncates, creates, deletes, O_TRUNC
// opens) go to every member still in the set, and complete once the ack
// policy is met by the answers (all, or a majority); reads and other
// read-only ops go to one member (the primary, or one at random) and, when
// it fails with anything but ENOENT, to the next, the failed member leaving
// the set at once.
//
// Not yet (see issue 23): write ordering across hosts, the dirty-region
// log, resync, hedged and least-loaded reads, `sroutectl replicas`.
#ifndef SROUTE_STAGES_REPLICA_SET_REPLICA_SET_STAGE_H_
#define SROUTE_STAGES_REPLICA_SET_REPLICA_SET_STAGE_H_

#include "stages/stage.h"

namespace sroute {

void RegisterReplicaSetStage(StageRegistry& registry);

}  // namespace sroute

#endif  // SROUTE_STAGES_REPLICA_SET_REPLICA_SET_STAGE_H_
