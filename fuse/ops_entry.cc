// SPDX-License-Identifier: Apache-2.0
// Namespace ops: lookup, forget, getattr, setattr, readlink, mknod, mkdir,
// symlink, link, unlink, rmdir, rename.
#include <cerrno>
#include <cstring>

#include "fuse/ops.h"
#include "fuse/request.h"

namespace sroute::fuse_internal {

void Lookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
  if (parent == InodeTable::kRootIno && std::strcmp(name, kReservedDir) == 0) {
    fuse_reply_err(req, ENOENT);  // invisible through the mount
    return;
  }
  std::string path;
  if (!ChildPathOf(req, parent, name, &path)) return;
  auto r = NewRequest(req, Op::kLookup, path);
  r->parent = parent;
  r->name = name;
  Submit(std::move(r), ReplyEntry);
}

void Forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup) {
  VolumeOf(req).inodes().Forget(ino, nlookup);
  fuse_reply_none(req);
}

void ForgetMulti(fuse_req_t req, size_t count, fuse_forget_data* forgets) {
  for (size_t i = 0; i < count; ++i) {
    VolumeOf(req).inodes().Forget(forgets[i].ino, forgets[i].nlookup);
  }
  fuse_reply_none(req);
}

void ReplyAttr(Request& r, uint64_t ino) {
  if (!r.io.status.ok()) {
    ReplyError(r);
    return;
  }
  // An unlinked open file: its hidden name is not a link to report.
  if (r.volume->inodes().hidden(ino) && r.io.attr.st_nlink > 0) {
    --r.io.attr.st_nlink;
  }
  r.io.attr.st_ino = ino;
  fuse_reply_attr(r.req, &r.io.attr, r.volume->attr_timeout());
}

void Getattr(fuse_req_t req, fuse_ino_t ino, fuse_file_info*) {
  std::string path;
  if (!PathOf(req, ino, &path)) return;
  Submit(NewRequest(req, Op::kGetattr, path),
         [ino](Request& r) { ReplyAttr(r, ino); });
}

// FATTR_KILL_SUIDGID (libfuse passes it on as FUSE_SET_ATTR_KILL_SUID): a
// truncate by a caller without CAP_FSETID or a chown of a non-directory,
// which clear set-ID bits and capabilities (kill_setid.h). A truncate
// through a descriptor (ftruncate: `fi`) was allowed when the descriptor
// was opened for writing, whatever the mode says now.
void Setattr(fuse_req_t req, fuse_ino_t ino, struct stat* attr, int to_set,
             fuse_file_info* fi) {
  std::string path;
  if (!PathOf(req, ino, &path)) return;
  auto r = NewRequest(req, Op::kSetattr, path);
  IoArgs& a = r->io.args;
  if (to_set & FUSE_SET_ATTR_KILL_SUID) a.to_set |= kKillSetid;
  if (fi != nullptr && (to_set & FUSE_SET_ATTR_SIZE)) {
    a.to_set |= kSizeByDescriptor;
  }
  if (to_set & FUSE_SET_ATTR_MODE) a.to_set |= kSetMode, a.mode = attr->st_mode;
  if (to_set & FUSE_SET_ATTR_UID) a.to_set |= kSetUid, a.uid = attr->st_uid;
  if (to_set & FUSE_SET_ATTR_GID) a.to_set |= kSetGid, a.gid = attr->st_gid;
  if (to_set & FUSE_SET_ATTR_SIZE) a.to_set |= kSetSize, a.size = attr->st_size;
  if (to_set & FUSE_SET_ATTR_ATIME)
    a.to_set |= kSetAtime, a.atime = attr->st_atim;
  if (to_set & FUSE_SET_ATTR_MTIME)
    a.to_set |= kSetMtime, a.mtime = attr->st_mtim;
  if (to_set & FUSE_SET_ATTR_ATIME_NOW) {
    a.to_set |= kSetAtime;
    a.atime = {0, UTIME_NOW};
  }
  if (to_set & FUSE_SET_ATTR_MTIME_NOW) {
    a.to_set |= kSetMtime;
    a.mtime = {0, UTIME_NOW};
  }
  // A chmod that sets a set-ID bit: open files no longer know they have
  // none.
  const bool setid = (a.to_set & kSetMode) && (a.mode & (S_ISUID | S_ISGID));
  // Writes past the daemon (kernel passthrough) run as the daemon, and the
  // kernel would not clear the bits on a user's write as a local file
  // system does: refused while a user but root writes the file so.
  if (PassthroughFiles* pt = r->volume->passthrough();
      setid && pt != nullptr && pt->WrittenPastByUser(ino)) {
    fuse_reply_err(req, ETXTBSY);
    return;
  }
  Submit(std::move(r), [ino, setid](Request& rr) {
    if (setid) rr.volume->SetidMayHaveChanged();
    ReplyAttr(rr, ino);
  });
}

