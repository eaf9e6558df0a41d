// SPDX-License-Identifier: Apache-2.0
// Credentials: who asked for an IO, and acting as them on this thread.
//
// The daemons run as root and serve many users. An endpoint performs a
// namespace or attribute change (create, mkdir, chmod, rename, ...) with
// the caller's file-system uid, gid and supplementary groups, so the backing
// file system chooses owners (setgid directories included) and makes its
// permission decisions exactly as it would for a local process
// (docs/design.md §11). Data IO on descriptors opened earlier does not switch:
// permission was checked when the file was opened, as locally.
//
// Linux keeps fsuid, fsgid and the group list per thread; glibc's
// setgroups() changes every thread of the process (and its setfsuid does
// not), so ScopedCredentials uses the raw system calls.
#ifndef SROUTE_SSWITCH_CREDENTIALS_H_
#define SROUTE_SSWITCH_CREDENTIALS_H_

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "rules/io_header.h"

namespace sroute {

struct Credentials {
  uint32_t uid = 0;
  uint32_t gid = 0;
  // Supplementary groups; null means none.
  std::shared_ptr<const std::vector<uint32_t>> groups;
  // False: nobody in particular (the daemon itself, e.g. for files the
  // sSwitch makes at detours); the endpoint acts as the daemon.
  bool set = false;

  static Credentials Of(uint32_t uid, uint32_t gid,
                        std::vector<uint32_t> groups = {});
  bool operator==(const Credentials& o) const;
};

// Whether endpoints perform `op` as its caller: ops that make, remove or
// move names, or change attributes, and open (O_TRUNC). Data IO, lookups
// and listings run as the daemon: the kernel checked the caller's rights at
// open and lookup.
bool ActsAsCaller(Op op);

// Acts as `c` on the calling thread until destroyed, then as the daemon
// again. A no-op when `c` is not set, is root with gid 0 (the daemon's own
// rights already), or the process cannot switch (not root: every file then
// belongs to the daemon's user, as with any unprivileged FUSE daemon).
//
// ok() is false (and status() says why) when switching failed: the caller
// must not perform the operation.
//
// Thread-safety: per thread; never hand a thread to other work (a
// completion, a library call that opens files) while one is alive.
class ScopedCredentials {
 public:
  explicit ScopedCredentials(const Credentials& c);
  ~ScopedCredentials();
  ScopedCredentials(const ScopedCredentials&) = delete;
  ScopedCredentials& operator=(const ScopedCredentials&) = delete;

  bool ok() const { return status_.ok(); }
  const absl::Status& status() const { return status_; }

  // Whether this process can act as other users (it has CAP_SETUID and
  // CAP_SETGID in effect); computed once.
  static bool Supported();

 private:
  bool switched_ = false;
  absl::Status status_;
};

}  // namespace sroute

#endif  // SROUTE_SSWITCH_CREDENTIALS_H_
