// SPDX-License-Identifier: Apache-2.0
// LocalEndpoint: syscalls confined beneath a root directory (how, and
// where each part lives: local_endpoint_impl.h). Here: the helpers every
// part uses, paths, Dispatch and the public class.
#include "endpoints/local_endpoint.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "endpoints/local_endpoint_impl.h"
#include "util/errno_status.h"
#include "util/helper_pool.h"
#include "util/strings.h"

namespace sroute {

// ---------------------------------------------------------------------------
// Helpers

int LocalEndpoint::Impl::OpenBeneathOnce(int dirfd, const char* path, int flags,
                                         mode_t mode) {
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

int LocalEndpoint::Impl::OpenBeneath(int dirfd, std::string_view path,
                                     int flags, mode_t mode) {
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

std::string LocalEndpoint::Impl::ProcPath(int fd, std::string_view leaf) {
  if (leaf.empty()) return StrCat("/proc/self/fd/", fd);
  return StrCat("/proc/self/fd/", fd, "/", leaf);
}

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
  Impl::UniqueFd owned(fd);
  // Also proves openat2 works (Linux >= 5.6) and the root can be searched.
  Impl::UniqueFd probe(Impl::OpenBeneath(fd, "", O_PATH | O_DIRECTORY));
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
  const int fd = Impl::OpenBeneath(
      impl_->root_fd, path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
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
