// SPDX-License-Identifier: Apache-2.0
// sroutectl replicas: the replica_set stages of a host (or, through the
// controller, of every host) shown as replica sets, and changed through
// the stages' options (stages set): members, primary, resync pause.
#ifndef SROUTE_TOOLS_SROUTECTL_REPLICAS_H_
#define SROUTE_TOOLS_SROUTECTL_REPLICAS_H_

#include <string>

#include "tools/sroutectl/commands.h"
#include "tools/sroutectl/target.h"

namespace sroute::ctl {

// The replica sets as a table of sets (ls) or of members (status), and as
// JSON. `bars`: a progress bar per member being resynced (a terminal).
Report ReplicaSetsReport(const proto::StageLists& lists,
                         const std::string& only, bool members, bool bars);

// The GC coordination of the replica sets with flash members (`gc
// status`): each set's mode and counters, its members' GC now, and the
// timeline of the latest `last` passes (times as the hosts' clocks say).
Report GcStatusReport(const proto::StageLists& lists, const std::string& only,
                      int last);

// The commands' bodies (commands.cc lists them).
int ReplicasList(const Args& args, ControlTarget& target, bool members);
int GcStatus(const Args& args, ControlTarget& target);
// Sets stage `args.name`'s options to what `edit` makes of its config.
int ReplicasChange(const Args& args, ControlTarget& target,
                   const std::string& what);

}  // namespace sroute::ctl

#endif  // SROUTE_TOOLS_SROUTECTL_REPLICAS_H_
