// SPDX-License-Identifier: Apache-2.0
// The sSwitch's core: snapshots and their publication, endpoints and
// stages, delegate context, namespace questions and introspection. Where
// the other members live: sswitch.h.
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
#include "sswitch/rule_context.h"
#include "sswitch/snapshot.h"
#include "util/clock.h"
#include "util/errno_status.h"
#include "util/interned.h"
#include "util/log.h"
#include "util/strings.h"
#include "util/thread_shard.h"

namespace sroute {

namespace {

std::atomic<uint64_t> next_switch_uid{1};

}  // namespace

uint64_t SnapshotVersion(const Snapshot& snapshot) { return snapshot.version; }

std::string FormatRuleInfo(const RuleInfo& info) {
  std::string out = StrCat(info.id, ": ", FormatRule(info.rule));
  if (!info.owner.empty()) StrAppend(&out, "  # owner=", info.owner);
  return out;
}

// --- Delegate context ---

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
