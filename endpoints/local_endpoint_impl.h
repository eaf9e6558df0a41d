// SPDX-License-Identifier: Apache-2.0
// LocalEndpoint::Impl, private to the files that define its members:
//   endpoints/local_endpoint.cc      helpers, paths, Dispatch, the public
//                                    class
//   endpoints/local_fd_cache.cc      the descriptor cache
//   endpoints/local_data_ops.cc      read, write, truncate, fsync, lseek,
//                                    fallocate
//   endpoints/local_metadata_ops.cc  getattr, open, readdir, readlink,
//                                    xattrs, statfs, setattr, create,
//                                    mknod/mkdir/symlink, link, unlink/rmdir,
//                                    rename
//
// LocalEndpoint: syscalls confined beneath a root directory.
//
// Path safety. A path is checked up front (no leading '/', no "." or ".."
// component, no empty component, no NUL) and then resolved only with
// openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS) starting at the root fd, so
// a symlink whose target leaves the root fails with EXDEV instead of being
// followed out. Ops that act on the final component itself (getattr, unlink,
// rename, mkdir, readlink, chown, utimens, ...) resolve the *parent* directory
// that way and then call the *at() syscall on the single last component, never
// following it (AT_SYMLINK_NOFOLLOW where the syscall has the choice). Where
// Linux has no *at()/no-follow form (chmod, truncate of an exact inode, the
// l*xattr calls) the call goes through "/proc/self/fd/N[/leaf]" of an fd that
// was itself resolved beneath the root, so /proc must be mounted for those.
//
// Data IO (read, write, truncate, fsync, fallocate) uses a bounded LRU cache
// of fds keyed by path, opened O_RDWR (O_RDONLY when that is refused and the
// op only reads). A handle is a shared_ptr: eviction or invalidation drops the
// cache's reference, and the fd is closed when the last IO using it is done.
// Namespace ops that remove or move names invalidate the affected entries:
// the names themselves, everything cached beneath a removed directory, every
// other cached name of the removed inode (aliases through symlinks), and the
// whole cache when a directory or symlink is renamed or a symlink removed
// (cached names reached through it can no longer be told apart). A
// generation counter keeps an fd opened concurrently with an invalidation out
// of the cache.
//
// Lock order: Impl::mu and Front::mu are leaf locks, never held together.
// They guard only the cache containers and the fronts; no syscall runs under
// them (fds are closed after they are released).
//
// Identity. Ops that make, remove or move names or change attributes run
// as the IO's caller (IoArgs::caller, ScopedCredentials): the backing file
// system picks owners (setgid directories included) and makes permission
// decisions as for the caller's own process. Data IO on cached descriptors,
// lookups and listings run as the daemon: the kernel checked the caller's
// rights at open and lookup (the volume mounts with default_permissions;
// a storage server trusts its authenticated peers to have done the same).
#ifndef SROUTE_ENDPOINTS_LOCAL_ENDPOINT_IMPL_H_
#define SROUTE_ENDPOINTS_LOCAL_ENDPOINT_IMPL_H_

#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "endpoints/local_endpoint.h"
#include "sswitch/credentials.h"
#include "util/errno_status.h"
#include "util/mutex.h"
#include "util/strings.h"
#include "util/thread_shard.h"

namespace sroute {

struct LocalEndpoint::Impl {
  // --- Helpers every part uses (local_endpoint.cc).
  static constexpr uint64_t kResolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;

  class UniqueFd {
   public:
    UniqueFd() = default;
    explicit UniqueFd(int fd) : fd_(fd) {}
    UniqueFd(UniqueFd&& o) noexcept : fd_(o.release()) {}
    UniqueFd& operator=(UniqueFd&& o) noexcept {
      reset(o.release());
      return *this;
    }
    UniqueFd(const UniqueFd&) = delete;
    UniqueFd& operator=(const UniqueFd&) = delete;
    ~UniqueFd() { reset(); }

    int get() const { return fd_; }
    bool valid() const { return fd_ >= 0; }
    int release() {
      const int fd = fd_;
      fd_ = -1;
      return fd;
    }
    void reset(int fd = -1) {
      if (fd_ >= 0) ::close(fd_);
      fd_ = fd;
    }

   private:
    int fd_ = -1;
  };

  static bool IsAccessError(int err) {
    return err == EACCES || err == EPERM || err == EROFS || err == ETXTBSY;
  }

