// SPDX-License-Identifier: Apache-2.0
// SSwitch: the router inside every process on the IO path (docs/design.md §3).
//
// Route() pins the current snapshot (rule table, endpoints, stages, quiesced
// patterns) for the whole life of the IO, parks IOs whose flow is quiesced,
// counts the IO in flight, splits it into byte-range pieces, runs delegates
// and sends each piece to its detours (scatter with an ack policy). With no
// matching rule an IO goes to its own file: an empty table is a passthrough.
//
// Thread safety: every method is thread-safe. Route() never blocks on
// control operations; control operations are serialized among themselves.
// Lock order (also at each declaration): a delegate's own state lock (e.g.
// TrackWrites::State::mu) > control_mu_ > publish_mu_; control_mu_ >
// QuiesceGate::mu > InflightRegistry::Shard::mu > DrainWaiter::mu;
// InflightRegistry::Shard::mu > publish_mu_ (a shard pins the snapshot of the
// moment); fence_mu_ and shared_state_mu_ are leaves. No sSwitch lock is held
// while an IO is submitted to an endpoint or stage, or while a completion
// runs.
//
// Where SSwitch's members live:
//   sswitch.cc       snapshots (Load, Publish), endpoints and stages (and
//                    their live change), delegate context, namespace
//                    questions (RouteOf, ChildPlaces), introspection
//   route.cc         the data path: Admit, Route, RoutePiece, Decide,
//                    Dispatch, stages' entry, taps, traces, stale IOs
//   rule_control.cc  the rule table's control: MakeEntry, Update, Insert,
//                    Delete, Validate, leases, Quiesce, Release, Drain
//   detours.cc       detour files: where a rule's target keeps a file's bytes
//                    (HomeOf, MakeDetourFile, CreateAtDetour, GrowHomeAfter)
//   fan_out.cc       byte-range splits, scatter and the join of its acks,
//                    fences of files a scatter left unequal
//   whole_file.cc    ops on a whole file across its places (RouteWholeFile,
//                    PlaceMoves, MovePlaces, SeekAcross)
//   bypass.cc        files open past the sSwitch (LeavesAlone,
//                    SetBypassGuard, ClearOfBypass: the hold-and-wait of
//                    changes naming them)
//   snapshot.h       the immutable snapshot an IO pins (InstalledRule,
//                    StageEntry)
//   rule_context.h   Context: what a delegate sees while it acts for its
//                    rule
#ifndef SROUTE_SSWITCH_SSWITCH_H_
#define SROUTE_SSWITCH_SSWITCH_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "rules/pattern_matcher.h"
#include "rules/rule.h"
#include "rules/rule_table.h"
#include "sswitch/bypass.h"
#include "sswitch/delegate.h"
#include "sswitch/endpoint.h"
#include "sswitch/io.h"
#include "sswitch/leases.h"
#include "sswitch/slow_ops.h"
#include "sswitch/stats.h"
#include "sswitch/trace.h"
#include "util/mutex.h"

namespace sroute {

struct FilePlace;     // whole_file.cc
class InstalledRule;  // snapshot.h
struct StageEntry;    // snapshot.h

// The version stamped on the snapshot an IO was routed with.
uint64_t SnapshotVersion(const Snapshot& snapshot);

struct RuleInfo {
  uint64_t id = 0;
  Rule rule;
  std::string owner;
  RuleCountersSnapshot counters;
};

// "ID: RULE" (plus "  # owner=NAME" when owned), as rule listings show it.
std::string FormatRuleInfo(const RuleInfo& info);

class SSwitch {
 public:
  explicit SSwitch(std::string name);
  // REQUIRES: no IO in flight or parked.
  ~SSwitch();
  SSwitch(const SSwitch&) = delete;
  SSwitch& operator=(const SSwitch&) = delete;

  const std::string& name() const { return name_; }
  // The host's state directory, where stages keep durable state (a replica
  // set's dirty-region log); empty if the host has none.
  // REQUIRES: set before stages are made, and not after.
  void set_state_dir(std::string dir) { state_dir_ = std::move(dir); }
  const std::string& state_dir() const { return state_dir_; }

