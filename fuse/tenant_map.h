// SPDX-License-Identifier: Apache-2.0
// TenantMap: who issued a FUSE request, as the `source` of its IO header.
// A caller is mapped by its uid first, then its gid, then its cgroup (the
// deepest configured cgroup v2 path that holds the caller's, so a
// container's sub-cgroups belong to it); unmapped callers are "uid:N".
//
// Thread safety: Add only during setup; TenantOf is thread-safe.
#ifndef SROUTE_FUSE_TENANT_MAP_H_
#define SROUTE_FUSE_TENANT_MAP_H_

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "fuse/pid_cache.h"
#include "proto/config.pb.h"

namespace sroute {

// "NAME=uid:N", "NAME=gid:N" or "NAME=cgroup:/PATH" as a config's tenant
// (the name and path are checked by TenantMap::Add).
absl::StatusOr<proto::HostConfig::Tenant> ParseTenantSpec(
    std::string_view spec);

class TenantMap {
 public:
  // Adds "NAME=uid:N", "NAME=gid:N" or "NAME=cgroup:/PATH" (a cgroup v2
  // path as /proc/PID/cgroup shows it). NAME is a rule-language source name.
  absl::Status Add(std::string_view spec);
  absl::Status Add(const proto::HostConfig::Tenant& tenant);
  // The tenant of a caller; `pid` (0: unknown, e.g. the kernel itself) is
  // looked up only if some tenant is a cgroup and neither id is mapped.
  std::string TenantOf(uid_t uid, gid_t gid, pid_t pid) const;

  // The cgroup v2 path of process or thread `pid` ("/a/b"), read from
  // /proc/PID/cgroup; nullopt if it has ended or has none.
  static std::optional<std::string> ReadCgroup(pid_t pid);

 private:
  // The caller's cgroup, cached for kCgroupTtlNs: reading /proc per request
  // would cost several system calls. A process moved to another cgroup, or a
  // pid reused by another process within that time, is seen late by as much.
  std::optional<std::string> CgroupOf(pid_t pid) const;

  absl::flat_hash_map<uid_t, std::string> by_uid_;
  absl::flat_hash_map<gid_t, std::string> by_gid_;
  // (cgroup path without a trailing '/', tenant), deepest first.
  std::vector<std::pair<std::string, std::string>> by_cgroup_;

  // Shared by copies of the map (a pid's cgroup is the same for all); a
  // cgroup is read again after a second (PidCache).
  using CgroupCache = PidCache<pid_t, std::optional<std::string>>;
  std::shared_ptr<CgroupCache> cgroup_cache_ =
      std::make_shared<CgroupCache>(1'000'000'000, 4096);
};

}  // namespace sroute

#endif  // SROUTE_FUSE_TENANT_MAP_H_
