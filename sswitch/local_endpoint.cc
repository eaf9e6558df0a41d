// SPDX-License-Identifier: Apache-2.0
// Over 1 200 lines: path resolution and the per-op syscalls share the
// handle cache; the split by op group is issue 52's.
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
// Modes are created as given: the caller's umask was applied before.
#include "sswitch/local_endpoint.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <stdio.h>  // renameat2
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <functional>
#include <list>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

#include "sswitch/credentials.h"
#include "util/errno_status.h"
#include "util/helper_pool.h"
#include "util/mutex.h"
#include "util/strings.h"
#include "util/thread_shard.h"

namespace sroute {
namespace {

constexpr uint64_t kResolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;

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

// openat2 beneath `dirfd`, for a path the kernel takes in one call.
int OpenBeneathOnce(int dirfd, const char* path, int flags, mode_t mode) {
  struct open_how how;
  std::memset(&how, 0, sizeof(how));
  how.flags = static_cast<uint64_t>(flags | O_CLOEXEC);
  how.mode = (flags & (O_CREAT | O_TMPFILE)) ? mode : 0;
  how.resolve = kResolve;
  for (int attempt = 0;; ++attempt) {
    const long r = ::syscall(SYS_openat2, dirfd, path, &how, sizeof(how));
    if (r >= 0) return static_cast<int>(r);
    if ((errno == EAGAIN || errno == EINTR) && attempt < 16) continue;
    return -1;
  }
}

// The longest path handed to one openat2 (PATH_MAX counts the NUL).
constexpr size_t kMaxPathInOneCall = PATH_MAX - 1;

// openat2 beneath `dirfd`. `path` "" means `dirfd` itself. Returns the fd or
// -1 with errno set. Retries EAGAIN, which RESOLVE_BENEATH returns when a
// concurrent rename kept it from proving a ".." (from a symlink) stayed
// inside. A path longer than PATH_MAX (valid through the mount, where the
// kernel hands over one name at a time) is walked in pieces, each resolved
// beneath the directory the one before reached: still confined beneath
// `dirfd`, and a symlink may not climb out of its piece.
int OpenBeneath(int dirfd, std::string_view path, int flags, mode_t mode = 0) {
  if (path.size() <= kMaxPathInOneCall) {
    const std::string p = path.empty() ? std::string(".") : std::string(path);
    return OpenBeneathOnce(dirfd, p.c_str(), flags, mode);
  }
  UniqueFd dir;
  int at = dirfd;
  std::string_view rest = path;
  while (rest.size() > kMaxPathInOneCall) {
    const size_t cut = rest.rfind('/', kMaxPathInOneCall);
    if (cut == std::string_view::npos || cut == 0) {
      errno = ENAMETOOLONG;  // one name longer than any file system allows
      return -1;
    }
    const std::string piece(rest.substr(0, cut));
    const int fd = OpenBeneathOnce(at, piece.c_str(), O_PATH | O_DIRECTORY, 0);
    if (fd < 0) return -1;
    dir.reset(fd);
    at = fd;
    rest.remove_prefix(cut + 1);
  }
  const std::string last(rest);
  const int fd = OpenBeneathOnce(at, last.c_str(), flags, mode);
  const int err = errno;
  dir.reset();
  errno = err;
  return fd;
}

std::string ProcPath(int fd, std::string_view leaf = {}) {
  if (leaf.empty()) return StrCat("/proc/self/fd/", fd);
  return StrCat("/proc/self/fd/", fd, "/", leaf);
}

bool IsAccessError(int err) {
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
InodeKey KeyOf(const struct stat& st) { return {st.st_dev, st.st_ino}; }

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

}  // namespace

struct LocalEndpoint::Impl {
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

// ---------------------------------------------------------------------------
// Paths

absl::Status LocalEndpoint::Impl::CheckPath(Op op,
                                            std::string_view path) const {
  if (path.empty()) return absl::OkStatus();
  if (path.find('\0') != std::string_view::npos) {
    return ErrnoStatus(
        EINVAL, StrCat(OpName(op), " ", root, ": path contains a NUL byte"));
  }
  if (path.front() == '/') {
    return ErrnoStatus(EXDEV, StrCat(OpName(op), " \"", path,
                                     "\": path escapes the endpoint root ",
                                     root, " (absolute path)"));
  }
  // Component by component without splitting into a vector: this runs for
  // every IO.
  for (size_t start = 0; start <= path.size();) {
    size_t end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    const std::string_view c = path.substr(start, end - start);
    start = end + 1;
    if (c == "..") {
      return ErrnoStatus(EXDEV, StrCat(OpName(op), " \"", path,
                                       "\": path escapes the endpoint root ",
                                       root, " ('..' component)"));
    }
    if (c.empty() || c == ".") {
      return ErrnoStatus(EINVAL,
                         StrCat(OpName(op), " \"", path,
                                "\": malformed path (empty or '.' component)"));
    }
  }
  return absl::OkStatus();
}

absl::Status LocalEndpoint::Impl::OpenParent(Op op, std::string_view path,
                                             Parent* out) const {
  if (path.empty()) {
    out->dirfd = root_fd;
    out->leaf = ".";
    return absl::OkStatus();
  }
  const size_t slash = path.rfind('/');
  if (slash == std::string_view::npos) {
    out->dirfd = root_fd;
    out->leaf = std::string(path);
    return absl::OkStatus();
  }
  const int fd =
      OpenBeneath(root_fd, path.substr(0, slash), O_PATH | O_DIRECTORY);
  if (fd < 0) return ResolveFail(errno, op, path);
  out->owned.reset(fd);
  out->dirfd = fd;
  out->leaf = std::string(path.substr(slash + 1));
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------
// The fd cache

void LocalEndpoint::Impl::EraseLocked(EntryList::iterator it,
                                      std::vector<Handle>* dropped) {
  auto ref = inode_refs.find(it->handle->inode);
  if (ref != inode_refs.end() && --ref->second <= 0) inode_refs.erase(ref);
  auto bp = by_path.find(std::string_view(it->path));
  if (bp != by_path.end() && bp->second == it) by_path.erase(bp);
  dropped->push_back(std::move(it->handle));
  lru.erase(it);
}

bool LocalEndpoint::Impl::FrontHit(std::string_view path, bool need_write,
                                   Handle* out) {
  if (!use_fronts) return false;
  Front& f = fronts[ThreadShard()];
  MutexLock l(&f.mu);
  if (f.handle == nullptr || f.path != path ||
      f.generation != generation.load(std::memory_order_acquire) ||
      (need_write && !f.handle->writable)) {
    return false;
  }
  *out = f.handle;
  return true;
}

void LocalEndpoint::Impl::SetFront(std::string_view path, const Handle& h,
                                   uint64_t gen) {
  if (!use_fronts) return;
  Handle front = ShardLocalRef(h);
  Front& f = fronts[ThreadShard()];
  MutexLock l(&f.mu);
  f.path.assign(path);
  f.generation = gen;
  f.handle.swap(front);  // the old one is released after the lock
}

void LocalEndpoint::Impl::ClearFronts() {
  for (Front& f : fronts) {
    Handle old;  // released after the lock
    MutexLock l(&f.mu);
    old.swap(f.handle);
  }
}

absl::Status LocalEndpoint::Impl::GetHandle(Op op, std::string_view path,
                                            bool need_write, Handle* out) {
  uint64_t gen;
  if (CachedHandle(path, need_write, out, &gen)) return absl::OkStatus();
  bool writable = true;
  int fd = OpenBeneath(root_fd, path, O_RDWR);
  if (fd < 0 && !need_write && IsAccessError(errno)) {
    writable = false;
    fd = OpenBeneath(root_fd, path, O_RDONLY);
  }
  if (fd < 0) return ResolveFail(errno, op, path);
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return Fail(err, op, path);
  }
  auto h = std::make_shared<FdHandle>(fd, writable, KeyOf(st), &live);
  Insert(path, h, gen);
  SetFront(path, h, gen);
  *out = std::move(h);
  return absl::OkStatus();
}

bool LocalEndpoint::Impl::CachedHandle(std::string_view path, bool need_write,
                                       Handle* out, uint64_t* gen) {
  out->reset();
  if (FrontHit(path, need_write, out)) return true;
  {
    MutexLock l(&mu);
    *gen = generation;
    auto it = by_path.find(path);
    if (it == by_path.end() || (need_write && !it->second->handle->writable)) {
      return false;
    }
    lru.splice(lru.begin(), lru, it->second);
    *out = it->second->handle;
  }
  SetFront(path, *out, *gen);
  return true;
}

void LocalEndpoint::Impl::Insert(std::string_view path, Handle h,
                                 uint64_t gen) {
  if (max_open == 0) return;
  std::vector<Handle> dropped;  // closed after the lock is released
  MutexLock l(&mu);
  if (generation != gen) return;  // a namespace change raced with the open
  auto it = by_path.find(path);
  if (it != by_path.end()) EraseLocked(it->second, &dropped);
  const InodeKey inode = h->inode;
  lru.push_front(Entry{std::string(path), std::move(h)});
  by_path.emplace(lru.front().path, lru.begin());
  ++inode_refs[inode];
  while (lru.size() > lru_capacity) {
    EraseLocked(std::prev(lru.end()), &dropped);
  }
}

void LocalEndpoint::Impl::Invalidate(const Invalidation& inv) {
  InvalidateShared(inv);
  ClearFronts();
}

void LocalEndpoint::Impl::InvalidateShared(const Invalidation& inv) {
  std::vector<Handle> dropped;  // closed after the lock is released
  MutexLock l(&mu);
  ++generation;
  if (inv.all) {
    for (Entry& e : lru) dropped.push_back(std::move(e.handle));
    lru.clear();
    by_path.clear();
    inode_refs.clear();
    return;
  }
  for (std::string_view name : inv.names) {
    auto it = by_path.find(name);
    if (it != by_path.end()) EraseLocked(it->second, &dropped);
  }
  bool scan = inv.beneath && !lru.empty();
  for (const InodeKey& k : inv.inodes) {
    if (inode_refs.count(k) != 0) scan = true;
  }
  if (!scan) return;
  auto beneath = [&](const std::string& p) {
    if (!inv.beneath) return false;
    for (std::string_view name : inv.names) {
      if (name.empty()) return true;
      if (p.size() > name.size() && p[name.size()] == '/' &&
          std::string_view(p).substr(0, name.size()) == name) {
        return true;
      }
    }
    return false;
  };
  for (auto it = lru.begin(); it != lru.end();) {
    auto next = std::next(it);
    if (beneath(it->path) || std::find(inv.inodes.begin(), inv.inodes.end(),
                                       it->handle->inode) != inv.inodes.end()) {
      EraseLocked(it, &dropped);
    }
    it = next;
  }
}

void LocalEndpoint::Impl::InvalidateIfOther(std::string_view path,
                                            InodeKey inode) {
  {
    std::vector<Handle> dropped;  // closed after the lock is released
    MutexLock l(&mu);
    auto it = by_path.find(path);
    if (it == by_path.end() || it->second->handle->inode == inode) return;
    ++generation;
    EraseLocked(it->second, &dropped);
  }
  ClearFronts();
}

// ---------------------------------------------------------------------------
// Data ops

absl::Status LocalEndpoint::Impl::Read(Io* io, std::string_view path) {
  io->bytes = 0;
  Handle h;
  if (auto s = GetHandle(Op::kRead, path, false, &h); !s.ok()) return s;
  const size_t want =
      std::min<uint64_t>(io->header.length, io->read_buffer.size());
  size_t done = 0;
  while (done < want) {
    const ssize_t n = ::pread(h->fd, io->read_buffer.data() + done, want - done,
                              static_cast<off_t>(io->header.offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      if (done > 0) break;  // a short read
      return Fail(errno, Op::kRead, path);
    }
    if (n == 0) break;  // EOF
    done += static_cast<size_t>(n);
  }
  io->bytes = done;
  return absl::OkStatus();
}

bool LocalEndpoint::Impl::ReadCached(Io* io, std::string_view path) {
  if (!CheckPath(Op::kRead, path).ok()) return false;
  Handle h;
  uint64_t gen;
  if (!CachedHandle(path, /*need_write=*/false, &h, &gen)) return false;
  const size_t want =
      std::min<uint64_t>(io->header.length, io->read_buffer.size());
  size_t done = 0;
  while (done < want) {
    iovec iov{io->read_buffer.data() + done, want - done};
    const ssize_t n =
        ::preadv2(h->fd, &iov, 1, static_cast<off_t>(io->header.offset + done),
                  RWF_NOWAIT);
    if (n < 0 && errno == EINTR) continue;
    // EAGAIN: not all in the page cache; EOPNOTSUPP: the filesystem cannot
    // tell. An error is for the helper to report as the read's own.
    if (n < 0) return false;
    if (n == 0) break;  // EOF
    done += static_cast<size_t>(n);
  }
  io->bytes = done;
  return true;
}

absl::Status LocalEndpoint::Impl::Write(Io* io, std::string_view path) {
  io->bytes = 0;
  Handle h;
  if (auto s = GetHandle(Op::kWrite, path, true, &h); !s.ok()) return s;
  const size_t want = io->write_data.size();
  size_t done = 0;
  while (done < want) {
    const ssize_t n = ::pwrite(h->fd, io->write_data.data() + done, want - done,
                               static_cast<off_t>(io->header.offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      if (done > 0) break;  // a short write
      return Fail(errno, Op::kWrite, path);
    }
    if (n == 0) {
      if (done > 0) break;
      return Fail(EIO, Op::kWrite, path);
    }
    done += static_cast<size_t>(n);
  }
  io->bytes = done;
  return absl::OkStatus();
}

absl::Status LocalEndpoint::Impl::Truncate(Io* io, std::string_view path) {
  Handle h;
  if (auto s = GetHandle(Op::kTruncate, path, true, &h); !s.ok()) return s;
  if (io->args.truncate_mode == TruncateMode::kGrowOnly) {
    // Not ftruncate: a write at home racing past this size must not be cut.
    if (::fstat(h->fd, &io->attr) != 0) return Fail(errno, Op::kTruncate, path);
    const auto want = static_cast<off_t>(io->args.size);
    if (want > 0 && io->attr.st_size < want) {
      if (::pwrite(h->fd, "", 1, want - 1) != 1) {
        return Fail(errno, Op::kTruncate, path);
      }
    }
  } else if (io->args.truncate_mode == TruncateMode::kShrinkOnly) {
    if (::fstat(h->fd, &io->attr) != 0) return Fail(errno, Op::kTruncate, path);
    const auto want = static_cast<off_t>(io->args.size);
    if (io->attr.st_size > want && ::ftruncate(h->fd, want) != 0) {
      return Fail(errno, Op::kTruncate, path);
    }
  } else if (::ftruncate(h->fd, static_cast<off_t>(io->args.size)) != 0) {
    return Fail(errno, Op::kTruncate, path);
  }
  if (::fstat(h->fd, &io->attr) != 0) return Fail(errno, Op::kTruncate, path);
  return absl::OkStatus();
}

absl::Status LocalEndpoint::Impl::Fsync(Io* io, std::string_view path) {
  const bool datasync = io->args.datasync;
  auto sync = [&](int fd) {
    const int r = datasync ? ::fdatasync(fd) : ::fsync(fd);
    return r == 0 ? absl::OkStatus() : Fail(errno, Op::kFsync, path);
  };
  Handle h;
  absl::Status s = GetHandle(Op::kFsync, path, false, &h);
  if (s.ok()) return sync(h->fd);
  if (ErrnoOf(s) != EISDIR) return s;
  // A directory: sync it through a read-only fd, not cached.
  UniqueFd dir(OpenBeneath(root_fd, path, O_RDONLY | O_DIRECTORY));
  if (!dir.valid()) return ResolveFail(errno, Op::kFsync, path);
  return sync(dir.get());
}

// SEEK_DATA/SEEK_HOLE from header.offset (args.whence); the
// resulting offset is returned in io->bytes.
absl::Status LocalEndpoint::Impl::Lseek(Io* io, std::string_view path) {
  Handle h;
  if (auto s = GetHandle(Op::kLseek, path, false, &h); !s.ok()) return s;
  const off_t r =
      ::lseek(h->fd, static_cast<off_t>(io->header.offset), io->args.whence);
  if (r < 0) return Fail(errno, Op::kLseek, path);
  io->bytes = static_cast<uint64_t>(r);
  return absl::OkStatus();
}

absl::Status LocalEndpoint::Impl::Fallocate(Io* io, std::string_view path) {
  Handle h;
  if (auto s = GetHandle(Op::kFallocate, path, true, &h); !s.ok()) return s;
  if (::fallocate(h->fd, io->args.fallocate_mode,
                  static_cast<off_t>(io->header.offset),
                  static_cast<off_t>(io->header.length)) != 0) {
    return Fail(errno, Op::kFallocate, path);
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------
// Metadata ops

absl::Status LocalEndpoint::Impl::Getattr(Io* io, std::string_view path) {
  const Op op = io->header.op;
  Parent p;
  if (auto s = OpenParent(op, path, &p); !s.ok()) return s;
  if (::fstatat(p.dirfd, p.leaf.c_str(), &io->attr, AT_SYMLINK_NOFOLLOW) != 0) {
    return Fail(errno, op, path);
  }
  return absl::OkStatus();
}

// open: the file exists and can be opened as asked. Follows symlinks (beneath
// the root) unless O_NOFOLLOW; O_DIRECTORY requires a directory; write access
// to a directory is EISDIR; O_TRUNC with write access truncates a regular
// file (atomic O_TRUNC). Fills attr.
absl::Status LocalEndpoint::Impl::OpenCheck(Io* io, std::string_view path) {
  const int flags = io->args.open_flags;
  UniqueFd fd(OpenBeneath(root_fd, path,
                          O_PATH | (flags & (O_NOFOLLOW | O_DIRECTORY))));
  if (!fd.valid()) return ResolveFail(errno, Op::kOpen, path);
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return Fail(errno, Op::kOpen, path);
  const int accmode = flags & O_ACCMODE;
  if (S_ISLNK(st.st_mode)) return Fail(ELOOP, Op::kOpen, path);
  if (S_ISDIR(st.st_mode) && accmode != O_RDONLY) {
    return Fail(EISDIR, Op::kOpen, path);
  }
  if (accmode != O_RDONLY && S_ISREG(st.st_mode)) {
    // No descriptor is opened here: ask as open(2) would on a read-only
    // filesystem or mount.
    struct statvfs vfs;
    if (::fstatvfs(fd.get(), &vfs) == 0 && (vfs.f_flag & ST_RDONLY)) {
      return Fail(EROFS, Op::kOpen, path);
    }
  }
  if ((flags & O_TRUNC) && accmode != O_RDONLY && S_ISREG(st.st_mode) &&
      st.st_size != 0) {
    if (::truncate(ProcPath(fd.get()).c_str(), 0) != 0) {
      return Fail(errno, Op::kOpen, path);
    }
    if (::fstat(fd.get(), &st) != 0) return Fail(errno, Op::kOpen, path);
  }
  io->attr = st;
  return absl::OkStatus();
}

absl::Status LocalEndpoint::Impl::Readdir(Io* io, std::string_view path) {
  io->entries.clear();
  const int fd = OpenBeneath(root_fd, path, O_RDONLY | O_DIRECTORY);
  if (fd < 0) return ResolveFail(errno, Op::kReaddir, path);
  DIR* dir = ::fdopendir(fd);
  if (dir == nullptr) {
    const int err = errno;
    ::close(fd);
    return Fail(err, Op::kReaddir, path);
  }
  absl::Status status;
  for (;;) {
    errno = 0;
    const struct dirent* d = ::readdir(dir);
    if (d == nullptr) {
      if (errno != 0) status = Fail(errno, Op::kReaddir, path);
      break;
    }
    const std::string_view name = d->d_name;
    if (name == "." || name == "..") continue;
    DirEntry e;
    e.name = std::string(name);
    e.type = d->d_type;
    e.ino = d->d_ino;
    if (e.type == DT_UNKNOWN) {
      struct stat st;
      if (::fstatat(fd, d->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0) {
        e.type = IFTODT(st.st_mode);
      }
    }
    io->entries.push_back(std::move(e));
  }
  ::closedir(dir);  // closes fd
  if (!status.ok()) io->entries.clear();
  return status;
}

absl::Status LocalEndpoint::Impl::Readlink(Io* io, std::string_view path) {
  Parent p;
  if (auto s = OpenParent(Op::kReadlink, path, &p); !s.ok()) return s;
  std::string buf(256, '\0');
  for (;;) {
    const ssize_t n =
        ::readlinkat(p.dirfd, p.leaf.c_str(), buf.data(), buf.size());
    if (n < 0) return Fail(errno, Op::kReadlink, path);
    if (static_cast<size_t>(n) < buf.size()) {
      buf.resize(static_cast<size_t>(n));
      io->data = std::move(buf);
      return absl::OkStatus();
    }
    buf.resize(buf.size() * 2);  // possibly truncated: retry larger
  }
}

// getxattr/listxattr/setxattr/removexattr on the final component itself (a
// symlink is not followed): l*xattr on "/proc/self/fd/PARENT/LEAF".
absl::Status LocalEndpoint::Impl::Xattr(Io* io, std::string_view path) {
  const Op op = io->header.op;
  const std::string& name = io->args.xattr_name;
  if (op != Op::kListxattr &&
      (name.empty() || name.find('\0') != std::string::npos)) {
    return ErrnoStatus(
        EINVAL, StrCat(OpName(op), " ", Where(path), ": bad xattr name"));
  }
  Parent p;
  if (auto s = OpenParent(op, path, &p); !s.ok()) return s;
  const std::string proc = ProcPath(p.dirfd, p.leaf);
  const char* f = proc.c_str();
  switch (op) {
    case Op::kGetxattr:
    case Op::kListxattr:
      for (;;) {
        ssize_t n = op == Op::kGetxattr
                        ? ::lgetxattr(f, name.c_str(), nullptr, 0)
                        : ::llistxattr(f, nullptr, 0);
        if (n < 0) return Fail(errno, op, path);
        std::string buf(static_cast<size_t>(n), '\0');
        n = op == Op::kGetxattr
                ? ::lgetxattr(f, name.c_str(), buf.data(), buf.size())
                : ::llistxattr(f, buf.data(), buf.size());
        if (n >= 0) {
          buf.resize(static_cast<size_t>(n));
          io->data = std::move(buf);
          return absl::OkStatus();
        }
        if (errno != ERANGE) return Fail(errno, op, path);
        // The value grew between the two calls: ask again.
      }
    case Op::kSetxattr:
      if (::lsetxattr(f, name.c_str(), io->write_data.data(),
                      io->write_data.size(), io->args.xattr_flags) != 0) {
        return Fail(errno, op, path);
      }
      return absl::OkStatus();
    case Op::kRemovexattr:
      if (::lremovexattr(f, name.c_str()) != 0) return Fail(errno, op, path);
      return absl::OkStatus();
    default:
      return Fail(ENOSYS, op, path);
  }
}

// statfs: io->data holds the raw bytes of a `struct statvfs` for the file
// system holding `path` (symlinks followed beneath the root).
absl::Status LocalEndpoint::Impl::Statfs(Io* io, std::string_view path) {
  UniqueFd fd(OpenBeneath(root_fd, path, O_PATH));
  if (!fd.valid()) return ResolveFail(errno, Op::kStatfs, path);
  struct statvfs sv;
  if (::fstatvfs(fd.get(), &sv) != 0) return Fail(errno, Op::kStatfs, path);
  io->data.assign(reinterpret_cast<const char*>(&sv), sizeof(sv));
  return absl::OkStatus();
}

// setattr acts on the final component itself (a symlink is not followed), in
// the order chown, truncate, chmod, utimens (so a requested mtime wins over
// the truncate's, and chown's clearing of set-id bits precedes chmod), then
// the clearing of set-ID bits and capabilities a write, truncate or chown
// asks for (kKillSetid). chmod of a symlink is EOPNOTSUPP (Linux has no
// symlink modes); truncate of a directory is EISDIR, of other non-regular
// files EINVAL. `as_caller` holds the caller's rights, if the IO has a
// caller: a truncate through a descriptor (kSizeByDescriptor) and the
// clearing are made without them.
absl::Status LocalEndpoint::Impl::Setattr(
    Io* io, std::string_view path,
    std::optional<ScopedCredentials>& as_caller) {
  const IoArgs& a = io->args;
  // Runs `step` with the daemon's own rights, then as the caller again.
  auto as_daemon = [&](auto step) -> absl::Status {
    const bool was_caller = as_caller.has_value();
    as_caller.reset();
    absl::Status s = step();
    if (was_caller) {
      as_caller.emplace(a.caller);
      if (s.ok() && !as_caller->ok()) s = as_caller->status();
    }
    return s;
  };
  Parent p;
  if (auto s = OpenParent(Op::kSetattr, path, &p); !s.ok()) return s;
  UniqueFd fd(
      ::openat(p.dirfd, p.leaf.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC));
  if (!fd.valid()) return Fail(errno, Op::kSetattr, path);
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return Fail(errno, Op::kSetattr, path);

  if (a.to_set & (kSetUid | kSetGid)) {
    const uid_t uid = (a.to_set & kSetUid) ? a.uid : static_cast<uid_t>(-1);
    const gid_t gid = (a.to_set & kSetGid) ? a.gid : static_cast<gid_t>(-1);
    if (::fchownat(p.dirfd, p.leaf.c_str(), uid, gid, AT_SYMLINK_NOFOLLOW) !=
        0) {
      return Fail(errno, Op::kSetattr, path);
    }
  }
  if (a.to_set & kSetSize) {
    if (S_ISDIR(st.st_mode)) return Fail(EISDIR, Op::kSetattr, path);
    if (!S_ISREG(st.st_mode)) return Fail(EINVAL, Op::kSetattr, path);
    auto truncate = [&] {
      return ::truncate(ProcPath(fd.get()).c_str(),
                        static_cast<off_t>(a.size)) == 0
                 ? absl::OkStatus()
                 : Fail(errno, Op::kSetattr, path);
    };
    if (auto s =
            (a.to_set & kSizeByDescriptor) ? as_daemon(truncate) : truncate();
        !s.ok()) {
      return s;
    }
  }
  if (a.to_set & kSetMode) {
    if (S_ISLNK(st.st_mode)) return Fail(EOPNOTSUPP, Op::kSetattr, path);
    if (::chmod(ProcPath(fd.get()).c_str(), a.mode & 07777) != 0) {
      return Fail(errno, Op::kSetattr, path);
    }
  }
  if (a.to_set & (kSetAtime | kSetMtime)) {
    struct timespec ts[2];
    ts[0] = (a.to_set & kSetAtime) ? a.atime : timespec{0, UTIME_OMIT};
    ts[1] = (a.to_set & kSetMtime) ? a.mtime : timespec{0, UTIME_OMIT};
    if (::utimensat(p.dirfd, p.leaf.c_str(), ts, AT_SYMLINK_NOFOLLOW) != 0) {
      return Fail(errno, Op::kSetattr, path);
    }
  }
  if (a.to_set & kKillSetid) {
    if (auto s = as_daemon([&] { return KillSetid(fd.get(), a.caller, path); });
        !s.ok()) {
      return s;
    }
  }
  if (::fstat(fd.get(), &io->attr) != 0) {
    return Fail(errno, Op::kSetattr, path);
  }
  return absl::OkStatus();
}

// Clears what a write by `caller`, who lacks CAP_FSETID, clears on a local
// file system (setattr_should_drop_suidgid, cap_inode_killpriv): the
// set-user-ID bit; the set-group-ID bit if the group may execute, or if the
// caller is not in the file's group (without group execute the bit marks
// mandatory locking, which a member keeps); and security.capability.
// Regular files only. `fd` is an O_PATH descriptor of the file.
absl::Status LocalEndpoint::Impl::KillSetid(int fd, const Credentials& caller,
                                            std::string_view path) {
  struct stat st;
  if (::fstat(fd, &st) != 0) return Fail(errno, Op::kSetattr, path);
  if (!S_ISREG(st.st_mode)) return absl::OkStatus();
  mode_t kill = st.st_mode & S_ISUID;
  if (st.st_mode & S_ISGID) {
    const bool member =
        caller.set &&
        (caller.gid == st.st_gid ||
         (caller.groups != nullptr &&
          std::find(caller.groups->begin(), caller.groups->end(),
                    static_cast<uint32_t>(st.st_gid)) != caller.groups->end()));
    if ((st.st_mode & S_IXGRP) || !member) kill |= S_ISGID;
  }
  const std::string proc = ProcPath(fd);
  if (kill != 0 && ::chmod(proc.c_str(), st.st_mode & 07777 & ~kill) != 0) {
    return Fail(errno, Op::kSetattr, path);
  }
  if (::removexattr(proc.c_str(), "security.capability") != 0 &&
      errno != ENODATA && errno != ENOTSUP) {
    return Fail(errno, Op::kSetattr, path);
  }
  return absl::OkStatus();
}

// create: open(O_CREAT | flags) with O_ACCMODE, O_EXCL, O_TRUNC and
// O_NOFOLLOW of args.open_flags honoured (the rest only matter to a real open).
// The file is opened O_RDWR when possible so the fd can serve the data IO
// that usually follows. Fills attr.
absl::Status LocalEndpoint::Impl::Create(Io* io, std::string_view path) {
  const int accmode = io->args.open_flags & O_ACCMODE;
  const int extra = io->args.open_flags & (O_EXCL | O_TRUNC | O_NOFOLLOW);
  const mode_t mode = io->args.mode & 07777;
  const uint64_t gen = Generation();
  bool writable = true;
  int fd = OpenBeneath(root_fd, path, O_CREAT | O_RDWR | extra, mode);
  if (fd < 0 && accmode != O_RDWR && IsAccessError(errno)) {
    writable = false;
    fd = OpenBeneath(root_fd, path, O_CREAT | accmode | extra, mode);
  }
  if (fd < 0) return ResolveFail(errno, Op::kCreate, path);
  UniqueFd owned(fd);
  if (::fstat(fd, &io->attr) != 0) return Fail(errno, Op::kCreate, path);
  const InodeKey inode = KeyOf(io->attr);
  if (writable && max_open > 0) {
    Insert(path,
           std::make_shared<FdHandle>(owned.release(), true, inode, &live),
           gen);
  } else {
    InvalidateIfOther(path, inode);
  }
  return absl::OkStatus();
}

// mknod (args.mode with the file type, args.rdev), mkdir (args.mode),
// symlink (args.symlink_text, stored as is: it is only ever followed
// beneath the root). Fills attr (lstat of the new name).
absl::Status LocalEndpoint::Impl::MakeNode(Io* io, std::string_view path) {
  const Op op = io->header.op;
  Parent p;
  if (auto s = OpenParent(op, path, &p); !s.ok()) return s;
  const char* leaf = p.leaf.c_str();
  int r = 0;
  switch (op) {
    case Op::kMknod:
      r = ::mknodat(p.dirfd, leaf, io->args.mode,
                    static_cast<dev_t>(io->args.rdev));
      break;
    case Op::kMkdir:
      r = ::mkdirat(p.dirfd, leaf, io->args.mode & 07777);
      break;
    case Op::kSymlink:
      if (io->args.symlink_text.empty() ||
          io->args.symlink_text.find('\0') != std::string::npos) {
        return Fail(EINVAL, op, path);
      }
      r = ::symlinkat(io->args.symlink_text.c_str(), p.dirfd, leaf);
      break;
    default:
      return Fail(ENOSYS, op, path);
  }
  if (r != 0) return Fail(errno, op, path);
  Invalidation inv;
  inv.names = {path};
  Invalidate(inv);
  if (::fstatat(p.dirfd, leaf, &io->attr, AT_SYMLINK_NOFOLLOW) != 0) {
    return Fail(errno, op, path);
  }
  return absl::OkStatus();
}

// link: `path` is the new name, args.second_file the existing one (a symlink
// there is linked itself, not followed).
absl::Status LocalEndpoint::Impl::Link(Io* io, std::string_view path) {
  const std::string& existing = io->args.second_file;
  if (auto s = CheckPath(Op::kLink, existing); !s.ok()) return s;
  Parent from, to;
  if (auto s = OpenParent(Op::kLink, existing, &from); !s.ok()) return s;
  if (auto s = OpenParent(Op::kLink, path, &to); !s.ok()) return s;
  if (::linkat(from.dirfd, from.leaf.c_str(), to.dirfd, to.leaf.c_str(), 0) !=
      0) {
    return ErrnoStatus(errno,
                       StrCat("link ", Where(existing), " to ", Where(path)));
  }
  Invalidation inv;
  inv.names = {path};
  Invalidate(inv);
  if (::fstatat(to.dirfd, to.leaf.c_str(), &io->attr, AT_SYMLINK_NOFOLLOW) !=
      0) {
    return Fail(errno, Op::kLink, path);
  }
  return absl::OkStatus();
}

// unlink and rmdir. The endpoint root itself cannot be removed (EBUSY).
absl::Status LocalEndpoint::Impl::Remove(Io* io, std::string_view path) {
  const Op op = io->header.op;
  if (path.empty()) {
    return ErrnoStatus(EBUSY, StrCat(OpName(op), " ", root,
                                     ": the endpoint root cannot be removed"));
  }
  Parent p;
  if (auto s = OpenParent(op, path, &p); !s.ok()) return s;
  struct stat st;
  const bool have_st =
      ::fstatat(p.dirfd, p.leaf.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0;
  if (::unlinkat(p.dirfd, p.leaf.c_str(),
                 op == Op::kRmdir ? AT_REMOVEDIR : 0) != 0) {
    return Fail(errno, op, path);
  }
  Invalidation inv;
  inv.names = {path};
  if (op == Op::kRmdir) {
    inv.beneath = true;
  } else if (have_st && S_ISLNK(st.st_mode)) {
    inv.all = true;  // cached names may lead through this symlink
  } else if (have_st) {
    inv.inodes = {KeyOf(st)};
  }
  Invalidate(inv);
  return absl::OkStatus();
}

// rename_from: `from` is the header's path and args.second_file the new
// name; rename_to is the mirror (`to` is the header's path, args.second_file
// the old name). args.rename_flags are renameat2 flags (RENAME_NOREPLACE,
// RENAME_EXCHANGE).
absl::Status LocalEndpoint::Impl::Rename(Io* io, Op op, std::string_view from,
                                         std::string_view to) {
  if (from.empty() || to.empty()) {
    return ErrnoStatus(EBUSY,
                       StrCat(OpName(op), " ", Where(from), " to ", Where(to),
                              ": the endpoint root cannot be renamed"));
  }
  Parent pf, pt;
  if (auto s = OpenParent(op, from, &pf); !s.ok()) return s;
  if (auto s = OpenParent(op, to, &pt); !s.ok()) return s;
  struct stat sf, st;
  const bool have_from =
      ::fstatat(pf.dirfd, pf.leaf.c_str(), &sf, AT_SYMLINK_NOFOLLOW) == 0;
  const bool have_to =
      ::fstatat(pt.dirfd, pt.leaf.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0;
  if (::renameat2(pf.dirfd, pf.leaf.c_str(), pt.dirfd, pt.leaf.c_str(),
                  io->args.rename_flags) != 0) {
    return ErrnoStatus(errno,
                       StrCat(OpName(op), " ", Where(from), " to ", Where(to)));
  }
  auto moves_names = [](bool have, const struct stat& s) {
    return !have || S_ISDIR(s.st_mode) || S_ISLNK(s.st_mode);
  };
  Invalidation inv;
  inv.names = {from, to};
  if (moves_names(have_from, sf) ||
      (have_to && (S_ISDIR(st.st_mode) || S_ISLNK(st.st_mode)))) {
    inv.all = true;  // cached names may lead through what moved
  } else {
    inv.inodes.push_back(KeyOf(sf));
    if (have_to) inv.inodes.push_back(KeyOf(st));
  }
  Invalidate(inv);
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------

absl::Status LocalEndpoint::Impl::Dispatch(Io* io, std::string_view path) {
  const Op op = io->header.op;
  if (auto s = CheckPath(op, path); !s.ok()) return s;
  std::optional<ScopedCredentials> as_caller;
  if (io->args.caller.set && ActsAsCaller(op)) {
    as_caller.emplace(io->args.caller);
    if (!as_caller->ok()) return as_caller->status();
  }
  switch (op) {
    case Op::kRead:
      return Read(io, path);
    case Op::kWrite:
      return Write(io, path);
    case Op::kGetattr:
    case Op::kLookup:
      return Getattr(io, path);
    case Op::kOpen:
      return OpenCheck(io, path);
    case Op::kReaddir:
      return Readdir(io, path);
    case Op::kReadlink:
      return Readlink(io, path);
    case Op::kGetxattr:
    case Op::kListxattr:
    case Op::kSetxattr:
    case Op::kRemovexattr:
      return Xattr(io, path);
    case Op::kStatfs:
      return Statfs(io, path);
    case Op::kSetattr:
      return Setattr(io, path, as_caller);
    case Op::kTruncate:
      return Truncate(io, path);
    case Op::kFsync:
      return Fsync(io, path);
    case Op::kFlush:
      // Writes reach the file before they are acknowledged: a close has
      // nothing left to send.
      return absl::OkStatus();
    case Op::kLseek:
      return Lseek(io, path);
    case Op::kFallocate:
      return Fallocate(io, path);
    case Op::kCreate:
      return Create(io, path);
    case Op::kMknod:
    case Op::kMkdir:
    case Op::kSymlink:
      return MakeNode(io, path);
    case Op::kLink:
      return Link(io, path);
    case Op::kUnlink:
    case Op::kRmdir:
      return Remove(io, path);
    case Op::kRenameFrom:
    case Op::kRenameTo: {
      const std::string& other = io->args.second_file;
      if (auto s = CheckPath(op, other); !s.ok()) return s;
      return op == Op::kRenameFrom ? Rename(io, op, path, other)
                                   : Rename(io, op, other, path);
    }
  }
  return Fail(ENOSYS, op, path);
}

absl::StatusOr<std::shared_ptr<LocalEndpoint>> LocalEndpoint::Open(
    const std::string& root, Options options) {
  const int fd = ::open(root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    return ErrnoStatus(errno, StrCat("local endpoint root ", root));
  }
  UniqueFd owned(fd);
  // Also proves openat2 works (Linux >= 5.6) and the root can be searched.
  UniqueFd probe(OpenBeneath(fd, "", O_PATH | O_DIRECTORY));
  if (!probe.valid()) {
    const int err = errno;
    return ErrnoStatus(
        err,
        StrCat("local endpoint root ", root,
               err == ENOSYS ? ": openat2 unsupported (Linux >= 5.6)" : ""));
  }
  if (::faccessat(fd, ".", X_OK, 0) != 0) {
    return ErrnoStatus(errno, StrCat("local endpoint root ", root,
                                     ": directory not searchable"));
  }
  auto impl =
      std::make_unique<Impl>(root, owned.release(), options.max_open_files);
  return std::shared_ptr<LocalEndpoint>(new LocalEndpoint(std::move(impl)));
}

LocalEndpoint::LocalEndpoint(std::unique_ptr<Impl> impl)
    : impl_(std::move(impl)) {}

LocalEndpoint::~LocalEndpoint() = default;

void LocalEndpoint::Submit(Io* io, std::string_view path) {
  const BlockingCallTarget helpers = BlockingCallsGoTo();
  if (helpers.pool != nullptr) {
    if (io->header.op == Op::kRead && impl_->ReadCached(io, path)) {
      io->Complete(absl::OkStatus());
      return;
    }
    // The endpoint outlives its IOs (its owner completes or drains them
    // before it goes).
    helpers.pool->Post(helpers.lane,
                       [impl = impl_.get(), io, p = std::string(path)]() {
                         absl::Status s = impl->Dispatch(io, p);
                         io->Complete(std::move(s));
                       });
    return;
  }
  absl::Status s = impl_->Dispatch(io, path);
  io->Complete(std::move(s));
}

const std::string& LocalEndpoint::root() const { return impl_->root; }

int LocalEndpoint::OpenRegularForPassthrough(std::string_view path) const {
  const int fd = OpenBeneath(impl_->root_fd, path,
                             O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return -errno;
  struct stat st;
  int err = 0;
  if (fstat(fd, &st) != 0) {
    err = errno;
  } else if (!S_ISREG(st.st_mode)) {
    err = EINVAL;
  } else if ((st.st_mode & (S_ISUID | S_ISGID)) != 0) {
    err = EPERM;
  }
  if (err == 0) return fd;
  ::close(fd);
  return -err;
}

size_t LocalEndpoint::open_files() const {
  return impl_->live.load(std::memory_order_relaxed);
}

}  // namespace sroute
