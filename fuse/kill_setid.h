// SPDX-License-Identifier: Apache-2.0
// Clearing set-ID bits and capabilities where a caller without CAP_FSETID
// writes, truncates or chowns a file, as a local file system does: the
// caller may write the file but may not chmod it, and a set-user-ID
// program changed by another user must not stay set-user-ID.
//
// The kernel says when (FUSE_HANDLE_KILLPRIV_V2, accepted at INIT by
// session_loop.cc): a WRITE with FUSE_WRITE_KILL_SUIDGID, a SETATTR with
// FATTR_KILL_SUIDGID (a truncate by such a caller, a chown of a
// non-directory), an OPEN or CREATE with FUSE_OPEN_KILL_SUIDGID (O_TRUNC). A
// FALLOCATE says nothing: the caller's capabilities decide. The clearing is
// a setattr (kKillSetid, sswitch/io.h) routed as the caller's own chmod
// would be: to the file's home, to every copy of a scatter, through stages
// and storage servers; each endpoint makes it with its own rights.
//
// Every write of a caller other than root carries the flag, so an open file
// remembers that its file has nothing to clear (after its first clearing,
// or since it created the file) until a chmod or setxattr through the
// volume may have added something (Volume::setid_generation), and so does
// the inode for a second (InodeTable::WithoutSetid): the next opens start
// knowing it, as ext4's S_NOSEC inode, so an open-write-close loop pays one
// clearing a second per file, not one per open. A set-ID bit added through
// another host (or on the endpoint) is cleared by a write at most that
// second later, or, while the file is open here, after this volume's next
// clearing decision, as with the kernel's own cached mode.
#ifndef SROUTE_FUSE_KILL_SETID_H_
#define SROUTE_FUSE_KILL_SETID_H_

#include <memory>
#include <string>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "fuse/request.h"

namespace sroute::fuse_internal {

// Whether `caller` lacks CAP_FSETID: anyone but root, and root without it
// in its effective set (read from /proc/PID/status).
bool LacksFsetid(const Caller& caller);

// Clears the set-ID bits and capabilities of the file `r` is about to change
// (its header's file, routed as a setattr of `caller`, whose groups decide
// about a set-group-ID bit without group execute), unless `open` (may be
// null) is known to have none, then runs `then` with `r` (its attr then the
// file's attributes as cleared) and the outcome: on this thread before
// returning when nothing is to be done, else on a helper thread
// (Volume::Continue), which may block.
void KillSetidThen(
    std::unique_ptr<Request> r, OpenFile* open, const Caller& caller,
    absl::AnyInvocable<void(std::unique_ptr<Request>, const absl::Status&)>
        then);

}  // namespace sroute::fuse_internal

#endif  // SROUTE_FUSE_KILL_SETID_H_
