// SPDX-License-Identifier: Apache-2.0
// Over 1 200 lines: membership, reads and changes share the member
// table (resync, gc, steering and the region log are out already); the
// rest of the split is issue 52's.
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
namespace {

constexpr uint64_t kDefaultRegionSize = 1 << 20;
constexpr uint32_t kDefaultResyncMibPerS = 64;
constexpr uint32_t kDefaultProbeMs = 1000;

// Whether `io` changes what a member holds: it goes to every member.
bool IsChange(const Io& io) {
  return io.header.op_class() != kOpClassRead || ChangesFileBytes(io);
}

// A member's failure (it is taken out of the set), as opposed to the op's
// own answer (ENOENT, EEXIST, ...), which every member would give.
bool IsMemberFailure(const absl::Status& s) {
  if (s.ok()) return false;
  if (absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s) ||
      absl::IsCancelled(s) || absl::IsInternal(s)) {
    return true;
  }
  const int err = ErrnoOf(s);
  return err == EIO || err == ETIMEDOUT || err == ENOSPC || err == EROFS;
}

// A member out of room (or quota): a failure of its own when another member
// took the change, but the volume's answer when none could (every member is
// full: the caller gets ENOSPC and the set stays whole).
bool IsFull(const absl::Status& s) {
  const int err = ErrnoOf(s);
  return err == ENOSPC || err == EDQUOT;
}

// Files with conflicting regions named in the counters ("conflict.PATH").
constexpr int kConflictFilesNamed = 20;

std::string PathOf(const std::string& file) {
  FileName name;
  if (!SplitFileName(file, &name)) return "";
  return std::string(name.path);
}

std::string ParentOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "" : path.substr(0, slash);
}

}  // namespace

// --- Making and options ----------------------------------------------------

absl::StatusOr<std::shared_ptr<ReplicaSetStage>> ReplicaSetStage::Make(
    const proto::StageConfig& config, SSwitch* sw, const std::string& log_dir) {
  auto log = RegionLog::Open(log_dir);
  if (!log.ok()) return log.status();
  auto records = (*log)->Load();
  if (!records.ok()) return records.status();
  std::shared_ptr<ReplicaSetStage> stage(
      new ReplicaSetStage(config, sw, *std::move(log)));
  // What the log holds: stale members stay stale; where a change was under
  // way, every member but one may differ: all but the primary (or the first
  // member current there) become stale, and resync makes them equal.
  {
    MutexLock l(&stage->mu_);
    uint64_t all = 0;
    for (const std::string& m : stage->members_) all |= stage->BitOf(m);
    const uint64_t primary =
        stage->BitOf(stage->members_[static_cast<size_t>(stage->primary_)]);
    MutexLock g(&stage->log_mu_);
    for (const RegionRecord& rec : *records) {
      Region& r = stage->dirty_[rec.path][rec.region];
      r.version = rec.version;
      for (const std::string& m : rec.stale) {
        if (stage->bits_.contains(m)) r.stale |= stage->bits_[m] & all;
      }
      if (rec.intent) {
        uint64_t source = 0;
        if ((r.stale & primary) == 0) {
          source = primary;
        } else {
          for (const std::string& m : stage->members_) {
            if ((r.stale & stage->bits_[m]) == 0) {
              source = stage->bits_[m];
              break;
            }
          }
        }
        r.stale |= all & ~source;
      }
      if (r.stale == 0) {
        RegionRecord gone = rec;
        gone.removed = true;
        stage->queued_.push_back(std::move(gone));
        stage->dirty_[rec.path].erase(rec.region);
        if (stage->dirty_[rec.path].empty()) stage->dirty_.erase(rec.path);
        continue;
      }
      stage->QueueLocked(rec.path, rec.region, r);
    }
    stage->dirty_files_.store(stage->dirty_.size());
    if (!records->empty()) {
      LogInfo("replica set ", stage->name_, ": ", records->size(),
              " regions in the log from before; resync brings them up");
    }
  }
  if (absl::Status s = stage->Persist(UINT64_MAX); !s.ok()) return s;
  stage->background_ = std::thread([raw = stage.get()] { raw->Background(); });
  stage->timer_thread_ = std::thread([t = stage->timers_] { TimerLoop(*t); });
  stage->gc_thread_ = std::thread([raw = stage.get()] { raw->GcLoop(); });
  return stage;
}

