// SPDX-License-Identifier: Apache-2.0
// Fan-out: the sub-IOs of a split (byte ranges) and of a scatter (several
// detours), joined into one reply; fences after a scatter that only some
// targets applied.
#include <fcntl.h>
#include <linux/falloc.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <optional>

#include "sswitch/snapshot.h"
#include "sswitch/sswitch.h"
#include "util/clock.h"
#include "util/errno_status.h"
#include "util/interned.h"
#include "util/log.h"
#include "util/mutex.h"
#include "util/strings.h"

namespace sroute {

// --- Join: sub-IOs of a split or a scatter -----------------------------------

struct SSwitch::Join {
  enum class Kind { kSplit, kScatterAll, kScatterQuorum, kScatterFirst };
  Kind kind;
  Io* parent;
  std::vector<std::unique_ptr<Io>> children;
  std::vector<std::vector<char>> buffers;  // scatter reads: one per child
  std::shared_ptr<std::string> data_copy;  // quorum writes outlive the caller
  // Guards the counts and the parent's fate. A leaf: the parent completes
  // after it is released.
  Mutex mu;
  size_t done ABSL_GUARDED_BY(mu) = 0;
  size_t ok ABSL_GUARDED_BY(mu) = 0;
  size_t needed = 0;  // successes that complete the parent
  bool parent_done ABSL_GUARDED_BY(mu) = false;
  bool parent_failed ABSL_GUARDED_BY(mu) = false;
  absl::Status first_error ABSL_GUARDED_BY(mu);
  SSwitch* sw;
  // Traced: when the fan-out began (its "join" hop names the piece or copy
  // whose answer completed the parent).
  uint64_t start_ns = 0;
  // A write-like scatter: the file it writes, fenced if the op fails after
  // some targets applied it (SSwitch::Fence).
  std::string fence_file;

