// SPDX-License-Identifier: Apache-2.0
// The replica_set stage's IOs: a change goes to every member, a read to
// one (hedged after a delay), a rename moves its regions
// (replica_set_impl.h).
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
#include "stages/replica_set/replica_set_stage.h"
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

// --- Changes and reads
// --------------------------------------------------------

struct ReplicaSetStage::Read {
  Io* parent = nullptr;
  uint64_t exclude = 0;  // members stale where it reads
  // A read of bytes with read=hedged: each attempt reads into a buffer of
  // its own (the loser may still be writing after the winner answered);
  // the winner's bytes are copied to the caller's.
  bool hedged = false;
  ReadPolicy policy = ReadPolicy::kPrimary;
  uint64_t key = 0;  // its file and region, hashed (ReadPolicy::kHash)
  Mutex mu;
  // Every attempt lives as long as the read: the next one starts inside
  // the completion of the one before, and a loser ends after the winner.
  std::vector<std::unique_ptr<Io>> attempts ABSL_GUARDED_BY(mu);
  std::vector<std::unique_ptr<char[]>> buffers ABSL_GUARDED_BY(mu);
  std::vector<int> tried ABSL_GUARDED_BY(mu);
  int outstanding ABSL_GUARDED_BY(mu) = 0;
  bool done ABSL_GUARDED_BY(mu) = false;
};

void ReplicaSetStage::Submit(Io* io, const Forward&) {
  if (IsChange(*io)) {
    changes_.fetch_add(1, std::memory_order_relaxed);
    // Writes and fallocates hold their byte range; any other change holds
    // the whole file (renames by their first name only).
    uint64_t begin = 0, end = UINT64_MAX;
    if (io->header.op == Op::kWrite || io->header.op == Op::kFallocate) {
      begin = io->header.offset;
      end = io->header.offset + std::max<uint64_t>(io->header.length, 1);
    }
    Order(PathOf(io->header.file), begin, end,
          [this, io](uint64_t id) { StartChange(io, id); });
    return;
  }
  reads_.fetch_add(1, std::memory_order_relaxed);
  auto state = std::make_shared<Read>();
  state->parent = io;
  const ReadPlan plan = PlanRead(io->header.file);
  state->exclude = StaleForRead(*io) | plan.exclude;
  // Only reads of bytes spread: a name's attributes (lookups, getattr,
  // open) come from the primary while it is in the set, because each
  // member has inode numbers of its own and a host that saw a name's
  // inode change would take the file for replaced (open handles of it
  // then fail with ESTALE).
  state->policy =
      io->header.op == Op::kRead ? plan.policy : ReadPolicy::kPrimary;
  state->hedged =
      io->header.op == Op::kRead && plan.policy == ReadPolicy::kHedged;
  if (state->policy == ReadPolicy::kHash) {
    state->key =
        absl::HashOf(io->header.file, io->header.offset / region_size_);
  }
  ReadFrom(state, /*hedge=*/false);
}

struct ReplicaSetStage::ChangeJoin {
  Io* parent = nullptr;
  std::string path;
  uint64_t order_id = 0;
  std::vector<Span> spans;
  std::vector<int> members;
  uint64_t missed = 0;        // members it did not go to
  uint64_t stale_before = 0;  // members that missed earlier changes there
  // placement anywhere, a write of whole regions: the members it was
  // written to (the others only grew the file, if it grew).
  uint64_t writers = 0;
  std::vector<std::unique_ptr<Io>> children;
  Mutex mu;
  size_t answered ABSL_GUARDED_BY(mu) = 0;
};

