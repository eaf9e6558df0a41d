// SPDX-License-Identifier: Apache-2.0
// File ops: open, create, read, write, flush, release, fsync, lseek,
// fallocate.
#include <fcntl.h>
#include <linux/fuse.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <optional>

#include "fuse/kill_setid.h"
#include "fuse/ops.h"
#include "fuse/request.h"
#include "util/clock.h"
#include "util/log.h"

namespace sroute::fuse_internal {

namespace {
// FOPEN_PASSTHROUGH (protocol 7.40), which Debian 12's header lacks.
constexpr uint32_t kFopenPassthrough = 1u << 7;

// Kernel caching of file data (docs/design.md §3): with --kernel-cache=off
// every read and write reaches the sSwitch (direct IO). With auto, the kernel
// keeps the pages of a file no rule can route, across opens (a rule change
// invalidates them: Volume::StartInvalidating); a file some rule matches
// gets direct IO, since its route may depend on the tenant or the range.
// An O_DIRECT open gets direct IO too: the caller asked for it, and the
// kernel then lets its writes run in parallel (ReplyOpen).
void SetCaching(Volume& v, const std::string& file, fuse_file_info* fi) {
  const bool direct =
      v.options().kernel_cache == VolumeOptions::KernelCache::kOff ||
      (fi->flags & O_DIRECT) != 0 || v.sswitch().MayRoute(file);
  fi->direct_io = direct ? 1 : 0;
  fi->keep_cache = direct ? 0 : 1;
}

// SetCaching, then kernel passthrough (fuse/passthrough.h): an open of a
// file nothing would see the IO of is served by the kernel from its
// backing file. The kernel fails an open through the page cache of an
// inode open past the daemon, or the other way round, and any open not
// past the daemon of an inode that is: PassthroughFiles::Decide keeps to
// that, parking an open (`again` runs later) when it must wait.
PassthroughFiles::Decision DecideOpen(
    Volume& v, uint64_t ino, const std::string& file, fuse_file_info* fi,
    uid_t opener, const std::function<absl::AnyInvocable<void() &&>()>& again) {
  SetCaching(v, file, fi);
  using Kind = PassthroughFiles::Decision::Kind;
  PassthroughFiles* pt = v.passthrough();
  if (pt == nullptr) return {Kind::kDaemon};
  const bool writes = (fi->flags & O_ACCMODE) != O_RDONLY;
  PassthroughFiles::Decision d = pt->Decide(
      ino, file, opener, writes, fi->direct_io == 0,
      [&] { return v.sswitch().LeavesAlone(file); },
      [&] { return v.OpenBackingFile(file); }, again);
  if (d.kind == Kind::kPast) {
    fi->direct_io = 0;
    fi->keep_cache = 0;
  }
  return d;
}

// An open's reply failed (interrupted), or it was released.
void EndOpen(Volume& v, uint64_t ino, const OpenFile* open) {
  PassthroughFiles* pt = v.passthrough();
  if (pt == nullptr || open == nullptr) return;
  if (open->backing_id > 0) pt->Closed(ino, open->opener.uid, open->writes);
  if (open->cached) pt->CachedReleased(ino);
}

// The open flags the kernel is sent: fuse_reply_open's, plus
// FOPEN_PARALLEL_DIRECT_WRITES for direct IO, which libfuse 3.14 cannot
// express: without it the kernel holds the inode's lock across every direct
// write, so writers of one file (a database, fio with several jobs) queue
// behind each other although the sSwitch and the endpoints serve them
// concurrently. The kernel still serializes writes that extend the file.
fuse_open_out OpenOut(const fuse_file_info& fi) {
  fuse_open_out out{};
  out.fh = fi.fh;
  const OpenFile* open = OpenFile::Of(&fi);
  if (open != nullptr && open->backing_id > 0) {
    // The kernel allows only these flags beside it.
    out.open_flags = kFopenPassthrough;
    out.padding = static_cast<uint32_t>(open->backing_id);  // backing_id
    return out;
  }
  if (fi.direct_io)
    out.open_flags |= FOPEN_DIRECT_IO | FOPEN_PARALLEL_DIRECT_WRITES;
  if (fi.keep_cache) out.open_flags |= FOPEN_KEEP_CACHE;
  if (fi.nonseekable) out.open_flags |= FOPEN_NONSEEKABLE;
  if (fi.noflush) out.open_flags |= FOPEN_NOFLUSH;
  return out;
}

// Returns what fuse_reply_open would.
int ReplyOpen(fuse_req_t req, const fuse_file_info& fi) {
  const fuse_open_out out = OpenOut(fi);
  return fuse_reply_buf(req, reinterpret_cast<const char*>(&out), sizeof(out));
}

// A timeout in seconds as the kernel takes it: whole seconds and nanoseconds.
void SplitTimeout(double t, uint64_t* sec, uint32_t* nsec) {
  if (!(t > 0)) t = 0;  // NaN and negatives: no caching
  if (t >= 1e18) t = 1e18;
  *sec = static_cast<uint64_t>(t);
  *nsec = static_cast<uint32_t>(
      std::min(999999999.0, (t - static_cast<double>(*sec)) * 1e9));
}

// fuse_reply_create with the open flags of OpenOut. Returns what
// fuse_reply_create would.
int ReplyCreate(fuse_req_t req, const fuse_entry_param& e,
                const fuse_file_info& fi) {
  struct {
    fuse_entry_out entry;
    fuse_open_out open;
  } out{};
  fuse_entry_out& entry = out.entry;
  entry.nodeid = e.ino;
  entry.generation = e.generation;
  SplitTimeout(e.entry_timeout, &entry.entry_valid, &entry.entry_valid_nsec);
  SplitTimeout(e.attr_timeout, &entry.attr_valid, &entry.attr_valid_nsec);
  const struct stat& st = e.attr;
  fuse_attr& a = entry.attr;
  a.ino = st.st_ino;
  a.mode = st.st_mode;
  a.nlink = static_cast<uint32_t>(st.st_nlink);
  a.uid = st.st_uid;
  a.gid = st.st_gid;
  a.rdev = static_cast<uint32_t>(st.st_rdev);
  a.size = static_cast<uint64_t>(st.st_size);
  a.blocks = static_cast<uint64_t>(st.st_blocks);
  a.blksize = static_cast<uint32_t>(st.st_blksize);
  a.atime = static_cast<uint64_t>(st.st_atim.tv_sec);
  a.mtime = static_cast<uint64_t>(st.st_mtim.tv_sec);
  a.ctime = static_cast<uint64_t>(st.st_ctim.tv_sec);
  a.atimensec = static_cast<uint32_t>(st.st_atim.tv_nsec);
  a.mtimensec = static_cast<uint32_t>(st.st_mtim.tv_nsec);
  a.ctimensec = static_cast<uint32_t>(st.st_ctim.tv_nsec);
  out.open = OpenOut(fi);
  return fuse_reply_buf(req, reinterpret_cast<const char*>(&out), sizeof(out));
}

// The write_flags of the WRITE being served through libfuse (which does
// not pass them on), or 0.
uint32_t CurrentWriteFlags() {
  const fuse_in_header* in = CurrentRawRequest();
  if (in == nullptr || in->opcode != FUSE_WRITE ||
      in->len < sizeof(*in) + sizeof(fuse_write_in)) {
    return 0;
  }
  return reinterpret_cast<const fuse_write_in*>(in + 1)->write_flags;
}

// The open_flags (FUSE_OPEN_KILL_SUIDGID) of the OPEN or CREATE being
// served through libfuse, or 0.
uint32_t CurrentOpenFlags() {
  const fuse_in_header* in = CurrentRawRequest();
  if (in == nullptr) return 0;
  if (in->opcode == FUSE_OPEN &&
      in->len >= sizeof(*in) + sizeof(fuse_open_in)) {
    return reinterpret_cast<const fuse_open_in*>(in + 1)->open_flags;
  }
  if (in->opcode == FUSE_CREATE &&
      in->len >= sizeof(*in) + sizeof(fuse_create_in)) {
    return reinterpret_cast<const fuse_create_in*>(in + 1)->open_flags;
  }
  return 0;
}
Caller CallerOf(fuse_req_t req) {
  const fuse_ctx* ctx = fuse_req_ctx(req);
  return Caller{ctx->uid, ctx->gid, ctx->pid};
}

// What a reply to `r` needs, in a request of its own: `r` is freed once its
// completion returns, and the reply is sent after more IO.
std::unique_ptr<Request> CopyForReply(const Request& r) {
  auto c = std::make_unique<Request>();
  c->volume = r.volume;
  c->req = r.req;
  c->io.header = r.io.header;
  c->io.args = r.io.args;
  c->io.attr = r.io.attr;
  c->parent = r.parent;
  c->name = r.name;
  c->fi = r.fi;
  c->has_fi = r.has_fi;
  return c;
}

OpenFile* NewOpenFile(Request& r) {
  OpenFile* file = r.volume->NewOpenFile();
  const fuse_ctx* ctx = fuse_req_ctx(r.req);
  file->opener = Caller{ctx->uid, ctx->gid, ctx->pid};
  return file;
}

void SubmitRead(std::unique_ptr<Request> r, size_t size, off_t off) {
  r->read_data.Allocate(size);
  r->io.header.offset = static_cast<uint64_t>(off);
  r->io.header.length = size;
  r->io.read_buffer = std::span<char>(r->read_data.get(), size);
  Submit(std::move(r), [](Request& rr) {
    if (!rr.io.status.ok()) return ReplyError(rr);
    ReplyData(rr, rr.read_data.get(), rr.io.bytes);
  });
}
}  // namespace

namespace {
// The open answered: its state recorded, its reply sent (or, parked by
// kernel passthrough, later, from a copy).
void FinishOpen(Request& o, uint64_t ino) {
  using Kind = PassthroughFiles::Decision::Kind;
  const PassthroughFiles::Decision d = DecideOpen(
      *o.volume, ino, o.io.header.file, &o.fi, CallerOf(o.req).uid, [&o, ino] {
        return absl::AnyInvocable<void() &&>(
            [copy = CopyForReply(o), ino]() mutable {
              FinishOpen(*copy, ino);
            });
      });
  if (d.kind == Kind::kParked) return;
  if (d.kind == Kind::kBusy) return (void)fuse_reply_err(o.req, EBUSY);
  o.volume->inodes().Opened(ino);
  OpenFile* open = NewOpenFile(o);
  open->ino = ino;
  open->backing_id = d.backing_id;
  open->cached = d.cached;
  open->writes = (o.fi.flags & O_ACCMODE) != O_RDONLY;
  // Found with nothing to clear lately (kill_setid.cc): so is this open.
  const uint64_t generation = o.volume->setid_generation();
  if (o.volume->inodes().WithoutSetid(ino, generation, MonotonicNanos())) {
    open->SetWithoutSetid(generation);
  }
  o.fi.fh = reinterpret_cast<uint64_t>(open);
  if (ReplyOpen(o.req, o.fi) != 0) {
    // Interrupted: no release follows.
    EndOpen(*o.volume, ino, open);
    o.volume->DeleteOpenFile(open);
    if (auto hidden = o.volume->inodes().Released(ino)) {
      RemoveHiddenName(*o.volume, *hidden, nullptr);
    }
  }
}

// The same for a create, whose entry `e` is made already.
void FinishCreate(Request& c, const fuse_entry_param& e, uint64_t generation) {
  using Kind = PassthroughFiles::Decision::Kind;
  const PassthroughFiles::Decision d =
      DecideOpen(*c.volume, e.ino, c.io.header.file, &c.fi, CallerOf(c.req).uid,
                 [&c, e, generation] {
                   return absl::AnyInvocable<void() &&>(
                       [copy = CopyForReply(c), e, generation]() mutable {
                         FinishCreate(*copy, e, generation);
                       });
                 });
  if (d.kind == Kind::kParked) return;
  if (d.kind == Kind::kBusy) {
    c.volume->inodes().Forget(e.ino, 1);
    return (void)fuse_reply_err(c.req, EBUSY);
  }
  c.volume->inodes().Opened(e.ino);
  OpenFile* open = NewOpenFile(c);
  open->ino = e.ino;
  open->backing_id = d.backing_id;
  open->cached = d.cached;
  open->writes = (c.fi.flags & O_ACCMODE) != O_RDONLY;
  // Made by this create (O_EXCL), without set-ID bits: nothing to
  // clear until a chmod or setxattr says otherwise.
  if ((c.io.args.open_flags & O_EXCL) &&
      (c.io.attr.st_mode & (S_ISUID | S_ISGID)) == 0) {
    open->SetWithoutSetid(generation);
  }
  c.fi.fh = reinterpret_cast<uint64_t>(open);
  if (ReplyCreate(c.req, e, c.fi) != 0) {
    EndOpen(*c.volume, e.ino, open);
    c.volume->DeleteOpenFile(open);
    if (auto hidden = c.volume->inodes().Released(e.ino)) {
      RemoveHiddenName(*c.volume, *hidden, nullptr);
    }
    c.volume->inodes().Forget(e.ino, 1);
  }
}
}  // namespace

void Open(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  std::string path;
  if (!PathOf(req, ino, &path)) return;
  auto r = NewRequest(req, Op::kOpen, path);
  r->io.args.open_flags = fi->flags;
  r->fi = *fi;
  const bool kill = (CurrentOpenFlags() & FUSE_OPEN_KILL_SUIDGID) != 0;
  Submit(std::move(r), [ino, kill](Request& rr) {
    if (!rr.io.status.ok()) return ReplyError(rr);
    if (!kill) return FinishOpen(rr, ino);
    // O_TRUNC by a caller without CAP_FSETID: the truncate clears set-ID
    // bits and capabilities. The open's request is answered after that,
    // from a copy (this one is freed when its completion returns).
    KillSetidThen(CopyForReply(rr), nullptr, CallerOf(rr.req),
                  [ino](std::unique_ptr<Request> o, const absl::Status& s) {
                    if (!s.ok()) {
                      o->io.status = s;
                      return ReplyError(*o);
                    }
                    FinishOpen(*o, ino);
                  });
  });
}

void Create(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode,
            fuse_file_info* fi) {
  std::string path;
  if (!ChildPathOf(req, parent, name, &path)) return;
  auto r = NewRequest(req, Op::kCreate, path);
  r->io.args.mode = mode;
  r->io.args.open_flags = fi->flags;
  r->parent = parent;
  r->name = name;
  r->fi = *fi;
  // An existing file opened O_TRUNC by a caller without CAP_FSETID.
  const bool kill = (CurrentOpenFlags() & FUSE_OPEN_KILL_SUIDGID) != 0;
  const uint64_t generation = VolumeOf(req).setid_generation();
  Submit(std::move(r), [kill, generation](Request& rr) {
    if (!rr.io.status.ok()) return ReplyError(rr);
    auto reply = [generation](Request& c) {
      FinishCreate(c, MakeEntry(c), generation);
    };
    if (!kill) return reply(rr);
    // Cleared before the reply (a write through the new descriptor could
    // come at once), which is then sent from a copy of this request.
    KillSetidThen(CopyForReply(rr), nullptr, CallerOf(rr.req),
                  [reply](std::unique_ptr<Request> c, const absl::Status& s) {
                    if (!s.ok()) {
                      c->io.status = s;
                      return ReplyError(*c);
                    }
                    reply(*c);
                  });
  });
}

void Read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
          fuse_file_info* fi) {
  std::string file;
  if (!OpenFile::Of(fi)->FileName(req, ino, &file)) return;
  SubmitRead(NewFileRequest(req, Op::kRead, std::move(file)), size, off);
}