ReplicaSetStage::ReplicaSetStage(proto::StageConfig config, SSwitch* sw,
                                 std::unique_ptr<RegionLog> log)
    : sw_(sw), log_(std::move(log)) {
  name_ = config.name();
  const uint64_t rs = config.replica_set().region_size();
  region_size_ = rs == 0 ? kDefaultRegionSize : rs;
  anywhere_ = config.replica_set().placement() == "anywhere";
  MutexLock l(&mu_);
  config_ = std::move(config);
  Apply(config_, /*initial=*/true);
}

ReplicaSetStage::~ReplicaSetStage() { (void)Stop(); }

absl::Status ReplicaSetStage::Stop() {
  {
    MutexLock l(&bg_mu_);
    stopping_ = true;
    bg_cv_.SignalAll();
    gc_cv_.SignalAll();
  }
  // The last reference to the stage may be dropped on its timer thread (a
  // read a timer held): that one is let go, not joined; it touches only
  // its Timers from then on.
  auto join = [](std::thread& t) {
    if (!t.joinable()) return;
    if (t.get_id() == std::this_thread::get_id()) {
      t.detach();
    } else {
      t.join();
    }
  };
  join(background_);
  join(gc_thread_);
  std::multimap<uint64_t, absl::AnyInvocable<void()>> dropped;
  {
    MutexLock l(&timers_->mu);
    timers_->stop = true;
    dropped.swap(timers_->due);  // their reads ended: no IO is inside
    timers_->cv.SignalAll();
  }
  join(timer_thread_);
  return Persist(UINT64_MAX);
}

proto::StageConfig ReplicaSetStage::config() const {
  MutexLock l(&mu_);
  return config_;
}

namespace {

// `c` without the options that steer reads only (weights, policy, AIMD),
// which change no placement.
proto::StageConfig WithoutSteering(proto::StageConfig c) {
  proto::ReplicaSetOptions* o = c.mutable_replica_set();
  o->clear_weight();
  o->clear_steer();
  o->clear_aimd_floor_percent();
  o->clear_write_member();
  o->clear_write_weight();
  return c;
}

}  // namespace

bool ReplicaSetStage::ReconfiguresLive(const proto::StageConfig& next) const {
  MutexLock l(&mu_);
  return next.replica_set().resolve_size() == 0 &&
         WithoutSteering(config_).SerializeAsString() ==
             WithoutSteering(next).SerializeAsString();
}

absl::Status ReplicaSetStage::Reconfigure(const proto::StageConfig& asked) {
  if (absl::Status s = Check(asked); !s.ok()) return s;
  {
    // Only the read steering changes: in place, IOs inside or not (the
    // steering app sets weights every epoch).
    MutexLock l(&mu_);
    if (asked.replica_set().resolve_size() == 0 &&
        WithoutSteering(config_).SerializeAsString() ==
            WithoutSteering(asked).SerializeAsString()) {
      config_ = asked;
      ApplySteering(asked.replica_set());
      return absl::OkStatus();
    }
  }
  const uint64_t rs = asked.replica_set().region_size();
  if ((rs == 0 ? kDefaultRegionSize : rs) != region_size_) {
    return absl::InvalidArgumentError(StrCat(
        "replica_set: region_size is ", region_size_,
        " for this set's log; it cannot change (remove the stage first)"));
  }
  if ((asked.replica_set().placement() == "anywhere") != anywhere_) {
    return absl::InvalidArgumentError(
        "replica_set: placement cannot change (its log says which members "
        "hold which regions; remove the stage first)");
  }
  // Resolve requests are taken, not kept.
  proto::StageConfig next = asked;
  next.mutable_replica_set()->clear_resolve();
  {
    MutexLock l(&mu_);
    // Against the members of now: a set changed and resolved in one
    // request resolves before the change.
    if (absl::Status s = ResolveLocked(asked.replica_set().resolve());
        !s.ok()) {
      return s;
    }
    config_ = next;
    Apply(next, /*initial=*/false);
  }
  // A member new to the set holds nothing: it is stale everywhere (the
  // whole tree, from the root) until resync has copied it.
  {
    MutexLock l(&bg_mu_);
    bg_cv_.SignalAll();
  }
  return Persist(UINT64_MAX);
}

