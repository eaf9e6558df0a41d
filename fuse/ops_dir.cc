// Directory ops: opendir, readdir, releasedir, fsyncdir.
#include <dirent.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "fuse/ops.h"
#include "fuse/request.h"

namespace sroute::fuse_internal {

namespace {
// The listing of one open directory, read whole at the first readdir and
// served by offset (entry index + 1) afterwards.
struct DirHandle {
  std::mutex mu;
  bool loaded = false;            // guarded by mu
  std::vector<DirEntry> entries;  // guarded by mu
};
DirHandle* HandleOf(fuse_file_info* fi) {
  return reinterpret_cast<DirHandle*>(fi->fh);
}

void ReplyEntries(fuse_req_t req, DirHandle* h, size_t size, off_t off) {
  std::vector<char> buf(size);
  size_t used = 0;
  {
    std::lock_guard<std::mutex> l(h->mu);
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

namespace {
// Listing a directory whose children rules may send to other endpoints: the
// directory's own listing plus each place ChildPlaces() names, keeping a
// name only where its own route points (so it shows up exactly once).
struct Listing {
  fuse_req_t req;
  DirHandle* handle;
  size_t size;
  off_t off;
  bool is_root;
  uint64_t ino;
  IoHeader dir;
  std::vector<std::string> places;  // [0] is where the directory went
  std::vector<std::vector<DirEntry>> found;
};

void FinishListing(Volume& v, const std::shared_ptr<Listing>& l) {
  std::vector<DirEntry> merged;
  merged.push_back({".", DT_DIR, l->ino});
  merged.push_back({"..", DT_DIR, InodeTable::kRootIno});
  const bool filter = l->places.size() > 1;
  absl::flat_hash_set<std::string> seen;
  IoHeader child = l->dir;
  child.op = Op::kLookup;
  for (size_t i = 0; i < l->found.size(); ++i) {
    for (DirEntry& e : l->found[i]) {
      if (l->is_root && e.name == kReservedDir) continue;
      if (filter) {
        child.file = l->dir.file + "/" + e.name;
        if (v.sswitch().RouteOf(child) != l->places[i] + "/" + e.name) {
          continue;  // it lives where its route points, not here
        }
      }
      if (seen.insert(e.name).second) merged.push_back(std::move(e));
    }
  }
  {
    std::lock_guard<std::mutex> lock(l->handle->mu);
    l->handle->entries = std::move(merged);
    l->handle->loaded = true;
  }
  ReplyEntries(l->req, l->handle, l->size, l->off);
}

void ListNextPlace(Volume& v, const std::shared_ptr<Listing>& l) {
  const size_t i = l->found.size();
  if (i == l->places.size()) return FinishListing(v, l);
  auto r = std::make_unique<Request>();
  r->volume = &v;
  r->req = l->req;
  r->io.header = l->dir;
  r->io.header.file = l->places[i];
  Submit(std::move(r), [l](Request& rr) {
    // A place that does not exist yet holds no children.
    if (!rr.io.status.ok() && ErrnoOf(rr.io.status) != ENOENT) {
      return ReplyError(rr);
    }
    l->found.push_back(std::move(rr.io.entries));
    ListNextPlace(*rr.volume, l);
  });
}
}  // namespace

void Readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
             fuse_file_info* fi) {
  DirHandle* h = HandleOf(fi);
  bool need_load;
  {
    std::lock_guard<std::mutex> l(h->mu);
    need_load = !h->loaded || off == 0;  // offset 0: rewinddir re-reads
  }
  if (!need_load) return ReplyEntries(req, h, size, off);
  std::string path;
  if (!PathOf(req, ino, &path)) return;
  auto r = NewRequest(req, Op::kReaddir, path);
  auto listing = std::make_shared<Listing>();
  listing->req = req;
  listing->handle = h;
  listing->size = size;
  listing->off = off;
  listing->is_root = ino == InodeTable::kRootIno;
  listing->ino = ino;
  listing->dir = r->io.header;
  Submit(std::move(r), [listing](Request& rr) {
    if (!rr.io.status.ok()) return ReplyError(rr);
    listing->places.push_back(rr.io.target);
    for (std::string& p : rr.volume->sswitch().ChildPlaces(listing->dir)) {
      listing->places.push_back(std::move(p));
    }
    listing->found.push_back(std::move(rr.io.entries));
    ListNextPlace(*rr.volume, listing);
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
  r->io.args.flags = datasync;
  Submit(std::move(r), ReplyError);
}

}  // namespace sroute::fuse_internal
