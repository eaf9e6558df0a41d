#include "fuse/tenant_map.h"

#include <charconv>

#include "util/strings.h"

namespace sroute {

absl::Status TenantMap::Add(std::string_view spec) {
  const size_t eq = spec.find('=');
  const auto bad = [&](std::string_view why) {
    return absl::InvalidArgumentError(StrCat(
        "tenant '", spec, "': ", why, " (expected NAME=uid:N or NAME=gid:N)"));
  };
  if (eq == std::string_view::npos || eq == 0) return bad("no NAME=");
  const std::string_view name = spec.substr(0, eq);
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                    (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-';
    if (!ok) return bad("NAME may hold letters, digits, '_', '.', '-'");
  }
  const std::string_view who = spec.substr(eq + 1);
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
  auto& map = is_uid ? by_uid_ : by_gid_;
  if (!map.emplace(id, std::string(name)).second) {
    return bad("this id is mapped already");
  }
  return absl::OkStatus();
}

std::string TenantMap::TenantOf(uid_t uid, gid_t gid) const {
  if (auto it = by_uid_.find(uid); it != by_uid_.end()) return it->second;
  if (auto it = by_gid_.find(gid); it != by_gid_.end()) return it->second;
  return StrCat("uid:", uid);
}

}  // namespace sroute