absl::Status ReplicaSetStage::ResolveLocked(
    const google::protobuf::RepeatedPtrField<proto::ReplicaSetOptions::Resolve>&
        requests) {
  if (requests.empty()) return absl::OkStatus();
  uint64_t all = 0;
  for (const std::string& m : members_) all |= bits_.at(m);
  MutexLock g(&log_mu_);
  // All or nothing: every request must find a conflict before any is taken.
  struct Taken {
    std::string path;
    FileRegions* regions;
    uint64_t source;
  };
  std::vector<Taken> taken;
  for (const proto::ReplicaSetOptions::Resolve& r : requests) {
    if (std::find(members_.begin(), members_.end(), r.source()) ==
        members_.end()) {
      return absl::InvalidArgumentError(StrCat("replica_set ", name_,
                                               ": resolve ", r.file(), ": ",
                                               r.source(), " is not a member"));
    }
    const std::string path =
        r.file().starts_with("//") ? PathOf(r.file()) : r.file();
    auto file = dirty_.find(path);
    bool conflict = false;
    if (file != dirty_.end()) {
      for (const auto& [region, reg] : file->second) {
        conflict |= (reg.stale & all) == all && reg.in_flight == 0;
      }
    }
    if (!conflict) {
      return absl::FailedPreconditionError(
          StrCat("replica_set ", name_, ": no region of ", r.file(),
                 " lacks a current copy: nothing to resolve"));
    }
    taken.push_back(Taken{path, &file->second, bits_.at(r.source())});
  }
  for (size_t i = 0; i < taken.size(); ++i) {
    const Taken& t = taken[i];
    for (auto& [region, reg] : *t.regions) {
      if ((reg.stale & all) != all || reg.in_flight != 0) continue;
      reg.stale = all & ~t.source;
      reg.diverged = false;
      ++reg.version;
      QueueLocked(t.path, region, reg);
    }
    LogWarning("replica_set ", name_, ": ", t.path, " resolved by hand from ",
               requests[static_cast<int>(i)].source());
  }
  return absl::OkStatus();
}

