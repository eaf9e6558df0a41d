// SPDX-License-Identifier: Apache-2.0
#include "rpc/io_codec.h"

#include <sys/statvfs.h>

#include <cstring>

#include "sswitch/trace.h"
#include "util/errno_status.h"
#include "util/strings.h"

namespace sroute {
namespace {

void ToMsg(const struct stat& st, proto::StatMsg* m) {
  m->set_dev(st.st_dev);
  m->set_ino(st.st_ino);
  m->set_mode(st.st_mode);
  m->set_nlink(st.st_nlink);
  m->set_uid(st.st_uid);
  m->set_gid(st.st_gid);
  m->set_rdev(st.st_rdev);
  m->set_size(st.st_size);
  m->set_blksize(st.st_blksize);
  m->set_blocks(st.st_blocks);
  m->set_atime_sec(st.st_atim.tv_sec);
  m->set_atime_nsec(st.st_atim.tv_nsec);
  m->set_mtime_sec(st.st_mtim.tv_sec);
  m->set_mtime_nsec(st.st_mtim.tv_nsec);
  m->set_ctime_sec(st.st_ctim.tv_sec);
  m->set_ctime_nsec(st.st_ctim.tv_nsec);
}

void FromMsg(const proto::StatMsg& m, struct stat* st) {
  *st = {};
  st->st_dev = m.dev();
  st->st_ino = m.ino();
  st->st_mode = m.mode();
  st->st_nlink = m.nlink();
  st->st_uid = m.uid();
  st->st_gid = m.gid();
  st->st_rdev = m.rdev();
  st->st_size = m.size();
  st->st_blksize = m.blksize();
  st->st_blocks = m.blocks();
  st->st_atim = {m.atime_sec(), m.atime_nsec()};
  st->st_mtim = {m.mtime_sec(), m.mtime_nsec()};
  st->st_ctim = {m.ctime_sec(), m.ctime_nsec()};
}

// Ops whose reply carries attributes.
bool HasAttr(Op op) {
  switch (op) {
    case Op::kOpen:  // what a cache compares for close-to-open
    case Op::kGetattr:
    case Op::kLookup:
    case Op::kSetattr:
    case Op::kCreate:
    case Op::kMknod:
    case Op::kMkdir:
    case Op::kSymlink:
    case Op::kLink:
      return true;
    default:
      return false;
  }
}

proto::TruncateMode ToMsg(TruncateMode mode) {
  switch (mode) {
    case TruncateMode::kExact:
      return proto::TRUNCATE_MODE_EXACT;
    case TruncateMode::kGrowOnly:
      return proto::TRUNCATE_MODE_GROW_ONLY;
    case TruncateMode::kShrinkOnly:
      return proto::TRUNCATE_MODE_SHRINK_ONLY;
  }
  return proto::TRUNCATE_MODE_EXACT;
}

// False for a value no sender of ours makes.
bool FromMsg(proto::TruncateMode m, TruncateMode* mode) {
  switch (m) {
    case proto::TRUNCATE_MODE_EXACT:
      *mode = TruncateMode::kExact;
      return true;
    case proto::TRUNCATE_MODE_GROW_ONLY:
      *mode = TruncateMode::kGrowOnly;
      return true;
    case proto::TRUNCATE_MODE_SHRINK_ONLY:
      *mode = TruncateMode::kShrinkOnly;
      return true;
    default:
      return false;
  }
}

// Ops that name a second file in args.second_file (relative on the wire, a
// full name "//HOST/PATH" inside a host).
bool NamesASecondFile(Op op) {
  return op == Op::kRenameFrom || op == Op::kRenameTo || op == Op::kLink;
}

}  // namespace

void EncodeIoRequest(const Io& io, std::string_view path,
                     proto::IoRequest* out) {
  proto::IoHeaderMsg* h = out->mutable_header();
  h->set_source(io.header.source);
  if (!io.header.stage.empty()) h->set_stage(io.header.stage);
  h->set_op(static_cast<uint32_t>(io.header.op));
  h->set_offset(io.header.offset);
  h->set_length(io.header.length);
  out->set_path(path.data(), path.size());
  if (io.trace != nullptr) out->set_trace(true);
  const IoArgs& a = io.args;
  proto::IoArgsMsg* m = out->mutable_args();
  m->set_mode(a.mode);
  m->set_open_flags(a.open_flags);
  m->set_rename_flags(a.rename_flags);
  m->set_xattr_flags(a.xattr_flags);
  m->set_fallocate_mode(a.fallocate_mode);
  m->set_whence(a.whence);
  m->set_truncate_mode(ToMsg(a.truncate_mode));
  m->set_datasync(a.datasync);
  m->set_uid(a.uid);
  m->set_gid(a.gid);
  m->set_to_set(a.to_set);
  m->set_size(a.size);
  m->set_rdev(a.rdev);
  if (a.to_set & (kSetAtime | kSetMtime)) {
    m->set_atime_sec(a.atime.tv_sec);
    m->set_atime_nsec(a.atime.tv_nsec);
    m->set_mtime_sec(a.mtime.tv_sec);
    m->set_mtime_nsec(a.mtime.tv_nsec);
  }
  if (!a.second_file.empty()) m->set_second_file(a.second_file);
  if (!a.symlink_text.empty()) m->set_symlink_text(a.symlink_text);
  if (!a.xattr_name.empty()) m->set_xattr_name(a.xattr_name);
  if (a.caller.set) {
    m->set_has_caller(true);
    m->set_caller_uid(a.caller.uid);
    m->set_caller_gid(a.caller.gid);
    if (a.caller.groups) {
      m->mutable_caller_groups()->Add(a.caller.groups->begin(),
                                      a.caller.groups->end());
    }
  }
  for (const DelegateRuleRecord& r : io.records) {
    proto::DelegateRecord* d = out->add_records();
    d->set_sswitch(r.sswitch);
    d->set_seq(r.seq);
    d->set_rule(r.rule);
    d->set_anchor(r.anchor);
  }
}

absl::Status DecodeIoReply(const proto::RpcReply& reply,
                           std::span<const char> payload, Io* io) {
  if (reply.code() != 0) {
    return StatusWithErrno(static_cast<absl::StatusCode>(reply.code()),
                           reply.message(), reply.errno_value());
  }
  const proto::IoReply& r = reply.io();
  io->bytes = r.bytes();
  io->change_stamp = r.change_stamp();
  io->congested = r.congested();
  io->congested_window = r.congested_window();
  if (r.has_attr()) FromMsg(r.attr(), &io->attr);
  switch (io->header.op) {
    case Op::kRead: {
      if (payload.size() > io->read_buffer.size() ||
          payload.size() != r.bytes()) {
        return absl::DataLossError(
            StrCat("read reply of ", payload.size(), " bytes (", r.bytes(),
                   " announced) for a buffer of ", io->read_buffer.size()));
      }
      if (!payload.empty()) {
        std::memcpy(io->read_buffer.data(), payload.data(), payload.size());
      }
      break;
    }
    case Op::kStatfs: {
      struct statvfs sv {};
      const proto::StatfsMsg& f = r.statfs();
      sv.f_bsize = f.bsize();
      sv.f_frsize = f.frsize();
      sv.f_blocks = f.blocks();
      sv.f_bfree = f.bfree();
      sv.f_bavail = f.bavail();
      sv.f_files = f.files();
      sv.f_ffree = f.ffree();
      sv.f_favail = f.favail();
      sv.f_fsid = f.fsid();
      sv.f_flag = f.flag();
      sv.f_namemax = f.namemax();
      io->data.assign(reinterpret_cast<const char*>(&sv), sizeof(sv));
      break;
    }
    case Op::kReaddir:
      io->entries.clear();
      io->entries.reserve(r.entries_size());
      for (const proto::DirEntryMsg& e : r.entries()) {
        io->entries.push_back(DirEntry{e.name(), e.type(), e.ino()});
      }
      break;
    default:
      io->data = r.data();
      break;
  }
  return absl::OkStatus();
}

absl::Status DecodeIoRequest(const proto::IoRequest& req,
                             const std::string& host, Io* io) {
  const proto::IoHeaderMsg& h = req.header();
  if (h.op() >= static_cast<uint32_t>(kNumOps)) {
    return absl::InvalidArgumentError(StrCat("unknown op ", h.op()));
  }
  const std::string& path = req.path();
  auto bad_path = [](const std::string& p) {
    return (!p.empty() && p.front() == '/') ||
           p.find('\0') != std::string::npos;
  };
  if (bad_path(path)) {
    return ErrnoStatus(EINVAL, StrCat("bad path '", path, "'"));
  }
  io->header.source = h.source();
  io->header.stage = h.stage();
  io->header.op = static_cast<Op>(h.op());
  io->header.offset = h.offset();
  io->header.length = h.length();
  io->header.file = JoinFileName(host, path);
  if (req.trace()) io->trace = std::make_shared<Trace>();
  const proto::IoArgsMsg& m = req.args();
  IoArgs& a = io->args;
  a.mode = m.mode();
  a.open_flags = m.open_flags();
  a.rename_flags = m.rename_flags();
  a.xattr_flags = m.xattr_flags();
  a.fallocate_mode = m.fallocate_mode();
  a.whence = m.whence();
  if (!FromMsg(m.truncate_mode(), &a.truncate_mode)) {
    return absl::InvalidArgumentError(
        StrCat("unknown truncate mode ", static_cast<int>(m.truncate_mode())));
  }
  a.datasync = m.datasync();
  a.uid = m.uid();
  a.gid = m.gid();
  a.to_set = m.to_set();
  a.size = m.size();
  a.rdev = m.rdev();
  a.atime = {m.atime_sec(), m.atime_nsec()};
  a.mtime = {m.mtime_sec(), m.mtime_nsec()};
  a.second_file = m.second_file();
  a.symlink_text = m.symlink_text();
  a.xattr_name = m.xattr_name();
  a.caller = Credentials();
  if (m.has_caller()) {
    a.caller = Credentials::Of(m.caller_uid(), m.caller_gid(),
                               std::vector<uint32_t>(m.caller_groups().begin(),
                                                     m.caller_groups().end()));
  }
  if (NamesASecondFile(io->header.op)) {
    if (bad_path(a.second_file) || a.second_file.empty()) {
      return ErrnoStatus(EINVAL,
                         StrCat("bad second path '", a.second_file, "'"));
    }
    a.second_file = JoinFileName(host, a.second_file);
  }
  io->records.clear();
  for (const proto::DelegateRecord& d : req.records()) {
    io->records.push_back(
        DelegateRuleRecord{d.sswitch(), d.seq(), d.rule(), d.anchor()});
  }
  return absl::OkStatus();
}

void EncodeIoReply(const Io& io, proto::RpcReply* out) {
  if (io.trace != nullptr) {
    // The reply is the trace's last reader here: its hops are moved out.
    for (const TraceHop& h : io.trace->TakeHops()) {
      TraceHopToMsg(h, out->mutable_io()->add_trace());
    }
  }
  if (!io.status.ok()) {
    out->set_code(static_cast<int>(io.status.code()));
    out->set_message(std::string(io.status.message()));
    out->set_errno_value(ErrnoOf(io.status));
    return;
  }
  proto::IoReply* r = out->mutable_io();
  r->set_bytes(io.bytes);
  if (!io.target.empty()) r->set_target(io.target);
  if (io.congested) r->set_congested(true);
  if (io.congested_window != 0) r->set_congested_window(io.congested_window);
  const Op op = io.header.op;
  if (HasAttr(op)) ToMsg(io.attr, r->mutable_attr());
  switch (op) {
    case Op::kRead:
      break;  // the payload
    case Op::kStatfs:
      if (io.data.size() == sizeof(struct statvfs)) {
        struct statvfs sv;
        std::memcpy(&sv, io.data.data(), sizeof(sv));
        proto::StatfsMsg* f = r->mutable_statfs();
        f->set_bsize(sv.f_bsize);
        f->set_frsize(sv.f_frsize);
        f->set_blocks(sv.f_blocks);
        f->set_bfree(sv.f_bfree);
        f->set_bavail(sv.f_bavail);
        f->set_files(sv.f_files);
        f->set_ffree(sv.f_ffree);
        f->set_favail(sv.f_favail);
        f->set_fsid(sv.f_fsid);
        f->set_flag(sv.f_flag);
        f->set_namemax(sv.f_namemax);
      }
      break;
    case Op::kReaddir:
      for (const DirEntry& e : io.entries) {
        proto::DirEntryMsg* m = r->add_entries();
        m->set_name(e.name);
        m->set_type(e.type);
        m->set_ino(e.ino);
      }
      break;
    default:
      if (!io.data.empty()) r->set_data(io.data);
      break;
  }
}

std::span<const char> ReadPayload(const Io& io) {
  if (!io.status.ok() || io.header.op != Op::kRead) return {};
  return std::span<const char>(
      io.read_buffer.data(), std::min<size_t>(io.bytes, io.read_buffer.size()));
}

void TraceHopToMsg(const TraceHop& h, proto::TraceHop* m) {
  m->set_host(h.host);
  m->set_kind(h.kind);
  m->set_rule_id(h.rule_id);
  m->set_next(h.next);
  m->set_start_ns(h.start_ns);
  m->set_end_ns(h.end_ns);
  m->set_depth(h.depth);
  m->set_copy(h.copy);
  m->set_code(static_cast<int32_t>(h.code));
}

TraceHop TraceHopFromMsg(const proto::TraceHop& m, uint32_t extra_depth) {
  return TraceHop{m.host(),
                  m.kind(),
                  m.rule_id(),
                  m.next(),
                  m.start_ns(),
                  m.end_ns(),
                  m.depth() + extra_depth,
                  m.copy(),
                  static_cast<absl::StatusCode>(m.code())};
}

}  // namespace sroute