  // --- Topology. Endpoint names are the HOST of "//HOST/PATH" files.
  absl::Status AddEndpoint(const std::string& name,
                           std::shared_ptr<Endpoint> endpoint);
  absl::Status AddStage(const std::string& name, std::shared_ptr<Stage> stage);
  // The endpoints now, by name.
  std::vector<std::pair<std::string, std::shared_ptr<Endpoint>>> Endpoints()
      const;
  // IOs sent to each endpoint so far (pieces of split IOs and each
  // scatter target count once), by name.
  std::vector<std::pair<std::string, uint64_t>> EndpointIos() const;
  // Has `watch` see every IO sent to endpoint `name` from now on (null:
  // none). NotFound if there is no such endpoint.
  absl::Status WatchEndpoint(const std::string& name,
                             std::shared_ptr<EndpointWatch> watch);
  // The endpoints watched now, by name.
  std::vector<std::pair<std::string, std::shared_ptr<EndpointWatch>>>
  EndpointWatches() const;
  void SetControllerSink(std::shared_ptr<ControllerSink> sink);

  // --- Stages, live (the update protocol applied to one stage). While a
  // stage changes, IOs that reach it are parked (no thread blocks); once
  // the IOs inside it (submitted, not completed) are done, the change runs
  // with none inside, then the parked IOs go on.
  struct StageInfo {
    std::string name;
    std::shared_ptr<Stage> stage;
    uint64_t ios = 0;       // IOs submitted to it
    int64_t in_flight = 0;  // submitted and not completed
    uint64_t parked = 0;    // waiting for a change to end
  };
  std::vector<StageInfo> Stages() const;
  // Runs change(stage) with no IO inside stage `name`. NotFound for no such
  // stage; Unavailable if it is changing already; DeadlineExceeded (and no
  // change) if IOs are still inside after `timeout`. Returns change's
  // status. REQUIRES: `change` does not route IOs to the stage and waits
  // for none of them.
  absl::Status ChangeStage(const std::string& name,
                           const std::function<absl::Status(Stage&)>& change,
                           absl::Duration timeout);
  // Removes stage `name` once no IO is inside it and returns it (to stop).
  // FailedPrecondition, naming them, while rules send IOs to it. IOs that
  // reach it afterwards (routed by an older snapshot) are routed again by
  // the current rules.
  absl::StatusOr<std::shared_ptr<Stage>> RemoveStage(const std::string& name,
                                                     absl::Duration timeout);

  // --- Coherence. An observer sees every IO routed here (not IOs a stage
  // hands back: they were seen on their way in) that changes the bytes of
  // a file or which bytes a name holds: write, truncate, fallocate, setattr
  // of the size, open and create with O_TRUNC, unlink, rename. It is called
  // with done=false in Route, before any stage or endpoint sees the IO,
  // and with done=true on its response path before the caller learns the
  // outcome (after the hooks of stages it passed). Observers must be quick
  // and may not route IOs; they run on the IO's threads. Thread-safe.
  using ChangeObserver = std::function<void(const Io& io, bool done)>;
  // Front ends route Op::kFlush at each close only while some stage wants
  // it (a write-back cache): each call adds `delta` (+1 or -1) to the
  // count of stages that do.
  void WantFlushes(int delta) { flush_wanted_.fetch_add(delta); }
  bool WantsFlushes() const {
    return flush_wanted_.load(std::memory_order_relaxed) > 0;
  }
  uint64_t AddChangeObserver(ChangeObserver observer);
  // After it returns, `id`'s observer is not called again.
  void RemoveChangeObserver(uint64_t id);

  // --- Data path.
  // Routes `io` and completes it exactly once (possibly before returning).
  // REQUIRES: io->header and the completion are set; the IO is not routed
  // already.
  void Route(Io* io);