void Readlink(fuse_req_t req, fuse_ino_t ino) {
  std::string path;
  if (!PathOf(req, ino, &path)) return;
  Submit(NewRequest(req, Op::kReadlink, path), [](Request& r) {
    if (!r.io.status.ok()) return ReplyError(r);
    fuse_reply_readlink(r.req, r.io.data.c_str());
  });
}

namespace {
void MakeNode(fuse_req_t req, fuse_ino_t parent, const char* name, Op op,
              IoArgs args) {
  std::string path;
  if (!ChildPathOf(req, parent, name, &path)) return;
  auto r = NewRequest(req, op, path);
  args.caller = std::move(r->io.args.caller);
  r->io.args = std::move(args);
  r->parent = parent;
  r->name = name;
  Submit(std::move(r), ReplyEntry);
}
}  // namespace

void Mknod(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode,
           dev_t rdev) {
  IoArgs a;
  a.mode = mode;
  a.rdev = rdev;
  MakeNode(req, parent, name, Op::kMknod, std::move(a));
}

void Mkdir(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode) {
  IoArgs a;
  a.mode = mode;
  MakeNode(req, parent, name, Op::kMkdir, std::move(a));
}

void Symlink(fuse_req_t req, const char* link, fuse_ino_t parent,
             const char* name) {
  IoArgs a;
  a.symlink_text = link;
  MakeNode(req, parent, name, Op::kSymlink, std::move(a));
}

void Link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent,
          const char* newname) {
  std::string old_path;
  if (!PathOf(req, ino, &old_path)) return;
  IoArgs a;
  a.second_file = VolumeOf(req).FileName(old_path);
  MakeNode(req, newparent, newname, Op::kLink, std::move(a));
}

namespace {
std::string HiddenPath(uint64_t ino) {
  return std::string(kReservedDir) + "/unlinked/" + std::to_string(ino);
}

void Remove(fuse_req_t req, fuse_ino_t parent, const char* name, Op op) {
  std::string path;
  if (!ChildPathOf(req, parent, name, &path)) return;
  auto r = NewRequest(req, op, path);
  r->parent = parent;
  r->name = name;
  Submit(std::move(r), [](Request& rr) {
    if (rr.io.status.ok()) rr.volume->inodes().Unlinked(rr.parent, rr.name);
    ReplyError(rr);
  });
}

// After the rename that hid an unlinked open file: records the hidden
// name, or, if its last handle closed meanwhile (its release found nothing
// hidden yet), removes that name now; then answers the unlink.
void HiddenOrGone(Request& m, uint64_t node, uint64_t hidden_parent,
                  const std::string& hidden_name) {
  std::optional<std::string> gone = m.volume->inodes().Hide(
      node, m.parent, m.name, hidden_parent, hidden_name);
  if (!gone) return ReplyError(m);
  RemoveHiddenName(*m.volume, *gone, m.req);
}

// An open file routed away from the home's reserved folder (to a server,
// a stage, another endpoint) hides in its own folder instead, where its
// route takes the rename too, as NFS clients hide theirs (that folder
// cannot be removed meanwhile: ENOTEMPTY); if even that cannot be, it is
// unlinked for real and its open handles see ENOENT.
void HideInItsFolder(fuse_req_t req, uint64_t node, uint64_t parent,
                     const std::string& name, const std::string& path) {
  const std::string hidden_name =
      std::string(kHiddenPrefix) + std::to_string(node);
  const size_t slash = path.rfind('/');
  const std::string hidden =
      (slash == std::string::npos ? "" : path.substr(0, slash + 1)) +
      hidden_name;
  auto mv = NewRequest(req, Op::kRenameFrom, path);
  mv->io.args.second_file = mv->volume->FileName(hidden);
  mv->parent = parent;
  mv->name = name;
  Submit(std::move(mv), [node, hidden_name, path](Request& m) {
    if (m.io.status.ok()) {
      return HiddenOrGone(m, node, m.parent, hidden_name);
    }
    auto del = NewRequest(m.req, Op::kUnlink, path);
    del->parent = m.parent;
    del->name = m.name;
    Submit(std::move(del), [](Request& d) {
      if (d.io.status.ok()) d.volume->inodes().Unlinked(d.parent, d.name);
      ReplyError(d);
    });
  });
}
}  // namespace

