// SPDX-License-Identifier: Apache-2.0
#include "fuse/tenant_map.h"

#include <algorithm>
#include <charconv>
#include <fstream>

#include "util/strings.h"

namespace sroute {
namespace {

// True if cgroup `path` is `root` or lies beneath it.
bool Within(std::string_view path, std::string_view root) {
  if (root.empty()) return true;  // "/": every cgroup
  return path.starts_with(root) &&
         (path.size() == root.size() || path[root.size()] == '/');
}

// Why `tenant` cannot be mapped, or "" (duplicates are the map's to find).
std::string TenantProblem(const proto::HostConfig::Tenant& tenant) {
  if (tenant.name().empty()) return "no NAME";
  for (char c : tenant.name()) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                    (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-';
    if (!ok) return "NAME may hold letters, digits, '_', '.', '-'";
  }
  if (tenant.who_case() == proto::HostConfig::Tenant::kCgroup &&
      !tenant.cgroup().starts_with('/')) {
    return "a cgroup path starts with '/'";
  }
  if (tenant.who_case() == proto::HostConfig::Tenant::WHO_NOT_SET) {
    return "no uid, gid or cgroup";
  }
  return "";
}

}  // namespace

absl::StatusOr<proto::HostConfig::Tenant> ParseTenantSpec(
    std::string_view spec) {
  const size_t eq = spec.find('=');
  const auto bad = [&](std::string_view why) {
    return absl::InvalidArgumentError(
        StrCat("tenant '", spec, "': ", why,
               " (expected NAME=uid:N, NAME=gid:N or NAME=cgroup:/PATH)"));
  };
  if (eq == std::string_view::npos || eq == 0) return bad("no NAME=");
  proto::HostConfig::Tenant tenant;
  tenant.set_name(std::string(spec.substr(0, eq)));
  const std::string_view who = spec.substr(eq + 1);
  if (who.starts_with("cgroup:")) {
    tenant.set_cgroup(std::string(who.substr(7)));
    if (const std::string why = TenantProblem(tenant); !why.empty()) {
      return bad(why);
    }
    return tenant;
  }
  const bool is_uid = who.starts_with("uid:");
  if (!is_uid && !who.starts_with("gid:")) return bad("unknown id kind");
  const std::string_view digits = who.substr(4);
  uint32_t id = 0;
  auto [p, ec] =
      std::from_chars(digits.data(), digits.data() + digits.size(), id);
  if (ec != std::errc() || p != digits.data() + digits.size() ||
      digits.empty()) {
    return bad("bad number");
  }
  if (is_uid) {
    tenant.set_uid(id);
  } else {
    tenant.set_gid(id);
  }
  if (const std::string why = TenantProblem(tenant); !why.empty()) {
    return bad(why);
  }
  return tenant;
}

absl::Status TenantMap::Add(std::string_view spec) {
  auto tenant = ParseTenantSpec(spec);
  if (!tenant.ok()) return tenant.status();
  return Add(*tenant);
}

absl::Status TenantMap::Add(const proto::HostConfig::Tenant& tenant) {
  const std::string& name = tenant.name();
  const auto bad = [&](std::string_view why) {
    return absl::InvalidArgumentError(StrCat("tenant '", name, "': ", why));
  };
  if (const std::string why = TenantProblem(tenant); !why.empty()) {
    return bad(why);
  }
  switch (tenant.who_case()) {
    case proto::HostConfig::Tenant::kCgroup: {
      std::string_view path = tenant.cgroup();
      while (path.ends_with('/')) path.remove_suffix(1);
      for (const auto& [p, t] : by_cgroup_) {
        if (p == path) return bad("this cgroup is mapped already");
      }
      by_cgroup_.emplace_back(std::string(path), name);
      // Deepest first: the first that holds a caller's cgroup is its tenant.
      std::stable_sort(by_cgroup_.begin(), by_cgroup_.end(),
                       [](const auto& a, const auto& b) {
                         return a.first.size() > b.first.size();
                       });
      return absl::OkStatus();
    }
    case proto::HostConfig::Tenant::kUid:
      if (!by_uid_.emplace(tenant.uid(), name).second) {
        return bad("this id is mapped already");
      }
      return absl::OkStatus();
    case proto::HostConfig::Tenant::kGid:
      if (!by_gid_.emplace(tenant.gid(), name).second) {
        return bad("this id is mapped already");
      }
      return absl::OkStatus();
    case proto::HostConfig::Tenant::WHO_NOT_SET:
      break;
  }
  return absl::OkStatus();  // TenantProblem refused it
}

std::string TenantMap::TenantOf(uid_t uid, gid_t gid, pid_t pid) const {
  if (!by_uid_.empty()) {
    if (auto it = by_uid_.find(uid); it != by_uid_.end()) return it->second;
  }
  if (!by_gid_.empty()) {
    if (auto it = by_gid_.find(gid); it != by_gid_.end()) return it->second;
  }
  if (!by_cgroup_.empty() && pid > 0) {
    if (std::optional<std::string> cgroup = CgroupOf(pid)) {
      for (const auto& [path, tenant] : by_cgroup_) {
        if (Within(*cgroup, path)) return tenant;
      }
    }
  }
  // Formatted once per thread and caller: this runs for every IO.
  thread_local uid_t last_uid = 0;
  thread_local std::string last_name;
  if (last_name.empty() || last_uid != uid) {
    last_name = StrCat("uid:", uid);
    last_uid = uid;
  }
  return last_name;
}

std::optional<std::string> TenantMap::CgroupOf(pid_t pid) const {
  return cgroup_cache_->Get(pid, ReadCgroup);
}

std::optional<std::string> TenantMap::ReadCgroup(pid_t pid) {
  std::ifstream in(StrCat("/proc/", pid, "/cgroup"));
  std::string line;
  while (std::getline(in, line)) {
    // cgroup v2: "0::/PATH"; v1 lines name their controllers.
    if (line.starts_with("0::")) {
      std::string path = line.substr(3);
      while (path.size() > 1 && path.ends_with('/')) path.pop_back();
      if (path == "/") path.clear();  // the root, as Add stores "/"
      return path;
    }
  }
  return std::nullopt;
}

}  // namespace sroute