absl::Status ReplicaSetStage::Check(const proto::StageConfig& c) {
  const proto::ReplicaSetOptions& o = c.replica_set();
  if (o.member().empty()) {
    return absl::InvalidArgumentError("replica_set: give at least one member");
  }
  if (o.member_size() > 64) {
    return absl::InvalidArgumentError(
        "replica_set: at most 64 members (the log keeps them as bits)");
  }
  for (int i = 0; i < o.member_size(); ++i) {
    if (o.member(i).empty() || o.member(i).find('/') != std::string::npos ||
        o.member(i).find('\n') != std::string::npos) {
      return absl::InvalidArgumentError(StrCat(
          "replica_set: member '", o.member(i), "' is not an endpoint name"));
    }
    for (int j = 0; j < i; ++j) {
      if (o.member(i) == o.member(j)) {
        return absl::InvalidArgumentError(
            StrCat("replica_set: member ", o.member(i), " is named twice"));
      }
    }
  }
  if (!o.primary().empty() && std::find(o.member().begin(), o.member().end(),
                                        o.primary()) == o.member().end()) {
    return absl::InvalidArgumentError(
        StrCat("replica_set: primary ", o.primary(), " is not a member"));
  }
  if (!o.read().empty() && o.read() != "primary" && o.read() != "random" &&
      o.read() != "least_loaded" && o.read() != "weighted" &&
      o.read() != "hedged") {
    return absl::InvalidArgumentError(
        StrCat("replica_set: read '", o.read(),
               "' is not primary, random, least_loaded, weighted or hedged"));
  }
  auto is_policy = [](const std::string& r) {
    return r.empty() || r == "primary" || r == "random" ||
           r == "least_loaded" || r == "weighted" || r == "hedged";
  };
  for (const proto::ReplicaSetOptions::Flow& f : o.flow()) {
    if (!f.file().starts_with("//")) {
      return absl::InvalidArgumentError(
          StrCat("replica_set: flow file '", f.file(),
                 "' is not //HOST/PATH or a prefix //HOST/PATH*"));
    }
    if (!is_policy(f.read())) {
      return absl::InvalidArgumentError(
          StrCat("replica_set: flow ", f.file(), ": read '", f.read(),
                 "' is not primary, random, least_loaded, weighted or hedged"));
    }
    if (f.read() == "weighted" && o.weight_size() != o.member_size()) {
      return absl::InvalidArgumentError(
          StrCat("replica_set: flow ", f.file(),
                 ": read weighted needs a weight for each member"));
    }
    for (const std::string& m : f.read_member()) {
      if (std::find(o.member().begin(), o.member().end(), m) ==
          o.member().end()) {
        return absl::InvalidArgumentError(StrCat("replica_set: flow ", f.file(),
                                                 ": ", m, " is not a member"));
      }
    }
  }
  for (const proto::ReplicaSetOptions::Resolve& r : o.resolve()) {
    if (r.file().empty() || std::find(o.member().begin(), o.member().end(),
                                      r.source()) == o.member().end()) {
      return absl::InvalidArgumentError(
          StrCat("replica_set: resolve ", r.file(), ": source '", r.source(),
                 "' is not a member"));
    }
  }
  if (!o.gc().empty() && o.gc() != "off" && o.gc() != "redirect" &&
      o.gc() != "delay" && o.gc() != "background") {
    return absl::InvalidArgumentError(
        StrCat("replica_set: gc '", o.gc(),
               "' is not off, redirect, delay or background"));
  }
  if (o.has_gc_poll_us() &&
      (o.gc_poll_us() < 100 || o.gc_poll_us() > 10'000'000)) {
    return absl::InvalidArgumentError(StrCat(
        "replica_set: gc_poll_us ", o.gc_poll_us(), " is not 100..10000000"));
  }
  if (o.hedge_percentile() > 99) {
    return absl::InvalidArgumentError(StrCat("replica_set: hedge_percentile ",
                                             o.hedge_percentile(),
                                             " is not 1..99"));
  }
  if (o.read() == "weighted" && o.weight_size() != o.member_size()) {
    return absl::InvalidArgumentError(
        StrCat("replica_set: read weighted needs a weight for each of the ",
               o.member_size(), " members, not ", o.weight_size()));
  }
  if (!o.steer().empty() && o.steer() != "fds" && o.steer() != "reflex" &&
      o.steer() != "gimbal" && o.steer() != "swan" && o.steer() != "sandook") {
    return absl::InvalidArgumentError(
        StrCat("replica_set: steer '", o.steer(),
               "' is not fds, reflex, gimbal, swan or sandook"));
  }
  if (!o.steer().empty() && o.weight_size() != 0 &&
      o.weight_size() != o.member_size()) {
    return absl::InvalidArgumentError(StrCat(
        "replica_set: steer ", o.steer(), " takes a weight for each of the ",
        o.member_size(), " members (or none: even), not ", o.weight_size()));
  }
  if (!o.placement().empty() && o.placement() != "everywhere" &&
      o.placement() != "anywhere") {
    return absl::InvalidArgumentError(
        StrCat("replica_set: placement '", o.placement(),
               "' is not everywhere or anywhere"));
  }
  if (o.copies() > static_cast<uint32_t>(o.member_size())) {
    return absl::InvalidArgumentError(StrCat("replica_set: copies ", o.copies(),
                                             " is more than the ",
                                             o.member_size(), " members"));
  }
  for (const std::string& m : o.write_member()) {
    if (std::find(o.member().begin(), o.member().end(), m) ==
        o.member().end()) {
      return absl::InvalidArgumentError(
          StrCat("replica_set: write_member ", m, " is not a member"));
    }
  }
  if (o.write_weight_size() != 0 &&
      o.write_weight_size() != o.write_member_size()) {
    return absl::InvalidArgumentError(
        StrCat("replica_set: write_weight takes one per write_member (",
               o.write_member_size(), "), not ", o.write_weight_size()));
  }
  if (o.has_aimd_floor_percent() &&
      (o.aimd_floor_percent() < 1 || o.aimd_floor_percent() > 100)) {
    return absl::InvalidArgumentError(StrCat("replica_set: aimd_floor_percent ",
                                             o.aimd_floor_percent(),
                                             " is not 1..100"));
  }
  if (!o.ack().empty() && o.ack() != "all" && o.ack() != "quorum" &&
      o.ack() != "primary") {
    uint32_t k = 0;
    if (!absl::SimpleAtoi(o.ack(), &k) || k == 0 ||
        k > static_cast<uint32_t>(o.member_size())) {
      return absl::InvalidArgumentError(StrCat(
          "replica_set: ack '", o.ack(),
          "' is not all, quorum, primary or a count 1..", o.member_size()));
    }
  }
  const uint64_t rs = o.region_size();
  if (rs != 0 && (rs < 4096 || rs > (1ull << 30) || !std::has_single_bit(rs))) {
    return absl::InvalidArgumentError(
        StrCat("replica_set: region_size ", rs,
               " is not a power of two from 4096 to 1 GiB"));
  }
  return absl::OkStatus();
}

