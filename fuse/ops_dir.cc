// SPDX-License-Identifier: Apache-2.0
// Directory ops: opendir, readdir, releasedir, fsyncdir.
#include <dirent.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <vector>

#include "fuse/ops.h"
#include "fuse/request.h"
#include "sswitch/namespace.h"
#include "util/mutex.h"

namespace sroute::fuse_internal {

namespace {
// The listing of one open directory, read whole at the first readdir and
// served by offset (entry index + 1) afterwards.
struct DirHandle {
  // Guards the listing. A leaf: no reply is sent under it.
  Mutex mu;
  bool loaded ABSL_GUARDED_BY(mu) = false;
  std::vector<DirEntry> entries ABSL_GUARDED_BY(mu);
};
DirHandle* HandleOf(fuse_file_info* fi) {
  return reinterpret_cast<DirHandle*>(fi->fh);
}

void ReplyEntries(fuse_req_t req, DirHandle* h, size_t size, off_t off) {
  std::vector<char> buf(size);
  size_t used = 0;
  {
    MutexLock l(&h->mu);
    for (size_t i = static_cast<size_t>(off); i < h->entries.size(); ++i) {
      const DirEntry& e = h->entries[i];
      struct stat st {};
      st.st_ino = e.ino;
      st.st_mode = static_cast<mode_t>(e.type) << 12;
      const size_t n =
          fuse_add_direntry(req, buf.data() + used, size - used, e.name.c_str(),
                            &st, static_cast<off_t>(i + 1));
      if (n > size - used) break;
      used += n;
    }
  }
  // No lock across the reply: once the kernel has it, releasedir may free
  // the handle on another thread.
  fuse_reply_buf(req, buf.data(), used);
}
}  // namespace

void Opendir(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  std::string path;
  if (!PathOf(req, ino, &path)) return;
  fi->fh = reinterpret_cast<uint64_t>(new DirHandle());
  fuse_reply_open(req, fi);
}

void Readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
             fuse_file_info* fi) {
  DirHandle* h = HandleOf(fi);
  bool need_load;
  {
    MutexLock l(&h->mu);
    need_load = !h->loaded || off == 0;  // offset 0: rewinddir re-reads
  }
  if (!need_load) return ReplyEntries(req, h, size, off);
  std::string path;
  if (!PathOf(req, ino, &path)) return;
  auto r = NewRequest(req, Op::kReaddir, path);
  const bool is_root = ino == InodeTable::kRootIno;
  // The merged listing of every place the directory's children may live
  // (sswitch/namespace.h).
  ListDirectory(r->volume->sswitch(), r->io.header, r->io.args,
                [req, h, size, off, is_root, ino](
                    absl::Status s, std::vector<DirEntry> entries) {
                  if (!s.ok()) {
                    fuse_reply_err(req, ErrnoOf(s));
                    return;
                  }
                  std::vector<DirEntry> merged;
                  merged.reserve(entries.size() + 2);
                  merged.push_back({".", DT_DIR, ino});
                  merged.push_back({"..", DT_DIR, InodeTable::kRootIno});
                  for (DirEntry& e : entries) {
                    if (is_root && e.name == kReservedDir) continue;
                    if (e.name.starts_with(kHiddenPrefix)) continue;
                    merged.push_back(std::move(e));
                  }
                  {
                    MutexLock l(&h->mu);
                    h->entries = std::move(merged);
                    h->loaded = true;
                  }
                  ReplyEntries(req, h, size, off);
                });
}

void Releasedir(fuse_req_t req, fuse_ino_t, fuse_file_info* fi) {
  delete HandleOf(fi);
  fuse_reply_err(req, 0);
}

void Fsyncdir(fuse_req_t req, fuse_ino_t ino, int datasync, fuse_file_info*) {
  std::string path;
  if (!PathOf(req, ino, &path)) return;
  auto r = NewRequest(req, Op::kFsync, path);
  r->io.args.datasync = datasync != 0;
  Submit(std::move(r), ReplyError);
}

}  // namespace sroute::fuse_internal
