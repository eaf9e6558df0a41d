// SPDX-License-Identifier: Apache-2.0
// Redirects between controllers. Several controllers may share one store
// with one of them leading (controller/leadership.h); the others answer
// each request only the leader serves with UNAVAILABLE naming the leader,
// and hosts (host/agent.h) and clients (controller/client.h) call it next.
// The leader's address travels in RpcReply.leader and comes back as a
// payload of the status.
#ifndef SROUTE_RPC_LEADER_H_
#define SROUTE_RPC_LEADER_H_

#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace sroute {

// UNAVAILABLE: "controller SELF does not lead; the leader is at LEADER" (or
// "no controller leads yet" with `leader` empty), and why, if `why` is not
// empty.
absl::Status NotLeaderError(std::string_view self, std::string_view leader,
                            std::string_view why = "");

// Whether `s` is a NotLeaderError: nothing was done, the call may go to
// another controller.
bool IsNotLeader(const absl::Status& s);
// The leader a NotLeaderError names ("" if none, or for any other status).
std::string LeaderOf(const absl::Status& s);

// `s` marked as a NotLeaderError naming `leader`.
absl::Status WithLeader(absl::Status s, std::string_view leader);

}  // namespace sroute

#endif  // SROUTE_RPC_LEADER_H_