// The stage's first members are all in the set (they hold the files: the
// operator says so by naming them, and the log says where they differ).
// Set again, a member keeps its place; one new to the set comes in stale
// everywhere.
void ReplicaSetStage::Apply(const proto::StageConfig& c, bool initial) {
  const proto::ReplicaSetOptions& o = c.replica_set();
  std::vector<std::string> old_members = std::move(members_);
  std::vector<bool> old_out = std::move(out_);
  std::vector<uint64_t> old_epoch = std::move(epoch_);
  members_.assign(o.member().begin(), o.member().end());
  out_.assign(members_.size(), false);
  epoch_.assign(members_.size(), 0);
  uint64_t added = 0;
  for (size_t i = 0; i < members_.size(); ++i) {
    auto it = std::find(old_members.begin(), old_members.end(), members_[i]);
    if (it != old_members.end()) {
      out_[i] = old_out[it - old_members.begin()];
      epoch_[i] = old_epoch[it - old_members.begin()];
    } else if (!initial) {
      added |= BitOf(members_[i]);
    }
    (void)BitOf(members_[i]);
  }
  // Members no longer in the set: nothing is owed to them.
  uint64_t removed = 0;
  for (const std::string& m : old_members) {
    if (std::find(members_.begin(), members_.end(), m) == members_.end()) {
      removed |= bits_.at(m);
    }
  }
  if (removed != 0) {
    MutexLock g(&log_mu_);
    for (auto& [path, file] : dirty_) {
      for (auto& [region, r] : file) {
        if ((r.stale & removed) == 0) continue;
        r.stale &= ~removed;
        QueueLocked(path, region, r);
      }
    }
  }
  if (added != 0) {
    MutexLock g(&log_mu_);
    Region& root = dirty_[""][RegionLog::kWholeName];
    root.stale |= added;
    ++root.version;
    QueueLocked("", RegionLog::kWholeName, root);
    dirty_files_.store(dirty_.size());
  }
  primary_ = 0;
  for (size_t i = 0; i < members_.size(); ++i) {
    if (members_[i] == o.primary()) primary_ = static_cast<int>(i);
  }
  read_ = PolicyOf(o.read(), ReadPolicy::kPrimary);
  flows_.clear();
  for (const proto::ReplicaSetOptions::Flow& f : o.flow()) {
    Flow flow;
    flow.prefix = !f.file().empty() && f.file().back() == '*';
    flow.file =
        flow.prefix ? f.file().substr(0, f.file().size() - 1) : f.file();
    flow.read = PolicyOf(f.read(), read_);
    for (const std::string& m : f.read_member()) flow.read_set |= BitOf(m);
    flows_.push_back(std::move(flow));
  }
  hedge_percentile_.store(o.hedge_percentile() == 0 ? 95
                                                    : o.hedge_percentile());
  ack_count_ = 0;
  if (o.ack() == "all") {
    ack_ = Ack::kAll;
  } else if (o.ack() == "quorum") {
    ack_ = Ack::kQuorum;
  } else if (o.ack() == "primary") {
    ack_ = Ack::kPrimary;
  } else if (!o.ack().empty()) {
    ack_ = Ack::kCount;
    (void)absl::SimpleAtoi(o.ack(), &ack_count_);
  } else {
    ack_ = members_.size() >= 3 ? Ack::kQuorum : Ack::kAll;
  }
  degrade_ = o.degrade();
  resync_rate_ =
      static_cast<uint64_t>(o.has_resync_mib_per_s() ? o.resync_mib_per_s()
                                                     : kDefaultResyncMibPerS)
      << 20;
  paused_ = o.resync_paused();
  probe_ms_ = o.has_probe_ms() ? o.probe_ms() : kDefaultProbeMs;
  gc_mode_.store(o.gc() == "redirect"     ? GcMode::kRedirect
                 : o.gc() == "delay"      ? GcMode::kDelay
                 : o.gc() == "background" ? GcMode::kBackground
                                          : GcMode::kOff);
  gc_poll_us_.store(o.has_gc_poll_us() ? o.gc_poll_us() : 1000);
  // A member's counters stay with it.
  std::vector<std::unique_ptr<Load>> old_load = std::move(load_);
  load_.clear();
  for (size_t i = 0; i < members_.size(); ++i) {
    auto it = std::find(old_members.begin(), old_members.end(), members_[i]);
    load_.push_back(it == old_members.end()
                        ? std::make_unique<Load>()
                        : std::move(old_load[it - old_members.begin()]));
  }
  ApplySteering(o);
}