namespace {
// A request for `op` on the open file `fh` of a request a RawHandler took,
// or null once it replied ESTALE (the file is gone).
// A page written through a shared mapping (`as_opener`) is routed as the
// file's opener's.
std::unique_ptr<Request> NewRawFileRequest(Volume& volume, fuse_session* se,
                                           const fuse_in_header& in,
                                           uint64_t fh, Op op,
                                           bool as_opener = false) {
  std::string file;
  auto* open = reinterpret_cast<OpenFile*>(fh);
  if (fh == 0 || !open->FileName(volume, in.nodeid, &file)) {
    SendRawReply(se, in.unique, ESTALE);
    return nullptr;
  }
  const Caller caller =
      as_opener ? open->opener
                : Caller{in.uid, in.gid, static_cast<pid_t>(in.pid)};
  auto r = NewFileRequest(volume, caller, op, std::move(file));
  r->session = se;
  r->unique = in.unique;
  return r;
}
}  // namespace

bool ServeRawRead(Volume& volume, fuse_session* se, const RawRequest& raw) {
  if (raw.arg_size < sizeof(fuse_read_in)) return false;
  const auto* arg = reinterpret_cast<const fuse_read_in*>(raw.arg);
  auto r = NewRawFileRequest(volume, se, *raw.header, arg->fh, Op::kRead);
  if (r != nullptr) {
    SubmitRead(std::move(r), arg->size, static_cast<off_t>(arg->offset));
  }
  return true;
}