  void ChildDone(size_t index, Io& child);
  void FinishSplit();
};

void SSwitch::Join::FinishSplit() {
  // Every piece is done; children are in offset order.
  const bool is_read = parent->header.op == Op::kRead;
  for (auto& c : children) {
    if (is_read && IsMissingPlace(*c)) {
      c->status = absl::OkStatus();
      c->bytes = 0;
    }
    if (!c->status.ok()) {
      parent->Complete(c->status);
      return;
    }
  }
  uint64_t total = 0;
  if (is_read) {
    // Bytes end where the last piece that returned data ends; short pieces
    // before it read a hole, which reads as zeros.
    for (auto& c : children) {
      if (c->bytes > 0) {
        total = c->header.offset - parent->header.offset + c->bytes;
      }
    }
    for (auto& c : children) {
      const uint64_t start = c->header.offset - parent->header.offset;
      if (start >= total) break;
      const uint64_t want = std::min<uint64_t>(c->header.length, total - start);
      if (c->bytes < want) {
        std::memset(parent->read_buffer.data() + start + c->bytes, 0,
                    want - c->bytes);
      }
    }
  } else {
    for (auto& c : children) total += c->bytes;
  }
  parent->bytes = total;
  parent->Complete(absl::OkStatus());
}

void SSwitch::Join::ChildDone(size_t index, Io& child) {
  Io* finish_with = nullptr;
  bool fail = false;
  bool fence = false;
  bool complete = false;
  absl::Status error;
  {
    MutexLock l(&mu);
    ++done;
    if (child.status.ok()) {
      ++ok;
    } else if (first_error.ok()) {
      first_error = child.status;
    }
    if (parent_done) {
      // A late scatter child: its error must not vanish.
      if (!child.status.ok()) sw->route_errors_.fetch_add(1);
    } else {
      switch (kind) {
        case Kind::kSplit:
        case Kind::kScatterAll:
          if (done == children.size()) parent_done = true;
          break;
        case Kind::kScatterQuorum:
        case Kind::kScatterFirst:
          if (ok >= needed) {
            parent_done = true;
            finish_with = &child;
          } else if (done - ok > children.size() - needed) {
            parent_done = true;  // the policy can no longer be met
            fail = true;
          } else if (done == children.size()) {
            parent_done = true;
            fail = true;
          }
          break;
      }
      if (parent_done) {
        complete = true;
        error = first_error;
        parent_failed = fail || (kind == Kind::kScatterAll && !error.ok());
      }
    }
    // Once every target answered: an op that failed, but that some target
    // applied, left the targets different.
    fence = done == children.size() && parent_failed && ok > 0 &&
            !fence_file.empty();
  }
  // Fenced before the caller hears of the failure: no IO after it finds
  // the file open.
  if (fence) sw->Fence(fence_file, children);
  if (!complete) return;
  if (parent->trace != nullptr) {
    // The piece or copy whose answer completed the parent: the last one
    // for a split or an all-ack scatter, the deciding one otherwise.
    const int32_t decided = static_cast<int32_t>(
        finish_with != nullptr ? finish_with->copy() : child.copy());
    parent->trace->Add(TraceHop{
        sw->name_, kind == Kind::kSplit ? "split" : "scatter", 0,
        StrCat(children.size(), kind == Kind::kSplit ? " pieces" : " copies"),
        start_ns, MonotonicNanos(), 0, decided, error.code()});
  }
  switch (kind) {
    case Kind::kSplit:
      FinishSplit();
      return;
    case Kind::kScatterAll: {
      if (!error.ok()) {
        parent->Complete(error);
        return;
      }
      // Results of the first target (all targets got the same IO), bytes
      // the fewest any target took.
      parent->AdoptResults(*children[0]);
      for (auto& c : children)
        parent->bytes = std::min(parent->bytes, c->bytes);
      parent->Complete(absl::OkStatus());
      return;
    }
    case Kind::kScatterQuorum:
    case Kind::kScatterFirst: {
      if (fail) {
        parent->Complete(error);
        return;
      }
      Io& c = *finish_with;
      parent->AdoptResults(c);
      if (kind == Kind::kScatterFirst && parent->header.op == Op::kRead) {
        std::memcpy(parent->read_buffer.data(), buffers[index].data(), c.bytes);
      }
      parent->Complete(absl::OkStatus());
      return;
    }
  }
}

void SSwitch::Split(Io* io, const RuleTable::Pieces& pieces) {
  auto join = std::make_shared<Join>();
  join->kind = Join::Kind::kSplit;
  join->parent = io;
  join->sw = this;
  join->children.reserve(pieces.size());
  for (const auto& piece : pieces) {
    // The piece's own bytes of the payload and of the read buffer.
    auto child = NewChild(*io);
    child->header.offset = piece.offset;
    child->header.length = piece.length;
    const uint64_t rel = piece.offset - io->header.offset;
    if (!io->write_data.empty()) {
      child->write_data = io->write_data.subspan(rel, piece.length);
    }
    if (!io->read_buffer.empty()) {
      child->read_buffer = io->read_buffer.subspan(rel, piece.length);
    }
    child->copy_ = static_cast<int32_t>(join->children.size());
    join->children.push_back(std::move(child));
  }
  if (io->trace != nullptr) join->start_ns = MonotonicNanos();
  for (size_t i = 0; i < pieces.size(); ++i) {
    Io* child = join->children[i].get();
    child->set_completion([join, i](Io& c) { join->ChildDone(i, c); });
  }
  // The join keeps the children alive; each child holds the join.
  for (size_t i = 0; i < pieces.size(); ++i) {
    RoutePiece(join->children[i].get(), pieces[i].rule);
  }
}

void SSwitch::Scatter(Io* io, const RuleEntry* entry,
                      const DetourList& detours) {
  const Rule& r = entry->rule();
  const OpClass cls = io->header.op_class();
  auto join = std::make_shared<Join>();
  join->parent = io;
  join->sw = this;
  const size_t n = detours.size();
  if (cls == kOpClassRead) {
    join->kind = Join::Kind::kScatterFirst;
    join->needed = 1;
  } else if (r.ack == 0 || r.ack >= n) {
    join->kind = Join::Kind::kScatterAll;
    join->needed = n;
  } else {
    join->kind = Join::Kind::kScatterQuorum;
    join->needed = r.ack;
    // The caller may reuse its buffer once the quorum acked; the others
    // still write from a copy.
    if (!io->write_data.empty()) {
      join->data_copy = std::make_shared<std::string>(io->write_data.data(),
                                                      io->write_data.size());
    }
  }
  if (join->kind != Join::Kind::kScatterFirst)
    join->fence_file = io->header.file;
  if (join->kind == Join::Kind::kScatterFirst && !io->read_buffer.empty()) {
    join->buffers.resize(n);
  }
  for (size_t i = 0; i < n; ++i) {
    // Every target gets the IO; a quorum write's payload is the join's
    // copy, a read's buffer one of the join's.
    auto child = NewChild(*io);
    if (join->data_copy) {
      child->write_data = std::span<const char>(join->data_copy->data(),
                                                join->data_copy->size());
    }
    if (!join->buffers.empty()) {
      join->buffers[i].resize(io->read_buffer.size());
      child->read_buffer = std::span<char>(join->buffers[i]);
    }
    child->copy_ = static_cast<int32_t>(i);
    // A copy may outlive the parent (the first read answer, a quorum's
    // ack complete it): it says where it waits in a slot of its own.
    child->waiting_at_ = &child->where_;
    join->children.push_back(std::move(child));
  }
  static const std::string* const kCopies = InternName("its scatter copies");
  io->NoteWaitingAt(kCopies);
  if (io->trace != nullptr) join->start_ns = MonotonicNanos();
  // Every name before the first send: a child that completes at once may
  // complete the parent (a read takes the first answer), whose issuer may
  // then free it.
  std::vector<std::string> files(n);
  for (size_t i = 0; i < n; ++i) {
    const Target& t = detours[i]->target;
    if (t.kind == Target::Kind::kFile) {
      files[i] = ResolveTargetFile(t, r.pattern.file, io->header.file);
    }
    join->children[i]->set_completion(
        [join, i](Io& c) { join->ChildDone(i, c); });
  }
  for (size_t i = 0; i < n; ++i) {
    SendTo(join->children[i].get(), detours[i]->target, std::move(files[i]),
           entry->id());
  }
}

// --- Fences ---

void SSwitch::Fence(const std::string& file,
                    const std::vector<std::unique_ptr<Io>>& targets) {
  std::string applied, failed;
  for (const auto& t : targets) {
    std::string& list = t->status.ok() ? applied : failed;
    StrAppend(&list, list.empty() ? "" : ", ", t->target);
    if (!t->status.ok()) StrAppend(&failed, " (", t->status.message(), ")");
  }
  std::string why = StrCat(OpName(targets[0]->header.op), " applied at ",
                           applied, ", failed at ", failed);
  LogError("fencing ", file, ": ", why,
           "; its IOs fail until the targets are identical again and the "
           "fence is cleared");
  MutexLock l(&fence_mu_);
  for (auto& [f, w] : fences_) {
    if (f == file) return;  // the first reason stays
  }
  fences_.emplace_back(file, std::move(why));
  fence_count_.store(fences_.size(), std::memory_order_relaxed);
}

bool SSwitch::FailIfFenced(Io* io) {
  switch (io->header.op) {
    case Op::kGetattr:
    case Op::kLookup:
    case Op::kReaddir:
    case Op::kReadlink:
    case Op::kStatfs:
    case Op::kGetxattr:
    case Op::kListxattr:
    case Op::kRmdir:
      return false;
    default:
      break;
  }
  std::string why;
  {
    MutexLock l(&fence_mu_);
    for (const auto& [f, w] : fences_) {
      if (f == io->header.file) why = w;
    }
  }
  if (why.empty()) return false;
  if (io->header.op == Op::kUnlink) {
    // Removing the file ends its fence.
    io->AddResponseHook([this, file = io->header.file](Io& done) {
      if (done.status.ok()) ClearFence(file).IgnoreError();
    });
    return false;
  }
  Fail(io,
       ErrnoStatus(
           EIO, StrCat(io->header.file, " is fenced: its copies differ since ",
                       why, "; make them identical and clear the fence")));
  return true;
}

std::vector<std::pair<std::string, std::string>> SSwitch::Fences() const {
  MutexLock l(&fence_mu_);
  return fences_;
}

absl::Status SSwitch::ClearFence(const std::string& file) {
  MutexLock l(&fence_mu_);
  auto it = std::find_if(fences_.begin(), fences_.end(),
                         [&](const auto& f) { return f.first == file; });
  if (it == fences_.end()) {
    return absl::NotFoundError(StrCat(file, " is not fenced"));
  }
  fences_.erase(it);
  fence_count_.store(fences_.size(), std::memory_order_relaxed);
  return absl::OkStatus();
}

}  // namespace sroute
