// SPDX-License-Identifier: Apache-2.0
// statfs and extended attributes.
#include <sys/statvfs.h>

#include <cerrno>
#include <cstring>

#include "fuse/ops.h"
#include "fuse/request.h"
#include "util/clock.h"

namespace sroute::fuse_internal {

void Statfs(fuse_req_t req, fuse_ino_t ino) {
  std::string path;
  if (!PathOf(req, ino, &path)) return;
  Submit(NewRequest(req, Op::kStatfs, path), [](Request& r) {
    if (!r.io.status.ok()) return ReplyError(r);
    struct statvfs st {};
    if (r.io.data.size() != sizeof(st)) {
      fuse_reply_err(r.req, EIO);
      return;
    }
    std::memcpy(&st, r.io.data.data(), sizeof(st));
    fuse_reply_statfs(r.req, &st);
  });
}

void Setxattr(fuse_req_t req, fuse_ino_t ino, const char* name,
              const char* value, size_t size, int flags) {
  std::string path;
  if (!PathOf(req, ino, &path)) return;
  auto r = NewRequest(req, Op::kSetxattr, path);
  r->io.args.xattr_name = name;
  r->io.args.xattr_flags = flags;
  r->buffer.assign(value, value + size);
  r->io.write_data = std::span<const char>(r->buffer);
  const bool capability = std::strcmp(name, "security.capability") == 0;
  Submit(std::move(r), [capability](Request& rr) {
    rr.volume->XattrsChanged();
    if (capability) rr.volume->SetidMayHaveChanged();
    ReplyError(rr);
  });
}

namespace {
// getxattr/listxattr protocol: size 0 asks for the length.
void ReplyXattr(Request& r, size_t size) {
  if (!r.io.status.ok()) return ReplyError(r);
  if (size == 0) {
    fuse_reply_xattr(r.req, r.io.data.size());
  } else if (r.io.data.size() > size) {
    fuse_reply_err(r.req, ERANGE);
  } else {
    fuse_reply_buf(r.req, r.io.data.data(), r.io.data.size());
  }
}
}  // namespace

void Getxattr(fuse_req_t req, fuse_ino_t ino, const char* name, size_t size) {
  // The kernel asks for security.capability before every write through its
  // page cache (to drop capabilities on write). With attributes cached, a
  // file found without one is answered here for as long as its attributes
  // are, unless xattrs or rules change: the write then costs no trip to
  // the endpoint for it.
  Volume& v = VolumeOf(req);
  const bool capability = std::strcmp(name, "security.capability") == 0;
  const uint64_t tag = v.xattr_generation();
  if (capability && v.inodes().NoCapability(ino, tag, MonotonicNanos())) {
    fuse_reply_err(req, ENODATA);
    return;
  }
  std::string path;
  if (!PathOf(req, ino, &path)) return;
  auto r = NewRequest(req, Op::kGetxattr, path);
  r->io.args.xattr_name = name;
  Submit(std::move(r), [size, ino, capability, tag](Request& rr) {
    const double ttl = rr.volume->attr_timeout();
    // Not for files some rule may route: the answer may depend on who asks.
    if (capability && ttl > 0 && ErrnoOf(rr.io.status) == ENODATA &&
        !rr.volume->sswitch().MayRoute(rr.io.header.file)) {
      rr.volume->inodes().SetNoCapability(
          ino, tag, MonotonicNanos() + static_cast<uint64_t>(ttl * 1e9));
    }
    ReplyXattr(rr, size);
  });
}

void Listxattr(fuse_req_t req, fuse_ino_t ino, size_t size) {
  std::string path;
  if (!PathOf(req, ino, &path)) return;
  Submit(NewRequest(req, Op::kListxattr, path),
         [size](Request& rr) { ReplyXattr(rr, size); });
}

// The kernel removes security.capability itself, as the writer, when a
// caller without CAP_FSETID writes a file that has one through the page
// cache. A caller reaches here with that name only so: removexattr(2) of
// it needs CAP_SETFCAP, which the kernel checks before asking (the volume
// mounts with default_permissions). It is removed with the daemon's rights.
void Removexattr(fuse_req_t req, fuse_ino_t ino, const char* name) {
  std::string path;
  if (!PathOf(req, ino, &path)) return;
  auto r = NewRequest(req, Op::kRemovexattr, path);
  r->io.args.xattr_name = name;
  if (std::strcmp(name, "security.capability") == 0) {
    r->io.args.caller = Credentials();
  }
  Submit(std::move(r), [](Request& rr) {
    rr.volume->XattrsChanged();
    ReplyError(rr);
  });
}

}  // namespace sroute::fuse_internal
