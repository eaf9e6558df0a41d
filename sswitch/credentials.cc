// SPDX-License-Identifier: Apache-2.0
#include "sswitch/credentials.h"

#include <linux/capability.h>
#include <sys/fsuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>

#include "util/errno_status.h"
#include "util/strings.h"

namespace sroute {
namespace {

// The daemon's own identity, read once: what a thread returns to.
struct Own {
  Own() {
    uid = static_cast<uint32_t>(geteuid());
    gid = static_cast<uint32_t>(getegid());
    const int n = getgroups(0, nullptr);
    if (n > 0) {
      std::vector<gid_t> g(static_cast<size_t>(n));
      const int got = getgroups(n, g.data());
      if (got > 0) groups.assign(g.begin(), g.begin() + got);
    }
    __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
    __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = {};
    if (syscall(SYS_capget, &header, data) == 0) {
      const uint32_t eff = data[0].effective;
      can_switch = (eff & (1u << CAP_SETUID)) && (eff & (1u << CAP_SETGID));
    }
  }
  uint32_t uid = 0;
  uint32_t gid = 0;
  std::vector<gid_t> groups;
  bool can_switch = false;
};

const Own& OwnIdentity() {
  static const Own* own = new Own;
  return *own;
}

// Per thread, not per process (see the header).
int SetGroups(const gid_t* list, size_t n) {
  return static_cast<int>(syscall(SYS_setgroups, n, list));
}

// setfsuid/setfsgid report no error; asking again tells whether it took.
bool SetFsUid(uint32_t uid) {
  setfsuid(static_cast<uid_t>(uid));
  return static_cast<uint32_t>(setfsuid(static_cast<uid_t>(-1))) == uid;
}
bool SetFsGid(uint32_t gid) {
  setfsgid(static_cast<gid_t>(gid));
  return static_cast<uint32_t>(setfsgid(static_cast<gid_t>(-1))) == gid;
}

}  // namespace

Credentials Credentials::Of(uint32_t uid, uint32_t gid,
                            std::vector<uint32_t> groups) {
  Credentials c;
  c.uid = uid;
  c.gid = gid;
  if (!groups.empty()) {
    c.groups = std::make_shared<const std::vector<uint32_t>>(std::move(groups));
  }
  c.set = true;
  return c;
}

bool Credentials::operator==(const Credentials& o) const {
  if (set != o.set || uid != o.uid || gid != o.gid) return false;
  const size_t n = groups ? groups->size() : 0;
  const size_t m = o.groups ? o.groups->size() : 0;
  return n == m && (n == 0 || *groups == *o.groups);
}

bool ActsAsCaller(Op op) {
  switch (op) {
    case Op::kOpen:
    case Op::kSetattr:
    case Op::kSetxattr:
    case Op::kRemovexattr:
    case Op::kCreate:
    case Op::kMknod:
    case Op::kMkdir:
    case Op::kSymlink:
    case Op::kLink:
    case Op::kUnlink:
    case Op::kRmdir:
    case Op::kRenameFrom:
    case Op::kRenameTo:
      return true;
    default:
      return false;
  }
}

bool ScopedCredentials::Supported() { return OwnIdentity().can_switch; }

ScopedCredentials::ScopedCredentials(const Credentials& c) {
  if (!c.set || (c.uid == 0 && c.gid == 0)) return;
  const Own& own = OwnIdentity();
  if (!own.can_switch) return;
  switched_ = true;
  std::vector<gid_t> groups;
  if (c.groups) groups.assign(c.groups->begin(), c.groups->end());
  if (SetGroups(groups.data(), groups.size()) != 0) {
    status_ = ErrnoStatus(errno, StrCat("acting as uid ", c.uid, ": groups"));
    return;
  }
  if (!SetFsGid(c.gid) || !SetFsUid(c.uid)) {
    status_ = ErrnoStatus(EPERM, StrCat("acting as uid ", c.uid, " gid ", c.gid,
                                        ": the switch did not take"));
  }
}

ScopedCredentials::~ScopedCredentials() {
  if (!switched_) return;
  const Own& own = OwnIdentity();
  // Back to the daemon's rights; a failure here would leave the thread
  // acting as a user for all later work, which must never happen.
  if (!SetFsUid(own.uid) || !SetFsGid(own.gid) ||
      SetGroups(own.groups.data(), own.groups.size()) != 0) {
    std::abort();
  }
}

}  // namespace sroute
