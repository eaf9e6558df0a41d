// statfs and extended attributes.
#include <sys/statvfs.h>

#include <cerrno>
#include <cstring>

#include "fuse/ops.h"
#include "fuse/request.h"

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
  r->io.args.other = name;
  r->io.args.flags = flags;
  r->buffer.assign(value, value + size);
  r->io.write_data = std::span<const char>(r->buffer);
  Submit(std::move(r), ReplyError);
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
  std::string path;
  if (!PathOf(req, ino, &path)) return;
  auto r = NewRequest(req, Op::kGetxattr, path);
  r->io.args.other = name;
  Submit(std::move(r), [size](Request& rr) { ReplyXattr(rr, size); });
}

void Listxattr(fuse_req_t req, fuse_ino_t ino, size_t size) {
  std::string path;
  if (!PathOf(req, ino, &path)) return;
  Submit(NewRequest(req, Op::kListxattr, path),
         [size](Request& rr) { ReplyXattr(rr, size); });
}

void Removexattr(fuse_req_t req, fuse_ino_t ino, const char* name) {
  std::string path;
  if (!PathOf(req, ino, &path)) return;
  auto r = NewRequest(req, Op::kRemovexattr, path);
  r->io.args.other = name;
  Submit(std::move(r), ReplyError);
}

}  // namespace sroute::fuse_internal
