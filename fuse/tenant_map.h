// TenantMap: who issued a FUSE request, as the `source` of its IO header.
// Callers map by uid first, then gid; unmapped callers are "uid:N".
//
// Thread safety: immutable after setup; lookups are thread-safe.
#ifndef SROUTE_FUSE_TENANT_MAP_H_
#define SROUTE_FUSE_TENANT_MAP_H_

#include <sys/types.h>

#include <string>
#include <string_view>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"

namespace sroute {

class TenantMap {
 public:
  // Adds "NAME=uid:N" or "NAME=gid:N". NAME is a rule-language source name.
  absl::Status Add(std::string_view spec);
  std::string TenantOf(uid_t uid, gid_t gid) const;

 private:
  absl::flat_hash_map<uid_t, std::string> by_uid_;
  absl::flat_hash_map<gid_t, std::string> by_gid_;
};

}  // namespace sroute

#endif  // SROUTE_FUSE_TENANT_MAP_H_
