// SPDX-License-Identifier: Apache-2.0
// The sSwitch's data path: admission at quiesce gates, the route of an IO
// by its pinned snapshot (Route, RoutePiece, Decide, Dispatch), stage hops,
// taps, traces and stale IOs (sswitch.h).
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
#include "sswitch/sswitch.h"
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

}  // namespace

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
  const IoHeader& h = io->header;
  const std::string* where = io->waiting_at_->load(std::memory_order_acquire);
  out->push_back(StaleIo{.source = h.source,
                         .op = h.op,
                         .file = h.file,
                         .offset = h.offset,
                         .length = h.length,
                         .age_ns = now - io->first_seen_ns_,
                         .parked = parked,
                         .waiting_at = where != nullptr ? *where : ""});
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

}  // namespace sroute