ReplicaSetStage::ReadPolicy ReplicaSetStage::PolicyOf(const std::string& r,
                                                      ReadPolicy otherwise) {
  return r == "random"         ? ReadPolicy::kRandom
         : r == "least_loaded" ? ReadPolicy::kLeastLoaded
         : r == "weighted"     ? ReadPolicy::kWeighted
         : r == "hedged"       ? ReadPolicy::kHedged
         : r == "primary"      ? ReadPolicy::kPrimary
                               : otherwise;
}

uint64_t ReplicaSetStage::BitOf(const std::string& member) {
  auto it = bits_.find(member);
  if (it != bits_.end()) return it->second;
  // Bits of names no longer members are reused only once 64 are taken.
  uint64_t used = 0;
  for (const auto& [name, bit] : bits_) used |= bit;
  if (used == ~uint64_t{0}) {
    for (auto b = bits_.begin(); b != bits_.end(); ++b) {
      if (std::find(members_.begin(), members_.end(), b->first) ==
          members_.end()) {
        used &= ~b->second;
        bits_.erase(b);
        break;
      }
    }
  }
  const int index = std::countr_one(used);
  bits_[member] = uint64_t{1} << index;
  MutexLock g(&log_mu_);
  bit_names_[index] = member;
  return bits_[member];
}

uint64_t ReplicaSetStage::OutMask() const {
  uint64_t mask = 0;
  for (size_t i = 0; i < members_.size(); ++i) {
    if (out_[i]) mask |= bits_.at(members_[i]);
  }
  return mask;
}