void Unlink(fuse_req_t req, fuse_ino_t parent, const char* name) {
  std::string path;
  if (!ChildPathOf(req, parent, name, &path)) return;
  Volume& v = VolumeOf(req);
  auto ino = v.inodes().Find(parent, name);
  if (!ino || v.inodes().open_count(*ino) == 0) {
    return Remove(req, parent, name, Op::kUnlink);
  }
  // Still open: POSIX lets the holders go on reading and writing. If this
  // is the last link, keep the data under a hidden name until the last
  // release (as NFS clients do).
  auto r = NewRequest(req, Op::kGetattr, path);
  r->parent = parent;
  r->name = name;
  const uint64_t node = *ino;
  Submit(std::move(r), [node, path](Request& rr) {
    if (!rr.io.status.ok()) return ReplyError(rr);
    if (rr.io.attr.st_nlink > 1) {
      auto del = NewRequest(rr.req, Op::kUnlink, path);
      del->parent = rr.parent;
      del->name = rr.name;
      return Submit(std::move(del), [](Request& d) {
        if (d.io.status.ok()) d.volume->inodes().Unlinked(d.parent, d.name);
        ReplyError(d);
      });
    }
    const std::string hidden = HiddenPath(node);
    auto mv = NewRequest(rr.req, Op::kRenameFrom, path);
    mv->io.args.second_file = mv->volume->FileName(hidden);
    // The daemon's own move into its reserved folder, which the caller may
    // not write to (the kernel checked the caller may unlink the name).
    mv->io.args.caller = Credentials();
    mv->parent = rr.parent;
    mv->name = rr.name;
    Submit(std::move(mv), [node, hidden, path](Request& m) {
      if (m.io.status.ok()) {
        return HiddenOrGone(m, node, InodeTable::kRootIno, hidden);
      }
      if (ErrnoOf(m.io.status) != EXDEV) return ReplyError(m);
      HideInItsFolder(m.req, node, m.parent, m.name, path);
    });
  });
}

namespace {
// The folder's own rmdir, answered as it comes.
void RmdirOnce(fuse_req_t req, uint64_t parent, const std::string& name,
               const std::string& path) {
  auto r = NewRequest(req, Op::kRmdir, path);
  r->parent = parent;
  r->name = name;
  Submit(std::move(r), [](Request& rr) {
    if (rr.io.status.ok()) rr.volume->inodes().Unlinked(rr.parent, rr.name);
    ReplyError(rr);
  });
}

// Moves the hidden names of `hidden` from `from` (folder `dir`) up to its
// parent's folder `to` (node `up`), one after another, then removes the
// folder. A file hidden in its folder (HideInItsFolder) holds it only
// because the release of its last handle has not come yet, or because it
// is open still: on a local file system neither keeps the folder from
// going. A name that cannot move (another route there) stays, and the
// folder's rmdir says ENOTEMPTY, as before.
void MoveHiddenUpThenRmdir(
    fuse_req_t req, uint64_t parent, std::string name, std::string path,
    uint64_t dir, std::string to_dir,
    std::vector<std::pair<uint64_t, std::string>> hidden) {
  if (hidden.empty()) {
    // A release that came meanwhile may be removing one still.
    Volume& v = VolumeOf(req);
    return v.inodes().AfterHiddenRemovals(
        path, [req, parent, name = std::move(name), path]() {
          RmdirOnce(req, parent, name, path);
        });
  }
  const uint64_t node = hidden.back().first;
  const std::string hidden_name = std::move(hidden.back().second);
  hidden.pop_back();
  const std::string from = path + "/" + hidden_name;
  const std::string to =
      to_dir.empty() ? hidden_name : to_dir + "/" + hidden_name;
  auto mv = NewRequest(req, Op::kRenameFrom, from);
  mv->io.args.second_file = mv->volume->FileName(to);
  mv->io.args.caller = Credentials();  // the daemon's own name
  Submit(std::move(mv), [parent, name = std::move(name), path = std::move(path),
                         dir, to_dir = std::move(to_dir),
                         hidden = std::move(hidden), node, hidden_name,
                         to](Request& m) mutable {
    if (m.io.status.ok() &&
        !m.volume->inodes().MovedHidden(node, dir, parent, hidden_name, to)) {
      // Its last handle closed meanwhile, removing the old name.
      RemoveHiddenName(*m.volume, to, nullptr);
    }
    MoveHiddenUpThenRmdir(m.req, parent, std::move(name), std::move(path), dir,
                          std::move(to_dir), std::move(hidden));
  });
}
}  // namespace

