// SPDX-License-Identifier: Apache-2.0
#include "fuse/caller_groups.h"

#include <fcntl.h>
#include <unistd.h>

#include <charconv>
#include <tuple>

#include "fuse/pid_cache.h"
#include "util/strings.h"

namespace sroute {
namespace {

using Groups = std::shared_ptr<const std::vector<uint32_t>>;
using Key = std::tuple<pid_t, uid_t, gid_t>;

// The numbers of a status line's value ("\t1\t2 3"), in order.
std::vector<uint32_t> Numbers(std::string_view v) {
  std::vector<uint32_t> out;
  const char* p = v.data();
  const char* end = v.data() + v.size();
  while (p < end) {
    while (p < end && (*p == ' ' || *p == '\t')) ++p;
    uint32_t n = 0;
    auto [next, ec] = std::from_chars(p, end, n);
    if (ec != std::errc()) break;
    out.push_back(n);
    p = next;
  }
  return out;
}

// The value of line "NAME:" of a status text, or nullopt.
std::optional<std::string_view> Field(std::string_view status,
                                      std::string_view name) {
  size_t at = 0;
  while (at < status.size()) {
    size_t eol = status.find('\n', at);
    if (eol == std::string_view::npos) eol = status.size();
    std::string_view line = status.substr(at, eol - at);
    if (line.size() > name.size() && line.starts_with(name) &&
        line[name.size()] == ':') {
      return line.substr(name.size() + 1);
    }
    at = eol + 1;
  }
  return std::nullopt;
}

Groups Read(const Key& key) {
  const auto [tid, uid, gid] = key;
  if (tid <= 0) return nullptr;
  const std::string path = StrCat("/proc/", tid, "/status");
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return nullptr;
  std::string text(4096, '\0');
  size_t used = 0;
  for (;;) {
    if (used == text.size()) text.resize(text.size() * 2);
    const ssize_t n = ::read(fd, text.data() + used, text.size() - used);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    used += static_cast<size_t>(n);
  }
  ::close(fd);
  text.resize(used);
  auto groups = ParseStatusGroups(text, uid, gid);
  if (!groups || groups->empty()) return nullptr;
  return std::make_shared<const std::vector<uint32_t>>(std::move(*groups));
}

}  // namespace

std::optional<std::vector<uint32_t>> ParseStatusGroups(std::string_view status,
                                                       uid_t uid, gid_t gid) {
  const auto uids = Field(status, "Uid");
  const auto gids = Field(status, "Gid");
  const auto groups = Field(status, "Groups");
  if (!uids || !gids || !groups) return std::nullopt;
  // real, effective, saved, file system
  const std::vector<uint32_t> u = Numbers(*uids), g = Numbers(*gids);
  if (u.size() < 4 || g.size() < 4 || u[3] != uid || g[3] != gid) {
    return std::nullopt;
  }
  return Numbers(*groups);
}

Groups CallerGroups(pid_t tid, uid_t uid, gid_t gid) {
  static auto* cache = new PidCache<Key, Groups>(1'000'000'000, 4096);
  return cache->Get(Key{tid, uid, gid}, Read);
}

}  // namespace sroute