void ReplicaSetStage::Report(proto::StageStats* out) const {
  auto& c = *out->mutable_counters();
  c["reads"] = static_cast<int64_t>(reads_.load());
  c["changes"] = static_cast<int64_t>(changes_.load());
  c["failovers"] = static_cast<int64_t>(failovers_.load());
  c["hedges"] = static_cast<int64_t>(hedges_.load());
  c["hedge_wins"] = static_cast<int64_t>(hedge_wins_.load());
  c["resync_bytes"] = static_cast<int64_t>(resync_bytes_.load());
  c["resync_regions"] = static_cast<int64_t>(resync_regions_.load());
  c["log_writes"] = static_cast<int64_t>(log_writes_.load());
  c["region_size"] = static_cast<int64_t>(region_size_);
  if (anywhere_) {
    c["segregated_writes"] = static_cast<int64_t>(segregated_writes_.load());
    c["writes_retried"] = static_cast<int64_t>(writes_retried_.load());
    c["reads_on_write_mode"] =
        static_cast<int64_t>(reads_on_write_mode_.load());
  }
  MutexLock l(&mu_);
  c["resync_paused"] = paused_ ? 1 : 0;
  c["resync_rate"] = static_cast<int64_t>(resync_rate_);
  c["resync_bytes_per_s"] =
      static_cast<int64_t>(resync_bytes_per_s_.load(std::memory_order_relaxed));
  std::vector<int64_t> regions(members_.size()), bytes(members_.size());
  int64_t conflicts = 0;
  {
    MutexLock g(&log_mu_);
    uint64_t all = 0;
    for (const std::string& m : members_) all |= bits_.at(m);
    int files_named = 0;
    for (const auto& [path, file] : dirty_) {
      int64_t in_file = 0;
      for (const auto& [region, r] : file) {
        if ((r.stale & all) == all) {
          ++conflicts;
          ++in_file;
        }
        for (size_t i = 0; i < members_.size(); ++i) {
          if ((r.stale & bits_.at(members_[i])) == 0) continue;
          ++regions[i];
          if (region < RegionLog::kFirstNamed) {
            bytes[i] += static_cast<int64_t>(region_size_);
          }
        }
      }
      // The first files with conflicts, by name (a bounded list).
      if (in_file > 0 && files_named < kConflictFilesNamed) {
        c[StrCat("conflict.", path)] = in_file;
        ++files_named;
      }
    }
  }
  int in = 0;
  for (size_t i = 0; i < members_.size(); ++i) {
    const std::string p = StrCat("member.", members_[i], ".");
    c[p + "in"] = out_[i] ? 0 : 1;
    c[p + "primary"] = static_cast<int>(i) == primary_ ? 1 : 0;
    c[p + "reads"] = static_cast<int64_t>(load_[i]->reads.load());
    c[p + "read_us"] = static_cast<int64_t>(load_[i]->ewma_ns.load() / 1000);
    if (!steer_.empty()) {
      c[p + "weight"] = weights_.empty() ? 0 : weights_[i];
      c[p + "aimd_permille"] =
          static_cast<int64_t>(load_[i]->aimd.multiplier() * 1000);
      c[p + "aimd_cuts"] = static_cast<int64_t>(load_[i]->aimd.cuts());
    }
    c[p + "congested"] = static_cast<int64_t>(load_[i]->congested.load());
    c[p + "common_marks"] = static_cast<int64_t>(load_[i]->common_marks.load());
    if (anywhere_) {
      c[p + "write_mode"] = (bits_.at(members_[i]) & write_mode_) != 0 ? 1 : 0;
    }
    c[p + "stale_regions"] = regions[i];
    c[p + "stale_bytes"] = bytes[i];
    auto moved = resynced_to_.find(members_[i]);
    c[p + "resynced_bytes"] =
        moved == resynced_to_.end() ? 0 : static_cast<int64_t>(moved->second);
    in += out_[i] ? 0 : 1;
  }
  if (gc_mode_.load() != GcMode::kOff) {
    c["gc_redirects"] = static_cast<int64_t>(gc_redirects_.load());
    c["gc_soft_delayed"] = static_cast<int64_t>(gc_soft_delayed_.load());
    c["gc_granted_soft"] = static_cast<int64_t>(gc_granted_soft_.load());
    c["gc_granted_regular"] = static_cast<int64_t>(gc_granted_regular_.load());
    c["gc_granted_bg"] = static_cast<int64_t>(gc_granted_bg_.load());
    c["gc_device_passes"] = static_cast<int64_t>(gc_device_passes_.load());
    const uint64_t now = MonotonicNanos();
    for (size_t i = 0; i < members_.size(); ++i) {
      if (!load_[i]->flash.load()) continue;
      c[StrCat("member.", members_[i], ".gc")] =
          load_[i]->gc_until_ns.load() > now ? 1 : 0;
    }
    const int64_t unix_now = absl::ToUnixMicros(absl::Now());
    auto unix_us = [&](uint64_t mono) {
      return unix_now -
             (static_cast<int64_t>(now) - static_cast<int64_t>(mono)) / 1000;
    };
    MutexLock g(&gc_mu_);
    for (const GcPass& p : gc_events_) {
      proto::GcEvent* e = out->add_gc_events();
      e->set_member(p.member);
      e->set_kind(p.kind);
      e->set_start_unix_us(unix_us(p.start_mono_ns));
      e->set_end_unix_us(unix_us(p.end_mono_ns));
    }
  }
  c["members_in"] = in;
  c["conflicts"] = conflicts;
}

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
                        cut);
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
