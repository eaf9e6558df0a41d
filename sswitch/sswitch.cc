// SPDX-License-Identifier: Apache-2.0
// Over 1 200 lines: the route, stage and control paths share the snapshot
// helpers (whole_file.cc and detours.cc are out already); the rest of the
// split is issue 52's.
#include "sswitch/sswitch.h"

#include <fcntl.h>
#include <linux/falloc.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "re2/re2.h"
#include "rules/parser.h"
#include "sswitch/inflight.h"
#include "sswitch/snapshot.h"
#include "util/clock.h"
#include "util/errno_status.h"
#include "util/interned.h"
#include "util/log.h"
#include "util/strings.h"
#include "util/thread_shard.h"

namespace sroute {

namespace {

// Ops that may act on every place a file's bytes live (RouteWholeFile).
bool TouchesWholeFile(Op op) {
  switch (op) {
    case Op::kSetattr:
    case Op::kTruncate:
    case Op::kOpen:
    case Op::kCreate:
    case Op::kUnlink:
    case Op::kLseek:
    case Op::kFallocate:
    case Op::kRenameFrom:
    case Op::kLink:
    case Op::kFsync:
      return true;
    default:
      return false;
  }
}

std::atomic<uint64_t> next_switch_uid{1};

}  // namespace

uint64_t SnapshotVersion(const Snapshot& snapshot) { return snapshot.version; }

std::string FormatRuleInfo(const RuleInfo& info) {
  std::string out = StrCat(info.id, ": ", FormatRule(info.rule));
  if (!info.owner.empty()) StrAppend(&out, "  # owner=", info.owner);
  return out;
}

// --- Delegate context ---

class SSwitch::Context : public DelegateContext {
 public:
  Context(SSwitch* sw, const InstalledRule* rule) : sw_(sw), rule_(rule) {}

  absl::StatusOr<std::vector<uint64_t>> Update(
      std::vector<Rule> insert, const std::vector<uint64_t>& remove) override {
    MutexLock l(&sw_->control_mu_);
    return sw_->UpdateLocked(std::move(insert), remove,
                             {StrCat("delegate:", rule_->id())}, rule_);
  }
  absl::Status Delete(const HeaderPattern& pattern) override {
    return sw_->Delete(pattern).status();
  }
  absl::Status Quiesce(const HeaderPattern& pattern, bool on) override {
    return sw_->Quiesce(pattern, on);
  }
  absl::Status Drain(const HeaderPattern& pattern,
                     absl::Duration timeout) override {
    return sw_->Drain(pattern, timeout);
  }
  const Rule& rule() const override { return rule_->rule(); }
  uint64_t rule_id() const override { return rule_->id(); }
  std::shared_ptr<void> SharedState(
      const std::string& key,
      std::function<std::shared_ptr<void>()> make) override {
    MutexLock l(&sw_->shared_state_mu_);
    for (auto& [k, v] : sw_->shared_state_) {
      if (k == key) return v;
    }
    sw_->shared_state_.emplace_back(key, make());
    return sw_->shared_state_.back().second;
  }

