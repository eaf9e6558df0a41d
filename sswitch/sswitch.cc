#include "sswitch/sswitch.h"

#include <fcntl.h>
#include <linux/falloc.h>
#include <sys/stat.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <optional>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "re2/re2.h"
#include "rules/parser.h"
#include "sswitch/snapshot.h"
#include "sswitch/thread_shard.h"
#include "util/errno_status.h"
#include "util/log.h"
#include "util/strings.h"

namespace sroute {

namespace {

constexpr int kMaxStageHops = 16;

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
      return true;
    default:
      return false;
  }
}

std::atomic<uint64_t> next_switch_uid{1};

}  // namespace

uint64_t SnapshotVersion(const Snapshot& snapshot) { return snapshot.version; }

struct DrainWaiter {
  std::mutex mu;
  std::condition_variable cv;
  int64_t remaining = 1;  // starts with a guard held by Drain() itself
};

// --- PatternMatcher ---

absl::StatusOr<PatternMatcher> PatternMatcher::Create(
    const HeaderPattern& pattern) {
  PatternMatcher m;
  m.pattern_ = pattern;
  if (pattern.file.kind == FilePattern::Kind::kRegex) {
    RE2::Options opts;
    opts.set_log_errors(false);
    auto re = std::make_shared<RE2>(pattern.file.text, opts);
    if (!re->ok()) {
      return absl::InvalidArgumentError(
          StrCat("bad regular expression: ", re->error()));
    }
    m.regex_ = std::move(re);
  }
  return m;
}

bool PatternMatcher::Matches(const IoHeader& h) const {
  if (!pattern_.source.Matches(h)) return false;
  if ((pattern_.ops & h.op_class()) == 0) return false;
  const FilePattern& f = pattern_.file;
  switch (f.kind) {
    case FilePattern::Kind::kAny:
      break;
    case FilePattern::Kind::kExact:
      if (h.file != f.text) return false;
      break;
    case FilePattern::Kind::kPrefix:
      if (!h.file.starts_with(f.text)) return false;
      break;
    case FilePattern::Kind::kRegex:
      if (!RE2::FullMatch(h.file, *regex_)) return false;
      break;
  }
  if (f.range && HasByteExtent(h.op)) {
    return f.range->Overlaps(h.offset, std::max(h.end(), h.offset + 1));
  }
  return true;
}

std::string FormatRuleInfo(const RuleInfo& info) {
  std::string out = StrCat(info.id, ": ", FormatRule(info.rule));
  if (!info.owner.empty()) StrAppend(&out, "  # owner=", info.owner);
  return out;
}

// --- In-flight registry ------------------------------------------------------

// IOs between admission and completion, in intrusive lists sharded by thread
// so that routing threads rarely share a lock.
//
// Each shard also pins the current snapshot for the IOs it registers,
// through a reference count of its own (ShardLocalRef): an IO holds its
// snapshot until it completes, and with one count shared by all threads
// that count's cache line would move between the CPUs twice per IO.
class InflightRegistry {
 public:
  // Registers `io` and sets its snapshot to the current one: `version` is
  // the sSwitch's version, `load` returns its current snapshot.
  template <typename Load>
  void Register(Io* io, const std::atomic<uint64_t>& version, Load load) {
    const int s = ThreadShard();
    Shard& shard = shards_[s];
    std::lock_guard<std::mutex> l(shard.mu);
    // Under the shard's lock, after the IO is listed: a Drain() that scans
    // this shard after us published its quiesce before (see SSwitch::Route).
    if (shard.pin == nullptr ||
        shard.pin->version != version.load(std::memory_order_acquire)) {
      shard.pin = ShardLocalRef(load());
    }
    io->snapshot_ = shard.pin;
    io->inflight_shard_ = s;
    io->inflight_prev_ = nullptr;
    io->inflight_next_ = shard.head;
    if (shard.head != nullptr) shard.head->inflight_prev_ = io;
    shard.head = io;
    ++shard.count;
  }

