// SPDX-License-Identifier: Apache-2.0
// The supplementary groups of the thread behind a FUSE request.
//
// The FUSE protocol carries the caller's uid, gid and thread id, not its
// groups; they come from /proc/TID/status ("Groups:"), kept per (thread,
// uid, gid) for a second (PidCache). A thread that changes its groups
// while keeping its uid and gid is seen late by as much.
#ifndef SROUTE_FUSE_CALLER_GROUPS_H_
#define SROUTE_FUSE_CALLER_GROUPS_H_

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

namespace sroute {

// Null when the thread has none, has ended, or is not the one that sent a
// request as uid/gid (its id was reused).
// Thread-safe.
std::shared_ptr<const std::vector<uint32_t>> CallerGroups(pid_t tid, uid_t uid,
                                                          gid_t gid);

// Parses the text of /proc/TID/status: the "Groups:" list, provided the
// "Uid:" and "Gid:" lines give `uid` and `gid` as file-system ids (their
// fourth field). Nullopt when they do not.
std::optional<std::vector<uint32_t>> ParseStatusGroups(std::string_view status,
                                                       uid_t uid, gid_t gid);

}  // namespace sroute

#endif  // SROUTE_FUSE_CALLER_GROUPS_H_