  // Sends `io` straight to stage `stage` (not through the rules): the
  // stage hands it back to be routed as source stage:STAGE. For IOs a
  // remote host sent to stage://HOST/STAGE. A quiesce of its flow parks it
  // first, as it does any IO. Completes it NotFound if there is no such
  // stage.
  // REQUIRES: as for Route.
  void RouteToStage(Io* io, const std::string& stage);

  // Hands `io` back to the sSwitch as stage `from` would (source
  // "stage:FROM" for the next match), e.g. after the controller let an IO
  // of an <IO, controller> detour go on.
  // REQUIRES: `io` was routed by this sSwitch and is not completed.
  void Resume(Io* io, const std::string& from);

  // --- Control API (Insert / Delete / Quiesce / Drain).
  // Validates the rule (delegate known and its arguments good, targets name
  // known endpoints and stages) and installs it. Returns its id.
  absl::StatusOr<uint64_t> Insert(Rule rule, std::string owner = "");
  // Inserts and deletes as one atomic change; either all or nothing.
  absl::StatusOr<std::vector<uint64_t>> Update(
      std::vector<Rule> insert, const std::vector<uint64_t>& remove,
      std::string owner = "");
  // The same with an owner per inserted rule (owners.size() == insert.size()).
  absl::StatusOr<std::vector<uint64_t>> Update(
      std::vector<Rule> insert, const std::vector<std::string>& owners,
      const std::vector<uint64_t>& remove);
  // NotFound if no rule has this id.
  absl::Status Delete(uint64_t id);
  // Deletes every rule whose pattern equals `pattern`; returns how many.
  absl::StatusOr<int> Delete(const HeaderPattern& pattern);
  // Deletes every rule `owner` installed; returns how many.
  absl::StatusOr<int> DeleteOwned(const std::string& owner);
  // Leases (sswitch/leases.h): a client that installs rules for itself
  // alone (sroute-trace) holds a lease on its owner name and renews it
  // within `ttl`; if it does not, the owner's rules are deleted. A zero
  // `ttl` ends the lease and deletes them now (returns how many).
  // REQUIRES: owner not empty.
  absl::StatusOr<int> HoldLease(const std::string& owner, absl::Duration ttl);
  std::vector<std::string> LeaseOwners() const;
  // While on, IOs matching `pattern` are parked (the caller's thread is not
  // blocked); turning it off releases them in arrival order.
  absl::Status Quiesce(const HeaderPattern& pattern, bool on);

  // Called after every change of the rule table, by the control API or by
  // delegates, with the patterns of the rules added and removed. It runs
  // under the control lock: it must be quick and must not call the sSwitch.
  using RouteObserver =
      std::function<void(const std::vector<HeaderPattern>& changed)>;
  void SetRouteObserver(RouteObserver observer);
  // Returns once every IO matching `pattern` that is in flight at the call
  // has completed (parked IOs are not in flight), or DeadlineExceeded.
  absl::Status Drain(const HeaderPattern& pattern, absl::Duration timeout);

  // --- Namespace questions (for front ends that list directories).
  // Where a whole-file IO with header `h` goes now: a file name, or "" for a
  // stage or the controller. Delegates are not consulted.
  std::string RouteOf(const IoHeader& h) const;
  // Directories ("//HOST/PATH") other than `dir`'s own route where rules
  // may send children of `dir` (a read-like header for the directory).
  // Regex rules are not considered.
  std::vector<std::string> ChildPlaces(const IoHeader& dir) const;
  // Whether some rule could route a tenant's IO to `file` (RuleTable::
  // MayRoute): false means the file takes its default route, and a cache of
  // its bytes stays right until a rule change says otherwise.
  bool MayRoute(const std::string& file) const;
  // Whether IO to `file` ("//HOST/PATH") goes straight to it, seen by
  // nothing: no rule routes it (MayRoute), no tap samples it, no quiesce
  // parks it, and its endpoint, which exists, is not watched. Such a file
  // may be opened past the sSwitch (sswitch/bypass.h).
  bool LeavesAlone(const std::string& file) const;
  // Files opened past the sSwitch (null: none): inserting rules and taps,
  // quiescing and watching an endpoint first wait up to `wait` for the
  // files they name to close, and fail, changing nothing, if they do not.
  // REQUIRES: set before such opens, and not taken away while they live.
  void SetBypassGuard(std::shared_ptr<BypassGuard> guard, absl::Duration wait);