void ReplicaSetStage::StartChange(Io* io, uint64_t order_id) {
  const std::string path = PathOf(io->header.file);
  std::vector<Span> spans = SpansOf(*io);
  // Members stale in the name (or a folder above it) hold no copy of it to
  // change: they miss the change too, and resync brings them the name.
  uint64_t exclude = 0;
  if (dirty_files_.load(std::memory_order_relaxed) != 0) {
    MutexLock g(&log_mu_);
    exclude = StaleNameLocked(path);
    for (const Span& s : spans) {
      if (s.first == RegionLog::kWholeName && s.path != path) {
        exclude |= StaleNameLocked(s.path);
      }
    }
  }
  uint64_t missed;  // members it does not go to
  std::vector<int> live;
  {
    MutexLock l(&mu_);
    missed = OutMask();
    for (size_t i = 0; i < members_.size(); ++i) {
      const uint64_t bit = bits_.at(members_[i]);
      if (out_[i]) continue;
      // (Stale only in bytes or attributes, it holds the name: the change
      // applies there.)
      if ((exclude & bit) != 0) {
        missed |= bit;
        continue;
      }
      live.push_back(static_cast<int>(i));
    }
  }
  auto fail = [&](absl::Status s) {
    io->Complete(std::move(s));
    Release(path, order_id);
  };
  // placement anywhere: who holds a region is kept per name; a second name
  // of the file would not follow later writes through the first, and reads
  // through it could find an old copy. link(2)'s EPERM: git and others
  // fall back to a rename.
  if (anywhere_ && io->header.op == Op::kLink) {
    fail(ErrnoStatus(EPERM, StrCat("replica set ", name_,
                                   ": no hard links where members hold "
                                   "regions apart (placement anywhere)")));
    return;
  }
  if (live.empty()) {
    fail(ErrnoStatus(EIO, StrCat("replica set ", name_,
                                 ": no member can take a change to ", path)));
    return;
  }
  uint64_t stale_before = 0;
  if (const uint64_t seq = BeginChange(spans, &stale_before); seq != 0) {
    if (absl::Status s = Persist(seq); !s.ok()) {
      (void)EndChange(spans, 0, false);
      fail(ErrnoStatus(absl::IsResourceExhausted(s) ? ENOSPC : EIO,
                       StrCat("replica set ", name_,
                              ": the dirty-region log: ", s.message())));
      return;
    }
  }
  auto join = std::make_shared<ChangeJoin>();
  join->parent = io;
  join->path = path;
  join->order_id = order_id;
  join->spans = std::move(spans);
  join->members = live;
  join->missed = missed;
  join->stale_before = stale_before;
  // placement anywhere: a write of whole regions goes to `copies` members
  // only; the others grow the file if it grows (a metadata change), or
  // get nothing, and miss the regions.
  const bool whole_regions = anywhere_ && io->header.op == Op::kWrite &&
                             io->header.length > 0 &&
                             io->header.offset % region_size_ == 0 &&
                             io->header.length % region_size_ == 0;
  std::vector<int> growers;
  const uint64_t end = io->header.offset + io->header.length;
  if (whole_regions) {
    std::vector<int> writers = ChooseWriters(live);
    bool grows = false;
    {
      MutexLock s(&size_mu_);
      uint64_t& known = KnownSizeLocked(path);
      grows = end > known;
    }
    for (int m : live) {
      if (std::find(writers.begin(), writers.end(), m) != writers.end()) {
        join->writers |= MemberBit(m);
      } else {
        join->missed |= MemberBit(m);
        if (grows) growers.push_back(m);
      }
    }
    join->members = writers;
    join->members.insert(join->members.end(), growers.begin(), growers.end());
    segregated_writes_.fetch_add(1, std::memory_order_relaxed);
  } else if (anywhere_) {
    MutexLock s(&size_mu_);
    if (io->header.op == Op::kWrite) {
      uint64_t& known = KnownSizeLocked(path);
      known = std::max(known, end);
    } else {
      sizes_.erase(path);
      if (!io->args.second_file.empty()) {
        sizes_.erase(PathOf(io->args.second_file));
      }
    }
  }
  live = join->members;
  for (size_t i = 0; i < live.size(); ++i) {
    join->children.push_back(sw_->NewChild(*io));
    if (whole_regions && (join->writers & MemberBit(live[i])) == 0) {
      // Grows the file there to the write's end: its size agrees.
      Io& grow = *join->children.back();
      grow.header.op = Op::kTruncate;
      grow.header.offset = 0;
      grow.header.length = 0;
      grow.write_data = {};
      grow.args.size = end;
      grow.args.truncate_mode = TruncateMode::kGrowOnly;
    }
  }
  for (size_t i = 0; i < live.size(); ++i) {
    join->children[i]->set_completion([this, join](Io&) {
      {
        MutexLock l(&join->mu);
        if (++join->answered < join->children.size()) return;
      }
      FinishChange(join);
    });
  }
  for (size_t i = 0; i < live.size(); ++i) {
    SendTo(join->children[i].get(), live[i]);
  }
}

