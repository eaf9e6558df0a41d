// SPDX-License-Identifier: Apache-2.0
// The replica_set stage made and configured: Make, Check, Apply,
// Reconfigure, its report (replica_set_impl.h).
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

namespace {

constexpr uint64_t kDefaultRegionSize = 1 << 20;
constexpr uint32_t kDefaultResyncMibPerS = 64;
constexpr uint32_t kDefaultProbeMs = 1000;

// Files with conflicting regions named in the counters ("conflict.PATH").
constexpr int kConflictFilesNamed = 20;

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

}  // namespace sroute