  // Checks that `rules` could be installed now (delegates known and their
  // arguments good, targets name known endpoints and stages), without
  // installing them.
  absl::Status Validate(const std::vector<Rule>& rules);

  // Gives delegate-made rules of an earlier life of this sSwitch back to the
  // delegates that made them (docs/design.md §5): records are grouped by their
  // anchor (the pattern of the delegate's rule) and each group, oldest
  // first, goes to Delegate::Restore of the rule with that pattern. Records
  // whose rule is gone are skipped (counted in *skipped). Returns the first
  // error of a restore.
  absl::Status RestoreDelegateRules(std::vector<DelegateRuleRecord> records,
                                    size_t* skipped = nullptr);

  // The sequence number for the next delegate-rule record (DelegateRule
  // Record::seq): strictly increasing, also across restarts of the process
  // (it follows the realtime clock).
  uint64_t NextRecordSeq();

  // Bytes [start, end) of `file` hold nothing (the file ends before them):
  // the delegates' rules that send reads of them elsewhere go (see
  // Delegate::ForgetRange).
  // REQUIRES: writes of the range quiesced and drained.
  absl::Status ForgetDelegateRange(const std::string& file, uint64_t start,
                                   uint64_t end);

  // --- Fences. A write-like op on a scattered file that fails after some
  // of its targets applied it leaves them different. The sSwitch then
  // fences the file: every later IO that would read or change its bytes or
  // attributes fails with EIO (lookups, listings and unlink still work)
  // until the fence is cleared, by an operator or a control application
  // once the targets are identical again, or the file is removed.
  // Fenced files ("//HOST/PATH") and why, oldest first.
  std::vector<std::pair<std::string, std::string>> Fences() const;
  // NotFound if `file` is not fenced.
  absl::Status ClearFence(const std::string& file);

  // --- Introspection.
  std::vector<RuleInfo> ListRules() const;
  // Calls `fn` for every installed rule, in order, with its id, owner and
  // live counters, without copying rules (cheap for a statistics report).
  void VisitCounters(
      const std::function<void(uint64_t id, const std::string& owner,
                               const RuleCounters& counters)>& fn) const;
  absl::StatusOr<RuleInfo> GetRule(uint64_t id) const;
  uint64_t version() const;
  int64_t in_flight() const;
  size_t parked() const;
  // IOs that found no endpoint, stage or controller for a detour.
  uint64_t route_errors() const { return route_errors_.load(); }
  // IOs (or pieces of split IOs) that matched no rule and took the default
  // route, by op: with the rules' counters, every routed IO is counted once.
  uint64_t unmatched_ops(Op op) const;