namespace {
void ReplyWrite(Request& r) {
  if (!r.io.status.ok()) return ReplyError(r);
  if (r.req != nullptr) {
    fuse_reply_write(r.req, r.io.bytes);
    return;
  }
  fuse_write_out out{};
  out.size = static_cast<uint32_t>(r.io.bytes);
  SendRawReply(r.session, r.unique, 0, &out, sizeof(out));
}

void SubmitWriteAt(std::unique_ptr<Request> r, const char* data, size_t size,
                   off_t off) {
  r->io.header.offset = static_cast<uint64_t>(off);
  r->io.header.length = size;
  SubmitWrite(std::move(r), data, size, ReplyWrite);
}

// A write the kernel flagged FUSE_WRITE_KILL_SUIDGID (its caller lacks
// CAP_FSETID) clears set-ID bits and capabilities first, unless the open
// file is known to have none (kill_setid.h). Then the data is copied: the
// worker's buffer is reused once the handler returns.
void SubmitWriteKilling(std::unique_ptr<Request> r, OpenFile* open,
                        const Caller& caller, bool kill, const char* data,
                        size_t size, off_t off) {
  if (!kill || open->KnownWithoutSetid(r->volume->setid_generation())) {
    SubmitWriteAt(std::move(r), data, size, off);
    return;
  }
  r->buffer.assign(data, data + size);
  KillSetidThen(std::move(r), open, caller,
                [off](std::unique_ptr<Request> w, const absl::Status& s) {
                  if (!s.ok()) {
                    w->io.status = s;
                    ReplyWrite(*w);
                    return;
                  }
                  std::vector<char> copy = std::move(w->buffer);
                  SubmitWriteAt(std::move(w), copy.data(), copy.size(), off);
                });
}

}  // namespace