// Every member the change went to answered. Members that failed leave the
// set. A change counts as made (acknowledged) when enough members current
// there (that missed no earlier change in its regions) applied it; then
// the members that missed it are logged stale, durably, before the answer.
// A change not made leaves the members that applied it differing from the
// others, all of them holding what was last made or more: the region is
// marked diverged, and resync makes them equal from one of them.
uint64_t ReplicaSetStage::MoveRegionsAfterRename(const Io& rename) {
  if (rename.args.second_file.empty()) return 0;
  const std::string a = PathOf(rename.header.file);
  const std::string b = PathOf(rename.args.second_file);
  // A rename moves them; a link (the header names the new link, the
  // second name the file) copies them: the new name is the same file.
  const bool link = rename.header.op == Op::kLink;
  const bool from_first = rename.header.op == Op::kRenameFrom;
  const std::string& from = from_first ? a : b;
  const std::string& to = from_first ? b : a;
  const bool exchange =
      !link && (rename.args.rename_flags & RENAME_EXCHANGE) != 0;
  uint64_t need = 0;
  MutexLock l(&log_mu_);
  if (dirty_.empty()) return 0;
  // The regions of `path` and of every name beneath it, keyed by what
  // follows `path` ("" for itself); the names' entries stay (their
  // regions of names say who holds the names).
  auto take = [&](const std::string& path)
                  ABSL_EXCLUSIVE_LOCKS_REQUIRED(log_mu_) {
                    std::vector<std::pair<std::string, FileRegions>> out;
                    for (auto& [p, file] : dirty_) {
                      if (p != path && !p.starts_with(path + "/")) continue;
                      FileRegions bytes;
                      for (auto& [region, r] : file) {
                        if (region >= RegionLog::kFirstNamed) continue;
                        bytes[region] = r;
                      }
                      if (!bytes.empty())
                        out.emplace_back(p.substr(path.size()), bytes);
                    }
                    return out;
                  };
  // Regions are cleared at the old names (logged clean: the sweep drops
  // them) and set at the new ones, with a version past both.
  auto clear = [&](const std::string& path)
                   ABSL_EXCLUSIVE_LOCKS_REQUIRED(log_mu_) {
                     for (auto& [p, file] : dirty_) {
                       if (p != path && !p.starts_with(path + "/")) continue;
                       for (auto& [region, r] : file) {
                         if (region >= RegionLog::kFirstNamed || r.stale == 0)
                           continue;
                         r.stale = 0;
                         ++r.version;
                         QueueLocked(p, region, r);
                         need = std::max(need, r.persist_seq);
                       }
                     }
                   };
  auto put = [&](const std::string& path,
                 std::vector<std::pair<std::string, FileRegions>>& moved)
                 ABSL_EXCLUSIVE_LOCKS_REQUIRED(log_mu_) {
                   for (auto& [rest, bytes] : moved) {
                     FileRegions& file = dirty_[path + rest];
                     for (auto& [region, r] : bytes) {
                       Region& dst = file[region];
                       dst.stale = r.stale;
                       dst.diverged = r.diverged;
                       dst.version = std::max(dst.version, r.version) + 1;
                       QueueLocked(path + rest, region, dst);
                       need = std::max(need, dst.persist_seq);
                     }
                   }
                 };
  auto moved = take(from);
  auto back = exchange ? take(to) : decltype(moved)();
  if (!link) clear(from);
  clear(to);  // (replaced, or exchanged)
  put(to, moved);
  if (exchange) put(from, back);
  dirty_files_.store(dirty_.size(), std::memory_order_relaxed);
  return need;
}

uint64_t& ReplicaSetStage::KnownSizeLocked(const std::string& path) {
  // Forgetting is safe: a size not known is 0, and the next write of whole
  // regions grows the others' file again (a truncate that only grows).
  constexpr size_t kMostKnown = 1 << 16;
  if (sizes_.size() >= kMostKnown && !sizes_.contains(path)) sizes_.clear();
  return sizes_[path];
}