  // The traces of IOs this sSwitch sampled (a rule's trace delegate), kept
  // when they complete: the whole path of each, hops from other hosts
  // included. The last kKeptTraces are kept; `seq` numbers them from 1, so
  // a reader that asks for those after the last it saw finds a gap when it
  // fell behind.
  struct KeptTrace {
    uint64_t seq = 0;
    IoHeader header;
    uint64_t rule_id = 0;               // the rule whose delegate sampled it
    uint64_t start_ns = 0, end_ns = 0;  // monotonic, of this host
    absl::StatusCode code = absl::StatusCode::kOk;
    std::vector<TraceHop> hops;
    uint64_t hops_dropped = 0;
  };
  static constexpr size_t kKeptTraces = 4096;
  // Oldest first, those with seq > `after`, at most `limit`.
  std::vector<KeptTrace> Traces(uint64_t after, size_t limit) const;
  uint64_t traces_sampled() const;
  // IOs still here (in flight or parked at a quiesce) that an earlier call
  // already saw, at least `older_than` ago: each call marks the IOs it
  // sees for the first time, so ages are lower bounds, exact to the
  // interval of the calls (sroute-trace --slow calls it every second). No
  // cost on the IO path. An IO's header is reported as it was admitted.
  struct StaleIo {
    std::string source;
    Op op = Op::kRead;
    std::string file;
    uint64_t offset = 0, length = 0;
    uint64_t age_ns = 0;  // at least
    bool parked = false;  // at a quiesce (else in flight past admission)
    // The endpoint or stage it was last handed to ("" if none yet).
    std::string waiting_at;
  };
  std::vector<StaleIo> StaleIos(absl::Duration older_than);
  // The IOs whose time here, from their first rule to their reply, reached
  // a threshold (sswitch/slow_ops.h). IOs that took no rule are not timed.
  SlowOpLog& slow_ops() { return slow_ops_; }

  // For the router and for stages that send an IO on to several places
  // (a replica set): an IO in `parent`'s place (a piece, a scatter
  // target, a detour attempt, a replica's copy): its header, arguments,
  // payload and read buffer, records and routing state (snapshot, stage
  // hops). The one way children are made; their answers come back with
  // Io::AdoptResults.
  // REQUIRES: `parent` was routed by this sSwitch and is not completed.
  std::unique_ptr<Io> NewChild(const Io& parent);
  // Sends `io` (a child) straight to the endpoint of `file` (no rules);
  // args.second_file of a rename or link is a full name on the same
  // endpoint. An unknown endpoint completes it with NotFound.
  void SubmitDirect(Io* io, const std::string& file);
  // Sends `io`, made by a stage on its own (a replica set's resync: no
  // caller's IO behind it), straight to the endpoint of `file` with the
  // endpoints the sSwitch has now, as SubmitDirect.
  void SubmitOwn(Io* io, const std::string& file);
  const SlowOpLog& slow_ops() const { return slow_ops_; }

 private:
  class Context;
  struct Join;

  // A rename's (or, with an empty `to`, an unlink's) calls to the
  // delegates of `rules` (Delegate::RenameRules, as records to send with
  // the IO, and Renamed), with the context a delegate gets.
  std::vector<DelegateRuleRecord> DelegateRenameRecords(
      const std::vector<const InstalledRule*>& rules, const std::string& from,
      const std::string& to,
      const std::vector<std::pair<std::string, std::string>>& moved);
  void DelegateRenamed(
      const InstalledRule* rule, const std::string& from, const std::string& to,
      const std::vector<std::pair<std::string, std::string>>& moved);

  std::shared_ptr<const Snapshot> Load() const;
  std::shared_ptr<const Snapshot> Current() const
      ABSL_LOCKS_EXCLUDED(publish_mu_);
  // current_ for a control operation: control_mu_ serializes its writers.
  const std::shared_ptr<const Snapshot>& CurrentLocked() const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(control_mu_);
  // Lists `io` as in flight and pins the current snapshot in it.
  void RegisterInflight(Io* io);
  // Sets the stage an IO comes from (it is routed again next). Under its
  // in-flight shard's lock: Drain() matches the headers of IOs in flight.
  void SetStageOf(Io* io, const std::string& stage);
  void Publish(std::shared_ptr<const Snapshot> snap)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(control_mu_)
          ABSL_LOCKS_EXCLUDED(publish_mu_);
  absl::StatusOr<std::shared_ptr<const RuleEntry>> MakeEntry(
      Rule rule, std::string owner, const OrderKey& order, const Snapshot& snap)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(control_mu_);
  // `owners` holds one owner for all rules, or one per rule.
  absl::StatusOr<std::vector<uint64_t>> UpdateLocked(
      std::vector<Rule> insert, const std::vector<uint64_t>& remove,
      const std::vector<std::string>& owners, const RuleEntry* anchor)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(control_mu_);