// A folder whose only entries are files unlinked while open (hidden in it,
// as HideInItsFolder does for files routed away) is removed as on a local
// file system: the hidden names move up to the parent folder first.
// Hidden names whose removal is under way (their last handle closed, as
// the kernel's asynchronous release of a file closed just before the
// unlink says) are waited for.
void Rmdir(fuse_req_t req, fuse_ino_t parent, const char* name) {
  std::string path;
  if (!ChildPathOf(req, parent, name, &path)) return;
  Volume& v = VolumeOf(req);
  v.inodes().AfterHiddenRemovals(path, [req, parent, name = std::string(name),
                                        path]() mutable {
    Volume& v = VolumeOf(req);
    auto dir = v.inodes().Find(parent, name);
    auto hidden = dir ? v.inodes().HiddenIn(*dir)
                      : std::vector<std::pair<uint64_t, std::string>>();
    if (hidden.empty()) return RmdirOnce(req, parent, name, path);
    const size_t slash = path.rfind('/');
    std::string up = slash == std::string::npos ? "" : path.substr(0, slash);
    MoveHiddenUpThenRmdir(req, parent, std::move(name), std::move(path), *dir,
                          std::move(up), std::move(hidden));
  });
}

void Rename(fuse_req_t req, fuse_ino_t parent, const char* name,
            fuse_ino_t newparent, const char* newname, unsigned int flags) {
  std::string from, to;
  if (!ChildPathOf(req, parent, name, &from)) return;
  if (!ChildPathOf(req, newparent, newname, &to)) return;
  Volume& v = VolumeOf(req);
  // A file open past the daemon (kernel passthrough) keeps that open under
  // its new name: only where nothing would see its IO either.
  PassthroughFiles* pt = v.passthrough();
  const std::string from_file = v.FileName(from), to_file = v.FileName(to);
  std::vector<std::pair<uint64_t, std::string>> named;  // (ino, new name)
  if (pt != nullptr) {
    auto a = v.inodes().Find(parent, name);
    if (a) named.emplace_back(*a, to_file);
    if (flags & RENAME_EXCHANGE) {
      if (auto b = v.inodes().Find(newparent, newname)) {
        named.emplace_back(*b, from_file);
      }
    }
    for (size_t i = 0; i < named.size(); ++i) {
      const std::string& file = named[i].second;
      if (!pt->AddName(named[i].first, file,
                       [&] { return v.sswitch().LeavesAlone(file); })) {
        for (size_t j = 0; j < i; ++j) {
          pt->DropName(named[j].first, named[j].second);
        }
        fuse_reply_err(req, EXDEV);
        return;
      }
    }
  }
  auto r = NewRequest(req, Op::kRenameFrom, from);
  r->io.args.second_file = to_file;
  r->io.args.rename_flags = flags;
  Submit(std::move(r), [parent, newparent, name = std::string(name),
                        newname = std::string(newname), flags, named, from_file,
                        to_file](Request& rr) {
    if (rr.io.status.ok()) {
      if (flags & RENAME_EXCHANGE) {
        rr.volume->inodes().Exchanged(parent, name, newparent, newname);
      } else {
        rr.volume->inodes().Renamed(parent, name, newparent, newname);
      }
    }
    if (PassthroughFiles* pt = rr.volume->passthrough()) {
      for (const auto& [ino, file] : named) {
        // Made: the name it had goes; not made: the one it would have had.
        const std::string& old = file == to_file ? from_file : to_file;
        pt->DropName(ino, rr.io.status.ok() ? old : file);
      }
    }
    ReplyError(rr);
  });
}

}  // namespace sroute::fuse_internal
