// SPDX-License-Identifier: Apache-2.0
// Files whose bytes live in several places: the operations that act on a
// whole file, done so that such a file behaves as a plain one.
//
// A file's *home* holds its name, attributes and size: it is where a
// getattr of the file goes. Rules may put bytes of the file elsewhere too:
// a ranged rule sends a byte range to another file, and a rule for writes
// that leaves reads alone (scatter replicas, track_writes) sends every
// write elsewhere. Those other files are the file's *places*, each made by
// one detour of one rule.
//
//  - A size change (setattr of the size, truncate, open or create with
//    O_TRUNC) goes where its rule sends it, to the home as well if that is
//    not among them (the size lives there), and then every place it did not
//    reach is cut to the new size if longer. Places are never extended:
//    bytes past a place's end read as zeros (ZeroFillShortRead).
//  - A read some of whose pieces leave the home and that comes back short
//    is completed with zeros up to the home's size.
//  - unlink removes the places too, so that bytes of a removed file never
//    show up in a new file of the same name.
//  - fsync reaches every place too: an fsync that succeeded made every
//    byte written before it durable, wherever a rule put it.
//  - rename and link move (or link) each place along when the new name has
//    the same place by the same rule; otherwise they fail with EXDEV before
//    anything changed (mv then copies through the routes).
//  - SEEK_DATA / SEEK_HOLE ask each piece's place about its part.
//  - fallocate collapse / insert range would shift bytes across places:
//    EOPNOTSUPP before anything changed.
//
// A place is one file's only: a target that many files share (a pattern
// matching many names whose target keeps no suffix) is not cut or removed.
// The IOs this file sends on its own go straight to endpoints (no rules),
// as the daemon unless they repeat the caller's own operation.
#include <fcntl.h>
#include <linux/falloc.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <optional>

#include "rules/parser.h"
#include "sswitch/snapshot.h"
#include "sswitch/sswitch.h"
#include "util/errno_status.h"
#include "util/strings.h"