  void Admit(Io* io);
  // StaleIos' look at one IO. REQUIRES: the lock of its list is held.
  static void NoteStale(Io* io, uint64_t now, uint64_t older_ns, bool parked,
                        std::vector<StaleIo>* out);
  friend class InflightRegistry;
  void Dispatch(Io* io);
  void RoutePiece(Io* io, const RuleEntry* rule);
  void SendTo(Io* io, const Target& target, std::string resolved_file,
              uint64_t rule_id);
  void SendToFile(Io* io, std::string file);
  void SendToRemoteStage(Io* io, const Target& target);
  static bool SecondNameEntersStage(const Snapshot& snap, const Io& io,
                                    const std::string& stage);
  struct DetourCreate;
  void CreateAtDetour(Io* io, std::shared_ptr<Endpoint> endpoint,
                      std::string path, bool make_file);
  void TryDetourCreate(const std::shared_ptr<DetourCreate>& st);
  void MakeDetourParents(const std::shared_ptr<DetourCreate>& st);
  void MakeDetourFile(const std::shared_ptr<DetourCreate>& st);
  // Where the first whole-file rule matching `h` sends it: a file name, ""
  // for a stage or the controller. Delegates are not consulted.
  static std::string ResolveWholeFile(const Snapshot& snap, const IoHeader& h);
  // Where the file of `h` has its home: ResolveWholeFile for a getattr.
  static std::string HomeOf(const Snapshot& snap, const IoHeader& h);
  // The file a whole-file IO like `h` (as op `as`) reaches, through the
  // local stages on its route; `keeper` (if given) tells whether that route
  // passes a stage that places its files itself (Stage::KeepsNames).
  static std::string ResolveThroughStages(const Snapshot& snap, IoHeader h,
                                          Op as, bool* keeper = nullptr);
  // The file rule `e` sends a whole-file IO on `file` to (`file` itself
  // for no rule, "" for a stage or the controller).
  static std::string ResolveEntry(const RuleEntry* e, const std::string& file);
  // Returns an Io to route in place of the write `io`: when it succeeds, the
  // file `home` grows to at least its end, then `io` completes.
  Io* GrowHomeAfter(Io* io, std::string home);
  using DetourList = absl::InlinedVector<const Detour*, 4>;
  // For a rule with a delegate or side detours: runs them and sets *chosen
  // to the IO detours to take. Returns false if it completed `io` (the
  // delegate rejected it or chose a detour that is not one).
  bool Decide(Io* io, const RuleEntry* rule, Io::Frame* frame,
              DetourList* chosen);
  // Sends `io` along `chosen` (none: on to its own file), growing the home
  // of a write detoured away from it.
  void SendToDetours(Io* io, const RuleEntry* rule, const DetourList& chosen);
  void Scatter(Io* io, const RuleEntry* rule, const DetourList& detours);
  void Split(Io* io, const RuleTable::Pieces& pieces);
  void Fail(Io* io, absl::Status status);
  // Fences `file` after a scatter to `targets` (all answered) failed on
  // some and not on others.
  void Fence(const std::string& file,
             const std::vector<std::unique_ptr<Io>>& targets);
  // Fails `io` if its file is fenced and it reads or changes it.
  bool FailIfFenced(Io* io);