 private:
  SSwitch* const sw_;
  const InstalledRule* const rule_;
};

std::vector<DelegateRuleRecord> SSwitch::DelegateRenameRecords(
    const std::vector<const InstalledRule*>& rules, const std::string& from,
    const std::string& to,
    const std::vector<std::pair<std::string, std::string>>& moved) {
  std::vector<DelegateRuleRecord> out;
  for (const InstalledRule* rule : rules) {
    Context ctx(this, rule);
    for (const Rule& r : rule->delegate->RenameRules(from, to, moved, ctx)) {
      out.push_back(DelegateRuleRecord{name_, NextRecordSeq(), FormatRule(r),
                                       FormatPattern(rule->rule().pattern)});
    }
  }
  return out;
}

void SSwitch::DelegateRenamed(
    const InstalledRule* rule, const std::string& from, const std::string& to,
    const std::vector<std::pair<std::string, std::string>>& moved) {
  Context ctx(this, rule);
  rule->delegate->Renamed(from, to, moved, ctx);
}

// --- SSwitch ---

SSwitch::SSwitch(std::string name)
    : name_(std::move(name)),
      uid_(next_switch_uid.fetch_add(1)),
      inflight_(std::make_unique<InflightRegistry>()),
      unmatched_(std::make_unique<UnmatchedShard[]>(kThreadShards)),
      leases_(std::make_unique<LeaseKeeper>([this](const std::string& owner) {
        auto n = DeleteOwned(owner);
        if (n.ok()) {
          LogInfo(name_, ": the lease of ", owner, " expired: deleted its ", *n,
                  " rule(s)");
        } else {
          LogWarning(name_, ": the lease of ", owner,
                     " expired, and deleting its rules failed: ",
                     n.status().message());
        }
      })) {
  auto snap = std::make_shared<Snapshot>();
  snap->version = 0;
  snap->table = RuleTable::Empty();
  snap->endpoints = std::make_shared<EndpointMap>();
  snap->stages = std::make_shared<StageMap>();
  current_ = std::move(snap);
}

SSwitch::~SSwitch() {
  // Stages may call back into the sSwitch as they go (a cache removes its
  // change observer): the last snapshot, and the stages it holds, go while
  // every member is still there.
  std::shared_ptr<const Snapshot> last;
  {
    MutexLock l(&publish_mu_);
    last = std::move(current_);
  }
  last.reset();
}

std::shared_ptr<const Snapshot> SSwitch::Load() const {
  // A weak reference: a thread's cache must not keep a snapshot (and the
  // endpoints and stages it holds) alive after the sSwitch replaced or
  // dropped it.
  struct Cache {
    uint64_t uid = 0;
    uint64_t version = 0;
    std::weak_ptr<const Snapshot> snap;
  };
  thread_local Cache cache;
  const uint64_t v = version_.load(std::memory_order_acquire);
  if (cache.uid == uid_ && cache.version == v) {
    if (auto snap = cache.snap.lock()) return snap;
  }
  std::shared_ptr<const Snapshot> snap = Current();
  cache.uid = uid_;
  cache.snap = snap;
  cache.version = snap->version;
  return snap;
}

void SSwitch::Publish(std::shared_ptr<const Snapshot> snap) {
  std::shared_ptr<const Snapshot> old;  // released after the lock
  {
    MutexLock l(&publish_mu_);
    const uint64_t v = snap->version;
    old = std::move(current_);
    current_ = std::move(snap);
    version_.store(v, std::memory_order_release);
  }
  inflight_->Unpin();
}

std::shared_ptr<const Snapshot> SSwitch::Current() const {
  MutexLock l(&publish_mu_);
  return current_;
}

const std::shared_ptr<const Snapshot>& SSwitch::CurrentLocked() const
    ABSL_NO_THREAD_SAFETY_ANALYSIS {
  // Publish() writes current_ with control_mu_ held as well: a reader that
  // holds control_mu_ needs no publish_mu_.
  return current_;
}

void SSwitch::RegisterInflight(Io* io) {
  inflight_->Register(io, version_, [this] { return Current(); });
}

void SSwitch::SetStageOf(Io* io, const std::string& stage) {
  inflight_->SetStage(io, stage);
}

absl::Status SSwitch::AddEndpoint(const std::string& name,
                                  std::shared_ptr<Endpoint> endpoint) {
  if (name.empty() || endpoint == nullptr) {
    return absl::InvalidArgumentError("an endpoint needs a name and an object");
  }
  MutexLock l(&control_mu_);
  auto snap = std::make_shared<Snapshot>(*CurrentLocked());
  if (snap->endpoints->contains(name)) {
    return absl::AlreadyExistsError(StrCat("endpoint '", name, "' exists"));
  }
  auto endpoints = std::make_shared<EndpointMap>(*snap->endpoints);
  const std::string description = endpoint->Describe();
  (*endpoints)[name] = EndpointEntry{
      std::move(endpoint),
      InternName(StrCat("endpoint ", name,
                        description.empty() ? "" : " (" + description + ")"))};
  snap->endpoints = std::move(endpoints);
  snap->version = CurrentLocked()->version + 1;
  Publish(std::move(snap));
  return absl::OkStatus();
}

absl::Status SSwitch::AddStage(const std::string& name,
                               std::shared_ptr<Stage> stage) {
  if (name.empty() || stage == nullptr) {
    return absl::InvalidArgumentError("a stage needs a name and an object");
  }
  MutexLock l(&control_mu_);
  auto snap = std::make_shared<Snapshot>(*CurrentLocked());
  if (snap->stages->contains(name)) {
    return absl::AlreadyExistsError(StrCat("stage '", name, "' exists"));
  }
  auto entry = std::make_shared<StageEntry>();
  entry->name = name;
  entry->where = InternName(StrCat("stage:", name));
  entry->stage = std::move(stage);
  entry->forward = [this, name](Io* io) {
    SetStageOf(io, name);
    ++io->stage_hops_;
    Dispatch(io);
  };
  auto stages = std::make_shared<StageMap>(*snap->stages);
  (*stages)[name] = std::move(entry);
  snap->stages = std::move(stages);
  snap->version = CurrentLocked()->version + 1;
  Publish(std::move(snap));
  return absl::OkStatus();
}

std::vector<std::pair<std::string, std::shared_ptr<Endpoint>>>
SSwitch::Endpoints() const {
  std::shared_ptr<const Snapshot> snap = Current();
  std::vector<std::pair<std::string, std::shared_ptr<Endpoint>>> out;
  for (const auto& [name, e] : *snap->endpoints)
    out.emplace_back(name, e.endpoint);
  std::sort(out.begin(), out.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  return out;
}

absl::Status SSwitch::WatchEndpoint(const std::string& name,
                                    std::shared_ptr<EndpointWatch> watch) {
  if (watch != nullptr && HasBypassGuard()) {
    absl::Status done;
    absl::Status clear = ClearOfBypass(
        [name](const std::string& file) {
          FileName f;
          return SplitFileName(file, &f) && f.host == name;
        },
        [&] { done = WatchEndpointNow(name, std::move(watch)); });
    return clear.ok() ? done : clear;
  }
  return WatchEndpointNow(name, std::move(watch));
}

absl::Status SSwitch::WatchEndpointNow(const std::string& name,
                                       std::shared_ptr<EndpointWatch> watch) {
  MutexLock l(&control_mu_);
  auto snap = std::make_shared<Snapshot>(*CurrentLocked());
  if (!snap->endpoints->contains(name)) {
    return absl::NotFoundError(StrCat("no endpoint named '", name, "'"));
  }
  auto endpoints = std::make_shared<EndpointMap>(*snap->endpoints);
  (*endpoints)[name].watch = std::move(watch);
  snap->endpoints = std::move(endpoints);
  snap->version = CurrentLocked()->version + 1;
  Publish(std::move(snap));
  return absl::OkStatus();
}

std::vector<std::pair<std::string, std::shared_ptr<EndpointWatch>>>
SSwitch::EndpointWatches() const {
  std::shared_ptr<const Snapshot> snap = Current();
  std::vector<std::pair<std::string, std::shared_ptr<EndpointWatch>>> out;
  for (const auto& [name, e] : *snap->endpoints) {
    if (e.watch != nullptr) out.emplace_back(name, e.watch);
  }
  std::sort(out.begin(), out.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  return out;
}

std::vector<std::pair<std::string, uint64_t>> SSwitch::EndpointIos() const {
  std::shared_ptr<const Snapshot> snap = Current();
  std::vector<std::pair<std::string, uint64_t>> out;
  for (const auto& [name, e] : *snap->endpoints) {
    out.emplace_back(name, e.ios->Read(0));
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<SSwitch::StageInfo> SSwitch::Stages() const {
  std::shared_ptr<const Snapshot> snap = Current();
  std::vector<StageInfo> out;
  for (const auto& [name, e] : *snap->stages) {
    StageInfo& info = out.emplace_back();
    info.name = name;
    info.stage = e->stage;
    info.ios = e->ios.load(std::memory_order_relaxed);
    info.in_flight = e->inside.load(std::memory_order_relaxed);
    MutexLock l(&e->mu);
    info.parked = e->parked.size();
  }
  std::sort(out.begin(), out.end(), [](const StageInfo& a, const StageInfo& b) {
    return a.name < b.name;
  });
  return out;
}

void SSwitch::RouteByRulesOfNow(Io* io) {
  // The IO's frames name rules of its old snapshot (the one that sent it
  // to a stage since removed): that snapshot lives until the IO completes,
  // in a frame at the bottom of its response path, which unwinds last.
  Io::Frame keep;
  keep.hook = [old = std::move(io->snapshot_)](Io&) {};
  io->frames_.insert(io->frames_.begin(), std::move(keep));
  io->snapshot_ = Load();
  Dispatch(io);
}

void SSwitch::EnterStage(Io* io, const std::shared_ptr<StageEntry>& entry) {
  StageEntry& e = *entry;
  e.inside.fetch_add(1);  // seq_cst: see StageEntry::inside
  if (e.gated.load()) {
    ReleasableMutexLock l(&e.mu);
    if (e.gated.load()) {
      if (e.inside.fetch_sub(1) == 1) e.idle.SignalAll();
      if (!e.removed) {
        e.parked.push_back(io);
        return;
      }
      l.Unlock();
      // Routed by a snapshot older than the stage's removal: the rules of
      // now, which name it no more, route it.
      RouteByRulesOfNow(io);
      return;
    }
  }
  e.ios.fetch_add(1, std::memory_order_relaxed);
  io->NoteWaitingAt(e.where);
  if (io->trace != nullptr) {
    io->AddResponseHook([this, name = e.name, rule = io->rule_id(),
                         start = MonotonicNanos()](Io& done) {
      done.trace->Add(TraceHop{name_, "stage", rule, "stage:" + name, start,
                               MonotonicNanos(), 0, done.copy(),
                               done.status.code()});
    });
  }
  io->AddResponseHook([entry](Io&) {
    if (entry->inside.fetch_sub(1) == 1 && entry->gated.load()) {
      MutexLock l(&entry->mu);
      entry->idle.SignalAll();
    }
  });
  e.stage->Submit(io, e.forward);
}

bool SSwitch::CloseStageGate(StageEntry& e, absl::Duration timeout) {
  const auto deadline =
      std::chrono::steady_clock::now() + absl::ToChronoNanoseconds(timeout);
  MutexLock l(&e.mu);
  e.gated.store(true);
  while (e.inside.load() != 0) {
    if (e.idle.WaitUntil(&e.mu, deadline) == std::cv_status::timeout &&
        e.inside.load() != 0) {
      return false;
    }
  }
  return true;
}

void SSwitch::OpenStageGate(StageEntry& e, bool removed) {
  std::deque<Io*> parked;
  {
    MutexLock l(&e.mu);
    e.removed = removed;
    e.changing = false;
    // A removed stage's gate stays shut: late IOs are routed again.
    if (!removed) e.gated.store(false);
    parked.swap(e.parked);
  }
  for (Io* io : parked) {
    if (removed) {
      RouteByRulesOfNow(io);
      continue;
    }
    // The stage is in this IO's snapshot still: it holds the entry.
    auto it = io->snapshot_->stages->find(e.name);
    EnterStage(io, it->second);
  }
}

absl::Status SSwitch::ChangeStage(
    const std::string& name, const std::function<absl::Status(Stage&)>& change,
    absl::Duration timeout) {
  std::shared_ptr<const Snapshot> snap = Current();
  auto it = snap->stages->find(name);
  if (it == snap->stages->end()) {
    return absl::NotFoundError(StrCat("no stage named '", name, "'"));
  }
  StageEntry& e = *it->second;
  {
    MutexLock l(&e.mu);
    if (e.changing || e.removed) {
      return absl::UnavailableError(
          StrCat("stage '", name, "' is being changed or removed"));
    }
    e.changing = true;
  }
  if (!CloseStageGate(e, timeout)) {
    OpenStageGate(e, /*removed=*/false);
    return absl::DeadlineExceededError(
        StrCat("IOs still inside stage '", name, "' after ",
               absl::FormatDuration(timeout), "; nothing changed"));
  }
  absl::Status s = change(*e.stage);
  OpenStageGate(e, /*removed=*/false);
  return s;
}

namespace {

// Ids of the rules of `snap` that send IOs to local stage `stage`.
std::vector<uint64_t> RulesNamingStage(const Snapshot& snap,
                                       const std::string& sswitch,
                                       const std::string& stage) {
  std::vector<uint64_t> ids;
  for (const RuleEntryPtr& e : snap.table->Rules()) {
    for (const Detour& d : e->rule().detours) {
      if (d.target.kind == Target::Kind::kStage && d.target.stage == stage &&
          (d.target.stage_host.empty() || d.target.stage_host == sswitch)) {
        ids.push_back(e->id());
        break;
      }
    }
  }
  return ids;
}

absl::Status StageInUse(const std::string& stage,
                        const std::vector<uint64_t>& ids) {
  std::string list;
  for (uint64_t id : ids) StrAppend(&list, list.empty() ? "" : ", ", id);
  return absl::FailedPreconditionError(
      StrCat("stage '", stage, "' is in use by rule",
             ids.size() > 1 ? "s " : " ", list, "; delete them first"));
}

}  // namespace

absl::StatusOr<std::shared_ptr<Stage>> SSwitch::RemoveStage(
    const std::string& name, absl::Duration timeout) {
  std::shared_ptr<const Snapshot> snap = Current();
  auto it = snap->stages->find(name);
  if (it == snap->stages->end()) {
    return absl::NotFoundError(StrCat("no stage named '", name, "'"));
  }
  std::shared_ptr<StageEntry> entry = it->second;
  if (auto ids = RulesNamingStage(*snap, name_, name); !ids.empty()) {
    return StageInUse(name, ids);
  }
  {
    MutexLock l(&entry->mu);
    if (entry->changing || entry->removed) {
      return absl::UnavailableError(
          StrCat("stage '", name, "' is being changed or removed"));
    }
    entry->changing = true;
  }
  if (!CloseStageGate(*entry, timeout)) {
    OpenStageGate(*entry, /*removed=*/false);
    return absl::DeadlineExceededError(
        StrCat("IOs still inside stage '", name, "' after ",
               absl::FormatDuration(timeout), "; not removed"));
  }
  absl::Status in_use;
  {
    MutexLock l(&control_mu_);
    const Snapshot& now = *CurrentLocked();
    if (auto ids = RulesNamingStage(now, name_, name); !ids.empty()) {
      in_use = StageInUse(name, ids);  // a rule came meanwhile
    } else {
      auto next = std::make_shared<Snapshot>(now);
      auto stages = std::make_shared<StageMap>(*now.stages);
      stages->erase(name);
      next->stages = std::move(stages);
      next->version = now.version + 1;
      Publish(std::move(next));
    }
  }
  OpenStageGate(*entry, /*removed=*/in_use.ok());
  if (!in_use.ok()) return in_use;
  return entry->stage;
}

void SSwitch::SetControllerSink(std::shared_ptr<ControllerSink> sink) {
  MutexLock l(&control_mu_);
  auto snap = std::make_shared<Snapshot>(*CurrentLocked());
  snap->controller = std::move(sink);
  snap->version = CurrentLocked()->version + 1;
  Publish(std::move(snap));
}

// --- Data path ---

uint64_t SSwitch::AddChangeObserver(ChangeObserver observer) {
  MutexLock l(&observer_mu_);
  auto list = observers_ ? std::make_shared<ObserverList>(*observers_)
                         : std::make_shared<ObserverList>();
  const uint64_t id = next_observer_++;
  list->emplace_back(
      id, std::make_shared<const ChangeObserver>(std::move(observer)));
  observers_ = std::move(list);
  observer_count_.fetch_add(1);
  return id;
}

void SSwitch::RemoveChangeObserver(uint64_t id) {
  MutexLock l(&observer_mu_);
  if (!observers_) return;
  auto list = std::make_shared<ObserverList>();
  for (const auto& o : *observers_) {
    if (o.first != id) list->push_back(o);
  }
  if (list->size() != observers_->size()) observer_count_.fetch_sub(1);
  observers_ = std::move(list);
}

void SSwitch::ObserveChange(Io* io) {
  std::shared_ptr<const ObserverList> list;
  {
    MutexLock l(&observer_mu_);
    list = observers_;
  }
  if (!list || list->empty()) return;
  for (const auto& o : *list) (*o.second)(*io, /*done=*/false);
  // The first hook: it runs last, after those of the stages the IO passes.
  io->AddResponseHook([list = std::move(list)](Io& done) {
    for (const auto& o : *list) (*o.second)(done, /*done=*/true);
  });
}

void SSwitch::Route(Io* io) {
  io->router_ = this;
  io->stage_hops_ = 0;
  if (observer_count_.load(std::memory_order_relaxed) != 0 &&
      ChangesFileBytes(*io)) {
    ObserveChange(io);
  }
  // Register, then load the snapshot: a Drain() that misses this IO in the
  // registry published its quiesce first, so this IO will see it.
  RegisterInflight(io);
  if (io->trace == nullptr && io->snapshot_->table->has_taps()) RunTaps(io);
  if (io->trace != nullptr && io->arrived_ns != 0) AddQueueHop(io);
  Admit(io);
}

void SSwitch::AddQueueHop(Io* io) {
  io->trace->Add(TraceHop{name_, "queue", 0, "", io->arrived_ns,
                          MonotonicNanos(), 0, io->copy_,
                          absl::StatusCode::kOk});
}

void SSwitch::RouteToStage(Io* io, const std::string& stage) {
  io->router_ = this;
  io->stage_hops_ = 0;
  if (observer_count_.load(std::memory_order_relaxed) != 0 &&
      ChangesFileBytes(*io)) {
    ObserveChange(io);
  }
  io->to_stage_ = stage;
  RegisterInflight(io);
  if (io->trace != nullptr && io->arrived_ns != 0) AddQueueHop(io);
  Admit(io);
}

void SSwitch::EnterNamedStage(Io* io) {
  const std::string stage = std::move(io->to_stage_);
  io->to_stage_.clear();
  auto it = io->snapshot_->stages->find(stage);
  if (it == io->snapshot_->stages->end()) {
    Fail(io, absl::NotFoundError(
                 StrCat("no stage named '", stage, "' on ", name_)));
    return;
  }
  io->target = StrCat("stage:", stage);
  EnterStage(io, it->second);
}

void SSwitch::Admit(Io* io) {
  // The snapshot RegisterInflight pinned, then (a gate released meanwhile)
  // the current one.
  for (;; io->snapshot_ = Load()) {
    const Snapshot* snap = io->snapshot_.get();
    QuiesceGate* gate = nullptr;
    for (const auto& g : snap->quiesced) {
      if (!io->passes_quiesce && g->matcher.Matches(io->header)) {
        gate = g.get();
        break;
      }
    }
    if (gate != nullptr) {
      ReleasableMutexLock l(&gate->mu);
      if (!gate->active) continue;  // released meanwhile: look again
      // A parked IO is not in flight: Drain() does not wait for it.
      absl::InlinedVector<std::shared_ptr<DrainWaiter>, 1> waiters;
      inflight_->Unregister(io, &waiters);
      io->snapshot_.reset();  // Release() pins the snapshot of the moment
      if (io->trace != nullptr && io->parked_ns_ == 0) {
        io->parked_ns_ = MonotonicNanos();
      }
      gate->parked.push_back(io);
      l.Unlock();
      for (auto& w : waiters) SignalDrained(*w);
      return;
    }
    if (io->parked_ns_ != 0) {  // traced, and parked until now
      io->trace->Add(TraceHop{name_, "park", 0, io->header.file, io->parked_ns_,
                              MonotonicNanos(), 0, io->copy_,
                              absl::StatusCode::kOk});
      io->parked_ns_ = 0;
    }
    if (!io->to_stage_.empty()) {
      EnterNamedStage(io);
      return;
    }
    if (io->header.stage.empty()) {
      if (fence_count_.load(std::memory_order_relaxed) != 0 &&
          FailIfFenced(io)) {
        return;
      }
      if (TouchesWholeFile(io->header.op) && RouteWholeFile(io)) return;
    }
    Dispatch(io);
    return;
  }
}

void SSwitch::Dispatch(Io* io) {
  RuleTable::Pieces pieces;
  io->snapshot_->table->Route(io->header, &pieces);
  if (io->header.op == Op::kRead) {
    for (const auto& piece : pieces) {
      if (piece.rule != nullptr && piece.rule->rule().pattern.file.range) {
        io = ZeroFillShortRead(io);
        break;
      }
    }
  }
  if (pieces.size() == 1) {
    RoutePiece(io, pieces[0].rule);
  } else {
    Split(io, pieces);
  }
}

void SSwitch::RoutePiece(Io* io, const RuleEntry* entry) {
  if (entry == nullptr) {
    unmatched_[ThreadShard()].ops[static_cast<int>(io->header.op)].fetch_add(
        1, std::memory_order_relaxed);
    if (io->trace != nullptr) {
      io->AddResponseHook([this, start = MonotonicNanos()](Io& done) {
        done.trace->Add(TraceHop{name_, "default", 0, done.target, start,
                                 MonotonicNanos(), 0, done.copy(),
                                 done.status.code()});
      });
    }
    SendToFile(io, io->header.file);  // default route
    return;
  }
  const InstalledRule* rule = AsInstalled(entry);
  rule->counters.Start(io->header.op_class());
  // The rule's frame, built in place: the response path finishes it.
  Io::Frame& frame = io->frames_.emplace_back();
  frame.rule = rule;
  frame.start_ns = MonotonicNanos();
  if (!rule->delegate && !rule->has_side_detours) {
    // Nothing to decide (the common case): every IO detour.
    SendToDetours(io, rule, rule->io_detours);
    return;
  }
  DetourList chosen;
  if (Decide(io, rule, &frame, &chosen)) SendToDetours(io, rule, chosen);
}

bool SSwitch::Decide(Io* io, const RuleEntry* entry, Io::Frame* frame,
                     DetourList* chosen) {
  const InstalledRule* rule = AsInstalled(entry);
  const Rule& r = rule->rule();
  Decision decision;
  std::optional<Context> ctx;
  if (rule->delegate) {
    ctx.emplace(this, rule);
    decision = rule->delegate->OnRequest(io->header, *ctx);
    if (decision.trace && io->trace == nullptr) {
      io->trace = std::make_shared<Trace>();
      frame->sampled = true;
    }
  }
  // Side detours: copies of the header, and the delegate's value.
  const Snapshot& snap = *io->snapshot_;
  bool emitted = false;
  for (const Detour& d : r.detours) {
    if (d.what == Detour::What::kHeader) {
      if (snap.controller) {
        snap.controller->OnHeader(io->header, rule->id());
      } else {
        route_errors_.fetch_add(1, std::memory_order_relaxed);
      }
    } else if (d.what == Detour::What::kF && decision.emit) {
      emitted = true;
      if (snap.controller) {
        snap.controller->OnValue(io->header, rule->id(), *decision.emit);
      } else {
        route_errors_.fetch_add(1, std::memory_order_relaxed);
      }
    }
  }
  if (decision.emit && !emitted && snap.controller) {
    snap.controller->OnValue(io->header, rule->id(), *decision.emit);
  }

  absl::Status bad_choice;
  if (decision.use.empty()) {
    *chosen = rule->io_detours;
  } else {
    for (uint16_t i : decision.use) {
      if (i >= r.detours.size() || r.detours[i].what != Detour::What::kIo) {
        bad_choice = absl::InternalError(
            StrCat("delegate ", r.delegate->name, " chose detour ", i,
                   ", which is not an IO detour of rule ", rule->id()));
        break;
      }
      chosen->push_back(&r.detours[i]);
    }
  }
  if (rule->delegate_response || rule->delegate_durable) {
    if (chosen->empty()) {
      frame->targets.push_back(io->header.file);
    }
    for (const Detour* d : *chosen) {
      frame->targets.push_back(
          d->target.kind == Target::Kind::kFile
              ? ResolveTargetFile(d->target, r.pattern.file, io->header.file)
              : FormatTarget(d->target));
    }
    if (rule->delegate_durable && decision.reject.ok() && bad_choice.ok()) {
      for (const Rule& made :
           rule->delegate->DurableRules(io->header, frame->targets, *ctx)) {
        io->records.push_back(DelegateRuleRecord{name_, NextRecordSeq(),
                                                 FormatRule(made),
                                                 FormatPattern(r.pattern)});
      }
    }
    if (!rule->delegate_response) frame->targets.clear();
  }
  if (!decision.reject.ok()) {
    io->Complete(std::move(decision.reject));
    return false;
  }
  if (!bad_choice.ok()) {
    io->Complete(std::move(bad_choice));
    return false;
  }
  return true;
}

std::unique_ptr<Io> SSwitch::NewChild(const Io& parent) {
  auto child = std::make_unique<Io>();
  child->header = parent.header;
  child->args = parent.args;
  child->write_data = parent.write_data;
  child->read_buffer = parent.read_buffer;
  child->records = parent.records;
  child->router_ = this;
  child->snapshot_ = parent.snapshot_;
  child->stage_hops_ = parent.stage_hops_;
  child->trace = parent.trace;
  child->copy_ = parent.copy_;
  child->child_ = true;
  child->waiting_at_ = parent.waiting_at_;
  return child;
}

void SSwitch::Fail(Io* io, absl::Status status) {
  route_errors_.fetch_add(1, std::memory_order_relaxed);
  io->Complete(std::move(status));
}

void SSwitch::FinishRuleFrame(Io& io, Io::Frame& frame) {
  const InstalledRule* rule = AsInstalled(frame.rule);
  const uint64_t now = MonotonicNanos();
  rule->counters.Finish(io.header.op_class(), io.bytes, !io.status.ok(),
                        now - frame.start_ns);
  if (io.trace != nullptr) {
    // Where the rule sent it (a stage hands it on elsewhere).
    io.trace->Add(
        TraceHop{name_, "rule", rule->id(),
                 frame.targets.size() == 1 ? frame.targets[0] : io.target,
                 frame.start_ns, now, 0, io.copy_, io.status.code()});
    if (frame.sampled) KeepTrace(io, rule->id(), frame.start_ns, now);
  }
  const uint64_t slow = slow_ops_.threshold_ns();
  if (slow != 0 && now - frame.start_ns >= slow && !io.child_ &&
      std::none_of(io.frames_.begin(), io.frames_.end(),
                   [](const Io::Frame& f) { return f.rule != nullptr; })) {
    // The IO's first rule here: its time at this sSwitch.
    SlowIo s;
    s.header = io.header;
    s.rule_id = rule->id();
    s.start_ns = frame.start_ns;
    s.end_ns = now;
    s.code = io.status.code();
    if (io.trace != nullptr) s.hops = io.trace->Hops();
    slow_ops_.Add(std::move(s));
  }
  if (rule->delegate_response) {
    Context ctx(this, rule);
    rule->delegate->OnResponse(
        io.header, IoOutcome{io.status, io.bytes, frame.targets}, ctx);
  }
}

void SSwitch::Unregister(
    Io* io, absl::InlinedVector<std::shared_ptr<DrainWaiter>, 1>* waiters) {
  inflight_->Unregister(io, waiters);
}

void SSwitch::RunTaps(Io* io) {
  absl::InlinedVector<const RuleEntry*, 2> taps;
  io->snapshot_->table->MatchTaps(io->header, &taps);
  for (const RuleEntry* entry : taps) {
    const InstalledRule* tap = AsInstalled(entry);
    Context ctx(this, tap);
    if (!tap->delegate->OnRequest(io->header, ctx).trace) continue;
    io->trace = std::make_shared<Trace>();
    // The first frame: it finishes last, once every hop here has ended.
    io->AddResponseHook(
        [this, id = tap->id(), start = MonotonicNanos()](Io& done) {
          KeepTrace(done, id, start, MonotonicNanos(), /*last=*/true);
        });
    return;
  }
}

void SSwitch::KeepTrace(Io& io, uint64_t rule_id, uint64_t start_ns,
                        uint64_t end_ns, bool last) {
  KeptTrace t;
  t.header = io.header;
  t.rule_id = rule_id;
  t.start_ns = start_ns;
  t.end_ns = end_ns;
  t.code = io.status.code();
  t.hops = last ? io.trace->TakeHops() : io.trace->Hops();
  t.hops_dropped = io.trace->dropped();
  MutexLock l(&traces_mu_);
  t.seq = next_trace_seq_++;
  if (traces_.size() >= kKeptTraces) traces_.pop_front();
  traces_.push_back(std::move(t));
}

std::vector<SSwitch::KeptTrace> SSwitch::Traces(uint64_t after,
                                                size_t limit) const {
  std::vector<KeptTrace> out;
  MutexLock l(&traces_mu_);
  for (const KeptTrace& t : traces_) {
    if (out.size() >= limit) break;
    if (t.seq > after) out.push_back(t);
  }
  return out;
}

void SSwitch::NoteStale(Io* io, uint64_t now, uint64_t older_ns, bool parked,
                        std::vector<StaleIo>* out) {
  // Readdir IOs change their file on the way (sswitch/namespace.cc): left
  // out rather than read while they do.
  if (io->header.op == Op::kReaddir) return;
  if (io->first_seen_ns_ == 0) {
    io->first_seen_ns_ = now;
    return;
  }
  if (now - io->first_seen_ns_ < older_ns) return;
  StaleIo s;
  s.source = io->header.source;
  s.op = io->header.op;
  s.file = io->header.file;
  s.offset = io->header.offset;
  s.length = io->header.length;
  s.age_ns = now - io->first_seen_ns_;
  s.parked = parked;
  if (const std::string* where =
          io->waiting_at_->load(std::memory_order_acquire)) {
    s.waiting_at = *where;
  }
  out->push_back(std::move(s));
}

std::vector<SSwitch::StaleIo> SSwitch::StaleIos(absl::Duration older_than) {
  const uint64_t now = MonotonicNanos();
  const uint64_t older = static_cast<uint64_t>(
      std::max<int64_t>(0, absl::ToInt64Nanoseconds(older_than)));
  std::vector<StaleIo> out;
  inflight_->Stale(now, older, &out);
  const std::shared_ptr<const Snapshot> snapshot = Load();
  for (const auto& g : snapshot->quiesced) {
    MutexLock l(&g->mu);
    for (Io* io : g->parked) NoteStale(io, now, older, /*parked=*/true, &out);
  }
  return out;
}

uint64_t SSwitch::traces_sampled() const {
  MutexLock l(&traces_mu_);
  return next_trace_seq_ - 1;
}

uint64_t SSwitch::unmatched_ops(Op op) const {
  uint64_t n = 0;
  for (int i = 0; i < kThreadShards; ++i) {
    n +=
        unmatched_[i].ops[static_cast<int>(op)].load(std::memory_order_relaxed);
  }
  return n;
}

void SSwitch::SignalDrained(DrainWaiter& w) {
  MutexLock l(&w.mu);
  if (--w.remaining == 0) w.cv.SignalAll();
}

// --- Control API ---

absl::StatusOr<std::shared_ptr<const RuleEntry>> SSwitch::MakeEntry(
    Rule rule, std::string owner, const OrderKey& order, const Snapshot& snap) {
  for (const Detour& d : rule.detours) {
    const Target& t = d.target;
    if (d.what != Detour::What::kIo && t.kind != Target::Kind::kController) {
      return absl::InvalidArgumentError(
          "IOHeader and F detours can only go to the controller");
    }
    if (t.kind == Target::Kind::kFile) {
      FileName name;
      if (!SplitFileName(t.file, &name)) {
        return absl::InvalidArgumentError(StrCat("bad target file ", t.file));
      }
      if (!snap.endpoints->contains(name.host)) {
        return absl::NotFoundError(
            StrCat("unknown endpoint '", name.host, "' in target ", t.file));
      }
    } else if (t.kind == Target::Kind::kStage &&
               (t.stage_host.empty() || t.stage_host == name_) &&
               !snap.stages->contains(t.stage)) {
      return absl::NotFoundError(
          StrCat("unknown stage '", t.stage, "' in target ", FormatTarget(t)));
    } else if (t.kind == Target::Kind::kStage && !t.stage_host.empty() &&
               t.stage_host != name_ &&
               !snap.endpoints->contains(t.stage_host)) {
      return absl::NotFoundError(StrCat("unknown endpoint '", t.stage_host,
                                        "' in target ", FormatTarget(t),
                                        " (a storage server of this host)"));
    }
  }
  if (rule.pattern.file.kind == FilePattern::Kind::kRegex) {
    RE2 re(rule.pattern.file.text, RE2::Quiet);
    if (!re.ok()) {
      return absl::InvalidArgumentError(
          StrCat("bad regular expression: ", re.error()));
    }
  }
  std::unique_ptr<Delegate> delegate;
  if (rule.delegate) {
    auto d = DelegateRegistry::Global().Create(*rule.delegate, rule);
    if (!d.ok()) return d.status();
    delegate = std::move(*d);
  }
  auto entry = std::make_shared<InstalledRule>(
      next_id_++, order, std::move(rule), std::move(owner));
  entry->delegate_response = delegate && delegate->wants_response();
  entry->delegate_durable = delegate && delegate->makes_durable_rules();
  entry->delegate = std::move(delegate);
  return entry;
}

absl::StatusOr<std::vector<uint64_t>> SSwitch::UpdateLocked(
    std::vector<Rule> insert, const std::vector<uint64_t>& remove,
    const std::vector<std::string>& owners, const RuleEntry* anchor) {
  if (owners.size() != 1 && owners.size() != insert.size()) {
    return absl::InvalidArgumentError("one owner, or one per rule");
  }
  const Snapshot& cur = *CurrentLocked();
  std::vector<uint64_t> present;
  present.reserve(remove.size());
  for (uint64_t id : remove) {
    if (cur.table->Find(id) != nullptr) {
      present.push_back(id);
    } else if (anchor == nullptr) {
      // A delegate's view may be stale (someone deleted its rule); a
      // user's delete of an unknown id is an error.
      return absl::NotFoundError(StrCat("no rule with id ", id));
    }
  }
  std::vector<RuleEntryPtr> entries;
  std::vector<uint64_t> ids;
  entries.reserve(insert.size());
  const uint64_t saved_id = next_id_, saved_seq = next_seq_,
                 saved_sub = next_sub_;
  for (size_t i = 0; i < insert.size(); ++i) {
    Rule& rule = insert[i];
    const std::string& owner = owners.size() == 1 ? owners[0] : owners[i];
    OrderKey order;
    if (anchor != nullptr) {
      order = anchor->order();
      order.anchored = true;
      order.sub = next_sub_++;
    } else {
      order.priority = rule.priority;
      order.seq = next_seq_++;
    }
    auto entry = MakeEntry(std::move(rule), owner, order, cur);
    if (!entry.ok()) {
      next_id_ = saved_id, next_seq_ = saved_seq, next_sub_ = saved_sub;
      return entry.status();
    }
    ids.push_back((*entry)->id());
    entries.push_back(std::move(*entry));
  }
  std::vector<HeaderPattern> changed;
  if (route_observer_) {
    for (const RuleEntryPtr& e : entries) changed.push_back(e->rule().pattern);
    for (uint64_t id : present) {
      changed.push_back(cur.table->Find(id)->rule().pattern);
    }
  }
  auto snap = std::make_shared<Snapshot>(cur);
  snap->version = cur.version + 1;
  snap->table = cur.table->Apply(std::move(entries), present, snap->version);
  Publish(std::move(snap));
  if (route_observer_ && !changed.empty()) route_observer_(changed);
  return ids;
}

absl::Status SSwitch::Validate(const std::vector<Rule>& rules) {
  MutexLock l(&control_mu_);
  const uint64_t saved_id = next_id_;
  absl::Status status;
  for (size_t i = 0; i < rules.size() && status.ok(); ++i) {
    auto entry = MakeEntry(rules[i], "", OrderKey(), *CurrentLocked());
    if (!entry.ok()) {
      status = absl::Status(
          entry.status().code(),
          StrCat(FormatRule(rules[i]), ": ", entry.status().message()));
    }
  }
  next_id_ = saved_id;  // nothing was installed
  return status;
}

absl::Status SSwitch::RestoreDelegateRules(
    std::vector<DelegateRuleRecord> records, size_t* skipped) {
  std::stable_sort(records.begin(), records.end(),
                   [](const DelegateRuleRecord& a,
                      const DelegateRuleRecord& b) { return a.seq < b.seq; });
  // Group by anchor, keeping the order within each group.
  std::vector<std::pair<std::string, std::vector<Rule>>> groups;
  size_t dropped = 0;
  for (const DelegateRuleRecord& rec : records) {
    auto rule = ParseRule(rec.rule);
    if (!rule.ok()) {
      ++dropped;
      continue;
    }
    auto g = std::find_if(groups.begin(), groups.end(),
                          [&](const auto& x) { return x.first == rec.anchor; });
    if (g == groups.end()) {
      groups.emplace_back(rec.anchor, std::vector<Rule>());
      g = groups.end() - 1;
    }
    g->second.push_back(*std::move(rule));
  }
  absl::Status first_error;
  auto snap = Load();
  for (auto& [anchor, rules] : groups) {
    const InstalledRule* owner = nullptr;
    for (const RuleEntryPtr& e : snap->table->Rules()) {
      const InstalledRule* r = AsInstalled(e.get());
      if (r->delegate_durable && FormatPattern(r->rule().pattern) == anchor) {
        owner = r;
        break;
      }
    }
    if (owner == nullptr) {
      dropped += rules.size();
      continue;
    }
    Context ctx(this, owner);
    absl::Status s = owner->delegate->Restore(rules, ctx);
    if (!s.ok() && first_error.ok()) first_error = s;
  }
  if (skipped != nullptr) *skipped = dropped;
  return first_error;
}

absl::StatusOr<uint64_t> SSwitch::Insert(Rule rule, std::string owner) {
  std::vector<Rule> one;
  one.push_back(std::move(rule));
  auto ids = Update(std::move(one), {}, std::move(owner));
  if (!ids.ok()) return ids.status();
  return (*ids)[0];
}

absl::StatusOr<std::vector<uint64_t>> SSwitch::Update(
    std::vector<Rule> insert, const std::vector<uint64_t>& remove,
    std::string owner) {
  return Update(std::move(insert), std::vector<std::string>{owner}, remove);
}

absl::StatusOr<std::vector<uint64_t>> SSwitch::Update(
    std::vector<Rule> insert, const std::vector<std::string>& owners,
    const std::vector<uint64_t>& remove) {
  if (insert.empty() || !HasBypassGuard()) {
    MutexLock l(&control_mu_);
    return UpdateLocked(std::move(insert), remove, owners, nullptr);
  }
  absl::StatusOr<std::vector<uint64_t>> ids;
  absl::Status clear = ClearOfBypass(NamedByRules(insert), [&] {
    MutexLock l(&control_mu_);
    ids = UpdateLocked(std::move(insert), remove, owners, nullptr);
  });
  if (!clear.ok()) return clear;
  return ids;
}

void SSwitch::Resume(Io* io, const std::string& from) {
  SetStageOf(io, from);
  ++io->stage_hops_;
  Dispatch(io);
}

absl::Status SSwitch::Delete(uint64_t id) { return Update({}, {id}).status(); }

absl::StatusOr<int> SSwitch::Delete(const HeaderPattern& pattern) {
  MutexLock l(&control_mu_);
  std::vector<uint64_t> ids;
  for (const RuleEntryPtr& e : CurrentLocked()->table->Rules()) {
    if (e->rule().pattern == pattern) ids.push_back(e->id());
  }
  if (ids.empty()) return 0;
  auto r = UpdateLocked({}, ids, {""}, nullptr);
  if (!r.ok()) return r.status();
  return static_cast<int>(ids.size());
}

absl::StatusOr<int> SSwitch::DeleteOwned(const std::string& owner) {
  MutexLock l(&control_mu_);
  std::vector<uint64_t> ids;
  for (const RuleEntryPtr& e : CurrentLocked()->table->Rules()) {
    if (e->owner() == owner) ids.push_back(e->id());
  }
  if (ids.empty()) return 0;
  auto r = UpdateLocked({}, ids, {""}, nullptr);
  if (!r.ok()) return r.status();
  return static_cast<int>(ids.size());
}

absl::StatusOr<int> SSwitch::HoldLease(const std::string& owner,
                                       absl::Duration ttl) {
  if (owner.empty()) {
    return absl::InvalidArgumentError("a lease needs an owner name");
  }
  if (ttl > absl::ZeroDuration()) {
    leases_->Hold(owner, ttl);
    return 0;
  }
  leases_->Release(owner);
  return DeleteOwned(owner);
}

std::vector<std::string> SSwitch::LeaseOwners() const {
  return leases_->Owners();
}

absl::Status SSwitch::Quiesce(const HeaderPattern& pattern, bool on) {
  if (on && HasBypassGuard()) {
    auto matcher = PatternMatcher::Create(pattern);
    if (!matcher.ok()) return matcher.status();
    absl::Status done;
    absl::Status clear = ClearOfBypass(
        [m = std::move(*matcher)](const std::string& file) {
          return m.MatchesFile(file);
        },
        [&] { done = QuiesceNow(pattern, on); });
    return clear.ok() ? done : clear;
  }
  return QuiesceNow(pattern, on);
}

absl::Status SSwitch::QuiesceNow(const HeaderPattern& pattern, bool on) {
  std::deque<Io*> release;
  {
    MutexLock l(&control_mu_);
    const Snapshot& cur = *CurrentLocked();
    auto it = std::find_if(cur.quiesced.begin(), cur.quiesced.end(),
                           [&](const std::shared_ptr<QuiesceGate>& g) {
                             return g->matcher.pattern() == pattern;
                           });
    if (on) {
      if (it != cur.quiesced.end()) return absl::OkStatus();
      auto matcher = PatternMatcher::Create(pattern);
      if (!matcher.ok()) return matcher.status();
      auto snap = std::make_shared<Snapshot>(cur);
      snap->quiesced.push_back(
          std::make_shared<QuiesceGate>(std::move(*matcher)));
      snap->version = cur.version + 1;
      Publish(std::move(snap));
      return absl::OkStatus();
    }
    if (it == cur.quiesced.end()) {
      return absl::NotFoundError(
          StrCat("not quiesced: ", FormatPattern(pattern)));
    }
    std::shared_ptr<QuiesceGate> gate = *it;
    auto snap = std::make_shared<Snapshot>(cur);
    snap->quiesced.erase(snap->quiesced.begin() + (it - cur.quiesced.begin()));
    snap->version = cur.version + 1;
    Publish(std::move(snap));
    MutexLock gl(&gate->mu);
    gate->active = false;
    release.swap(gate->parked);
  }
  Release(std::move(release));
  return absl::OkStatus();
}

void SSwitch::Release(std::deque<Io*> parked) {
  // In arrival order, on the caller's thread, with no lock held.
  for (Io* io : parked) {
    RegisterInflight(io);
    Admit(io);
  }
}

absl::Status SSwitch::Drain(const HeaderPattern& pattern,
                            absl::Duration timeout) {
  auto matcher = PatternMatcher::Create(pattern);
  if (!matcher.ok()) return matcher.status();
  auto waiter = std::make_shared<DrainWaiter>();
  inflight_->Collect(*matcher, waiter);
  MutexLock l(&waiter->mu);
  --waiter->remaining;  // drop the guard
  const bool done =
      waiter->cv.WaitFor(&waiter->mu, absl::ToChronoNanoseconds(timeout),
                         [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(waiter->mu) {
                           return waiter->remaining == 0;
                         });
  if (!done) {
    return absl::DeadlineExceededError(
        StrCat("drain of ", FormatPattern(pattern), ": ", waiter->remaining,
               " IO(s) still in flight after ", absl::FormatDuration(timeout)));
  }
  return absl::OkStatus();
}

// --- Namespace questions ---

std::string SSwitch::RouteOf(const IoHeader& h) const {
  return ResolveWholeFile(*Load(), h);
}

namespace {
// The directory of "//HOST/PATH": "//HOST/DIR", or "//HOST/" for a file at
// the endpoint's root.
std::string DirName(const std::string& file) {
  const size_t slash = file.rfind('/');
  if (slash == std::string::npos || slash < 3) return file;
  const size_t root = file.find('/', 2);
  return slash == root ? file.substr(0, slash + 1) : file.substr(0, slash);
}
}  // namespace

uint64_t SSwitch::NextRecordSeq() {
  // Realtime nanoseconds, strictly increasing: records of one sSwitch keep
  // their order across restarts without any state of its own.
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  const uint64_t now = static_cast<uint64_t>(ts.tv_sec) * 1000000000u +
                       static_cast<uint64_t>(ts.tv_nsec);
  uint64_t last = last_record_seq_.load(std::memory_order_relaxed);
  uint64_t next;
  do {
    next = std::max(now, last + 1);
  } while (!last_record_seq_.compare_exchange_weak(last, next,
                                                   std::memory_order_relaxed));
  return next;
}

void SSwitch::SetRouteObserver(RouteObserver observer) {
  MutexLock l(&control_mu_);
  route_observer_ = std::move(observer);
}

bool SSwitch::MayRoute(const std::string& file) const {
  return Load()->table->MayRoute(file);
}

std::vector<std::string> SSwitch::ChildPlaces(const IoHeader& dir) const {
  auto snap = Load();
  const std::string own = ResolveWholeFile(*snap, dir);
  const std::string children =
      dir.file.ends_with('/') ? dir.file : dir.file + "/";
  std::vector<std::string> places;
  for (const RuleEntryPtr& e : snap->table->Rules()) {
    const Rule& r = e->rule();
    const FilePattern& f = r.pattern.file;
    if (f.range || !(r.pattern.ops & dir.op_class()) ||
        !r.pattern.source.Matches(dir)) {
      continue;
    }
    // A sample child of `dir` that the rule matches, if any.
    std::string child;
    switch (f.kind) {
      case FilePattern::Kind::kAny:
        child = children + "x";
        break;
      case FilePattern::Kind::kExact:
        if (f.text.starts_with(children) &&
            f.text.find('/', children.size()) == std::string::npos) {
          child = f.text;
        }
        break;
      case FilePattern::Kind::kPrefix:
        if (children.starts_with(f.text)) {
          child = children + "x";
        } else if (f.text.starts_with(children) &&
                   f.text.find('/', children.size()) == std::string::npos) {
          child = f.text + "x";
        }
        break;
      case FilePattern::Kind::kRegex:
        break;
    }
    if (child.empty()) continue;
    for (const Detour& d : r.detours) {
      if (d.what != Detour::What::kIo || d.target.kind != Target::Kind::kFile) {
        continue;
      }
      std::string place = DirName(ResolveTargetFile(d.target, f, child));
      if (place != own &&
          std::find(places.begin(), places.end(), place) == places.end()) {
        places.push_back(std::move(place));
      }
    }
  }
  return places;
}

// --- Introspection ---

void SSwitch::VisitCounters(
    const std::function<void(uint64_t, const std::string&,
                             const RuleCounters&)>& fn) const {
  for (const RuleEntryPtr& e : Load()->table->Rules()) {
    fn(e->id(), e->owner(), AsInstalled(e.get())->counters);
  }
}

absl::Status SSwitch::ForgetDelegateRange(const std::string& file,
                                          uint64_t start, uint64_t end) {
  // Every rule with a delegate asks it: the rule that made the read rules
  // may be gone (a reclaim replaced it), their state shared with the rule
  // that replaced it.
  auto snap = Load();
  for (const RuleEntryPtr& e : snap->table->Rules()) {
    const InstalledRule* rule = AsInstalled(e.get());
    if (!rule->delegate) continue;
    Context ctx(this, rule);
    if (absl::Status s = rule->delegate->ForgetRange(file, start, end, ctx);
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

std::vector<RuleInfo> SSwitch::ListRules() const {
  std::vector<RuleInfo> out;
  for (const RuleEntryPtr& e : Load()->table->Rules()) {
    RuleInfo info;
    info.id = e->id();
    info.rule = e->rule();
    info.owner = e->owner();
    info.counters = AsInstalled(e.get())->counters.Read();
    out.push_back(std::move(info));
  }
  return out;
}

absl::StatusOr<RuleInfo> SSwitch::GetRule(uint64_t id) const {
  auto snap = Load();
  const RuleEntry* e = snap->table->Find(id);
  if (e == nullptr) return absl::NotFoundError(StrCat("no rule with id ", id));
  RuleInfo info;
  info.id = e->id();
  info.rule = e->rule();
  info.owner = e->owner();
  info.counters = AsInstalled(e)->counters.Read();
  return info;
}

uint64_t SSwitch::version() const {
  return version_.load(std::memory_order_acquire);
}

int64_t SSwitch::in_flight() const { return inflight_->total(); }

size_t SSwitch::parked() const {
  size_t n = 0;
  // Held for the loop: a range-for keeps no temporary of its range
  // expression alive but the last, and a Publish() may free the snapshot.
  const std::shared_ptr<const Snapshot> snapshot = Load();
  for (const auto& g : snapshot->quiesced) {
    MutexLock l(&g->mu);
    n += g->parked.size();
  }
  return n;
}

}  // namespace sroute
