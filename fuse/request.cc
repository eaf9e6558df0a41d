// SPDX-License-Identifier: Apache-2.0
#include "fuse/request.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <new>
#include <optional>
#include <utility>
#include <vector>

#include "fuse/caller_groups.h"
#include "util/strings.h"

namespace sroute::fuse_internal {

namespace {
// Size classes 4 KiB << c, c < kClasses: up to 1 MiB, the largest read the
// kernel sends (libfuse's 256-page limit). Readahead for a reader that said
// it reads sequentially (cat, fio) comes in 256 KiB requests; a buffer that
// size freed to malloc went back to the kernel, so every such read faulted
// in 64 fresh pages, and those allocations interleaved with the page
// cache's own and scattered it in physical memory (slower cached reads
// later). Each thread keeps up to 512 KiB per class, at least one buffer.
constexpr int kClasses = 9;

constexpr size_t ClassSize(int c) { return size_t{4096} << c; }

// Buffers a thread keeps per class (at most 4), computed once rather than
// divided out on every read.
constexpr auto kKeepPerClass = [] {
  std::array<size_t, kClasses> keep{};
  for (int c = 0; c < kClasses; ++c) {
    keep[c] = std::clamp<size_t>((size_t{512} << 10) / ClassSize(c), 1, 4);
  }
  return keep;
}();

// Page-aligned: a 4 KiB read into a buffer that straddles two pages makes
// the kernel pin and copy two pages, for the backing file's read and again
// for the reply.
constexpr std::align_val_t kPage{4096};
char* NewPages(size_t size) {
  return static_cast<char*>(::operator new[](size, kPage));
}
void DeletePages(char* p) { ::operator delete[](p, kPage); }

struct ThreadReadBuffers {
  ~ThreadReadBuffers() {
    for (auto& list : free)
      for (char* b : list) DeletePages(b);
    gone = true;
  }
  std::vector<char*> free[kClasses];
  // Set once the thread's buffers are freed (at its exit): a buffer freed
  // later by another thread-local's destructor is not kept.
  static thread_local bool gone;
};
thread_local ThreadReadBuffers thread_read_buffers;
thread_local bool ThreadReadBuffers::gone = false;

}  // namespace

void ReadBuffer::Allocate(size_t size) {
  Release();
  int c = 0;
  while (c < kClasses && ClassSize(c) < size) ++c;
  if (c == kClasses) {
    data_ = NewPages(size);
    size_class_ = -1;
    return;
  }
  size_class_ = c;
  std::vector<char*>& list = thread_read_buffers.free[c];
  if (ThreadReadBuffers::gone || list.empty()) {
    data_ = NewPages(ClassSize(c));
  } else {
    data_ = list.back();
    list.pop_back();
  }
}

void ReadBuffer::Release() {
  char* data = std::exchange(data_, nullptr);
  if (data == nullptr) return;
  if (size_class_ >= 0 && !ThreadReadBuffers::gone) {
    std::vector<char*>& list = thread_read_buffers.free[size_class_];
    if (list.size() < kKeepPerClass[size_class_]) {
      list.push_back(data);
      return;
    }
  }
  DeletePages(data);
}

Request::~Request() { ReturnRequestBuffer(request_buffer); }

Volume& VolumeOf(fuse_req_t req) {
  return *static_cast<Volume*>(fuse_req_userdata(req));
}

std::unique_ptr<Request> NewFileRequest(Volume& volume, const Caller& caller,
                                        Op op, std::string file) {
  auto r = std::make_unique<Request>();
  r->volume = &volume;
  r->io.header.source =
      volume.options().tenants.TenantOf(caller.uid, caller.gid, caller.pid);
  r->io.header.op = op;
  r->io.header.file = std::move(file);
  Credentials& who = r->io.args.caller;
  who.uid = caller.uid;
  who.gid = caller.gid;
  who.set = true;
  // Groups only where the endpoint acts as the caller (reading them costs
  // a /proc read, cached), and not for root, whose rights do not depend on
  // them.
  if (ActsAsCaller(op) && (caller.uid != 0 || caller.gid != 0)) {
    who.groups = CallerGroups(caller.pid, caller.uid, caller.gid);
  }
  return r;
}

std::unique_ptr<Request> NewFileRequest(fuse_req_t req, Op op,
                                        std::string file) {
  const fuse_ctx* ctx = fuse_req_ctx(req);
  auto r = NewFileRequest(VolumeOf(req), Caller{ctx->uid, ctx->gid, ctx->pid},
                          op, std::move(file));
  r->req = req;
  return r;
}

std::unique_ptr<Request> NewRequest(fuse_req_t req, Op op,
                                    const std::string& path) {
  return NewFileRequest(req, op, VolumeOf(req).FileName(path));
}

bool OpenFile::FileName(fuse_req_t req, uint64_t ino, std::string* file) {
  if (FileName(VolumeOf(req), ino, file)) return true;
  fuse_reply_err(req, ESTALE);
  return false;
}

bool OpenFile::FileName(Volume& volume, uint64_t ino, std::string* file) {
  InodeTable& inodes = volume.inodes();
  if (valid_generation_.load(std::memory_order_acquire) ==
      inodes.generation()) {
    *file = *file_.load(std::memory_order_acquire);
    return true;
  }
  uint64_t generation = 0;
  std::optional<std::string> path = inodes.Path(ino, &generation);
  if (!path) return false;
  *file = volume.FileName(*path);
  MutexLock l(&mu_);
  // Refreshes may finish out of order: never go back to an older name.
  if (generation <= valid_generation_.load(std::memory_order_relaxed)) {
    return true;
  }
  const std::string* current = file_.load(std::memory_order_relaxed);
  if (current == nullptr || *current != *file) {
    names_.push_back(std::make_unique<const std::string>(*file));
    // The name first: a reader that sees the new generation sees it too.
    file_.store(names_.back().get(), std::memory_order_release);
  }
  valid_generation_.store(generation, std::memory_order_release);
  return true;
}

void ReplyError(Request& r) {
  const int error = r.io.status.ok() ? 0 : ErrnoOf(r.io.status);
  if (r.req != nullptr) {
    fuse_reply_err(r.req, error);
  } else {
    SendRawReply(r.session, r.unique, error);
  }
}

void ReplyData(Request& r, const char* data, size_t size) {
  if (r.req != nullptr) {
    fuse_reply_buf(r.req, data, size);
  } else {
    SendRawReply(r.session, r.unique, 0, data, size);
  }
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