void ReplicaSetStage::FinishChange(const std::shared_ptr<ChangeJoin>& join) {
  const Io* first_ok = nullptr;
  const Io* answer = nullptr;  // the op's own error, if every member gave one
  uint64_t applied = 0, failed = 0, sent = 0;
  uint64_t primary_bit;
  size_t total;
  Ack ack;
  uint32_t ack_count;
  bool degrade;
  {
    MutexLock l(&mu_);
    primary_bit = bits_.at(members_[primary_]);
    total = members_.size();
    ack = ack_;
    ack_count = ack_count_;
    degrade = degrade_;
  }
  const bool any_applied =
      std::any_of(join->children.begin(), join->children.end(),
                  [](const std::unique_ptr<Io>& c) { return c->status.ok(); });
  for (size_t i = 0; i < join->children.size(); ++i) {
    const Io& c = *join->children[i];
    const uint64_t bit = MemberBit(join->members[i]);
    sent |= bit;
    if (c.status.ok()) {
      applied |= bit;
      // The answer (attributes) is the primary's when it has one, as for
      // reads of attributes: the name's inode stays the same. (A write of
      // whole regions answers from a member that wrote it, not one that
      // only grew the file.)
      const bool wrote = join->writers == 0 || (bit & join->writers) != 0;
      if (wrote && (first_ok == nullptr || bit == primary_bit)) first_ok = &c;
    } else if (IsMemberFailure(c.status) &&
               !(IsFull(c.status) && !any_applied)) {
      TakeOut(join->members[i], c.status);
      failed |= bit;
    } else if (answer == nullptr) {
      answer = &c;
    }
  }
  // Members that refused it while others applied it (not a failure of
  // theirs): they diverged; they leave the set and miss it.
  if (first_ok != nullptr && answer != nullptr) {
    for (size_t i = 0; i < join->children.size(); ++i) {
      const Io& c = *join->children[i];
      if (!c.status.ok() && !IsMemberFailure(c.status)) {
        TakeOut(join->members[i], c.status);
        failed |= MemberBit(join->members[i]);
      }
    }
  }
  const uint64_t current = ~join->stale_before;
  size_t made_on = std::popcount(applied & current);
  size_t needed = total;
  if (join->writers != 0) {
    // A write of whole regions: made when every member chosen wrote it
    // (current there from now on, whatever they held before).
    made_on = std::popcount(applied & join->writers);
    needed = std::popcount(join->writers);
  } else if (anywhere_ && (join->parent->header.op == Op::kWrite ||
                           join->parent->header.op == Op::kFallocate)) {
    // A write of part of a region: the members that hold the region (not
    // stale there, by design or by a miss) are its copies; every one of
    // them must have it.
    needed = std::max<size_t>(1, std::popcount(sent & current));
  }
  const bool own_count =
      join->writers != 0 ||
      (anywhere_ && (join->parent->header.op == Op::kWrite ||
                     join->parent->header.op == Op::kFallocate));
  switch (own_count ? Ack::kCount : ack) {
    case Ack::kCount:
      if (!own_count) needed = ack_count;
      break;
    case Ack::kAll:
      // Degraded: every current member that could be reached.
      needed = degrade
                   ? std::max<int>(1, std::popcount(sent & current & ~failed))
                   : total;
      break;
    case Ack::kQuorum:
      needed = total / 2 + 1;
      break;
    case Ack::kPrimary:
      needed = (applied & current & primary_bit) != 0 ? 1 : total + 1;
      break;
  }
  const bool made = first_ok != nullptr && made_on >= needed;
  Io* parent = join->parent;
  if (!made && join->writers != 0 && (failed & join->writers) != 0) {
    // A chosen writer failed on the way and left the set: the write goes
    // again, whole, to writers chosen among the members left (each round
    // has one member fewer; none left, it fails). What the others wrote
    // is written again or logged missed.
    (void)EndChange(join->spans, 0, false, 0);
    writes_retried_.fetch_add(1, std::memory_order_relaxed);
    StartChange(parent, join->order_id);
    return;
  }
  absl::Status logged = absl::OkStatus();
  uint64_t seq =
      EndChange(join->spans, made ? (failed | join->missed) : 0,
                !made && (applied & ~(join->missed & ~join->writers)) != 0,
                made ? (applied & join->writers) : 0);
  if (made &&
      (parent->header.op == Op::kRenameFrom ||
       parent->header.op == Op::kRenameTo || parent->header.op == Op::kLink)) {
    // What members miss of a file's bytes moves with its name (a link
    // gets a copy: its name is the same file).
    seq = std::max(seq, MoveRegionsAfterRename(*parent));
  }
  if (seq != 0) logged = Persist(seq);
  if (made && join->writers != 0) {
    MutexLock s(&size_mu_);
    uint64_t& known = KnownSizeLocked(join->path);
    known = std::max(known, parent->header.offset + parent->header.length);
  }
  if (!logged.ok()) {
    // Not acknowledged: that a member missed it is not on disk.
    parent->Complete(
        ErrnoStatus(EIO, StrCat("replica set ", name_,
                                ": the dirty-region log: ", logged.message())));
  } else if (made) {
    parent->AdoptResults(*first_ok);
    IdentityAfterChange(*parent);
    parent->Complete(absl::OkStatus());
  } else if (first_ok == nullptr && answer != nullptr) {
    parent->AdoptResults(*answer);
    parent->Complete(answer->status);
  } else {
    parent->Complete(ErrnoStatus(
        EIO, StrCat("replica set ", name_, ": ", made_on, " of ", total,
                    " members (current there) applied the change; ", needed,
                    " needed")));
  }
  Release(join->path, join->order_id);
}