namespace sroute {

// One file that holds bytes of another, and the detour that puts them there.
struct FilePlace {
  std::string file;
  const RuleEntry* rule = nullptr;
  size_t detour = 0;  // which of the rule's detours
};

namespace {
using Place = FilePlace;

struct FilePlaces {
  std::vector<Place> data;  // besides the home
  bool ranged = false;      // some ranged rule matches the file
};

// Whether rule `r` puts bytes of the files it matches somewhere (places)
// rather than being their home for the tenants it names: ranged rules,
// and whole-file rules for writes that leave reads alone.
bool PlacesBytes(const Rule& r) {
  if (r.pattern.file.range) return true;
  return (r.pattern.ops & kOpClassWrite) != 0 &&
         (r.pattern.ops & kOpClassRead) == 0;
}

bool IsDelegateMade(const RuleEntry& e) {
  return e.owner().starts_with("delegate:");
}

// The installed rules whose delegates made rules for exactly `file`.
std::vector<const InstalledRule*> TrackersOf(const Snapshot& snap,
                                             const std::string& file) {
  std::vector<const InstalledRule*> out;
  for (const RuleEntry* e : snap.table->RulesOfFile(file)) {
    if (!IsDelegateMade(*e) ||
        e->rule().pattern.file.kind != FilePattern::Kind::kExact ||
        e->rule().pattern.file.text != file) {
      continue;
    }
    const uint64_t id = std::strtoull(
        e->owner().c_str() + std::string_view("delegate:").size(), nullptr, 10);
    const InstalledRule* owner = AsInstalled(snap.table->Find(id));
    if (owner != nullptr && owner->delegate &&
        std::find(out.begin(), out.end(), owner) == out.end()) {
      out.push_back(owner);
    }
  }
  return out;
}

bool OneFileOnly(const Rule& r, const Target& t) {
  return r.pattern.file.kind == FilePattern::Kind::kExact || t.keeps_suffix();
}

bool Contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

// The places of `file`, leaving out `home`.
FilePlaces PlacesOf(const Snapshot& snap, const std::string& file,
                    const std::string& home) {
  FilePlaces p;
  // The rules' own places first: a delegate's rule for the file (a
  // track_writes read rule) names a place its rule makes too, and a rename
  // pairs places by the rule that makes them for both names.
  std::vector<const RuleEntry*> rules = snap.table->RulesOfFile(file);
  std::stable_partition(rules.begin(), rules.end(),
                        [](const RuleEntry* e) { return !IsDelegateMade(*e); });
  for (const RuleEntry* e : rules) {
    const Rule& r = e->rule();
    if (!PlacesBytes(r)) continue;
    if (r.pattern.file.range) p.ranged = true;
    for (size_t i = 0; i < r.detours.size(); ++i) {
      const Detour& d = r.detours[i];
      if (d.what != Detour::What::kIo || d.target.kind != Target::Kind::kFile ||
          !OneFileOnly(r, d.target)) {
        continue;
      }
      std::string f = ResolveTargetFile(d.target, r.pattern.file, file);
      if (f == home) continue;
      const bool seen =
          std::any_of(p.data.begin(), p.data.end(),
                      [&](const Place& q) { return q.file == f; });
      if (!seen) p.data.push_back(Place{std::move(f), e, i});
    }
  }
  return p;
}

// The files a whole-file IO with header `h` goes to by its rule (its own
// file when none matches, or the rule has no IO detour); stages and the
// controller are left out.
std::vector<std::string> TargetsOf(const Snapshot& snap, const IoHeader& h) {
  const RuleEntry* e = snap.table->MatchWhole(h);
  if (e == nullptr) return {h.file};
  std::vector<std::string> out;
  bool any_io = false;
  for (const Detour& d : e->rule().detours) {
    if (d.what != Detour::What::kIo) continue;
    any_io = true;
    if (d.target.kind == Target::Kind::kFile) {
      out.push_back(
          ResolveTargetFile(d.target, e->rule().pattern.file, h.file));
    }
  }
  if (!any_io) out.push_back(h.file);
  return out;
}

// Whether `file` lies in its host's reserved folder (docs/design.md §6), where
// a volume keeps files unlinked while open.
bool IsReserved(const std::string& file) {
  FileName n;
  return SplitFileName(file, &n) && InReservedDir(n.path);
}

// Whether every place of a file is a whole copy of it: made by a rule that
// sends the same writes to the home too (a scatter that includes it).
bool AllCopies(const FilePlaces& places, const std::string& file,
               const std::string& home) {
  for (const Place& p : places.data) {
    const Rule& r = p.rule->rule();
    if (r.pattern.file.range) return false;
    bool to_home = false;
    for (const Detour& d : r.detours) {
      to_home = to_home ||
                (d.what == Detour::What::kIo &&
                 d.target.kind == Target::Kind::kFile &&
                 ResolveTargetFile(d.target, r.pattern.file, file) == home);
    }
    if (!to_home) return false;
  }
  return true;
}

}  // namespace

bool IsMissingPlace(const Io& io) {
  return io.header.op == Op::kRead && ErrnoOf(io.status) == ENOENT &&
         !io.target.empty() && io.target != io.header.file;
}

std::string ParentFileOf(const std::string& file) {
  FileName n;
  if (!SplitFileName(file, &n)) return "";
  const size_t slash = n.path.rfind('/');
  if (slash == std::string_view::npos) return "";
  return JoinFileName(n.host, n.path.substr(0, slash));
}

void SSwitch::RouteChildThen(Io* parent, std::unique_ptr<Io>* slot,
                             absl::AnyInvocable<void()> then) {
  *slot = NewChild(*parent);
  (*slot)->set_completion([parent, then = std::move(then)](Io& c) mutable {
    parent->AdoptResults(c);
    if (!c.status.ok()) {
      parent->Complete(c.status);
      return;
    }
    then();
  });
  Dispatch(slot->get());
}

void SSwitch::SubmitDirect(Io* io, const std::string& file) {
  io->target = file;
  FileName name;
  if (!SplitFileName(file, &name)) {
    Fail(io, absl::InvalidArgumentError(
                 StrCat("'", file, "' is not a file name //HOST/PATH")));
    return;
  }
  const auto& endpoints = *io->snapshot_->endpoints;
  auto it = endpoints.find(name.host);
  if (it == endpoints.end()) {
    Fail(io, absl::NotFoundError(
                 StrCat("no endpoint named '", name.host, "' for ", file)));
    return;
  }
  const Op op = io->header.op;
  if (op == Op::kRenameFrom || op == Op::kLink) {
    FileName other;
    if (!SplitFileName(io->args.second_file, &other) ||
        other.host != name.host) {
      Fail(io, ErrnoStatus(EXDEV, StrCat(OpName(op), " ", file, " -> ",
                                         io->args.second_file,
                                         ": not on one endpoint")));
      return;
    }
    io->args.second_file = std::string(other.path);
  }
  it->second.Sent(io);
  it->second.endpoint->Submit(io, name.path);
}

void SSwitch::SubmitOwn(Io* io, const std::string& file) {
  io->router_ = this;
  // The endpoints only: an IO a stage's own thread holds must not keep the
  // stage alive (its last reference, dropped there, would join that thread
  // from itself).
  const std::shared_ptr<const Snapshot> now = Load();
  auto own = std::make_shared<Snapshot>();
  own->version = now->version;
  own->endpoints = now->endpoints;
  io->snapshot_ = std::move(own);
  SubmitDirect(io, file);
}

void SSwitch::SendOwn(const Io& like, Op op, const std::string& file,
                      const std::function<void(Io&)>& setup,
                      absl::AnyInvocable<void(Io&)> done) {
  auto* io = new Io;
  io->header.source = like.header.source;
  io->header.op = op;
  io->header.file = file;
  io->snapshot_ = like.snapshot_;
  if (setup) setup(*io);
  io->set_completion([done = std::move(done)](Io& x) mutable {
    done(x);
    delete &x;
  });
  SubmitDirect(io, file);
}

// --- Size changes and removals ------------------------------------------

struct SSwitch::SizeFanOut {
  Io* parent;
  std::unique_ptr<Io> child;
  std::string home;             // the home, when the op's rule did not reach it
  Op place_op = Op::kTruncate;  // kTruncate (shrink only) or kUnlink
  uint64_t size = 0;
  std::vector<std::string> places;  // to cut or remove
  size_t next = 0;
  // An unlink: rules whose delegates route the file's bytes by name, and
  // the durable rules that retire them (sent with the places' unlinks until
  // one stores them).
  std::vector<const InstalledRule*> trackers;
  std::vector<DelegateRuleRecord> records;
  bool records_stored = false;
};

void SSwitch::StepSizeFanOut(const std::shared_ptr<SizeFanOut>& st) {
  Io& parent = *st->parent;
  if (!st->home.empty()) {
    const std::string home = std::move(st->home);
    st->home.clear();
    // The same operation, as the caller, at the home: it holds the size
    // and attributes.
    SendOwn(
        parent, parent.header.op, home,
        [&parent](Io& io) {
          io.header.offset = parent.header.offset;
          io.header.length = parent.header.length;
          io.args = parent.args;
        },
        [this, st](Io& io) {
          // No file at the home (an sSwitch without a front end that made
          // one): only the routed op counts.
          if (io.status.ok()) {
            st->parent->attr = io.attr;
          } else if (ErrnoOf(io.status) != ENOENT) {
            st->parent->Complete(io.status);
            return;
          }
          StepSizeFanOut(st);
        });
    return;
  }
  if (st->next == st->places.size()) {
    for (const InstalledRule* t : st->trackers) {
      DelegateRenamed(t, parent.header.file, "", {});
    }
    parent.Complete(absl::OkStatus());
    return;
  }
  const std::string& place = st->places[st->next++];
  SendOwn(
      parent, st->place_op, place,
      [&st](Io& io) {
        io.args.size = st->size;
        io.args.truncate_mode = TruncateMode::kShrinkOnly;
        io.args.datasync = st->parent->args.datasync;
        if (!st->records_stored) io.records = st->records;
      },
      [this, st, place](Io& io) {
        if (io.status.ok() && !io.records.empty()) st->records_stored = true;
        // A place nothing was written to yet does not exist.
        if (!io.status.ok() && ErrnoOf(io.status) != ENOENT) {
          st->parent->Complete(ErrnoStatus(
              ErrnoOf(io.status),
              StrCat(
                  OpName(st->parent->header.op), " ", st->parent->header.file,
                  ": done at its home, but ", place,
                  " (which holds bytes of it) failed: ", io.status.message())));
          return;
        }
        StepSizeFanOut(st);
      });
}

bool SSwitch::RouteWholeFile(Io* io) {
  const IoHeader& h = io->header;
  const IoArgs& a = io->args;
  std::optional<uint64_t> new_size;
  switch (h.op) {
    case Op::kSetattr:
      if (a.to_set & kSetSize) new_size = a.size;
      break;
    case Op::kTruncate:
      if (a.truncate_mode != TruncateMode::kExact) {
        return false;  // the sSwitch's own growing
      }
      new_size = a.size;
      break;
    case Op::kOpen:
      if (!(a.open_flags & O_TRUNC) || (a.open_flags & O_ACCMODE) == O_RDONLY) {
        return false;
      }
      new_size = 0;
      break;
    case Op::kCreate:
      if (!(a.open_flags & O_TRUNC)) return false;
      new_size = 0;
      break;
    case Op::kFallocate:
      if (!(a.fallocate_mode &
            (FALLOC_FL_COLLAPSE_RANGE | FALLOC_FL_INSERT_RANGE))) {
        return false;
      }
      break;
    case Op::kUnlink:
    case Op::kLseek:
    case Op::kRenameFrom:
    case Op::kLink:
    case Op::kFsync:
      break;
    default:
      return false;
  }
  const Snapshot& snap = *io->snapshot_;
  if (h.op == Op::kRenameFrom || h.op == Op::kLink) {
    // Both names: for a link the header names the new one.
    const std::string& from = h.op == Op::kLink ? a.second_file : h.file;
    const std::string& to = h.op == Op::kLink ? h.file : a.second_file;
    if (!snap.table->MayRoute(from) && !snap.table->MayRoute(to)) return false;
    IoHeader hf = h, ht = h;
    hf.file = from;
    ht.file = to;
    const std::string from_home = HomeOf(snap, hf);
    const FilePlaces pf = PlacesOf(snap, from, from_home);
    const FilePlaces pt = PlacesOf(snap, to, HomeOf(snap, ht));
    if (pf.data.empty() && pt.data.empty()) return false;
    if (h.op == Op::kRenameFrom && IsReserved(to) &&
        AllCopies(pf, from, from_home)) {
      // The volume keeps a file unlinked while open under a hidden name of
      // its reserved folder: the home holds every byte, the copies go.
      auto st = std::make_shared<SizeFanOut>();
      st->parent = io;
      st->place_op = Op::kUnlink;
      for (const Place& p : pf.data) st->places.push_back(p.file);
      RouteChildThen(io, &st->child, [this, st] { StepSizeFanOut(st); });
      return true;
    }
    return MovePlaces(io, pf.data, pt.data);
  }
  if (!snap.table->MayRoute(h.file)) return false;
  const std::string home = HomeOf(snap, h);
  const FilePlaces places = PlacesOf(snap, h.file, home);
  switch (h.op) {
    case Op::kLseek:
      if (!places.ranged || home.empty()) return false;
      SeekAcrossPlaces(io, home);
      return true;
    case Op::kFallocate:
      if (places.data.empty()) return false;
      Fail(io, ErrnoStatus(EOPNOTSUPP,
                           StrCat("fallocate collapse/insert range of ", h.file,
                                  ": its bytes live in several files (",
                                  places.data[0].file,
                                  " among them), which cannot shift together; "
                                  "nothing was changed")));
      return true;
    default:
      break;
  }
  const std::vector<std::string> targets = TargetsOf(snap, h);
  auto st = std::make_shared<SizeFanOut>();
  st->parent = io;
  if ((h.op == Op::kSetattr || h.op == Op::kTruncate) && !home.empty() &&
      !Contains(targets, home)) {
    st->home = home;
  }
  if (h.op == Op::kUnlink || h.op == Op::kFsync || new_size) {
    st->place_op = h.op == Op::kUnlink  ? Op::kUnlink
                   : h.op == Op::kFsync ? Op::kFsync
                                        : Op::kTruncate;
    st->size = new_size.value_or(0);
    for (const Place& p : places.data) {
      if (!Contains(targets, p.file)) st->places.push_back(p.file);
    }
  }
  if (h.op == Op::kUnlink && !st->places.empty()) {
    // A delegate's rules for the name go with it: a new file of that name
    // must not read these places.
    st->trackers = TrackersOf(snap, h.file);
    st->records = DelegateRenameRecords(st->trackers, h.file, "", {});
  }
  if (st->home.empty() && st->places.empty()) return false;
  RouteChildThen(io, &st->child, [this, st] { StepSizeFanOut(st); });
  return true;
}

// --- Reads ------------------------------------------------------------------

Io* SSwitch::ZeroFillShortRead(Io* io) {
  struct Fill {
    Io* parent;
    std::unique_ptr<Io> read;
  };
  auto f = std::make_shared<Fill>();
  f->parent = io;
  f->read = NewChild(*io);
  f->read->set_completion([this, f](Io& r) {
    Io& parent = *f->parent;
    if (IsMissingPlace(r)) {
      r.status = absl::OkStatus();
      r.bytes = 0;
    }
    parent.AdoptResults(r);
    if (!r.status.ok() || r.bytes >= parent.header.length) {
      parent.Complete(r.status);
      return;
    }
    const std::string home = HomeOf(*parent.snapshot_, parent.header);
    if (home.empty()) {
      parent.Complete(absl::OkStatus());
      return;
    }
    SendOwn(parent, Op::kGetattr, home, nullptr, [f](Io& g) {
      Io& p = *f->parent;
      if (!g.status.ok()) {
        p.Complete(g.status);
        return;
      }
      // Bytes up to the file's size; what no place returned is a hole.
      const uint64_t size =
          static_cast<uint64_t>(std::max<off_t>(0, g.attr.st_size));
      const uint64_t off = p.header.offset;
      const uint64_t want =
          size <= off ? 0 : std::min<uint64_t>(p.header.length, size - off);
      if (want > p.bytes) {
        std::fill(p.read_buffer.begin() + static_cast<ptrdiff_t>(p.bytes),
                  p.read_buffer.begin() + static_cast<ptrdiff_t>(want), 0);
      }
      p.bytes = want;
      p.Complete(absl::OkStatus());
    });
  });
  return f->read.get();
}

// --- rename and link
// ----------------------------------------------------------

struct SSwitch::PlaceMoves {
  Io* parent;
  std::unique_ptr<Io> child;
  Op op;  // kRenameFrom or kLink
  std::string from_name, to_name;
  std::vector<std::pair<std::string, std::string>> moves;  // from, to
  size_t next = 0;
  bool made_parents = false;  // for the current move
  // Rules whose delegates route bytes of either name by name (the parent's
  // snapshot keeps them), and the durable rules that say where those bytes
  // go after the rename (sent with the first place renamed, until one
  // stores them).
  std::vector<const InstalledRule*> trackers;
  std::vector<DelegateRuleRecord> records;
  bool records_stored = false;
};

bool SSwitch::MovePlaces(Io* io, const std::vector<Place>& from,
                         const std::vector<Place>& to) {
  const IoHeader& h = io->header;
  const std::string& from_name =
      h.op == Op::kLink ? io->args.second_file : h.file;
  const std::string& to_name =
      h.op == Op::kLink ? h.file : io->args.second_file;
  auto refuse = [&](const std::string& why) {
    Fail(io, ErrnoStatus(EXDEV,
                         StrCat(OpName(h.op), " ", from_name, " -> ", to_name,
                                ": ", why, "; nothing was changed")));
    return true;
  };
  if (h.op == Op::kRenameFrom && (io->args.rename_flags & RENAME_EXCHANGE)) {
    return refuse("bytes of these files live in several places");
  }
  auto st = std::make_shared<PlaceMoves>();
  st->parent = io;
  st->op = h.op;
  st->from_name = from_name;
  st->to_name = to_name;
  const Snapshot& snap = *io->snapshot_;
  st->trackers = TrackersOf(snap, from_name);
  if (h.op == Op::kLink && !st->trackers.empty()) {
    // The delegate routes the file's bytes by name: a second name would not
    // follow later writes through the first.
    return refuse(StrCat("a delegate routes its bytes by name (",
                         FormatRule(st->trackers[0]->rule()), ")"));
  }
  for (const InstalledRule* t : TrackersOf(snap, to_name)) {
    if (std::find(st->trackers.begin(), st->trackers.end(), t) ==
        st->trackers.end()) {
      st->trackers.push_back(t);
    }
  }
  for (const Place& p : from) {
    auto q = std::find_if(to.begin(), to.end(), [&](const Place& x) {
      return x.rule == p.rule && x.detour == p.detour;
    });
    std::string moved_to;
    if (q != to.end()) {
      moved_to = q->file;
    } else if (IsDelegateMade(*p.rule)) {
      // A place only a delegate's rule names (the rule that made it has
      // changed since): the new name's place beside it, as its rule made
      // it (the old name's path ends both).
      FileName fn, tn;
      if (SplitFileName(from_name, &fn) && SplitFileName(to_name, &tn) &&
          p.file.ends_with(fn.path) && p.file.size() > fn.path.size()) {
        moved_to =
            StrCat(p.file.substr(0, p.file.size() - fn.path.size()), tn.path);
      }
    }
    if (moved_to.empty()) {
      return refuse(StrCat("bytes of the first live in ", p.file,
                           ", where no rule puts bytes of the second"));
    }
    FileName a, b;
    if (!SplitFileName(p.file, &a) || !SplitFileName(moved_to, &b) ||
        a.host != b.host) {
      return refuse(
          StrCat(p.file, " and ", moved_to, " are not on one endpoint"));
    }
    st->moves.emplace_back(p.file, std::move(moved_to));
  }
  for (const Place& q : to) {
    const bool paired =
        IsDelegateMade(*q.rule) ||  // the replaced file's: retired below
        std::any_of(from.begin(), from.end(), [&](const Place& p) {
          return p.rule == q.rule && p.detour == q.detour;
        });
    if (!paired) {
      return refuse(StrCat("a rule puts bytes of the second in ", q.file,
                           ", where none of the first are"));
    }
  }
  st->records =
      DelegateRenameRecords(st->trackers, from_name, to_name, st->moves);
  RouteChildThen(io, &st->child, [this, st] { StepPlaceMoves(st); });
  return true;
}

void SSwitch::StepPlaceMoves(const std::shared_ptr<PlaceMoves>& st) {
  if (st->next == st->moves.size()) {
    // Every byte moved: the delegates' rules follow the new name.
    for (const InstalledRule* t : st->trackers) {
      DelegateRenamed(t, st->from_name, st->to_name, st->moves);
    }
    st->parent->Complete(absl::OkStatus());
    return;
  }
  const std::string from = st->moves[st->next].first;
  const std::string to = st->moves[st->next].second;
  auto fail = [st](const std::string& file, const absl::Status& s) {
    st->parent->Complete(ErrnoStatus(
        ErrnoOf(s),
        StrCat(OpName(st->op), " ", st->parent->header.file,
               ": done at its home, but ", file,
               " (which holds bytes of it) failed: ", s.message())));
  };
  auto next = [this, st] {
    ++st->next;
    st->made_parents = false;
    StepPlaceMoves(st);
  };
  SendOwn(
      // A link's header names the new name, args.second_file the existing
      // one.
      *st->parent, st->op, st->op == Op::kLink ? to : from,
      [&](Io& io) {
        io.args.second_file = st->op == Op::kLink ? from : to;
        if (!st->records_stored) io.records = st->records;
      },
      [this, st, from, to, fail, next](Io& io) {
        if (io.status.ok()) {
          if (!io.records.empty()) st->records_stored = true;
          return next();
        }
        if (ErrnoOf(io.status) != ENOENT) return fail(from, io.status);
        // Either nothing was ever written to `from`, or the directory of
        // `to` is missing there.
        SendOwn(*st->parent, Op::kGetattr, from, nullptr,
                [this, st, from, to, fail, next](Io& g) {
                  if (ErrnoOf(g.status) == ENOENT || st->made_parents) {
                    if (st->op == Op::kLink) return next();
                    // A stale `to` must not show through the new name.
                    SendOwn(
                        *st->parent, Op::kUnlink, to, nullptr,
                        [to, fail, next](Io& u) {
                          if (u.status.ok() || ErrnoOf(u.status) == ENOENT) {
                            return next();
                          }
                          fail(to, u.status);
                        });
                    return;
                  }
                  if (!g.status.ok()) return fail(from, g.status);
                  st->made_parents = true;
                  MakeParents(*st->parent, to, {ParentFileOf(from)},
                              [this, st, to, fail](absl::Status s) {
                                if (!s.ok()) return fail(to, s);
                                StepPlaceMoves(st);  // the same move again
                              });
                });
      });
}

// --- Making directories at places and detours -----------------------------

void SSwitch::MakeParents(const Io& like, const std::string& file,
                          std::vector<std::string> models,
                          absl::AnyInvocable<void(absl::Status)> done) {
  struct Parents {
    const Io* like;
    std::vector<std::string> dirs;  // outermost first
    size_t next = 0;
    struct stat model {};
    bool have_model = false;
    absl::AnyInvocable<void(absl::Status)> done;
  };
  auto st = std::make_shared<Parents>();
  st->like = &like;
  st->done = std::move(done);
  FileName n;
  if (!SplitFileName(file, &n)) {
    st->done(absl::InvalidArgumentError(StrCat("bad file name ", file)));
    return;
  }
  for (size_t p = n.path.find('/'); p != std::string_view::npos;
       p = n.path.find('/', p + 1)) {
    st->dirs.push_back(JoinFileName(n.host, n.path.substr(0, p)));
  }
  auto step = std::make_shared<std::function<void()>>();
  *step = [this, st, step] {
    if (st->next == st->dirs.size()) {
      auto done = std::move(st->done);
      *step = nullptr;  // breaks the cycle through the captures
      done(absl::OkStatus());
      return;
    }
    const std::string dir = st->dirs[st->next++];
    SendOwn(
        *st->like, Op::kMkdir, dir,
        [&st](Io& io) {
          io.args.mode = st->have_model ? (st->model.st_mode & 07777) : 0755;
        },
        [this, st, step, dir](Io& m) {
          const int err = ErrnoOf(m.status);
          if (err == EEXIST) return (*step)();
          if (err != 0) {
            auto done = std::move(st->done);
            *step = nullptr;
            done(m.status);
            return;
          }
          if (!st->have_model || (m.attr.st_uid == st->model.st_uid &&
                                  m.attr.st_gid == st->model.st_gid)) {
            return (*step)();
          }
          SendOwn(
              *st->like, Op::kSetattr, dir,
              [&st](Io& io) {
                io.args.to_set = kSetUid | kSetGid;
                io.args.uid = st->model.st_uid;
                io.args.gid = st->model.st_gid;
              },
              [st, step](Io&) { (*step)(); });  // an owner is best effort
        });
  };
  // The first model that is a directory, then the steps.
  auto models_left = std::make_shared<std::vector<std::string>>();
  for (auto it = models.rbegin(); it != models.rend(); ++it) {
    if (!it->empty()) models_left->push_back(std::move(*it));
  }
  // Each pending getattr holds the search; the search itself holds only a
  // weak reference (no cycle to break).
  auto find_model = std::make_shared<std::function<void()>>();
  std::weak_ptr<std::function<void()>> weak = find_model;
  *find_model = [this, st, step, models_left, weak] {
    if (models_left->empty()) {
      (*step)();
      return;
    }
    const std::string model = std::move(models_left->back());
    models_left->pop_back();
    SendOwn(*st->like, Op::kGetattr, model, nullptr,
            [st, step, again = weak.lock()](Io& g) {
              if (g.status.ok() && S_ISDIR(g.attr.st_mode)) {
                st->model = g.attr;
                st->have_model = true;
                (*step)();
                return;
              }
              (*again)();
            });
  };
  (*find_model)();
}

// --- SEEK_DATA / SEEK_HOLE
// ------------------------------------------------------

struct SSwitch::SeekAcross {
  Io* parent;
  uint64_t size = 0;
  // [offset, end) and the file that holds it.
  struct Part {
    uint64_t offset;
    uint64_t end;
    std::string file;  // "" when no file can tell (a stage): all data
  };
  std::vector<Part> parts;
  size_t next = 0;
};

void SSwitch::SeekAcrossPlaces(Io* io, const std::string& home) {
  SendOwn(*io, Op::kGetattr, home, nullptr, [this, io](Io& g) {
    if (!g.status.ok()) {
      io->Complete(g.status);
      return;
    }
    auto st = std::make_shared<SeekAcross>();
    st->parent = io;
    st->size = static_cast<uint64_t>(std::max<off_t>(0, g.attr.st_size));
    const uint64_t off = io->header.offset;
    if (off >= st->size) {
      io->Complete(ErrnoStatus(
          ENXIO, StrCat("lseek ", io->header.file, ": offset past the end")));
      return;
    }
    // The pieces a read of [off, size) would be split into.
    IoHeader h = io->header;
    h.op = Op::kRead;
    h.length = st->size - off;
    RuleTable::Pieces pieces;
    io->snapshot_->table->Match(h, &pieces);
    for (const auto& piece : pieces) {
      std::string file = io->header.file;
      if (piece.rule != nullptr) {
        file.clear();
        for (const Detour& d : piece.rule->rule().detours) {
          if (d.what != Detour::What::kIo) continue;
          if (d.target.kind == Target::Kind::kFile) {
            file = ResolveTargetFile(d.target, piece.rule->rule().pattern.file,
                                     io->header.file);
          }
          break;
        }
      }
      st->parts.push_back(
          {piece.offset, piece.offset + piece.length, std::move(file)});
    }
    StepSeek(st);
  });
}

void SSwitch::StepSeek(const std::shared_ptr<SeekAcross>& st) {
  Io& parent = *st->parent;
  const bool data = parent.args.whence == SEEK_DATA;
  auto answer = [&parent](uint64_t at) {
    parent.bytes = at;
    parent.Complete(absl::OkStatus());
  };
  if (st->next == st->parts.size()) {
    // Past the last part: no more data; the end of the file is a hole.
    if (data) {
      parent.Complete(
          ErrnoStatus(ENXIO, StrCat("lseek ", parent.header.file,
                                    ": no data past ", parent.header.offset)));
    } else {
      answer(st->size);
    }
    return;
  }
  const SeekAcross::Part part = st->parts[st->next++];
  const uint64_t from = std::max(part.offset, parent.header.offset);
  if (part.file.empty()) {
    if (data) return answer(from);
    return StepSeek(st);
  }
  SendOwn(
      parent, Op::kLseek, part.file,
      [from, &parent](Io& io) {
        io.header.offset = from;
        io.args.whence = parent.args.whence;
      },
      [this, st, part, from, data, answer](Io& io) {
        const int err = ErrnoOf(io.status);
        // ENXIO: `from` is past the place's end; ENOENT: nothing was
        // written there. Either way a hole up to the part's end.
        if (err == ENXIO || err == ENOENT) {
          if (data) return StepSeek(st);
          return answer(from);
        }
        if (err != 0) {
          st->parent->Complete(io.status);
          return;
        }
        if (io.bytes < part.end) return answer(io.bytes);
        StepSeek(st);
      });
}

}  // namespace sroute