  // --- Files whose bytes live in several places (whole_file.cc).
  // For a tenant's admitted IO that changes a file's size, removes or moves
  // it, seeks its data or holes, or shifts its bytes (fallocate collapse /
  // insert): when some rule puts bytes of the file elsewhere than its home,
  // takes the IO, gives it the result a plain file gives, and returns true.
  bool RouteWholeFile(Io* io);
  // Returns an Io to route in place of the read `io`, some of whose pieces
  // leave the home: an answer that comes back short is completed with zeros
  // up to the file's size, which the home holds.
  Io* ZeroFillShortRead(Io* io);
  // Routes a child of `parent` by the rules, held in *slot (which must
  // live until it completes: `then` may hold its owner). A failure
  // completes `parent` with it; on success the child's results are the
  // parent's and `then` runs.
  void RouteChildThen(Io* parent, std::unique_ptr<Io>* slot,
                      absl::AnyInvocable<void()> then);
  // A one-off IO of the sSwitch's own, as the daemon, with the snapshot
  // and source of `like`: `setup` fills it, `done` runs once it completed,
  // and it is freed after.
  void SendOwn(const Io& like, Op op, const std::string& file,
               const std::function<void(Io&)>& setup,
               absl::AnyInvocable<void(Io&)> done);
  // Makes the missing ancestors of `file` on its endpoint, as the daemon,
  // each with the mode and owner of the first of `models` that is a
  // directory (0755 and the daemon's when none is), then calls done(status).
  void MakeParents(const Io& like, const std::string& file,
                   std::vector<std::string> models,
                   absl::AnyInvocable<void(absl::Status)> done);
  struct SizeFanOut;
  struct PlaceMoves;
  struct SeekAcross;
  void StepSizeFanOut(const std::shared_ptr<SizeFanOut>& st);
  // rename / link of a file with places (FilePlace) in `from`, to a name
  // with places in `to`: moves each along, or EXDEV.
  bool MovePlaces(Io* io, const std::vector<FilePlace>& from,
                  const std::vector<FilePlace>& to);
  void StepPlaceMoves(const std::shared_ptr<PlaceMoves>& st);
  void SeekAcrossPlaces(Io* io, const std::string& home);
  void StepSeek(const std::shared_ptr<SeekAcross>& st);

  // Submits `io` to the stage of `entry`, or parks it while the stage
  // changes; a removed stage's IO is routed again.
  // Enters io->to_stage_ (RouteToStage, once admitted); fails the IO if
  // the snapshot has no such stage.
  void EnterNamedStage(Io* io);
  void EnterStage(Io* io, const std::shared_ptr<StageEntry>& entry);
  // Routes `io`, which reached a stage removed since its snapshot, by the
  // rules of now; its old snapshot stays until it completes (its frames
  // name that snapshot's rules).
  void RouteByRulesOfNow(Io* io);
  // Parks IOs reaching `entry` and waits for those inside it; false (gate
  // open again) after `timeout`.
  bool CloseStageGate(StageEntry& entry, absl::Duration timeout);
  // Lets the parked IOs go on (`removed`: routed again by the rules).
  void OpenStageGate(StageEntry& entry, bool removed);
  // Calls the change observers, and adds the hook that calls them done.
  void ObserveChange(Io* io);

  friend class Io;
  void FinishRuleFrame(Io& io, Io::Frame& frame);
  void Unregister(
      Io* io, absl::InlinedVector<std::shared_ptr<DrainWaiter>, 1>* waiters);
  static void SignalDrained(DrainWaiter& waiter);
  void Release(std::deque<Io*> parked);

  const std::string name_;
  std::string state_dir_;
  const uint64_t uid_;  // distinguishes sSwitches in per-thread caches

