// SPDX-License-Identifier: Apache-2.0
// The replica_set stage's class, shared by the files of its members:
//   configure.cc          making it, its options (Check, Apply,
//                         Reconfigure), its report
//   replica_set_stage.cc  identity, members, dirty regions, the order of
//                         changes per file
//   data_path.cc          IOs: changes to every member, reads from one,
//                         hedged reads' timers
//   steering.cc           read steering (weights, AIMD, segregation)
//   gc.cc                 GC coordination of flash members
//   resync.cc             background work: probing
// members that left, forgetting clean regions, rebuilding stale ones.
//
// Locks, in the order they may be taken: persist_mu_ (log writes take
// turns) > mu_ (members and options) > order_mu_ (changes per file) >
// log_mu_ (dirty regions). None is held while an IO is sent.
#ifndef SROUTE_STAGES_REPLICA_SET_REPLICA_SET_IMPL_H_
#define SROUTE_STAGES_REPLICA_SET_REPLICA_SET_IMPL_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/btree_map.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "rules/io_header.h"
#include "stages/replica_set/region_log.h"
#include "stages/stage.h"
#include "stages/steering/aimd.h"
#include "util/errno_status.h"
#include "util/mutex.h"

namespace sroute {
namespace replica_set_internal {

// Whether `io` changes what a member holds: it goes to every member.
inline bool IsChange(const Io& io) {
  return io.header.op_class() != kOpClassRead || ChangesFileBytes(io);
}

// A member's failure (it is taken out of the set), as opposed to the op's
// own answer (ENOENT, EEXIST, ...), which every member would give.
inline bool IsMemberFailure(const absl::Status& s) {
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
inline bool IsFull(const absl::Status& s) {
  const int err = ErrnoOf(s);
  return err == ENOSPC || err == EDQUOT;
}

inline std::string PathOf(const std::string& file) {
  FileName name;
  if (!SplitFileName(file, &name)) return "";
  return std::string(name.path);
}

inline std::string ParentOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "" : path.substr(0, slash);
}

}  // namespace replica_set_internal

class ReplicaSetStage : public HostStage {
 public:
  // Opens (or makes) the region log in `log_dir` and takes up what it
  // holds: regions a change was under way in at a crash become stale on
  // every member but one (the primary if it is current there).
  static absl::StatusOr<std::shared_ptr<ReplicaSetStage>> Make(
      const proto::StageConfig& config, SSwitch* sw,
      const std::string& log_dir);
  ~ReplicaSetStage() override;

  void Submit(Io* io, const Forward&) override;
  bool KeepsNames() const override { return true; }
  proto::StageConfig config() const override;
  absl::Status Reconfigure(const proto::StageConfig& next) override;
  // Changes of the read steering only (weight, steer, aimd_floor_percent).
  bool ReconfiguresLive(const proto::StageConfig& next) const override;
  void Report(proto::StageStats* out) const override;
  absl::Status Stop() override;

  static absl::Status Check(const proto::StageConfig& c);
  // Takes resolve requests (ReplicaSetOptions.resolve): all of them, or
  // FailedPrecondition naming a file without a conflict and none.
  absl::Status ResolveLocked(const google::protobuf::RepeatedPtrField<
                             proto::ReplicaSetOptions::Resolve>& requests)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

 private:
  ReplicaSetStage(proto::StageConfig config, SSwitch* sw,
                  std::unique_ptr<RegionLog> log);

