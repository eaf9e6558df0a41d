#include "fuse/request.h"

#include <cerrno>
#include <cstring>

#include "util/strings.h"

namespace sroute::fuse_internal {

Volume& VolumeOf(fuse_req_t req) {
  return *static_cast<Volume*>(fuse_req_userdata(req));
}

std::unique_ptr<Request> NewRequest(fuse_req_t req, Op op,
                                    const std::string& path) {
  auto r = std::make_unique<Request>();
  r->volume = &VolumeOf(req);
  r->req = req;
  const fuse_ctx* ctx = fuse_req_ctx(req);
  r->io.header.source =
      r->volume->options().tenants.TenantOf(ctx->uid, ctx->gid);
  r->io.header.op = op;
  r->io.header.file = r->volume->FileName(path);
  r->io.args.uid = ctx->uid;
  r->io.args.gid = ctx->gid;
  return r;
}

void Submit(std::unique_ptr<Request> r, std::function<void(Request&)> reply) {
  Request* raw = r.release();
  raw->io.set_completion([raw, reply = std::move(reply)](Io&) {
    std::unique_ptr<Request> owned(raw);
    reply(*owned);
  });
  raw->volume->sswitch().Route(&raw->io);
}

void ReplyError(Request& r) {
  fuse_reply_err(r.req, r.io.status.ok() ? 0 : ErrnoOf(r.io.status));
}

fuse_entry_param MakeEntry(Request& r) {
  fuse_entry_param e{};
  e.attr = r.io.attr;
  e.ino = r.volume->inodes().Remember(r.parent, r.name, r.io.attr.st_dev,
                                      r.io.attr.st_ino);
  e.attr.st_ino = e.ino;
  e.attr_timeout = r.volume->attr_timeout();
  e.entry_timeout = r.volume->entry_timeout();
  return e;
}

void ReplyEntry(Request& r) {
  if (!r.io.status.ok()) {
    ReplyError(r);
    return;
  }
  fuse_entry_param e = MakeEntry(r);
  if (fuse_reply_entry(r.req, &e) != 0) {
    // The kernel did not take the reference (interrupted request).
    r.volume->inodes().Forget(e.ino, 1);
  }
}

bool PathOf(fuse_req_t req, uint64_t ino, std::string* path) {
  auto p = VolumeOf(req).inodes().Path(ino);
  if (!p) {
    fuse_reply_err(req, ESTALE);
    return false;
  }
  *path = std::move(*p);
  return true;
}

bool ChildPathOf(fuse_req_t req, uint64_t parent, const char* name,
                 std::string* path) {
  if (parent == InodeTable::kRootIno && std::strcmp(name, kReservedDir) == 0) {
    fuse_reply_err(req, EACCES);  // .sroute/ is closed to tenants
    return false;
  }
  auto p = VolumeOf(req).inodes().ChildPath(parent, name);
  if (!p) {
    fuse_reply_err(req, ESTALE);
    return false;
  }
  *path = std::move(*p);
  return true;
}

}  // namespace sroute::fuse_internal