  void Unregister(
      Io* io, absl::InlinedVector<std::shared_ptr<DrainWaiter>, 1>* waiters) {
    if (io->inflight_shard_ < 0) return;
    Shard& shard = shards_[io->inflight_shard_];
    std::lock_guard<std::mutex> l(shard.mu);
    if (io->inflight_prev_ != nullptr) {
      io->inflight_prev_->inflight_next_ = io->inflight_next_;
    } else {
      shard.head = io->inflight_next_;
    }
    if (io->inflight_next_ != nullptr) {
      io->inflight_next_->inflight_prev_ = io->inflight_prev_;
    }
    io->inflight_prev_ = io->inflight_next_ = nullptr;
    io->inflight_shard_ = -1;
    --shard.count;
    waiters->swap(io->drain_waiters_);
    io->drain_waiters_.clear();
  }

  // Attaches `waiter` to every in-flight IO that `m` matches.
  void Collect(const PatternMatcher& m,
               const std::shared_ptr<DrainWaiter>& waiter) {
    for (Shard& shard : shards_) {
      std::lock_guard<std::mutex> l(shard.mu);
      for (Io* io = shard.head; io != nullptr; io = io->inflight_next_) {
        if (!m.Matches(io->header)) continue;
        io->drain_waiters_.push_back(waiter);
        std::lock_guard<std::mutex> wl(waiter->mu);
        ++waiter->remaining;
      }
    }
  }

  // Drops the shards' pins, so that no snapshot outlives its replacement
  // but in the IOs routed with it.
  void Unpin() {
    for (Shard& shard : shards_) {
      std::shared_ptr<const Snapshot> old;  // released after the lock
      std::lock_guard<std::mutex> l(shard.mu);
      old.swap(shard.pin);
    }
  }

  int64_t total() const {
    int64_t n = 0;
    for (const Shard& shard : shards_) {
      std::lock_guard<std::mutex> l(shard.mu);
      n += shard.count;
    }
    return n;
  }

 private:
  struct alignas(64) Shard {
    mutable std::mutex mu;
    Io* head = nullptr;
    int64_t count = 0;
    std::shared_ptr<const Snapshot> pin;  // the current one, or null
  };
  Shard shards_[kThreadShards];
};

// --- Delegate context ---

class SSwitch::Context : public DelegateContext {
 public:
  Context(SSwitch* sw, const InstalledRule* rule) : sw_(sw), rule_(rule) {}

  absl::StatusOr<std::vector<uint64_t>> Update(
      std::vector<Rule> insert, const std::vector<uint64_t>& remove) override {
    std::lock_guard<std::mutex> l(sw_->control_mu_);
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
    std::lock_guard<std::mutex> l(sw_->shared_state_mu_);
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

// --- Join: sub-IOs of a split or a scatter -----------------------------------

struct SSwitch::Join {
  enum class Kind { kSplit, kScatterAll, kScatterQuorum, kScatterFirst };
  Kind kind;
  Io* parent;
  std::vector<std::unique_ptr<Io>> children;
  std::vector<std::vector<char>> buffers;  // scatter reads: one per child
  std::shared_ptr<std::string> data_copy;  // quorum writes outlive the caller
  std::mutex mu;
  size_t done = 0;             // guarded by mu
  size_t ok = 0;               // guarded by mu
  size_t needed = 0;           // successes that complete the parent
  bool parent_done = false;    // guarded by mu
  bool parent_failed = false;  // guarded by mu
  absl::Status first_error;    // guarded by mu
  SSwitch* sw;
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
    std::lock_guard<std::mutex> l(mu);
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
  switch (kind) {
    case Kind::kSplit:
      FinishSplit();
      return;
    case Kind::kScatterAll: {
      if (!error.ok()) {
        parent->Complete(error);
        return;
      }
      // Results of the first target (all targets got the same IO).
      Io& c0 = *children[0];
      parent->bytes = c0.bytes;
      for (auto& c : children)
        parent->bytes = std::min(parent->bytes, c->bytes);
      parent->attr = c0.attr;
      parent->data = c0.data;
      parent->entries = c0.entries;
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
      parent->bytes = c.bytes;
      parent->attr = c.attr;
      parent->data = c.data;
      parent->entries = c.entries;
      parent->target = c.target;
      if (kind == Kind::kScatterFirst && parent->header.op == Op::kRead) {
        std::memcpy(parent->read_buffer.data(), buffers[index].data(), c.bytes);
      }
      parent->Complete(absl::OkStatus());
      return;
    }
  }
}

// --- SSwitch ---

SSwitch::SSwitch(std::string name)
    : name_(std::move(name)),
      uid_(next_switch_uid.fetch_add(1)),
      inflight_(std::make_unique<InflightRegistry>()),
      unmatched_(std::make_unique<UnmatchedShard[]>(kThreadShards)) {
  auto snap = std::make_shared<Snapshot>();
  snap->version = 0;
  snap->table = RuleTable::Empty();
  snap->endpoints = std::make_shared<EndpointMap>();
  snap->stages = std::make_shared<StageMap>();
  current_ = std::move(snap);
}

SSwitch::~SSwitch() = default;

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
    std::lock_guard<std::mutex> l(publish_mu_);
    const uint64_t v = snap->version;
    old = std::move(current_);
    current_ = std::move(snap);
    version_.store(v, std::memory_order_release);
  }
  inflight_->Unpin();
}