  struct InodeKey {
    dev_t dev = 0;
    ino_t ino = 0;
    bool operator==(const InodeKey&) const = default;
  };
  struct InodeKeyHash {
    size_t operator()(const InodeKey& k) const {
      return std::hash<uint64_t>{}(static_cast<uint64_t>(k.ino) *
                                       0x9E3779B97F4A7C15ull ^
                                   static_cast<uint64_t>(k.dev));
    }
  };
  static InodeKey KeyOf(const struct stat& st) {
    return {st.st_dev, st.st_ino};
  }

  // An open fd for data IO. Closed when the last reference goes.
  struct FdHandle {
    FdHandle(int fd, bool writable, InodeKey inode, std::atomic<size_t>* live)
        : fd(fd), writable(writable), inode(inode), live(live) {
      live->fetch_add(1, std::memory_order_relaxed);
    }
    FdHandle(const FdHandle&) = delete;
    FdHandle& operator=(const FdHandle&) = delete;
    ~FdHandle() {
      ::close(fd);
      live->fetch_sub(1, std::memory_order_relaxed);
    }
    const int fd;
    const bool writable;
    const InodeKey inode;
    std::atomic<size_t>* const live;
  };
  using Handle = std::shared_ptr<FdHandle>;

  // The parent directory of a path, resolved beneath the root, and the last
  // component. For the root itself: the root fd and ".".
  struct Parent {
    UniqueFd owned;
    int dirfd = -1;
    std::string leaf;
  };

  // What a namespace change makes stale in the fd cache.
  struct Invalidation {
    bool all = false;
    std::vector<std::string_view> names;  // exact names
    bool beneath = false;                 // and everything beneath the names
    std::vector<InodeKey> inodes;         // and every name of these inodes
  };

  // openat2 beneath `dirfd`, for a path the kernel takes in one call.
  static int OpenBeneathOnce(int dirfd, const char* path, int flags,
                             mode_t mode);
  // The longest path handed to one openat2 (PATH_MAX counts the NUL).
  static constexpr size_t kMaxPathInOneCall = PATH_MAX - 1;
  // openat2 beneath `dirfd`. `path` "" means `dirfd` itself. Returns the fd or
  // -1 with errno set. Retries EAGAIN, which RESOLVE_BENEATH returns when a
  // concurrent rename kept it from proving a ".." (from a symlink) stayed
  // inside. A path longer than PATH_MAX (valid through the mount, where the
  // kernel hands over one name at a time) is walked in pieces, each resolved
  // beneath the directory the one before reached: still confined beneath
  // `dirfd`, and a symlink may not climb out of its piece.
  static int OpenBeneath(int dirfd, std::string_view path, int flags,
                         mode_t mode = 0);
  // "/proc/self/fd/FD[/LEAF]", for calls Linux has no *at() form of.
  static std::string ProcPath(int fd, std::string_view leaf = {});

  Impl(std::string root, int root_fd, size_t max_open)
      : root(std::move(root)),
        root_fd(root_fd),
        max_open(max_open),
        use_fronts(max_open >= 4 * kThreadShards),
        lru_capacity(use_fronts ? max_open - kThreadShards : max_open) {}
  ~Impl() {
    lru.clear();
    by_path.clear();
    ::close(root_fd);
  }

  absl::Status Dispatch(Io* io, std::string_view path);

  // Errors.
  std::string Where(std::string_view path) const {
    return path.empty() ? root : StrCat(root, "/", path);
  }
  absl::Status Fail(int err, Op op, std::string_view path) const {
    return ErrnoStatus(err, StrCat(OpName(op), " ", Where(path)));
  }
  // A failure of openat2: EXDEV there means the path left the root.
  absl::Status ResolveFail(int err, Op op, std::string_view path) const {
    if (err == EXDEV) {
      return ErrnoStatus(err, StrCat(OpName(op), " ", Where(path),
                                     ": path escapes the endpoint root"));
    }
    return Fail(err, op, path);
  }
  absl::Status CheckPath(Op op, std::string_view path) const;
  absl::Status OpenParent(Op op, std::string_view path, Parent* out) const;