void Write(fuse_req_t req, fuse_ino_t ino, const char* buf, size_t size,
           off_t off, fuse_file_info* fi) {
  OpenFile* open = OpenFile::Of(fi);
  std::string file;
  if (!open->FileName(req, ino, &file)) return;
  std::unique_ptr<Request> r;
  const fuse_ctx* ctx = fuse_req_ctx(req);
  Caller caller{ctx->uid, ctx->gid, ctx->pid};
  if (fi->writepage) {  // a page written through a shared mapping
    caller = open->opener;
    r = NewFileRequest(VolumeOf(req), caller, Op::kWrite, std::move(file));
    r->req = req;
  } else {
    r = NewFileRequest(req, Op::kWrite, std::move(file));
  }
  SubmitWriteKilling(std::move(r), open, caller,
                     (CurrentWriteFlags() & FUSE_WRITE_KILL_SUIDGID) != 0, buf,
                     size, off);
}

bool ServeRawWrite(Volume& volume, fuse_session* se, const RawRequest& raw) {
  if (raw.arg_size < sizeof(fuse_write_in)) return false;
  const auto* arg = reinterpret_cast<const fuse_write_in*>(raw.arg);
  // The data follows the argument (protocol 7.9 on); anything else is
  // libfuse's to parse and report.
  if (raw.arg_size != sizeof(fuse_write_in) + arg->size) return false;
  auto r = NewRawFileRequest(volume, se, *raw.header, arg->fh, Op::kWrite,
                             (arg->write_flags & FUSE_WRITE_CACHE) != 0);
  if (r != nullptr) {
    const fuse_in_header& in = *raw.header;
    SubmitWriteKilling(std::move(r), reinterpret_cast<OpenFile*>(arg->fh),
                       Caller{in.uid, in.gid, static_cast<pid_t>(in.pid)},
                       (arg->write_flags & FUSE_WRITE_KILL_SUIDGID) != 0,
                       raw.arg + sizeof(fuse_write_in), arg->size,
                       static_cast<off_t>(arg->offset));
  }
  return true;
}