  // --- Members -----------------------------------------------------------
  struct Load {  // a member's reads now and lately
    std::atomic<int64_t> in_flight{0};
    std::atomic<uint64_t> ewma_ns{0};         // of its read times, weight 1/5
    std::atomic<uint64_t> last_sample_ns{0};  // MonotonicNanos of the last
    std::atomic<uint64_t> reads{0};
    // Its last 64 read times (0: none yet), for hedging.
    std::array<std::atomic<uint64_t>, 64> samples{};
    std::atomic<uint32_t> next_sample{0};
    // Its device's GC as the stage last saw it (gc.cc): MonotonicNanos
    // until which it collects (0: it does not), and whether it is a flash
    // device at all.
    std::atomic<uint64_t> gc_until_ns{0};
    std::atomic<bool> flash{false};
    // Steering (issue 49): its weight's multiplier, which replies marked
    // congested halve (steer gimbal, sandook), and those replies.
    Aimd aimd;
    std::atomic<uint64_t> congested{0};
    // Its latest reply: marked or not, and when (MonotonicNanos); and its
    // marks not acted on: every other member's latest reply was marked too
    // (common mode: moving reads between them gains nothing).
    std::atomic<bool> last_reply_marked{false};
    std::atomic<uint64_t> last_reply_ns{0};
    std::atomic<uint64_t> common_marks{0};
    void Sample(uint64_t ns);
    // When to ask another member: the `percentile` of its recent read
    // times (10 ms until 8 are known; at least 50 us).
    uint64_t HedgeAfterNs(uint32_t percentile) const;
    // The EWMA as of `now_ns`: halved for every kAgeHalfLifeNs without a
    // sample, so that a member avoided after a slow spell is asked again
    // soon (an estimate that only its own reads refresh would otherwise
    // keep it out for good).
    uint64_t AgedEwmaNs(uint64_t now_ns) const;
  };
  enum class ReadPolicy {
    kPrimary,
    kRandom,
    kLeastLoaded,
    kWeighted,
    kHedged,
    kHash,  // a region's reads to one member (steer fds)
  };
  enum class Ack { kAll, kQuorum, kCount, kPrimary };
  void Apply(const proto::StageConfig& c, bool initial)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static ReadPolicy PolicyOf(const std::string& read, ReadPolicy otherwise);
  // The read steering's part of the options: in place, IOs inside or not.
  void ApplySteering(const proto::ReplicaSetOptions& o)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A member's bit in region masks: stable for its name while the stage
  // lives (members come and go by Reconfigure). At most 64 names.
  uint64_t BitOf(const std::string& member) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  uint64_t OutMask() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Members in the set (not out) and not in `exclude` (bits), the one to
  // read first first.
  // A read's policy and the members it may not go to (by its flow).
  struct ReadPlan {
    ReadPolicy policy;
    uint64_t exclude;
  };
  ReadPlan PlanRead(const std::string& file);
  // `key`: the read's file and region hashed (ReadPolicy::kHash).
  std::vector<int> Live(uint64_t exclude, ReadPolicy policy, uint64_t key);
  // The member a weighted read goes to first, among `live`: at random in
  // proportion to weight x AIMD multiplier.
  std::vector<int>::iterator PickWeighted(std::vector<int>& live)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A mark on `member`'s reply at `now` while every other member's latest
  // reply (within the last second) was marked too: the slowness is
  // everyone's (the host of them all, or the whole set overloaded) and
  // AIMD does not cut for it.
  bool MarkIsCommonMode(int member, uint64_t now) const;
  int LeastLoaded(const std::vector<int>& live) const;
  void TakeOut(int member, const absl::Status& why);
  std::string MemberName(int member);
  uint64_t MemberBit(int member);
  void SendTo(Io* child, int member);

  // --- Dirty regions -----------------------------------------------------
  struct Region {
    uint64_t version = 0;
    uint64_t stale = 0;  // bits of members that miss changes here
    // What the log holds for it, and the log write (seq) that holds it.
    bool persisted = false;
    bool persisted_intent = false;
    uint64_t persisted_stale = 0;
    uint64_t persist_seq = 0;
    uint32_t in_flight = 0;  // changes under way
    uint64_t idle_since_ns = 0;
    uint64_t retry_after_ns = 0;  // a resync of it failed: not before then
    // A change not made (not acknowledged) was applied by some members:
    // those not stale may differ (each holds what was made, or more).
    bool diverged = false;
  };
  using FileRegions = std::map<uint64_t, Region>;
  // Regions `first`..`last` of `path` (a span of bytes, or one of
  // RegionLog's named regions).
  struct Span {
    std::string path;
    uint64_t first, last;
  };
  std::vector<Span> SpansOf(const Io& io) const;
  // Marks a change's spans as under way (an intent), queueing log writes;
  // returns the seq the log must reach before the change's data goes
  // anywhere (0: none), and in `stale_before` the members stale there.
  uint64_t BeginChange(const std::vector<Span>& spans, uint64_t* stale_before);
  // Ends it: `missed` (bits) missed a change that was made; `diverged`: a
  // change not made was applied by some members; `whole` (bits): members
  // that wrote the regions whole, current there from now on. Returns the
  // seq that must be durable before the change is acknowledged (0: none).
  uint64_t EndChange(const std::vector<Span>& spans, uint64_t missed,
                     bool diverged, uint64_t whole = 0);
  // After a rename made: the regions of bytes members miss under the old
  // name (and beneath it) move to the new one (swap, for an exchange); a
  // link copies them to the new name. Returns the seq that must be
  // durable before it is acknowledged. (Later writes through one of a
  // file's several names mark that name's regions only.)
  uint64_t MoveRegionsAfterRename(const Io& rename)
      ABSL_LOCKS_EXCLUDED(log_mu_);
  // placement anywhere: the members a write of whole regions goes to,
  // `copies_` of `live` (indexes) by write weight (write-mode members
  // first).
  std::vector<int> ChooseWriters(const std::vector<int>& live);
  // The write-mode members' bits (no lock: a relaxed copy).
  uint64_t WriteMode();
  void QueueLocked(const std::string& path, uint64_t region, Region& r)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(log_mu_);
  // Makes the log durable up to `seq` (group commit: one synced write for
  // every record queued so far; UINT64_MAX: whatever is queued).
  absl::Status Persist(uint64_t seq);
  // Bits of members stale where `io` reads (any region of the file for
  // anything but a read of bytes).
  uint64_t StaleForRead(const Io& io);
  // Bits of members stale in the name `path` or a folder above it: they
  // hold no current copy of the name.
  uint64_t StaleNameLocked(const std::string& path) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(log_mu_);