std::shared_ptr<const Snapshot> SSwitch::Current() const {
  std::lock_guard<std::mutex> l(publish_mu_);
  return current_;
}

void SSwitch::RegisterInflight(Io* io) {
  inflight_->Register(io, version_, [this] { return Current(); });
}

absl::Status SSwitch::AddEndpoint(const std::string& name,
                                  std::shared_ptr<Endpoint> endpoint) {
  if (name.empty() || endpoint == nullptr) {
    return absl::InvalidArgumentError("an endpoint needs a name and an object");
  }
  std::lock_guard<std::mutex> l(control_mu_);
  auto snap = std::make_shared<Snapshot>(*current_);
  if (snap->endpoints->contains(name)) {
    return absl::AlreadyExistsError(StrCat("endpoint '", name, "' exists"));
  }
  auto endpoints = std::make_shared<EndpointMap>(*snap->endpoints);
  (*endpoints)[name] = std::move(endpoint);
  snap->endpoints = std::move(endpoints);
  snap->version = current_->version + 1;
  Publish(std::move(snap));
  return absl::OkStatus();
}

absl::Status SSwitch::AddStage(const std::string& name,
                               std::shared_ptr<Stage> stage) {
  if (name.empty() || stage == nullptr) {
    return absl::InvalidArgumentError("a stage needs a name and an object");
  }
  std::lock_guard<std::mutex> l(control_mu_);
  auto snap = std::make_shared<Snapshot>(*current_);
  if (snap->stages->contains(name)) {
    return absl::AlreadyExistsError(StrCat("stage '", name, "' exists"));
  }
  auto entry = std::make_shared<StageEntry>();
  entry->stage = std::move(stage);
  entry->forward = [this, name](Io* io) {
    io->header.stage = name;
    ++io->stage_hops_;
    Dispatch(io);
  };
  auto stages = std::make_shared<StageMap>(*snap->stages);
  (*stages)[name] = std::move(entry);
  snap->stages = std::move(stages);
  snap->version = current_->version + 1;
  Publish(std::move(snap));
  return absl::OkStatus();
}

void SSwitch::SetControllerSink(std::shared_ptr<ControllerSink> sink) {
  std::lock_guard<std::mutex> l(control_mu_);
  auto snap = std::make_shared<Snapshot>(*current_);
  snap->controller = std::move(sink);
  snap->version = current_->version + 1;
  Publish(std::move(snap));
}

// --- Data path ---

