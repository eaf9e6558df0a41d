// SPDX-License-Identifier: Apache-2.0
// The replica_set stage: identity of its files, its members, the dirty
// regions and the order of changes per file (replica_set_impl.h).
#include "stages/replica_set/replica_set_stage.h"

#include <fcntl.h>
#include <stdio.h>  // RENAME_EXCHANGE

#include <algorithm>
#include <array>
#include <bit>
#include <chrono>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/hash/hash.h"
#include "absl/strings/numbers.h"
#include "absl/time/clock.h"
#include "rules/io_header.h"
#include "sswitch/sswitch.h"
#include "stages/replica_set/replica_set_impl.h"
#include "util/clock.h"
#include "util/errno_status.h"
#include "util/log.h"
#include "util/strings.h"

namespace sroute {

using replica_set_internal::IsChange;
using replica_set_internal::IsFull;
using replica_set_internal::IsMemberFailure;
using replica_set_internal::ParentOf;
using replica_set_internal::PathOf;

// --- Identity ----------------------------------------------------------------

void ReplicaSetStage::KeepIdentity(Io& io) {
  constexpr size_t kMaxIdentities = 1 << 18;
  // Reads and writes of bytes never change which file a name is: no lock
  // on their path.
  if (io.attr.st_ino == 0 || io.header.op == Op::kRead ||
      io.header.op == Op::kWrite) {
    return;
  }
  std::string path = PathOf(io.header.file);
  MutexLock l(&id_mu_);
  auto it = ids_.find(path);
  if (it == ids_.end()) {
    if (ids_.size() >= kMaxIdentities) ids_.clear();
    ids_.emplace(std::move(path), Identity{io.attr.st_dev, io.attr.st_ino});
    return;
  }
  io.attr.st_dev = it->second.dev;
  io.attr.st_ino = it->second.ino;
}

void ReplicaSetStage::IdentityAfterChange(Io& change) {
  const Op op = change.header.op;
  if (op == Op::kUnlink || op == Op::kRmdir) {
    MutexLock l(&id_mu_);
    ids_.erase(PathOf(change.header.file));
    return;
  }
  if (op != Op::kRenameFrom && op != Op::kRenameTo) {
    KeepIdentity(change);  // its answer's attributes are the file's
    return;
  }
  if (change.args.second_file.empty()) return;
  const std::string a = PathOf(change.header.file);
  const std::string b = PathOf(change.args.second_file);
  const std::string& from = op == Op::kRenameFrom ? a : b;
  const std::string& to = op == Op::kRenameFrom ? b : a;
  MutexLock l(&id_mu_);
  auto moved = TakeSubtreeLocked(from);
  // A name replaced (its identities go) or, exchanged, moved the other way.
  auto other = TakeSubtreeLocked(to);
  for (auto& [rest, id] : moved) ids_[to + rest] = id;
  if ((change.args.rename_flags & RENAME_EXCHANGE) != 0) {
    for (auto& [rest, id] : other) ids_[from + rest] = id;
  }
}

std::vector<std::pair<std::string, ReplicaSetStage::Identity>>
ReplicaSetStage::TakeSubtreeLocked(const std::string& path) {
  std::vector<std::pair<std::string, Identity>> out;
  auto self = ids_.find(path);
  if (self != ids_.end()) {
    out.emplace_back("", self->second);
    ids_.erase(self);
  }
  // "path/" up to "path0" ('0' follows '/'): the names beneath it.
  const std::string below = path + "/";
  auto it = ids_.lower_bound(below);
  while (it != ids_.end() && it->first.starts_with(below)) {
    out.emplace_back(it->first.substr(path.size()), it->second);
    it = ids_.erase(it);
  }
  return out;
}

// --- Members -----------------------------------------------------------------

int ReplicaSetStage::LeastLoaded(const std::vector<int>& live) const {
  int best = live.front();
  double best_score = 0;
  const uint64_t now = MonotonicNanos();
  for (int m : live) {
    const Load& l = *load_[m];
    const double score =
        static_cast<double>(l.in_flight.load(std::memory_order_relaxed) + 1) *
        static_cast<double>(std::max<uint64_t>(l.AgedEwmaNs(now), 1));
    if (m == live.front() || score < best_score) {
      best = m;
      best_score = score;
    }
  }
  return best;
}

ReplicaSetStage::ReadPlan ReplicaSetStage::PlanRead(const std::string& file) {
  MutexLock l(&mu_);
  for (const Flow& f : flows_) {
    if (f.prefix ? file.starts_with(f.file) : file == f.file) {
      return ReadPlan{f.read, f.read_set == 0 ? 0 : ~f.read_set};
    }
  }
  return ReadPlan{read_, 0};
}

std::vector<int> ReplicaSetStage::Live(uint64_t exclude, ReadPolicy read,
                                       uint64_t key) {
  MutexLock l(&mu_);
  std::vector<int> live;
  for (size_t i = 0; i < members_.size(); ++i) {
    if (!out_[i] && (bits_.at(members_[i]) & exclude) == 0) {
      live.push_back(static_cast<int>(i));
    }
  }
  if (live.empty()) return live;
  // placement anywhere: reads go to read-mode members when one holds the
  // region; the write-mode holders come after (failover, or the only
  // holders).
  std::vector<int> writing;
  if (anywhere_ && write_mode_ != 0) {
    std::vector<int> reading;
    for (int m : live) {
      ((bits_.at(members_[m]) & write_mode_) != 0 ? writing : reading)
          .push_back(m);
    }
    if (reading.empty()) {
      writing.clear();
    } else {
      live = std::move(reading);
    }
  }
  auto first = std::find(live.begin(), live.end(), primary_);
  if (read == ReadPolicy::kRandom) {
    thread_local std::minstd_rand rng(std::random_device{}());
    first = live.begin() + static_cast<long>(rng() % live.size());
  } else if (read == ReadPolicy::kLeastLoaded || read == ReadPolicy::kHedged) {
    first = std::find(live.begin(), live.end(), LeastLoaded(live));
  } else if (read == ReadPolicy::kWeighted) {
    first = PickWeighted(live);
  } else if (read == ReadPolicy::kHash) {
    first = live.begin() + static_cast<long>(key % live.size());
  }
  if (first != live.end()) std::rotate(live.begin(), first, live.end());
  AvoidCollecting(live);
  live.insert(live.end(), writing.begin(), writing.end());
  return live;
}

void ReplicaSetStage::TakeOut(int member, const absl::Status& why) {
  MutexLock l(&mu_);
  if (out_[member]) return;
  out_[member] = true;
  ++epoch_[member];
  LogWarning("replica set ", name_, ": member ", members_[member],
             " leaves the set: ", why.message());
}

std::string ReplicaSetStage::MemberName(int member) {
  MutexLock l(&mu_);
  return members_[member];
}

uint64_t ReplicaSetStage::MemberBit(int member) {
  MutexLock l(&mu_);
  return bits_.at(members_[member]);
}

// Sends `child` (for `member`) on, as //MEMBER/PATH; a rename's or link's
// other name too.
void ReplicaSetStage::SendTo(Io* child, int member) {
  const std::string m = MemberName(member);
  if (!child->args.second_file.empty() &&
      (child->header.op == Op::kRenameFrom ||
       child->header.op == Op::kRenameTo || child->header.op == Op::kLink)) {
    child->args.second_file =
        StrCat("//", m, "/", PathOf(child->args.second_file));
  }
  sw_->SubmitDirect(child, StrCat("//", m, "/", PathOf(child->header.file)));
}

// --- Dirty regions
// -------------------------------------------------------------

std::vector<ReplicaSetStage::Span> ReplicaSetStage::SpansOf(
    const Io& io) const {
  std::vector<Span> spans;
  const std::string path = PathOf(io.header.file);
  auto whole = [&](const std::string& p) {
    spans.push_back(Span{p, RegionLog::kWholeName, RegionLog::kWholeName});
    spans.push_back(Span{ParentOf(p), RegionLog::kList, RegionLog::kList});
  };
  switch (io.header.op) {
    case Op::kWrite:
    case Op::kFallocate: {
      const uint64_t end =
          io.header.offset + std::max<uint64_t>(io.header.length, 1);
      spans.push_back(Span{path, io.header.offset / region_size_,
                           (end - 1) / region_size_});
      break;
    }
    case Op::kTruncate:
    case Op::kSetattr:
    case Op::kSetxattr:
    case Op::kRemovexattr:
      spans.push_back(Span{path, RegionLog::kAttrs, RegionLog::kAttrs});
      break;
    case Op::kOpen:
      if ((io.args.open_flags & O_TRUNC) != 0) {
        spans.push_back(Span{path, RegionLog::kAttrs, RegionLog::kAttrs});
      }
      break;
    case Op::kCreate:
    case Op::kMknod:
    case Op::kMkdir:
    case Op::kSymlink:
    case Op::kLink:
    case Op::kUnlink:
    case Op::kRmdir:
      whole(path);
      break;
    case Op::kRenameFrom:
    case Op::kRenameTo:
      whole(path);
      if (!io.args.second_file.empty()) whole(PathOf(io.args.second_file));
      break;
    default:  // fsync, flush: no member's bytes change
      break;
  }
  return spans;
}

void ReplicaSetStage::QueueLocked(const std::string& path, uint64_t region,
                                  Region& r) {
  r.persisted = true;
  r.persisted_intent = r.in_flight > 0 || r.diverged;
  r.persisted_stale = r.stale;
  r.persist_seq = ++queued_seq_;
  RegionRecord rec;
  rec.path = path;
  rec.region = region;
  rec.version = r.version;
  rec.intent = r.persisted_intent;
  // Names, not bits: the bits are this process's.
  for (uint64_t bits = r.stale; bits != 0; bits &= bits - 1) {
    rec.stale.push_back(bit_names_[std::countr_zero(bits)]);
  }
  queued_.push_back(std::move(rec));
}

uint64_t ReplicaSetStage::BeginChange(const std::vector<Span>& spans,
                                      uint64_t* stale_before) {
  uint64_t need = 0;
  *stale_before = 0;
  MutexLock l(&log_mu_);
  for (const Span& s : spans) {
    FileRegions& file = dirty_[s.path];
    for (uint64_t g = s.first;; ++g) {
      Region& r = file[g];
      ++r.in_flight;
      *stale_before |= r.stale;
      if (!r.persisted || !r.persisted_intent) QueueLocked(s.path, g, r);
      need = std::max(need, r.persist_seq);
      if (g == s.last) break;
    }
  }
  dirty_files_.store(dirty_.size(), std::memory_order_relaxed);
  return need;
}

uint64_t ReplicaSetStage::EndChange(const std::vector<Span>& spans,
                                    uint64_t missed, bool diverged,
                                    uint64_t whole) {
  uint64_t need = 0;
  const uint64_t now = MonotonicNanos();
  MutexLock l(&log_mu_);
  for (const Span& s : spans) {
    FileRegions& file = dirty_[s.path];
    for (uint64_t g = s.first;; ++g) {
      Region& r = file[g];
      --r.in_flight;
      r.diverged |= diverged;
      // Members that wrote the region whole hold it current now.
      const uint64_t stale = (r.stale | missed) & ~whole;
      if (stale != r.stale) {
        r.stale = stale;
        ++r.version;
        QueueLocked(s.path, g, r);
        need = std::max(need, r.persist_seq);
      }
      if (r.in_flight == 0) r.idle_since_ns = now;
      if (g == s.last) break;
    }
  }
  return need;
}

absl::Status ReplicaSetStage::Persist(uint64_t seq) {
  MutexLock p(&persist_mu_);
  if (durable_seq_ >= seq && seq != UINT64_MAX) return absl::OkStatus();
  std::vector<RegionRecord> batch;
  uint64_t upto;
  {
    MutexLock l(&log_mu_);
    batch.swap(queued_);
    upto = queued_seq_;
  }
  if (batch.empty()) {
    durable_seq_ = std::max(durable_seq_, upto);
    return absl::OkStatus();
  }
  absl::Status s = log_->Write(batch, /*sync=*/true);
  if (!s.ok()) {
    // Kept for the next write: what is in memory is what must be logged.
    MutexLock l(&log_mu_);
    batch.insert(batch.end(), std::make_move_iterator(queued_.begin()),
                 std::make_move_iterator(queued_.end()));
    queued_.swap(batch);
    return s;
  }
  log_writes_.fetch_add(1, std::memory_order_relaxed);
  durable_seq_ = upto;
  return absl::OkStatus();
}

uint64_t ReplicaSetStage::StaleForRead(const Io& io) {
  if (dirty_files_.load(std::memory_order_relaxed) == 0) return 0;
  const std::string path = PathOf(io.header.file);
  MutexLock l(&log_mu_);
  uint64_t stale = StaleNameLocked(path);
  auto it = dirty_.find(path);
  if (it == dirty_.end()) return stale;
  const FileRegions& file = it->second;
  if (io.header.op == Op::kRead) {
    const uint64_t first = io.header.offset / region_size_;
    const uint64_t last =
        (io.header.offset + std::max<uint64_t>(io.header.length, 1) - 1) /
        region_size_;
    for (auto r = file.lower_bound(first); r != file.end() && r->first <= last;
         ++r) {
      stale |= r->second.stale;
    }
    auto a = file.find(RegionLog::kAttrs);
    if (a != file.end()) stale |= a->second.stale;
  } else if (io.header.op == Op::kReaddir) {
    auto d = file.find(RegionLog::kList);
    if (d != file.end()) stale |= d->second.stale;
  } else if (io.header.op == Op::kOpen) {
    // An open checks the name and its mode, not bytes: a member that
    // missed only bytes answers it.
    auto a = file.find(RegionLog::kAttrs);
    if (a != file.end()) stale |= a->second.stale;
  } else {
    // placement anywhere: a member lacks regions by design, and its size
    // is kept (writes it does not take grow the file there): attributes
    // and names are asked of a member current in them. What looks at the
    // bytes' layout (lseek's holes) needs every region.
    const bool names_only = anywhere_ && io.header.op != Op::kLseek;
    for (const auto& [region, r] : file) {
      if (region == RegionLog::kList) continue;
      if (names_only && region < RegionLog::kFirstNamed) continue;
      stale |= r.stale;
    }
  }
  return stale;
}

// A name made or renamed while a member was away is stale there with
// everything under it.
uint64_t ReplicaSetStage::StaleNameLocked(const std::string& path) const {
  uint64_t stale = 0;
  for (std::string p = path;; p = ParentOf(p)) {
    auto it = dirty_.find(p);
    if (it != dirty_.end()) {
      auto w = it->second.find(RegionLog::kWholeName);
      if (w != it->second.end()) stale |= w->second.stale;
    }
    if (p.empty()) break;
  }
  return stale;
}

// --- Order
// ----------------------------------------------------------------------

namespace {
template <typename Range, typename T>
bool OverlapsAny(const T& o, const Range& others) {
  return std::any_of(others.begin(), others.end(), [&](const auto& x) {
    return o.begin < x.end && x.begin < o.end;
  });
}
}  // namespace

void ReplicaSetStage::Order(const std::string& path, uint64_t begin,
                            uint64_t end,
                            absl::AnyInvocable<void(uint64_t id)> start) {
  uint64_t id;
  {
    MutexLock l(&order_mu_);
    id = ++next_order_id_;
    Ordered o{id, begin, end, nullptr};
    FileOrder& f = order_[path];
    if (OverlapsAny(o, f.running) || OverlapsAny(o, f.waiting)) {
      o.start = std::move(start);
      f.waiting.push_back(std::move(o));
      return;
    }
    f.running.push_back(std::move(o));
  }
  start(id);
}

void ReplicaSetStage::Release(const std::string& path, uint64_t id) {
  std::vector<std::pair<uint64_t, absl::AnyInvocable<void(uint64_t)>>> start;
  {
    MutexLock l(&order_mu_);
    auto it = order_.find(path);
    if (it == order_.end()) return;
    FileOrder& f = it->second;
    std::erase_if(f.running, [&](const Ordered& o) { return o.id == id; });
    std::deque<Ordered> still;
    for (Ordered& w : f.waiting) {
      if (OverlapsAny(w, f.running) || OverlapsAny(w, still)) {
        still.push_back(std::move(w));
      } else {
        start.emplace_back(w.id, std::move(w.start));
        f.running.push_back(Ordered{w.id, w.begin, w.end, nullptr});
      }
    }
    f.waiting.swap(still);
    if (f.running.empty() && f.waiting.empty()) order_.erase(it);
  }
  for (auto& [sid, fn] : start) fn(sid);
}

}  // namespace sroute
