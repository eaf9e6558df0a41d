// SPDX-License-Identifier: Apache-2.0
// Detours: sending an IO where its rule says (files, stages, the
// controller), preparing a detour's file and parents on first need, and
// growing the home after a write detoured away from it.
#include <fcntl.h>
#include <linux/falloc.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <optional>

#include "rules/parser.h"
#include "sswitch/snapshot.h"
#include "sswitch/sswitch.h"
#include "util/errno_status.h"
#include "util/log.h"
#include "util/strings.h"

namespace sroute {
namespace {

constexpr int kMaxStageHops = 16;

}  // namespace

void SSwitch::SendToDetours(Io* io, const RuleEntry* entry,
                            const DetourList& chosen) {
  const Rule& r = entry->rule();
  // The single detour's file, resolved once (the home check below and the
  // send both need it).
  std::string single_file;
  if (chosen.size() == 1 && chosen[0]->target.kind == Target::Kind::kFile) {
    single_file =
        ResolveTargetFile(chosen[0]->target, r.pattern.file, io->header.file);
  }
  const Op op = io->header.op;
  const bool may_grow =
      op == Op::kWrite || (op == Op::kFallocate &&
                           (io->args.fallocate_mode == 0 ||
                            io->args.fallocate_mode == FALLOC_FL_ZERO_RANGE));
  if (may_grow && !chosen.empty()) {
    // DESIGN §3: a write (or an allocation that may extend the file)
    // detoured away from the file's home still grows the size the home
    // reports.
    std::string home = HomeOf(*io->snapshot_, io->header);
    bool reaches_home = home.empty();
    for (const Detour* d : chosen) {
      if (reaches_home) break;
      if (d->target.kind != Target::Kind::kFile) {
        reaches_home = true;
      } else if (chosen.size() == 1) {
        reaches_home = single_file == home;  // no copy of it
      } else {
        reaches_home = ResolveTargetFile(d->target, r.pattern.file,
                                         io->header.file) == home;
      }
    }
    if (!reaches_home) io = GrowHomeAfter(io, std::move(home));
  }
  if (chosen.empty()) {
    SendToFile(io, io->header.file);  // only side detours: the IO goes on
  } else if (chosen.size() == 1) {
    SendTo(io, chosen[0]->target, std::move(single_file), entry->id());
  } else {
    Scatter(io, entry, chosen);
  }
}

Io* SSwitch::GrowHomeAfter(Io* io, std::string home) {
  struct Growth {
    Io* parent;
    std::unique_ptr<Io> write;
    std::unique_ptr<Io> grow;
  };
  auto g = std::make_shared<Growth>();
  g->parent = io;
  g->write = NewChild(*io);
  io->records.clear();  // they travel with the write
  Io& w = *g->write;
  w.set_completion([this, g, home = std::move(home)](Io& done) {
    Io* parent = g->parent;
    parent->AdoptResults(done);
    const uint64_t end =
        done.header.offset +
        (done.header.op == Op::kWrite ? done.bytes : done.header.length);
    if (!done.status.ok() || end == done.header.offset) {
      parent->Complete(done.status);
      return;
    }
    g->grow = NewChild(*parent);
    Io& grow = *g->grow;
    grow.header.op = Op::kTruncate;
    grow.header.offset = grow.header.length = 0;
    grow.args.truncate_mode = TruncateMode::kGrowOnly;
    grow.args.size = end;
    grow.write_data = {};
    grow.read_buffer = {};
    grow.records.clear();
    grow.set_completion([g](Io& gr) {
      // The bytes are written; a home that cannot grow is still an error
      // (stat would lie), reported as the write's.
      g->parent->Complete(gr.status);
    });
    SendToFile(&grow, home);
  });
  return &w;
}

void SSwitch::SendTo(Io* io, const Target& target, std::string resolved_file,
                     uint64_t rule_id) {
  const Snapshot& snap = *io->snapshot_;
  switch (target.kind) {
    case Target::Kind::kFile:
      SendToFile(io, std::move(resolved_file));
      return;
    case Target::Kind::kController:
      if (!snap.controller) {
        Fail(io,
             absl::UnavailableError(StrCat(
                 "rule ", rule_id,
                 " sends this IO to the controller, and none is connected")));
        return;
      }
      io->target = "controller";
      snap.controller->OnIo(io, rule_id);
      return;
    case Target::Kind::kStage: {
      if (!target.stage_host.empty() && target.stage_host != name_) {
        SendToRemoteStage(io, target);
        return;
      }
      auto it = snap.stages->find(target.stage);
      if (it == snap.stages->end()) {
        Fail(io, absl::NotFoundError(StrCat("no stage named '", target.stage,
                                            "' (rule ", rule_id, ")")));
        return;
      }
      if (io->stage_hops_ >= kMaxStageHops) {
        Fail(io, ErrnoStatus(ELOOP, StrCat("IO passed ", kMaxStageHops,
                                           " stages: routing loop at stage:",
                                           target.stage)));
        return;
      }
      const Op op = io->header.op;
      if ((op == Op::kRenameFrom || op == Op::kLink) &&
          it->second->stage->KeepsNames() &&
          !SecondNameEntersStage(snap, *io, target.stage)) {
        Fail(io, ErrnoStatus(EXDEV, StrCat(OpName(op), " ", io->header.file,
                                           " -> ", io->args.second_file,
                                           ": not through one stage (",
                                           target.stage, ")")));
        return;
      }
      io->target = StrCat("stage:", target.stage);
      if (io->trace != nullptr) NoteRuleTarget(io);
      EnterStage(io, it->second);
      return;
    }
  }
}

// A rename or link whose first name a rule sends to stage `stage` goes
// there only if the rules send its second name there too (as they would a
// create of it): a stage keeps names it was given, and a name moved out of
// its flow would be left where no later IO of that name looks.
bool SSwitch::SecondNameEntersStage(const Snapshot& snap, const Io& io,
                                    const std::string& stage) {
  IoHeader second = io.header;
  second.op = io.header.op == Op::kRenameFrom ? Op::kRenameTo : Op::kLink;
  second.file = io.args.second_file;
  second.offset = second.length = 0;
  const RuleEntry* e = snap.table->MatchWholeAs(second, second.op);
  if (e == nullptr) return false;
  for (const Detour& d : e->rule().detours) {
    if (d.what != Detour::What::kIo) continue;
    return d.target.kind == Target::Kind::kStage &&
           d.target.stage_host.empty() && d.target.stage == stage;
  }
  return false;
}

// stage://HOST/NAME: HOST is an endpoint of this sSwitch (a storage
// server), and holds the IO's file: the server's stage sees the file as
// the server names it.
void SSwitch::SendToRemoteStage(Io* io, const Target& target) {
  const Snapshot& snap = *io->snapshot_;
  auto it = snap.endpoints->find(target.stage_host);
  if (it == snap.endpoints->end()) {
    Fail(io,
         absl::NotFoundError(StrCat("no endpoint named '", target.stage_host,
                                    "' for ", FormatTarget(target))));
    return;
  }
  FileName name;
  if (!SplitFileName(io->header.file, &name) ||
      name.host != target.stage_host) {
    Fail(io, absl::InvalidArgumentError(
                 StrCat(FormatTarget(target), " takes IOs of files on ",
                        target.stage_host, ", not ", io->header.file)));
    return;
  }
  io->target = FormatTarget(target);
  if (io->trace != nullptr) NoteRuleTarget(io);
  it->second.Sent(io);
  it->second.endpoint->SubmitToStage(io, name.path, target.stage);
}

void Endpoint::SubmitToStage(Io* io, std::string_view, std::string_view stage) {
  io->Complete(absl::InvalidArgumentError(
      StrCat("stage ", stage,
             ": this endpoint is not a storage server and "
             "has no stages")));
}

void SSwitch::NoteRuleTarget(Io* io) {
  if (io->frames_.empty()) return;
  Io::Frame& f = io->frames_.back();
  if (f.rule != nullptr && f.targets.empty()) f.targets.push_back(io->target);
}

void SSwitch::SendToFile(Io* io, std::string file) {
  io->target = std::move(file);
  FileName name;
  if (!SplitFileName(io->target, &name)) {
    Fail(io, absl::InvalidArgumentError(
                 StrCat("'", io->target, "' is not a file name //HOST/PATH")));
    return;
  }
  const auto& endpoints = *io->snapshot_->endpoints;
  auto it = endpoints.find(name.host);
  if (it == endpoints.end()) {
    Fail(io, absl::NotFoundError(StrCat("no endpoint named '", name.host,
                                        "' for ", io->target)));
    return;
  }
  const Op op = io->header.op;
  if (op == Op::kRenameFrom || op == Op::kLink) {
    // The second name is routed too (as a create-like op on it), and both
    // must land on one endpoint; the endpoint gets its own path for it.
    IoHeader second = io->header;
    second.op = op == Op::kRenameFrom ? Op::kRenameTo : Op::kLink;
    second.file = io->args.second_file;
    second.offset = second.length = 0;
    bool keeper = false;
    const std::string resolved =
        ResolveThroughStages(*io->snapshot_, second, second.op, &keeper);
    if (keeper) {
      // The first name goes to a file from here; the second's route passes
      // a stage that places its files itself (Stage::KeepsNames).
      Fail(io, ErrnoStatus(EXDEV, StrCat(OpName(op), " ", io->target, " -> ",
                                         io->args.second_file,
                                         ": the second name's route passes a "
                                         "stage that keeps its own names")));
      return;
    }
    FileName other;
    if (!SplitFileName(resolved, &other)) {
      Fail(io,
           absl::InvalidArgumentError(StrCat(
               "'", io->args.second_file, "' is not a file name //HOST/PATH")));
      return;
    }
    if (other.host != name.host) {
      Fail(io, ErrnoStatus(EXDEV, StrCat(OpName(op), " ", io->target, " -> ",
                                         resolved, ": not on one endpoint")));
      return;
    }
    io->args.second_file = std::string(other.path);
  }
  const OpClass cls = io->header.op_class();
  if (io->target != io->header.file) {
    if (cls == kOpClassCreate) {
      it->second.Sent(io);
      CreateAtDetour(io, it->second.endpoint, std::string(name.path), false);
      return;
    }
    if (cls == kOpClassWrite) {
      // Routing a write to a file includes making it (scatter replicas,
      // byte ranges, write detours): the op then acts on every target.
      it->second.Sent(io);
      CreateAtDetour(io, it->second.endpoint, std::string(name.path), true);
      return;
    }
  }
  it->second.Sent(io);
  it->second.endpoint->Submit(io, name.path);
}

// A create sent somewhere other than its own name: the parent directories
// exist at the home but maybe not at the target. Try the create; on ENOENT
// make the missing parents there (with the mode and owner of the file's
// directory at its home, or of the name's directory) and try once more. A
// write-like op sent to a detour whose file does not exist yet makes the file
// too (lazily, at the first IO that needs it: docs/design.md §6), with the mode
// and owner of the file at its home.
struct SSwitch::DetourCreate {
  Io* parent;
  std::shared_ptr<Endpoint> endpoint;
  std::string path;
  bool make_file = false;  // a write: the file itself may be missing
  bool retried = false;
  std::unique_ptr<Io> attempt;
};

void SSwitch::CreateAtDetour(Io* io, std::shared_ptr<Endpoint> endpoint,
                             std::string path, bool make_file) {
  auto st = std::make_shared<DetourCreate>();
  st->parent = io;
  st->endpoint = std::move(endpoint);
  st->path = std::move(path);
  st->make_file = make_file;
  TryDetourCreate(st);
}

void SSwitch::TryDetourCreate(const std::shared_ptr<DetourCreate>& st) {
  auto attempt = NewChild(*st->parent);
  attempt->target = st->parent->target;
  attempt->set_completion([this, st](Io& a) {
    if (ErrnoOf(a.status) == ENOENT && !st->retried) {
      st->retried = true;
      MakeDetourParents(st);
      return;
    }
    Io& parent = *st->parent;
    parent.AdoptResults(a);
    parent.Complete(a.status);
  });
  Io* raw = attempt.get();
  st->attempt = std::move(attempt);
  st->endpoint->Submit(raw, st->path);
}

void SSwitch::MakeDetourParents(const std::shared_ptr<DetourCreate>& st) {
  Io& parent = *st->parent;
  const std::string home = HomeOf(*parent.snapshot_, parent.header);
  // The directory at the home, or, when the home is routed with the file
  // (a rule for every op) and is missing too, the directory of the name.
  MakeParents(parent, parent.target,
              {ParentFileOf(home), ParentFileOf(parent.header.file)},
              [this, st](absl::Status s) {
                if (!s.ok()) {
                  st->parent->Complete(std::move(s));
                } else if (st->make_file) {
                  MakeDetourFile(st);
                } else {
                  TryDetourCreate(st);
                }
              });
}

void SSwitch::MakeDetourFile(const std::shared_ptr<DetourCreate>& st) {
  Io& parent = *st->parent;
  const std::string home = HomeOf(*parent.snapshot_, parent.header);
  auto create = [this, st](std::optional<struct stat> model) {
    Io& p = *st->parent;
    SendOwn(
        p, Op::kCreate, p.target,
        [&model](Io& io) {
          io.args.mode = S_IFREG | (model ? (model->st_mode & 07777) : 0644);
          // Not O_EXCL: a racing write may win.
          io.args.open_flags = O_CREAT | O_WRONLY;
        },
        [this, st, model](Io& c) {
          const int err = ErrnoOf(c.status);
          if (err != 0 && err != EEXIST) {
            st->parent->Complete(c.status);
            return;
          }
          if (err != 0 || !model ||
              (c.attr.st_uid == model->st_uid &&
               c.attr.st_gid == model->st_gid)) {
            TryDetourCreate(st);
            return;
          }
          SendOwn(
              *st->parent, Op::kSetattr, st->parent->target,
              [&model](Io& io) {
                io.args.to_set = kSetUid | kSetGid;
                io.args.uid = model->st_uid;
                io.args.gid = model->st_gid;
              },
              [this, st](Io& o) {
                if (!o.status.ok()) {
                  st->parent->Complete(o.status);
                  return;
                }
                TryDetourCreate(st);
              });
        });
  };
  if (home.empty() || home == parent.target) {
    create(std::nullopt);
    return;
  }
  SendOwn(parent, Op::kGetattr, home, nullptr, [create](Io& g) mutable {
    if (g.status.ok() && S_ISREG(g.attr.st_mode)) {
      create(g.attr);
    } else {
      create(std::nullopt);
    }
  });
}

std::string SSwitch::ResolveWholeFile(const Snapshot& snap, const IoHeader& h) {
  return ResolveThroughStages(snap, h, h.op);
}

std::string SSwitch::HomeOf(const Snapshot& snap, const IoHeader& h) {
  return ResolveThroughStages(snap, h, Op::kGetattr);
}

// A local stage hands the IO back to be routed as source stage:NAME, so the
// file a waypoint route reaches is where the rules send that: follow it (a
// file whose every route passes a cache is still one file, not a file with
// its bytes elsewhere). A remote stage's server has the file itself.
std::string SSwitch::ResolveThroughStages(const Snapshot& snap, IoHeader h,
                                          Op as, bool* keeper) {
  if (keeper != nullptr) *keeper = false;
  for (int hop = 0; hop < kMaxStageHops; ++hop) {
    const RuleEntry* e = snap.table->MatchWholeAs(h, as);
    if (e == nullptr) return h.file;
    const Detour* io = nullptr;
    for (const Detour& d : e->rule().detours) {
      if (d.what == Detour::What::kIo) {
        io = &d;
        break;
      }
    }
    if (io == nullptr) return h.file;
    if (io->target.kind != Target::Kind::kStage) return ResolveEntry(e, h.file);
    if (!io->target.stage_host.empty()) return h.file;
    if (keeper != nullptr) {
      auto it = snap.stages->find(io->target.stage);
      if (it != snap.stages->end() && it->second->stage->KeepsNames()) {
        *keeper = true;
      }
    }
    h.stage = io->target.stage;
  }
  return "";  // a loop of stages
}

std::string SSwitch::ResolveEntry(const RuleEntry* e, const std::string& file) {
  if (e == nullptr) return file;
  for (const Detour& d : e->rule().detours) {
    if (d.what != Detour::What::kIo) continue;
    if (d.target.kind != Target::Kind::kFile) return "";
    return ResolveTargetFile(d.target, e->rule().pattern.file, file);
  }
  return file;
}

}  // namespace sroute