  // Ops.
  absl::Status Read(Io* io, std::string_view path);
  // Reads `io` without blocking if it can: with a descriptor the cache
  // holds, from the page cache only. False if it did not (nothing is
  // reported; Read then does it).
  bool ReadCached(Io* io, std::string_view path);
  absl::Status Write(Io* io, std::string_view path);
  absl::Status Getattr(Io* io, std::string_view path);
  absl::Status OpenCheck(Io* io, std::string_view path);
  absl::Status Readdir(Io* io, std::string_view path);
  absl::Status Readlink(Io* io, std::string_view path);
  absl::Status Xattr(Io* io, std::string_view path);
  absl::Status Statfs(Io* io, std::string_view path);
  absl::Status Setattr(Io* io, std::string_view path,
                       std::optional<ScopedCredentials>& as_caller);
  absl::Status KillSetid(int fd, const Credentials& caller,
                         std::string_view path);
  absl::Status Truncate(Io* io, std::string_view path);
  absl::Status Fsync(Io* io, std::string_view path);
  absl::Status Lseek(Io* io, std::string_view path);
  absl::Status Fallocate(Io* io, std::string_view path);
  absl::Status Create(Io* io, std::string_view path);
  absl::Status MakeNode(Io* io, std::string_view path);
  absl::Status Link(Io* io, std::string_view path);
  absl::Status Remove(Io* io, std::string_view path);
  absl::Status Rename(Io* io, Op op, std::string_view from,
                      std::string_view to);

  // The fd cache.
  absl::Status GetHandle(Op op, std::string_view path, bool need_write,
                         Handle* out);
  uint64_t Generation() {
    MutexLock l(&mu);
    return generation;
  }
  // The handle a thread shard used last, if it still stands.
  bool FrontHit(std::string_view path, bool need_write, Handle* out);
  // The handle the cache holds for `path`: the shard's front, else the
  // shared cache's (then made the shard's front). False if neither has it;
  // `*gen` is then the generation an open must be inserted with. Opens
  // nothing (it never blocks on the filesystem).
  bool CachedHandle(std::string_view path, bool need_write, Handle* out,
                    uint64_t* gen);
  void SetFront(std::string_view path, const Handle& h, uint64_t gen);
  void ClearFronts();
  void Insert(std::string_view path, Handle h, uint64_t gen);
  void Invalidate(const Invalidation& inv);
  void InvalidateShared(const Invalidation& inv);  // all but the fronts
  // Drops `path` if it is cached for an inode other than `inode`.
  void InvalidateIfOther(std::string_view path, InodeKey inode);

  struct Entry {
    std::string path;
    Handle handle;
  };
  using EntryList = std::list<Entry>;
  void EraseLocked(EntryList::iterator it, std::vector<Handle>* dropped)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);

  const std::string root;
  const int root_fd;
  const size_t max_open;
  // The fronts (below) hold up to kThreadShards handles the shared cache
  // may have dropped: with them, the shared cache keeps that many fewer, so
  // that no more than max_open files are open in all. A limit too small to
  // spare them gets no fronts.
  const bool use_fronts;
  const size_t lru_capacity;
  std::atomic<size_t> live{0};  // FdHandles alive (cached or in use)

  // Guards the shared cache: lru, by_path, inode_refs (and generation's
  // increments). A leaf; never held with a Front::mu.
  Mutex mu;
  EntryList lru ABSL_GUARDED_BY(mu);  // most recently used first
  std::unordered_map<std::string, EntryList::iterator, StringHash, StringEq>
      by_path ABSL_GUARDED_BY(mu);
  std::unordered_map<InodeKey, int, InodeKeyHash> inode_refs
      ABSL_GUARDED_BY(mu);
  // Bumped (under mu) by namespace changes; the fronts read it without mu.
  std::atomic<uint64_t> generation{0};

  // Each thread shard's last handle, looked up before the shared cache,
  // whose lock, map and reference count every IO on every CPU would
  // otherwise touch. A front holds its handle through a reference count of
  // its own (ShardLocalRef); namespace changes clear the fronts.
  struct alignas(64) Front {
    // Guards this front. A leaf; never held with Impl::mu.
    Mutex mu;
    uint64_t generation ABSL_GUARDED_BY(mu) = 0;
    std::string path ABSL_GUARDED_BY(mu);
    Handle handle ABSL_GUARDED_BY(mu);  // null if none
  };
  Front fronts[kThreadShards];
};

}  // namespace sroute

#endif  // SROUTE_ENDPOINTS_LOCAL_ENDPOINT_IMPL_H_