  // --- Identity: the inode number hosts know a name by -------------------
  // Members have inode numbers of their own, and a host that saw a name's
  // inode change would take the file for replaced (its open handles would
  // fail with ESTALE). Attributes come from the primary, and the first
  // (st_dev, st_ino) the stage reported for a name is put back into every
  // later answer for it, so that a failover (another member answers while
  // the primary is out) or a file made while it was out keeps its identity.
  // Renames move it, unlinks drop it. Bounded: past kMaxIdentities names
  // the map starts over (names answered after that keep their identity
  // while the primary is in).
  void KeepIdentity(Io& io) ABSL_LOCKS_EXCLUDED(id_mu_);
  // After a change made: a rename moves the identity, and those of the
  // names beneath a folder (an exchange swaps them), an unlink drops it,
  // any other change keeps its answer's (KeepIdentity).
  void IdentityAfterChange(Io& change) ABSL_LOCKS_EXCLUDED(id_mu_);
  struct Identity {
    dev_t dev;
    ino_t ino;
  };
  // Takes the identities of `path` and of every name beneath it out of
  // ids_, keyed by what follows `path` ("" for `path` itself).
  std::vector<std::pair<std::string, Identity>> TakeSubtreeLocked(
      const std::string& path) ABSL_EXCLUSIVE_LOCKS_REQUIRED(id_mu_);
  Mutex id_mu_;
  // Ordered: a folder's names are one range.
  absl::btree_map<std::string, Identity> ids_ ABSL_GUARDED_BY(id_mu_);

  // --- Order: overlapping changes to a file one at a time -----------------
  struct Ordered {
    uint64_t id;
    uint64_t begin, end;
    absl::AnyInvocable<void(uint64_t id)> start;
  };
  struct FileOrder {
    std::vector<Ordered> running;
    std::deque<Ordered> waiting;
  };
  // Runs `start(id)` once no earlier change to `path` overlapping
  // [begin, end) runs; Release(path, id) ends it.
  void Order(const std::string& path, uint64_t begin, uint64_t end,
             absl::AnyInvocable<void(uint64_t id)> start);
  void Release(const std::string& path, uint64_t id);

  // --- Changes and reads -------------------------------------------------
  struct ChangeJoin;
  struct Read;
  void StartChange(Io* io, uint64_t order_id);
  void FinishChange(const std::shared_ptr<ChangeJoin>& join);
  void ReadFrom(const std::shared_ptr<Read>& state, bool hedge);
  // Runs `fn` on the timer thread `delay_ns` from now.
  void After(uint64_t delay_ns, absl::AnyInvocable<void()> fn);