void Release(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  EndOpen(VolumeOf(req), ino, OpenFile::Of(fi));
  VolumeOf(req).DeleteOpenFile(OpenFile::Of(fi));
  std::optional<std::string> hidden = VolumeOf(req).inodes().Released(ino);
  if (!hidden) {
    fuse_reply_err(req, 0);
    return;
  }
  // The last handle of an unlinked file: now its data can go.
  RemoveHiddenName(VolumeOf(req), *hidden, req);
}

void RemoveHiddenName(Volume& volume, const std::string& path,
                      fuse_req_t reply) {
  auto r = NewFileRequest(volume, Caller{0, 0, 0}, Op::kUnlink,
                          volume.FileName(path));
  r->io.args.caller = Credentials();  // the daemon's own name
  r->req = reply;
  Submit(std::move(r), [path](Request& rr) {
    if (!rr.io.status.ok() && ErrnoOf(rr.io.status) != ENOENT) {
      // The caller's operation itself succeeded; the name is left behind
      // (a leak an operator can remove), so say where.
      LogWarning("removing ", rr.io.header.file,
                 ", the hidden name of an unlinked file closed last: ",
                 rr.io.status.message());
    }
    for (auto& then : rr.volume->inodes().HiddenNameRemoved(path)) {
      std::move(then)();
    }
    if (rr.req != nullptr) fuse_reply_err(rr.req, 0);
  });
}