  // Serializes control operations; guards the id counters and the route
  // observer. Order: after a delegate's state lock, before publish_mu_ and
  // QuiesceGate::mu.
  mutable Mutex control_mu_;
  // SetBypassGuard's (set while control requests may come). A leaf.
  mutable Mutex bypass_mu_;
  std::shared_ptr<BypassGuard> bypass_ ABSL_GUARDED_BY(bypass_mu_);
  absl::Duration bypass_wait_ ABSL_GUARDED_BY(bypass_mu_) = absl::Seconds(5);
  bool HasBypassGuard() const ABSL_LOCKS_EXCLUDED(bypass_mu_);
  // Holds the files `names` names against opens past the sSwitch and waits
  // for those open to close; then `change` runs, before the hold ends.
  // FailedPrecondition, naming the files, if they stay open (`change` does
  // not run).
  absl::Status ClearOfBypass(BypassGuard::Names names,
                             const std::function<void()>& change);
  absl::Status QuiesceNow(const HeaderPattern& pattern, bool on);
  absl::Status WatchEndpointNow(const std::string& name,
                                std::shared_ptr<EndpointWatch> watch);
  // Guards current_ (written with control_mu_ held too, so control
  // operations read it through CurrentLocked()). Order: after control_mu_
  // and InflightRegistry::Shard::mu; nothing is taken under it.
  mutable Mutex publish_mu_ ABSL_ACQUIRED_AFTER(control_mu_);
  std::shared_ptr<const Snapshot> current_ ABSL_GUARDED_BY(publish_mu_);
  std::atomic<uint64_t> version_{0};
  uint64_t next_id_ ABSL_GUARDED_BY(control_mu_) = 1;
  // Change observers, copied on write. observer_mu_ is a leaf.
  using ObserverList =
      std::vector<std::pair<uint64_t, std::shared_ptr<const ChangeObserver>>>;
  mutable Mutex observer_mu_;
  std::shared_ptr<const ObserverList> observers_ ABSL_GUARDED_BY(observer_mu_);
  uint64_t next_observer_ ABSL_GUARDED_BY(observer_mu_) = 1;
  std::atomic<int> observer_count_{0};
  std::atomic<int> flush_wanted_{0};
  uint64_t next_seq_ ABSL_GUARDED_BY(control_mu_) = 1;
  uint64_t next_sub_ ABSL_GUARDED_BY(control_mu_) = 1;

  std::unique_ptr<class InflightRegistry> inflight_;
  std::atomic<uint64_t> route_errors_{0};
  // Kept traces: a ring of kKeptTraces. A leaf lock.
  // `last`: nothing reads the trace after (its hops are moved, not copied).
  void KeepTrace(Io& io, uint64_t rule_id, uint64_t start_ns, uint64_t end_ns,
                 bool last = false);
  // Runs the taps `io` matches (RuleTable::MatchTaps) until one samples it.
  // REQUIRES: io->trace is null; its snapshot is pinned.
  void RunTaps(Io* io);
  // The traced IO's wait from its request's arrival (Io::arrived_ns) to
  // now, as a "queue" hop. REQUIRES: io->trace is not null.
  void AddQueueHop(Io* io);
  // For a traced IO sent to a stage: its rule's hop names the stage, not
  // where the stage sent it on (kept in the rule's frame).
  void NoteRuleTarget(Io* io);
  SlowOpLog slow_ops_;
  mutable Mutex traces_mu_;
  std::deque<KeptTrace> traces_ ABSL_GUARDED_BY(traces_mu_);
  uint64_t next_trace_seq_ ABSL_GUARDED_BY(traces_mu_) = 1;
  RouteObserver route_observer_ ABSL_GUARDED_BY(control_mu_);
  // Counted per thread shard (ThreadShard in sswitch.cc), each on cache
  // lines of its own: every unmatched IO adds one, and a count shared by
  // all threads would bounce between their CPUs on every IO.
  struct alignas(64) UnmatchedShard {
    std::array<std::atomic<uint64_t>, kNumOps> ops{};
  };
  std::unique_ptr<UnmatchedShard[]> unmatched_;
  std::atomic<uint64_t> last_record_seq_{0};

  // Guards fences_. A leaf.
  mutable Mutex fence_mu_;
  std::vector<std::pair<std::string, std::string>> fences_
      ABSL_GUARDED_BY(fence_mu_);       // file, why
  std::atomic<size_t> fence_count_{0};  // fences_.size(), read without lock

  // Guards shared_state_. A leaf (the `make` of SharedState runs under it).
  Mutex shared_state_mu_;
  std::vector<std::pair<std::string, std::shared_ptr<void>>> shared_state_
      ABSL_GUARDED_BY(shared_state_mu_);

  // Last: destroyed first, so that no expiry runs on a dying sSwitch.
  std::unique_ptr<LeaseKeeper> leases_;
};

}  // namespace sroute

#endif  // SROUTE_SSWITCH_SSWITCH_H_