  // --- GC coordination with flash members (gc.cc) ------------------------
  enum class GcMode { kOff, kRedirect, kDelay, kBackground };
  // A member's device state, as its kFlashStateXattr words say.
  struct DeviceState {
    int free_permille = 0;
    std::string need;  // none, soft, regular
    bool gc = false;
    uint64_t gc_left_us = 0;
    bool bg_ok = false;
  };
  // Asks every member in the set for its device's state and grants GC as
  // the mode says; returns how long to wait before the next turn (ns).
  uint64_t CoordinateGc();
  absl::StatusOr<DeviceState> AskDevice(const std::string& member);
  absl::Status GrantGc(const std::string& member, const std::string& kind);
  // Notes a GC pass of `member` in the timeline (one under way is
  // extended, not noted twice).
  void NoteGc(const std::string& member, const std::string& kind,
              uint64_t until_mono_ns) ABSL_LOCKS_EXCLUDED(gc_mu_);
  void GcLoop();
  // Moves the members whose devices collect to the back of `live`
  // (keeping the order of the others): reads go to them last.
  void AvoidCollecting(std::vector<int>& live)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // --- Background (resync.cc) --------------------------------------------
  void Background();
  void Probe();
  void Sweep();
  // Rebuilds one stale region of some member; false if none is left.
  bool ResyncOne();
  absl::Status ResyncRegion(const std::string& target,
                            const std::string& source, const std::string& path,
                            uint64_t region);
  // Runs `body` holding the order of `path` over [begin, end).
  absl::Status WithOrder(const std::string& path, uint64_t begin, uint64_t end,
                         const std::function<absl::Status()>& body);
  absl::Status SyncName(const std::string& target, const std::string& source,
                        const std::string& path, int depth);
  absl::Status SyncList(const std::string& target, const std::string& source,
                        const std::string& path, int depth, bool whole);
  absl::Status SyncAttrs(const std::string& target, const std::string& source,
                         const std::string& path);
  absl::Status SyncXattrs(const std::string& target, const std::string& source,
                          const std::string& path);
  absl::Status RemoveTree(const std::string& target, const std::string& path,
                          int depth);
  // Copies [begin, end) of `path` (up to the source's end) in chunks, each
  // under the file's order unless `ordered` (the caller holds it).
  absl::Status CopyBytes(const std::string& target, const std::string& source,
                         const std::string& path, uint64_t begin, uint64_t end,
                         bool ordered);
  // Sends an IO of the stage's own to `file` and waits for its answer.
  absl::Status Call(Io& io, const std::string& file);
  void Throttle(uint64_t bytes);

  SSwitch* const sw_;
  const std::unique_ptr<RegionLog> log_;

  mutable Mutex mu_;
  proto::StageConfig config_ ABSL_GUARDED_BY(mu_);
  std::string name_;  // set once
  std::vector<std::string> members_ ABSL_GUARDED_BY(mu_);
  std::vector<bool> out_ ABSL_GUARDED_BY(mu_);
  // Raised each time a member leaves the set: a resync of it that began
  // before must not clear its stale marks.
  std::vector<uint64_t> epoch_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, uint64_t> bits_ ABSL_GUARDED_BY(mu_);
  int primary_ ABSL_GUARDED_BY(mu_) = 0;
  ReadPolicy read_ ABSL_GUARDED_BY(mu_) = ReadPolicy::kPrimary;
  struct Flow {
    std::string file;  // without a trailing '*'
    bool prefix = false;
    ReadPolicy read;
    uint64_t read_set = 0;  // bits; 0: every member
  };
  std::vector<Flow> flows_ ABSL_GUARDED_BY(mu_);
  std::vector<uint32_t> weights_ ABSL_GUARDED_BY(mu_);
  // steer: "" or fds, reflex, gimbal, sandook (ReplicaSetOptions.steer).
  std::string steer_ ABSL_GUARDED_BY(mu_);
  bool even_weights_ ABSL_GUARDED_BY(mu_) = false;  // gimbal, swan
  // placement anywhere (issue 49): whole-region writes go to `copies_`
  // members chosen among the write-mode ones; write_weight_ by member
  // index (0: not in write mode), write_mode_ their bits.
  bool anywhere_ = false;  // fixed at creation (Reconfigure refuses)
  uint32_t copies_ ABSL_GUARDED_BY(mu_) = 2;
  std::vector<uint32_t> write_weight_ ABSL_GUARDED_BY(mu_);
  uint64_t write_mode_ ABSL_GUARDED_BY(mu_) = 0;
  // write_mode_, for the read path's count without the lock.
  std::atomic<uint64_t> write_mode_now_{0};
  // The largest end of each file written through the set lately: a write
  // past it also grows the file on the members it does not go to (their
  // sizes agree; a read of a hole must not end early there). Forgotten at
  // any other change of the file.
  Mutex size_mu_;
  absl::flat_hash_map<std::string, uint64_t> sizes_ ABSL_GUARDED_BY(size_mu_);
  // sizes_[path], the map kept to 64 K names.
  uint64_t& KnownSizeLocked(const std::string& path)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(size_mu_);
  std::atomic<uint64_t> segregated_writes_{0}, reads_on_write_mode_{0},
      writes_retried_{0};
  std::atomic<bool> aimd_{false};  // multipliers in use
  Ack ack_ ABSL_GUARDED_BY(mu_) = Ack::kQuorum;
  uint32_t ack_count_ ABSL_GUARDED_BY(mu_) = 0;
  bool degrade_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t region_size_ = 1 << 20;  // fixed at creation (the log's keys)
  uint64_t resync_rate_ ABSL_GUARDED_BY(mu_) = 0;  // bytes/s, 0: no limit
  bool paused_ ABSL_GUARDED_BY(mu_) = false;
  uint32_t probe_ms_ ABSL_GUARDED_BY(mu_) = 1000;
  // One per member, made again only with no IO inside (Reconfigure).
  std::vector<std::unique_ptr<Load>> load_;