// A close: a stage that holds writes (a write-back cache) writes the file's
// back before close(2) returns. Without such a stage there is nothing to
// send (writes reach the endpoints before they are acknowledged).
void Flush(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  if (!VolumeOf(req).sswitch().WantsFlushes()) {
    fuse_reply_err(req, 0);
    return;
  }
  std::string file;
  if (!OpenFile::Of(fi)->FileName(req, ino, &file)) return;
  Submit(NewFileRequest(req, Op::kFlush, std::move(file)), ReplyError);
}

void Fsync(fuse_req_t req, fuse_ino_t ino, int datasync, fuse_file_info*) {
  std::string path;
  if (!PathOf(req, ino, &path)) return;
  auto r = NewRequest(req, Op::kFsync, path);
  r->io.args.datasync = datasync != 0;
  Submit(std::move(r), ReplyError);
}

void Lseek(fuse_req_t req, fuse_ino_t ino, off_t off, int whence,
           fuse_file_info*) {
  if (whence != SEEK_DATA && whence != SEEK_HOLE) {
    fuse_reply_err(req, EINVAL);  // the kernel handles SET/CUR/END itself
    return;
  }
  std::string path;
  if (!PathOf(req, ino, &path)) return;
  auto r = NewRequest(req, Op::kLseek, path);
  r->io.header.offset = static_cast<uint64_t>(off);
  r->io.args.whence = whence;
  Submit(std::move(r), [](Request& rr) {
    if (!rr.io.status.ok()) return ReplyError(rr);
    fuse_reply_lseek(rr.req, static_cast<off_t>(rr.io.bytes));
  });
}

// A fallocate carries no kill flag: a caller without CAP_FSETID clears
// set-ID bits and capabilities first (kill_setid.h), as fallocate(2) does
// on a local file system.
void Fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t offset,
               off_t length, fuse_file_info* fi) {
  std::string path;
  if (!PathOf(req, ino, &path)) return;
  auto r = NewRequest(req, Op::kFallocate, path);
  r->io.args.fallocate_mode = mode;
  r->io.header.offset = static_cast<uint64_t>(offset);
  r->io.header.length = static_cast<uint64_t>(length);
  OpenFile* open = fi != nullptr ? OpenFile::Of(fi) : nullptr;
  const fuse_ctx* ctx = fuse_req_ctx(req);
  if ((open != nullptr &&
       open->KnownWithoutSetid(r->volume->setid_generation())) ||
      !LacksFsetid(Caller{ctx->uid, ctx->gid, ctx->pid})) {
    Submit(std::move(r), ReplyError);
    return;
  }
  KillSetidThen(std::move(r), open, Caller{ctx->uid, ctx->gid, ctx->pid},
                [](std::unique_ptr<Request> f, const absl::Status& s) {
                  if (!s.ok()) {
                    f->io.status = s;
                    return ReplyError(*f);
                  }
                  Submit(std::move(f), ReplyError);
                });
}

}  // namespace sroute::fuse_internal
