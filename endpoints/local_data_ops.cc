// SPDX-License-Identifier: Apache-2.0
// LocalEndpoint: data ops (endpoints/local_endpoint_impl.h).
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "endpoints/local_endpoint_impl.h"

namespace sroute {

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

}  // namespace sroute