// The first member in the set, current where it reads and not tried yet;
// a member's failure takes it out and the read goes to the next. Hedged:
// once the first has not answered within a percentile of its recent read
// times, the next is asked too, and the first answer wins.
void ReplicaSetStage::ReadFrom(const std::shared_ptr<Read>& state, bool hedge) {
  Io* attempt = nullptr;
  int member = -1;
  char* own = nullptr;
  {
    MutexLock l(&state->mu);
    if (state->done) return;
    for (int m : Live(state->exclude, state->policy, state->key)) {
      if (std::find(state->tried.begin(), state->tried.end(), m) ==
          state->tried.end()) {
        member = m;
        break;
      }
    }
    if (member < 0) {
      if (hedge || state->outstanding > 0) return;  // another may answer
      state->done = true;
    } else {
      state->tried.push_back(member);
      state->attempts.push_back(sw_->NewChild(*state->parent));
      attempt = state->attempts.back().get();
      // A hedge's loser ends after the parent: its slot is its own.
      if (state->hedged) attempt->KeepOwnWaitingSlot();
      ++state->outstanding;
      if (state->hedged) {
        state->buffers.push_back(
            std::make_unique<char[]>(state->parent->read_buffer.size()));
        own = state->buffers.back().get();
        attempt->read_buffer =
            std::span<char>(own, state->parent->read_buffer.size());
      }
    }
  }
  if (member < 0) {
    state->parent->Complete(ErrnoStatus(
        EIO, StrCat("replica set ", name_, ": no current copy of ",
                    PathOf(state->parent->header.file), " could answer")));
    return;
  }
  if (hedge) hedges_.fetch_add(1, std::memory_order_relaxed);
  Load& load = *load_[member];
  load.in_flight.fetch_add(1, std::memory_order_relaxed);
  load.reads.fetch_add(1, std::memory_order_relaxed);
  if (anywhere_ && (MemberBit(member) & WriteMode()) != 0) {
    reads_on_write_mode_.fetch_add(1, std::memory_order_relaxed);
  }
  attempt->set_completion([this, state, member, &load, own, hedge,
                           start = MonotonicNanos()](Io& a) {
    const uint64_t now = MonotonicNanos();
    load.Sample(now - start);
    load.in_flight.fetch_sub(1, std::memory_order_relaxed);
    if (a.congested) load.congested.fetch_add(1, std::memory_order_relaxed);
    // AIMD (gimbal, sandook) only: the latest reply's mark for the common
    // mode test, and the multiplier; other policies pay nothing here.
    if (aimd_.load(std::memory_order_relaxed) && a.status.ok()) {
      load.last_reply_marked.store(a.congested, std::memory_order_relaxed);
      load.last_reply_ns.store(now, std::memory_order_relaxed);
      bool cut = a.congested;
      if (cut && MarkIsCommonMode(member, now)) {
        load.common_marks.fetch_add(1, std::memory_order_relaxed);
        cut = false;
      }
      // A round trip: the member's recent read time (50 us at least).
      load.aimd.OnReply(now, std::max<uint64_t>(load.AgedEwmaNs(now), 50'000),
                        cut, a.congested_window);
    }
    const bool failed = IsMemberFailure(a.status);
    if (failed) {
      TakeOut(member, a.status);
      failovers_.fetch_add(1, std::memory_order_relaxed);
    }
    {
      MutexLock l(&state->mu);
      --state->outstanding;
      if (state->done) return;                       // a hedge's loser
      if (failed && state->outstanding > 0) return;  // the other may answer
      if (!failed) state->done = true;
    }
    if (failed) {
      ReadFrom(state, /*hedge=*/false);
      return;
    }
    if (hedge) hedge_wins_.fetch_add(1, std::memory_order_relaxed);
    if (own != nullptr && a.status.ok()) {
      std::memcpy(state->parent->read_buffer.data(), own,
                  std::min<size_t>(a.bytes, state->parent->read_buffer.size()));
    }
    state->parent->AdoptResults(a);
    if (a.status.ok()) KeepIdentity(*state->parent);
    state->parent->Complete(a.status);
  });
  SendTo(attempt, member);
  if (state->hedged && !hedge) {
    // The timer holds the read weakly: a read that ended before its hedge
    // was due is not kept alive by it (its attempts hold the stage; a timer
    // far off would keep the stage past its owner and destroy it, and its
    // RocksDB log, on the timer thread, even after main has returned).
    After(load.HedgeAfterNs(hedge_percentile_.load(std::memory_order_relaxed)),
          [this, weak = std::weak_ptr<Read>(state)] {
            if (std::shared_ptr<Read> live = weak.lock()) {
              ReadFrom(live, /*hedge=*/true);
            }
          });
  }
}

// --- Timers (hedged reads) ---------------------------------------------------

void ReplicaSetStage::After(uint64_t delay_ns, absl::AnyInvocable<void()> fn) {
  MutexLock l(&timers_->mu);
  timers_->due.emplace(MonotonicNanos() + delay_ns, std::move(fn));
  timers_->cv.Signal();
}

void ReplicaSetStage::TimerLoop(Timers& t) {
  for (;;) {
    absl::AnyInvocable<void()> fn;
    {
      MutexLock l(&t.mu);
      while (!t.stop && fn == nullptr) {
        if (t.due.empty()) {
          t.cv.Wait(&t.mu);
          continue;
        }
        const uint64_t now = MonotonicNanos();
        auto first = t.due.begin();
        if (first->first > now) {
          t.cv.WaitFor(&t.mu, std::chrono::nanoseconds(first->first - now));
          continue;
        }
        fn = std::move(first->second);
        t.due.erase(first);
      }
      if (t.stop) return;
    }
    fn();
  }
}

void ReplicaSetStage::Load::Sample(uint64_t ns) {
  // Racing updates may lose one another's sample: an estimate.
  const uint64_t old = ewma_ns.load(std::memory_order_relaxed);
  ewma_ns.store(old == 0 ? ns : (old * 4 + ns) / 5, std::memory_order_relaxed);
  last_sample_ns.store(MonotonicNanos(), std::memory_order_relaxed);
  const uint32_t i = next_sample.fetch_add(1, std::memory_order_relaxed);
  samples[i % samples.size()].store(ns, std::memory_order_relaxed);
}

uint64_t ReplicaSetStage::Load::AgedEwmaNs(uint64_t now_ns) const {
  constexpr uint64_t kAgeHalfLifeNs = 50'000'000;
  const uint64_t ewma = ewma_ns.load(std::memory_order_relaxed);
  const uint64_t last = last_sample_ns.load(std::memory_order_relaxed);
  const uint64_t halvings =
      now_ns > last ? (now_ns - last) / kAgeHalfLifeNs : 0;
  return halvings >= 63 ? 0 : ewma >> halvings;
}

uint64_t ReplicaSetStage::Load::HedgeAfterNs(uint32_t percentile) const {
  constexpr uint64_t kFloorNs =
      50'000;  // below: hedges cost more than they win
  constexpr uint64_t kUnknownNs = 10'000'000;  // too few samples yet
  std::array<uint64_t, 64> v;
  size_t n = 0;
  for (const auto& s : samples) {
    const uint64_t x = s.load(std::memory_order_relaxed);
    if (x != 0) v[n++] = x;
  }
  if (n < 8) return kUnknownNs;
  const size_t k = std::min(n - 1, n * percentile / 100);
  std::nth_element(v.begin(), v.begin() + static_cast<long>(k),
                   v.begin() + static_cast<long>(n));
  return std::max(v[k], kFloorNs);
}

void RegisterReplicaSetStage(StageRegistry& registry) {
  (void)registry.Register(
      "replica_set",
      [](const proto::StageConfig& config,
         const StageEnv& env) -> absl::StatusOr<std::shared_ptr<HostStage>> {
        if (absl::Status s = ReplicaSetStage::Check(config); !s.ok()) return s;
        if (env.sswitch == nullptr) {
          return absl::InvalidArgumentError("replica_set: needs its sSwitch");
        }
        if (env.state_dir.empty()) {
          return absl::InvalidArgumentError(
              "replica_set: needs the host's state directory for its "
              "dirty-region log (state_dir)");
        }
        auto stage = ReplicaSetStage::Make(
            config, env.sswitch,
            StrCat(env.state_dir, "/replica_set-", config.name()));
        if (!stage.ok()) return stage.status();
        return std::shared_ptr<HostStage>(*std::move(stage));
      });
}

}  // namespace sroute
