// SPDX-License-Identifier: Apache-2.0
// PassthroughFiles: regular files whose reads, writes and mmap the kernel
// serves from their backing file itself (FUSE passthrough, protocol 7.40,
// Linux 6.9), with no round trip to the daemon.
//
// A file is opened so only when nothing would see its IO: the volume's
// sSwitch leaves it alone (SSwitch::LeavesAlone: no rule, tap, quiesce or
// endpoint watch names it) and its home is a directory on this machine.
// The kernel lets an inode be open either through its page cache or
// without it, never both, and every passthrough open of an inode must use
// the same backing file: so an inode open through the page cache is not
// opened past the daemon, and all passthrough opens of an inode share one
// backing id, closed with the last of them.
//
// It is also the sSwitch's BypassGuard (sswitch/bypass.h): a change that
// would route, tap, quiesce or watch a file open here waits for its opens
// to close (no new one starts meanwhile) and fails cleanly if they do not.
//
// Thread safety: thread-safe; no syscall but the backing file's open and
// the two ioctls runs under its lock.
#ifndef SROUTE_FUSE_PASSTHROUGH_H_
#define SROUTE_FUSE_PASSTHROUGH_H_

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "sswitch/bypass.h"
#include "util/mutex.h"

namespace sroute {

class PassthroughFiles : public BypassGuard {
 public:
  // `fuse_fd`: the session's /dev/fuse descriptor (the backing ioctls').
  explicit PassthroughFiles(int fuse_fd) : fuse_fd_(fuse_fd) {}
  ~PassthroughFiles() override;

  // Why an open was not past the daemon, and how many each.
  struct Counters {
    uint64_t opens = 0;       // opens served past the daemon
    uint64_t files_open = 0;  // inodes with such opens now
    std::map<std::string, uint64_t> not_why;
  };

  // How an open goes.
  struct Decision {
    enum class Kind {
      kPast,    // past the daemon: reply with `backing_id`
      kDaemon,  // through the daemon; `cached`: recorded as using the
                // page cache (CachedReleased when it goes)
      kParked,  // waits: `park`'s continuation runs when it may go on
      kBusy,    // refused: another name of a file open past the daemon
                // that the sSwitch does not leave alone (EBUSY)
    };
    Kind kind = Kind::kDaemon;
    int32_t backing_id = 0;
    bool cached = false;
  };
  // For an open of inode `ino` by `opener` (for writing: `writes`), the
  // file `file` ("//HOST/PATH"). The kernel wants every open of an inode
  // open past the daemon to be so too (it fails any other with EIO): an
  // open that would not (a change naming it waits for those) is parked
  // until they close or the change is over, then decides again. (So a
  // change is made once the opens under way close, however often the file
  // is opened again.) `wants_cache`: the open would use the page cache
  // (recorded in the same step, so that no passthrough open slips in
  // between). `leaves_alone` asks the sSwitch and `park` makes the
  // continuation, both under this object's lock; `open_backing` opens the
  // backing file (a descriptor, or -errno). Reasons for kDaemon are
  // counted.
  Decision Decide(uint64_t ino, const std::string& file, uid_t opener,
                  bool writes, bool wants_cache,
                  const std::function<bool()>& leaves_alone,
                  const std::function<int()>& open_backing,
                  const std::function<absl::AnyInvocable<void() &&>()>& park);
  // A passthrough open of `ino` by `opener` was released (or its reply
  // failed).
  void Closed(uint64_t ino, uid_t opener, bool writes);
  void CachedReleased(uint64_t ino);
  // Before `ino` takes the name `file` (a rename): false if it is open
  // past the daemon and `file` is not left alone by the sSwitch (the
  // rename must fail with EXDEV: the open cannot be taken back); else a
  // change naming `file` waits for its opens from now on. DropName after
  // the rename: its old name if it was made, else the new one.
  bool AddName(uint64_t ino, const std::string& file,
               const std::function<bool()>& leaves_alone);
  void DropName(uint64_t ino, const std::string& file);
  // Whether `ino` is open past the daemon for writing by a user but root:
  // set-ID bits must not be given to it then (such a user's writes would
  // clear them on a local file system; past the daemon they run as the
  // daemon, and the kernel keeps them).
  bool WrittenPastByUser(uint64_t ino) const;

  Counters counters() const;

  // BypassGuard.
  uint64_t Hold(Names names) override;
  std::vector<std::string> WaitClosed(uint64_t ticket,
                                      absl::Time deadline) override;
  void Unhold(uint64_t ticket) override;

 private:
  struct Backing {
    int32_t id = 0;
    uint32_t opens = 0;
    std::vector<std::string> files;  // its names (more during a rename)
    std::multiset<uid_t> writers;    // the openers for writing
  };
  void NotPast(const std::string& why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    ++not_why_[why];
  }

  const int fuse_fd_;
  mutable Mutex mu_;
  CondVar closed_;
  absl::flat_hash_map<uint64_t, Backing> backing_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, uint32_t> cached_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, Names> holds_ ABSL_GUARDED_BY(mu_);
  // Parked opens, by inode.
  absl::flat_hash_map<uint64_t, std::vector<absl::AnyInvocable<void() &&>>>
      parked_ ABSL_GUARDED_BY(mu_);
  uint64_t next_hold_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t opens_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, uint64_t> not_why_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sroute

#endif  // SROUTE_FUSE_PASSTHROUGH_H_