  Mutex order_mu_;
  uint64_t next_order_id_ ABSL_GUARDED_BY(order_mu_) = 0;
  absl::flat_hash_map<std::string, FileOrder> order_ ABSL_GUARDED_BY(order_mu_);

  Mutex persist_mu_;
  uint64_t durable_seq_ ABSL_GUARDED_BY(persist_mu_) = 0;
  mutable Mutex log_mu_;
  absl::flat_hash_map<std::string, FileRegions> dirty_ ABSL_GUARDED_BY(log_mu_);
  std::atomic<size_t> dirty_files_{0};  // dirty_.size(), read without log_mu_
  // Member names by bit, for the log's records (a copy of bits_).
  std::string bit_names_[64] ABSL_GUARDED_BY(log_mu_);
  uint64_t queued_seq_ ABSL_GUARDED_BY(log_mu_) = 0;
  std::vector<RegionRecord> queued_ ABSL_GUARDED_BY(log_mu_);

  // Background thread: wakes every 100 ms, or when kicked, or to stop.
  Mutex bg_mu_;
  CondVar bg_cv_;
  CondVar gc_cv_;  // wakes GcLoop (on bg_mu_)
  bool stopping_ ABSL_GUARDED_BY(bg_mu_) = false;
  std::thread background_;
  uint64_t throttle_start_ns_ = 0, throttle_bytes_ = 0;  // background only
  uint64_t throttle_seen_ios_ = 0;  // clients' IOs at the last Throttle

  std::atomic<GcMode> gc_mode_{GcMode::kOff};
  std::atomic<uint32_t> gc_poll_us_{1000};
  // The GC timeline: the latest kMaxGcEvents passes, oldest first.
  struct GcPass {
    std::string member, kind;
    uint64_t start_mono_ns, end_mono_ns;
  };
  mutable Mutex gc_mu_;
  std::deque<GcPass> gc_events_ ABSL_GUARDED_BY(gc_mu_);
  // Soft requests waiting for a partner's GC to end, by member.
  absl::flat_hash_map<std::string, bool> soft_waiting_ ABSL_GUARDED_BY(gc_mu_);
  std::thread gc_thread_;
  std::atomic<uint64_t> gc_redirects_{0}, gc_soft_delayed_{0};
  std::atomic<uint64_t> gc_granted_soft_{0}, gc_granted_regular_{0},
      gc_granted_bg_{0}, gc_device_passes_{0};

  std::atomic<uint32_t> hedge_percentile_{95};
  // The timer thread's state, apart from the stage's: the stage's last
  // reference may be dropped on that thread (by a read a timer held), and
  // the thread, let go then, must not touch the stage afterwards.
  struct Timers {
    Mutex mu;
    CondVar cv;
    std::multimap<uint64_t, absl::AnyInvocable<void()>> due ABSL_GUARDED_BY(mu);
    bool stop ABSL_GUARDED_BY(mu) = false;
  };
  static void TimerLoop(Timers& t);
  const std::shared_ptr<Timers> timers_ = std::make_shared<Timers>();
  std::thread timer_thread_;

  std::atomic<uint64_t> reads_{0}, changes_{0}, failovers_{0};
  std::atomic<uint64_t> hedges_{0}, hedge_wins_{0};
  std::atomic<uint64_t> resync_bytes_{0}, resync_regions_{0};
  // Bytes resync moved in the last whole second, and to each member.
  std::atomic<uint64_t> resync_bytes_per_s_{0};
  absl::flat_hash_map<std::string, uint64_t> resynced_to_ ABSL_GUARDED_BY(mu_);
  std::atomic<uint64_t> conflicts_{0}, log_writes_{0};
};

}  // namespace sroute

#endif  // SROUTE_STAGES_REPLICA_SET_REPLICA_SET_IMPL_H_
