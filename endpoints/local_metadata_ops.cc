// SPDX-License-Identifier: Apache-2.0
// LocalEndpoint: metadata ops (endpoints/local_endpoint_impl.h).
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>  // renameat2
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "endpoints/local_endpoint_impl.h"

namespace sroute {

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

}  // namespace sroute