void SSwitch::Route(Io* io) {
  io->router_ = this;
  io->stage_hops_ = 0;
  // Register, then load the snapshot: a Drain() that misses this IO in the
  // registry published its quiesce first, so this IO will see it.
  RegisterInflight(io);
  Admit(io);
}

void SSwitch::Admit(Io* io) {
  // The snapshot RegisterInflight pinned, then (a gate released meanwhile)
  // the current one.
  for (;; io->snapshot_ = Load()) {
    const Snapshot* snap = io->snapshot_.get();
    QuiesceGate* gate = nullptr;
    for (const auto& g : snap->quiesced) {
      if (g->matcher.Matches(io->header)) {
        gate = g.get();
        break;
      }
    }
    if (gate != nullptr) {
      std::unique_lock<std::mutex> l(gate->mu);
      if (!gate->active) continue;  // released meanwhile: look again
      // A parked IO is not in flight: Drain() does not wait for it.
      absl::InlinedVector<std::shared_ptr<DrainWaiter>, 1> waiters;
      inflight_->Unregister(io, &waiters);
      io->snapshot_.reset();  // Release() pins the snapshot of the moment
      gate->parked.push_back(io);
      l.unlock();
      for (auto& w : waiters) SignalDrained(*w);
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

void SSwitch::Split(Io* io, const RuleTable::Pieces& pieces) {
  auto join = std::make_shared<Join>();
  join->kind = Join::Kind::kSplit;
  join->parent = io;
  join->sw = this;
  join->children.reserve(pieces.size());
  for (const auto& piece : pieces) {
    auto child = std::make_unique<Io>();
    child->header = io->header;
    child->header.offset = piece.offset;
    child->header.length = piece.length;
    child->args = io->args;
    const uint64_t rel = piece.offset - io->header.offset;
    if (!io->write_data.empty()) {
      child->write_data = io->write_data.subspan(rel, piece.length);
    }
    if (!io->read_buffer.empty()) {
      child->read_buffer = io->read_buffer.subspan(rel, piece.length);
    }
    child->router_ = this;
    child->snapshot_ = io->snapshot_;
    child->stage_hops_ = io->stage_hops_;
    join->children.push_back(std::move(child));
  }
  for (size_t i = 0; i < pieces.size(); ++i) {
    Io* child = join->children[i].get();
    child->set_completion([join, i](Io& c) { join->ChildDone(i, c); });
  }
  // The join keeps the children alive; each child holds the join.
  for (size_t i = 0; i < pieces.size(); ++i) {
    RoutePiece(join->children[i].get(), pieces[i].rule);
  }
}

void SSwitch::RoutePiece(Io* io, const RuleEntry* entry) {
  if (entry == nullptr) {
    unmatched_[ThreadShard()].ops[static_cast<int>(io->header.op)].fetch_add(
        1, std::memory_order_relaxed);
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
  if (rule->delegate) {
    Context ctx(this, rule);
    decision = rule->delegate->OnRequest(io->header, ctx);
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
           rule->delegate->DurableRules(io->header, frame->targets)) {
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

void SSwitch::SendToDetours(Io* io, const RuleEntry* entry,
                            const DetourList& chosen) {
  const Rule& r = entry->rule();
  // The single detour's file, resolved once (the home check below and the
  // send both need it).
  std::string single_file;
  if (chosen.size() == 1 && chosen[0]->target.kind == Target::Kind::kFile) {
    single_file =
        ResolveTargetFile(chosen[0]->target, r.pattern.file, io->header.file);
  }
  const Op op = io->header.op;
  const bool may_grow =
      op == Op::kWrite ||
      (op == Op::kFallocate &&
       (io->args.flags == 0 || io->args.flags == FALLOC_FL_ZERO_RANGE));
  if (may_grow && !chosen.empty()) {
    // DESIGN §3: a write (or an allocation that may extend the file)
    // detoured away from the file's home still grows the size the home
    // reports.
    std::string home = HomeOf(*io->snapshot_, io->header);
    bool reaches_home = home.empty();
    for (const Detour* d : chosen) {
      if (reaches_home) break;
      if (d->target.kind != Target::Kind::kFile) {
        reaches_home = true;
      } else if (chosen.size() == 1) {
        reaches_home = single_file == home;  // no copy of it
      } else {
        reaches_home = ResolveTargetFile(d->target, r.pattern.file,
                                         io->header.file) == home;
      }
    }
    if (!reaches_home) io = GrowHomeAfter(io, std::move(home));
  }
  if (chosen.empty()) {
    SendToFile(io, io->header.file);  // only side detours: the IO goes on
  } else if (chosen.size() == 1) {
    SendTo(io, chosen[0]->target, std::move(single_file), entry->id());
  } else {
    Scatter(io, entry, chosen);
  }
}

Io* SSwitch::GrowHomeAfter(Io* io, std::string home) {
  struct Growth {
    Io* parent;
    std::unique_ptr<Io> write;
    std::unique_ptr<Io> grow;
  };
  auto g = std::make_shared<Growth>();
  g->parent = io;
  g->write = std::make_unique<Io>();
  Io& w = *g->write;
  w.header = io->header;
  w.args = io->args;
  w.write_data = io->write_data;
  w.records = std::move(io->records);
  w.router_ = this;
  w.snapshot_ = io->snapshot_;
  w.stage_hops_ = io->stage_hops_;
  w.set_completion([this, g, home = std::move(home)](Io& done) {
    Io* parent = g->parent;
    parent->bytes = done.bytes;
    parent->target = done.target;
    const uint64_t end =
        done.header.offset +
        (done.header.op == Op::kWrite ? done.bytes : done.header.length);
    if (!done.status.ok() || end == done.header.offset) {
      parent->Complete(done.status);
      return;
    }
    g->grow = std::make_unique<Io>();
    Io& grow = *g->grow;
    grow.header = parent->header;
    grow.header.op = Op::kTruncate;
    grow.header.offset = grow.header.length = 0;
    grow.args = parent->args;
    grow.args.flags = kTruncateGrowOnly;
    grow.args.size = end;
    grow.router_ = this;
    grow.snapshot_ = parent->snapshot_;
    grow.set_completion([g](Io& gr) {
      // The bytes are written; a home that cannot grow is still an error
      // (stat would lie), reported as the write's.
      g->parent->Complete(gr.status);
    });
    SendToFile(&grow, home);
  });
  return &w;
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
    auto child = std::make_unique<Io>();
    child->header = io->header;
    child->args = io->args;
    if (join->data_copy) {
      child->write_data = std::span<const char>(join->data_copy->data(),
                                                join->data_copy->size());
    } else {
      child->write_data = io->write_data;
    }
    child->records = io->records;
    if (!join->buffers.empty()) {
      join->buffers[i].resize(io->read_buffer.size());
      child->read_buffer = std::span<char>(join->buffers[i]);
    } else {
      child->read_buffer = io->read_buffer;
    }
    child->router_ = this;
    child->snapshot_ = io->snapshot_;
    child->stage_hops_ = io->stage_hops_;
    join->children.push_back(std::move(child));
  }
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

void SSwitch::SendTo(Io* io, const Target& target, std::string resolved_file,
                     uint64_t rule_id) {
  const Snapshot& snap = *io->snapshot_;
  switch (target.kind) {
    case Target::Kind::kFile:
      SendToFile(io, std::move(resolved_file));
      return;
    case Target::Kind::kController:
      if (!snap.controller) {
        Fail(io,
             absl::UnavailableError(StrCat(
                 "rule ", rule_id,
                 " sends this IO to the controller, and none is connected")));
        return;
      }
      io->target = "controller";
      snap.controller->OnIo(io, rule_id);
      return;
    case Target::Kind::kStage: {
      if (!target.stage_host.empty() && target.stage_host != name_) {
        Fail(io, absl::UnimplementedError(
                     StrCat("stage ", FormatTarget(target),
                            " is on another host; remote stages are not "
                            "reachable from this sSwitch")));
        return;
      }
      auto it = snap.stages->find(target.stage);
      if (it == snap.stages->end()) {
        Fail(io, absl::NotFoundError(StrCat("no stage named '", target.stage,
                                            "' (rule ", rule_id, ")")));
        return;
      }
      if (io->stage_hops_ >= kMaxStageHops) {
        Fail(io, ErrnoStatus(ELOOP, StrCat("IO passed ", kMaxStageHops,
                                           " stages: routing loop at stage:",
                                           target.stage)));
        return;
      }
      io->target = StrCat("stage:", target.stage);
      const StageEntry& stage = *it->second;
      stage.stage->Submit(io, stage.forward);
      return;
    }
  }
}

void SSwitch::SendToFile(Io* io, std::string file) {
  io->target = std::move(file);
  FileName name;
  if (!SplitFileName(io->target, &name)) {
    Fail(io, absl::InvalidArgumentError(
                 StrCat("'", io->target, "' is not a file name //HOST/PATH")));
    return;
  }
  const auto& endpoints = *io->snapshot_->endpoints;
  auto it = endpoints.find(name.host);
  if (it == endpoints.end()) {
    Fail(io, absl::NotFoundError(StrCat("no endpoint named '", name.host,
                                        "' for ", io->target)));
    return;
  }
  const Op op = io->header.op;
  if (op == Op::kRenameFrom || op == Op::kLink) {
    // The second name is routed too (as a create-like op on it), and both
    // must land on one endpoint; the endpoint gets its own path for it.
    IoHeader second = io->header;
    second.op = op == Op::kRenameFrom ? Op::kRenameTo : Op::kLink;
    second.file = io->args.other;
    second.offset = second.length = 0;
    const std::string resolved = ResolveWholeFile(*io->snapshot_, second);
    FileName other;
    if (!SplitFileName(resolved, &other)) {
      Fail(io, absl::InvalidArgumentError(StrCat(
                   "'", io->args.other, "' is not a file name //HOST/PATH")));
      return;
    }
    if (other.host != name.host) {
      Fail(io, ErrnoStatus(EXDEV, StrCat(OpName(op), " ", io->target, " -> ",
                                         resolved, ": not on one endpoint")));
      return;
    }
    io->args.other = std::string(other.path);
  }
  const OpClass cls = io->header.op_class();
  if (io->target != io->header.file) {
    if (cls == kOpClassCreate) {
      CreateAtDetour(io, it->second, std::string(name.path), false);
      return;
    }
    if (cls == kOpClassWrite) {
      // Routing a write to a file includes making it (scatter replicas,
      // byte ranges, write detours): the op then acts on every target.
      CreateAtDetour(io, it->second, std::string(name.path), true);
      return;
    }
  }
  it->second->Submit(io, name.path);
}

// A create sent somewhere other than its own name: the parent directories
// exist at the home but maybe not at the target. Try the create; on ENOENT
// make the missing parents there (with the mode and owner of the file's
// directory at its home) and try once more. A write-like op sent to a
// detour whose file does not exist yet makes the file too (lazily, at the
// first IO that needs it: DESIGN.md §6), with the mode and owner of the
// file at its home.
struct SSwitch::DetourCreate {
  Io* parent;
  std::shared_ptr<Endpoint> endpoint;
  std::string path;
  bool make_file = false;  // a write: the file itself may be missing
  bool retried = false;
  std::unique_ptr<Io> attempt;
};

void SSwitch::CreateAtDetour(Io* io, std::shared_ptr<Endpoint> endpoint,
                             std::string path, bool make_file) {
  auto st = std::make_shared<DetourCreate>();
  st->parent = io;
  st->endpoint = std::move(endpoint);
  st->path = std::move(path);
  st->make_file = make_file;
  TryDetourCreate(st);
}

void SSwitch::TryDetourCreate(const std::shared_ptr<DetourCreate>& st) {
  auto attempt = std::make_unique<Io>();
  attempt->header = st->parent->header;
  attempt->args = st->parent->args;
  attempt->write_data = st->parent->write_data;
  attempt->read_buffer = st->parent->read_buffer;
  attempt->records = st->parent->records;
  attempt->target = st->parent->target;
  attempt->set_completion([this, st](Io& a) {
    if (ErrnoOf(a.status) == ENOENT && !st->retried) {
      st->retried = true;
      MakeDetourParents(st);
      return;
    }
    Io& parent = *st->parent;
    parent.attr = a.attr;
    parent.bytes = a.bytes;
    parent.data = std::move(a.data);
    parent.Complete(a.status);
  });
  Io* raw = attempt.get();
  st->attempt = std::move(attempt);
  st->endpoint->Submit(raw, st->path);
}

void SSwitch::MakeDetourParents(const std::shared_ptr<DetourCreate>& st) {
  Io& parent = *st->parent;
  const std::string home = HomeOf(*parent.snapshot_, parent.header);
  MakeParents(parent, parent.target, ParentFileOf(home),
              [this, st](absl::Status s) {
                if (!s.ok()) {
                  st->parent->Complete(std::move(s));
                } else if (st->make_file) {
                  MakeDetourFile(st);
                } else {
                  TryDetourCreate(st);
                }
              });
}

void SSwitch::MakeDetourFile(const std::shared_ptr<DetourCreate>& st) {
  Io& parent = *st->parent;
  const std::string home = HomeOf(*parent.snapshot_, parent.header);
  auto create = [this, st](std::optional<struct stat> model) {
    Io& p = *st->parent;
    SendOwn(
        p, Op::kCreate, p.target,
        [&model](Io& io) {
          io.args.mode = S_IFREG | (model ? (model->st_mode & 07777) : 0644);
          // Not O_EXCL: a racing write may win.
          io.args.flags = O_CREAT | O_WRONLY;
        },
        [this, st, model](Io& c) {
          const int err = ErrnoOf(c.status);
          if (err != 0 && err != EEXIST) {
            st->parent->Complete(c.status);
            return;
          }
          if (err != 0 || !model ||
              (c.attr.st_uid == model->st_uid &&
               c.attr.st_gid == model->st_gid)) {
            TryDetourCreate(st);
            return;
          }
          SendOwn(
              *st->parent, Op::kSetattr, st->parent->target,
              [&model](Io& io) {
                io.args.to_set = kSetUid | kSetGid;
                io.args.uid = model->st_uid;
                io.args.gid = model->st_gid;
              },
              [this, st](Io& o) {
                if (!o.status.ok()) {
                  st->parent->Complete(o.status);
                  return;
                }
                TryDetourCreate(st);
              });
        });
  };
  if (home.empty() || home == parent.target) {
    create(std::nullopt);
    return;
  }
  SendOwn(parent, Op::kGetattr, home, nullptr, [create](Io& g) mutable {
    if (g.status.ok() && S_ISREG(g.attr.st_mode)) {
      create(g.attr);
    } else {
      create(std::nullopt);
    }
  });
}

std::string SSwitch::ResolveWholeFile(const Snapshot& snap, const IoHeader& h) {
  return ResolveEntry(snap.table->MatchWhole(h), h.file);
}

std::string SSwitch::HomeOf(const Snapshot& snap, const IoHeader& h) {
  return ResolveEntry(snap.table->MatchWholeAs(h, Op::kGetattr), h.file);
}

std::string SSwitch::ResolveEntry(const RuleEntry* e, const std::string& file) {
  if (e == nullptr) return file;
  for (const Detour& d : e->rule().detours) {
    if (d.what != Detour::What::kIo) continue;
    if (d.target.kind != Target::Kind::kFile) return "";
    return ResolveTargetFile(d.target, e->rule().pattern.file, file);
  }
  return file;
}

void SSwitch::Fail(Io* io, absl::Status status) {
  route_errors_.fetch_add(1, std::memory_order_relaxed);
  io->Complete(std::move(status));
}

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
  std::lock_guard<std::mutex> l(fence_mu_);
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
    std::lock_guard<std::mutex> l(fence_mu_);
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
  std::lock_guard<std::mutex> l(fence_mu_);
  return fences_;
}

absl::Status SSwitch::ClearFence(const std::string& file) {
  std::lock_guard<std::mutex> l(fence_mu_);
  auto it = std::find_if(fences_.begin(), fences_.end(),
                         [&](const auto& f) { return f.first == file; });
  if (it == fences_.end()) {
    return absl::NotFoundError(StrCat(file, " is not fenced"));
  }
  fences_.erase(it);
  fence_count_.store(fences_.size(), std::memory_order_relaxed);
  return absl::OkStatus();
}

void SSwitch::FinishRuleFrame(Io& io, Io::Frame& frame) {
  const InstalledRule* rule = AsInstalled(frame.rule);
  rule->counters.Finish(io.header.op_class(), io.bytes, !io.status.ok(),
                        MonotonicNanos() - frame.start_ns);
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

uint64_t SSwitch::unmatched_ops(Op op) const {
  uint64_t n = 0;
  for (int i = 0; i < kThreadShards; ++i) {
    n +=
        unmatched_[i].ops[static_cast<int>(op)].load(std::memory_order_relaxed);
  }
  return n;
}

void SSwitch::SignalDrained(DrainWaiter& w) {
  std::lock_guard<std::mutex> l(w.mu);
  if (--w.remaining == 0) w.cv.notify_all();
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
  const Snapshot& cur = *current_;
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
  std::lock_guard<std::mutex> l(control_mu_);
  const uint64_t saved_id = next_id_;
  absl::Status status;
  for (size_t i = 0; i < rules.size() && status.ok(); ++i) {
    auto entry = MakeEntry(rules[i], "", OrderKey(), *current_);
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
  std::lock_guard<std::mutex> l(control_mu_);
  return UpdateLocked(std::move(insert), remove, {owner}, nullptr);
}

absl::StatusOr<std::vector<uint64_t>> SSwitch::Update(
    std::vector<Rule> insert, const std::vector<std::string>& owners,
    const std::vector<uint64_t>& remove) {
  std::lock_guard<std::mutex> l(control_mu_);
  return UpdateLocked(std::move(insert), remove, owners, nullptr);
}

void SSwitch::Resume(Io* io, const std::string& from) {
  io->header.stage = from;
  ++io->stage_hops_;
  Dispatch(io);
}

absl::Status SSwitch::Delete(uint64_t id) { return Update({}, {id}).status(); }

absl::StatusOr<int> SSwitch::Delete(const HeaderPattern& pattern) {
  std::lock_guard<std::mutex> l(control_mu_);
  std::vector<uint64_t> ids;
  for (const RuleEntryPtr& e : current_->table->Rules()) {
    if (e->rule().pattern == pattern) ids.push_back(e->id());
  }
  if (ids.empty()) return 0;
  auto r = UpdateLocked({}, ids, {""}, nullptr);
  if (!r.ok()) return r.status();
  return static_cast<int>(ids.size());
}

absl::Status SSwitch::Quiesce(const HeaderPattern& pattern, bool on) {
  std::deque<Io*> release;
  {
    std::lock_guard<std::mutex> l(control_mu_);
    const Snapshot& cur = *current_;
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
    std::lock_guard<std::mutex> gl(gate->mu);
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
  std::unique_lock<std::mutex> l(waiter->mu);
  --waiter->remaining;  // drop the guard
  const bool done = waiter->cv.wait_for(l, absl::ToChronoNanoseconds(timeout),
                                        [&] { return waiter->remaining == 0; });
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
  std::lock_guard<std::mutex> l(control_mu_);
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
  for (const auto& g : Load()->quiesced) {
    std::lock_guard<std::mutex> l(g->mu);
    n += g->parked.size();
  }
  return n;
}

}  // namespace sroute
