// SPDX-License-Identifier: Apache-2.0
#include "host/agent.h"

#include <algorithm>
#include <atomic>
#include <deque>
#include <map>
#include <random>
#include <thread>
#include <unordered_map>

#include "hostctl/control_handler.h"
#include "rpc/channel.h"
#include "rpc/controller_channels.h"
#include "rpc/rule_codec.h"
#include "rules/parser.h"
#include "sswitch/stats.h"
#include "stages/host_stages.h"
#include "util/background.h"
#include "util/errno_status.h"
#include "util/log.h"
#include "util/mutex.h"
#include "util/strings.h"

namespace sroute {
namespace {

constexpr absl::Duration kPollTimeout = absl::Seconds(30);
constexpr absl::Duration kCallTimeout = absl::Seconds(10);
// The statistics report is the heartbeat: a controller that does not
// answer one this long is taken for gone (as the controller takes a silent
// host after its host_timeout), so that the agent registers again, with
// another controller if there are several.
constexpr absl::Duration kHeartbeatTimeout = absl::Seconds(5);
// With several controllers, how long one may take to answer a registration
// before the next is tried.
constexpr absl::Duration kRegisterEachTimeout = absl::Seconds(3);
constexpr absl::Duration kTick = absl::Milliseconds(50);
constexpr size_t kMaxQueuedEvents = 100000;
constexpr size_t kEventsPerMessage = 1000;

bool IsDelegateRule(const std::string& owner) {
  return owner.rfind("delegate:", 0) == 0;
}

proto::IoHeaderMsg ToMsg(const IoHeader& h) {
  proto::IoHeaderMsg m;
  m.set_source(h.source);
  if (!h.stage.empty()) m.set_stage(h.stage);
  m.set_op(static_cast<uint32_t>(h.op));
  m.set_offset(h.offset);
  m.set_length(h.length);
  return m;
}

}  // namespace

// A WaitCommands call in flight (PollLoop).
struct PendingPoll {
  Mutex mu;  // a leaf, taken after Impl::mu
  bool done ABSL_GUARDED_BY(mu) = false;
  absl::Status status ABSL_GUARDED_BY(mu);
  proto::RpcReply reply ABSL_GUARDED_BY(mu);
  bool Done() {
    MutexLock l(&mu);
    return done;
  }
};

struct ControllerAgent::Impl : std::enable_shared_from_this<Impl> {
  Impl(SSwitch* s, IoThreads* t, AgentOptions o)
      : sw(s), threads(t), options(std::move(o)) {}

  absl::Status Register(bool fresh, absl::Duration timeout);
  absl::Status Reconcile(
      const google::protobuf::RepeatedPtrField<proto::ManagedRule>& desired);
  void PollLoop();
  void TickLoop();
  void Execute(const proto::Command& c);
  absl::Status Prepare(const proto::Prepare& p);
  absl::StatusOr<uint64_t> Commit(uint64_t update);
  void Abort(uint64_t update);
  void SendStats();
  void FlushEvents();
  void QueueEvent(const IoHeader& h, uint64_t rule_id,
                  const std::string* value);
  void TakeTurn(Io* io);
  void Disconnected(const absl::Status& why);
  uint64_t session_id() const {
    MutexLock l(&mu);
    return session;
  }
  bool Stopping() const {
    MutexLock l(&mu);
    return stopping;
  }

  SSwitch* const sw;
  IoThreads* const threads;
  const AgentOptions options;
  // The controllers (AgentOptions::address may list several sharing a
  // store); calls go to the current one, which follows the leader. Set by
  // Start before any other thread runs.
  std::unique_ptr<ControllerChannels> controllers;
  RpcChannel& channel() { return controllers->current(); }
  std::string address() const { return controllers->current_address(); }
  // After a call to controller `from` failed: on to the leader it names,
  // or to the next address when the controller could not be reached.
  void FollowLeader(size_t from, const absl::Status& why);

  // Lock order: control_mu, then mu or events_mu (leaves). No lock is
  // held across a call to the controller or a drain.
  //
  // The connection's state; a leaf lock.
  mutable Mutex mu ABSL_ACQUIRED_AFTER(control_mu);
  CondVar cv;  // stopping or connected changed
  uint64_t session ABSL_GUARDED_BY(mu) = 0;
  bool connected ABSL_GUARDED_BY(mu) = false;
  bool stopping ABSL_GUARDED_BY(mu) = false;
  absl::Duration interval ABSL_GUARDED_BY(mu) = absl::Seconds(1);
  std::atomic<size_t> restored{0};

  // Serializes changes to the rule table by the controller's commands, and
  // guards the managed rules' ids (cid <-> the host's rule id) and the
  // updates in progress.
  Mutex control_mu;
  std::unordered_map<uint64_t, uint64_t> cid_to_id ABSL_GUARDED_BY(control_mu);
  std::unordered_map<uint64_t, uint64_t> id_to_cid ABSL_GUARDED_BY(control_mu);
  struct Prepared {
    std::vector<Rule> insert;
    std::vector<std::string> owners;
    std::vector<uint64_t> insert_cids;
    std::vector<uint64_t> remove_ids;
    std::vector<uint64_t> remove_cids;
    std::vector<HeaderPattern> parked;
    absl::Time lease_end;
  };
  std::map<uint64_t, Prepared> prepared ABSL_GUARDED_BY(control_mu);
  // Updates whose Prepare is parking and draining their flows (without
  // control_mu: a drain may take seconds), and whether an Abort came for
  // them meanwhile.
  std::map<uint64_t, bool> preparing ABSL_GUARDED_BY(control_mu);

  // Statistics (the tick thread only): the counters last reported.
  struct Reported {
    uint64_t ops = 0, reads = 0, writes = 0, others = 0;
    uint64_t read_bytes = 0, write_bytes = 0, errors = 0;
    int64_t in_flight = 0;
    LatencyHistogram::Counts latency;
    uint64_t generation = 0;
  };
  std::unordered_map<uint64_t, Reported> reported;
  uint64_t generation = 0;
  absl::Time next_stats;

  // Controller-bound headers and values waiting to be sent; a leaf lock.
  Mutex events_mu ABSL_ACQUIRED_AFTER(control_mu);
  std::deque<std::pair<proto::HeaderEventItem, absl::Time>> events
      ABSL_GUARDED_BY(events_mu);
  uint64_t events_dropped ABSL_GUARDED_BY(events_mu) = 0;

  Background work;  // commands and controller-bound IOs
  std::thread poll_thread, tick_thread;
};

// Hands controller-bound detours to the agent; outlives it safely (the
// sSwitch's snapshots may hold it a little longer).
class AgentSink : public ControllerSink {
 public:
  explicit AgentSink(std::weak_ptr<ControllerAgent::Impl> impl)
      : impl_(std::move(impl)) {}
  void OnHeader(const IoHeader& header, uint64_t rule_id) override {
    if (auto i = impl_.lock()) i->QueueEvent(header, rule_id, nullptr);
  }
  void OnValue(const IoHeader& header, uint64_t rule_id,
               const std::string& value) override {
    if (auto i = impl_.lock()) i->QueueEvent(header, rule_id, &value);
  }
  void OnIo(Io* io, uint64_t) override {
    auto i = impl_.lock();
    if (!i) {
      io->Complete(ErrnoStatus(EIO, "the controller agent has stopped"));
      return;
    }
    i->TakeTurn(io);
  }

 private:
  std::weak_ptr<ControllerAgent::Impl> impl_;
};

// --- Registration ---

void ControllerAgent::Impl::FollowLeader(size_t from, const absl::Status& why) {
  if (std::optional<size_t> to = controllers->Follow(from, why)) {
    LogInfo("controller ", controllers->address(from), ": ", why.message(),
            "; trying the controller at ", controllers->address(*to));
  }
}

absl::Status ControllerAgent::Impl::Register(bool fresh,
                                             absl::Duration timeout) {
  proto::RpcRequest req;
  proto::Register* r = req.mutable_controller()->mutable_register_();
  *r->mutable_host() = options.host;
  for (const SSwitch::StageInfo& st : sw->Stages()) {
    r->mutable_host()->add_stages(st.name);
  }
  r->set_fresh(fresh);
  {
    MutexLock cl(&control_mu);
    for (const RuleInfo& info : sw->ListRules()) {
      if (IsDelegateRule(info.owner)) continue;
      proto::ManagedRule* m = r->add_rules();
      auto it = id_to_cid.find(info.id);
      m->set_cid(it == id_to_cid.end() ? 0 : it->second);
      m->set_text(FormatRule(info.rule));
      RuleToMsg(info.rule, m->mutable_rule());
      m->set_owner(info.owner.empty() ? "config" : info.owner);
    }
  }
  const size_t at = controllers->current_index();
  auto reply = controllers->at(at).CallSync(req, timeout);
  if (!reply.ok()) {
    FollowLeader(at, reply.status());
    return reply.status();
  }
  const proto::RegisterReply& rr = reply->controller().registered();
  // The controller's stages first: its rules may name them.
  for (const proto::StageConfig& st : rr.stages()) {
    if (absl::Status s = EnsureStage(*sw, st, timeout); !s.ok()) {
      return absl::Status(s.code(),
                          StrCat("the controller's stage ", st.name(), " for ",
                                 options.host.sswitch(),
                                 " does not install here: ", s.message()));
    }
  }
  if (absl::Status s = Reconcile(rr.rules()); !s.ok()) {
    return absl::Status(
        s.code(), StrCat("the controller's rules for ", options.host.sswitch(),
                         " do not install here: ", s.message()));
  }
  if (fresh && rr.records_size() > 0) {
    std::vector<DelegateRuleRecord> records;
    records.reserve(rr.records_size());
    for (const proto::DelegateRecord& d : rr.records()) {
      records.push_back(
          DelegateRuleRecord{d.sswitch(), d.seq(), d.rule(), d.anchor()});
    }
    size_t skipped = 0;
    MutexLock cl(&control_mu);
    if (absl::Status s = sw->RestoreDelegateRules(std::move(records), &skipped);
        !s.ok()) {
      return absl::Status(s.code(),
                          StrCat("restoring delegate rules: ", s.message()));
    }
    restored = rr.records_size() - skipped;
    if (skipped > 0) {
      LogWarning(skipped, " delegate records name rules that are gone; ",
                 "skipped");
    }
  }
  MutexLock l(&mu);
  session = rr.session();
  connected = true;
  if (rr.stats_interval_ms() > 0) {
    interval = absl::Milliseconds(rr.stats_interval_ms());
  }
  return absl::OkStatus();
}

absl::Status ControllerAgent::Impl::Reconcile(
    const google::protobuf::RepeatedPtrField<proto::ManagedRule>& desired) {
  MutexLock cl(&control_mu);
  // Updates held in phase one are void now, and so are those still
  // preparing (their Prepare gives their flows back when it ends): the
  // controller that sent them is gone, or has forgotten them. Their flows
  // stay parked until the rules below are in place: released before, a
  // parked IO would go by the rules this host is leaving while the hosts
  // that sent it route by the new ones (a mixed route).
  std::vector<HeaderPattern> parked;
  for (auto& [update, p] : prepared) {
    parked.insert(parked.end(), p.parked.begin(), p.parked.end());
  }
  prepared.clear();
  for (auto& [update, aborted] : preparing) aborted = true;
  auto release = [&] {
    for (const HeaderPattern& pat : parked) (void)sw->Quiesce(pat, false);
  };
  std::vector<uint64_t> current_ids;
  std::vector<std::pair<uint64_t, Rule>> current;
  for (const RuleInfo& info : sw->ListRules()) {
    if (IsDelegateRule(info.owner)) continue;
    current_ids.push_back(info.id);
    auto it = id_to_cid.find(info.id);
    current.emplace_back(it == id_to_cid.end() ? 0 : it->second, info.rule);
  }
  std::vector<std::pair<uint64_t, Rule>> want;
  std::vector<Rule> rules;
  std::vector<std::string> owners;
  for (const proto::ManagedRule& m : desired) {
    auto rule = RuleOf(m);  // as the controller parsed it
    if (!rule.ok()) {
      release();
      return absl::InvalidArgumentError(
          StrCat("rule ", m.cid(), ": ", rule.status().message()));
    }
    want.emplace_back(m.cid(), *rule);
    rules.push_back(*std::move(rule));
    owners.push_back(m.owner());
  }
  if (current == want) {  // nothing to change
    release();
    return absl::OkStatus();
  }
  auto ids =
      rules.empty() && current_ids.empty()
          ? absl::StatusOr<std::vector<uint64_t>>(std::vector<uint64_t>())
          : sw->Update(std::move(rules),
                       owners.empty() ? std::vector<std::string>{""} : owners,
                       current_ids);
  if (!ids.ok()) {
    release();  // parked for good would be worse
    return ids.status();
  }
  cid_to_id.clear();
  id_to_cid.clear();
  for (size_t i = 0; i < ids->size(); ++i) {
    cid_to_id[want[i].first] = (*ids)[i];
    id_to_cid[(*ids)[i]] = want[i].first;
  }
  release();
  return absl::OkStatus();
}

// --- Commands ---

absl::Status ControllerAgent::Impl::Prepare(const proto::Prepare& p) {
  Prepared held;
  // The flows to park: the update's own (patterns as text, which the
  // controller checked) and the changed rules' patterns, de-duplicated.
  std::vector<HeaderPattern> patterns;
  for (const std::string& text : p.flows()) {
    auto pat = ParsePattern(text);
    if (!pat.ok()) {
      return absl::InvalidArgumentError(
          StrCat("flow ", text, ": ", pat.status().message()));
    }
    patterns.push_back(*std::move(pat));
  }
  {
    MutexLock cl(&control_mu);
    if (prepared.contains(p.update()) || preparing.contains(p.update())) {
      return absl::AlreadyExistsError(
          StrCat("update ", p.update(), " is held"));
    }
    for (const proto::ManagedRule& m : p.insert()) {
      auto rule = RuleOf(m);  // as the controller parsed it
      if (!rule.ok()) {
        return absl::InvalidArgumentError(
            StrCat("rule ", m.text(), ": ", rule.status().message()));
      }
      patterns.push_back(rule->pattern);
      held.insert.push_back(*std::move(rule));
      held.owners.push_back(m.owner());
      held.insert_cids.push_back(m.cid());
    }
    for (uint64_t cid : p.remove()) {
      auto it = cid_to_id.find(cid);
      if (it == cid_to_id.end()) {
        return absl::NotFoundError(StrCat("this host has no rule ", cid));
      }
      auto info = sw->GetRule(it->second);
      if (!info.ok()) return info.status();
      patterns.push_back(info->rule.pattern);
      held.remove_ids.push_back(it->second);
      held.remove_cids.push_back(cid);
    }
    preparing[p.update()] = false;
  }
  // Park the flows, then wait for their IOs in flight: from here on no IO
  // of them is routed until the commit (by the new rules) or the abort.
  // Without control_mu: the drain may wait seconds, and the statistics and
  // lease checks of the tick thread, and other updates' commands, take it.
  std::sort(patterns.begin(), patterns.end());
  patterns.erase(std::unique(patterns.begin(), patterns.end()), patterns.end());
  auto fail = [&](absl::Status s) {
    for (const HeaderPattern& pat : held.parked) (void)sw->Quiesce(pat, false);
    MutexLock cl(&control_mu);
    preparing.erase(p.update());
    return s;
  };
  for (const HeaderPattern& pat : patterns) {
    if (absl::Status s = sw->Quiesce(pat, true); !s.ok()) return fail(s);
    held.parked.push_back(pat);
  }
  const absl::Duration drain = absl::Milliseconds(
      p.drain_timeout_ms() == 0 ? 10000 : p.drain_timeout_ms());
  for (const HeaderPattern& pat : held.parked) {
    if (absl::Status s = sw->Drain(pat, drain); !s.ok()) return fail(s);
  }
  if (absl::Status s = sw->Validate(held.insert); !s.ok()) return fail(s);
  MutexLock cl(&control_mu);
  const bool aborted = preparing[p.update()];
  preparing.erase(p.update());
  if (aborted) {
    for (const HeaderPattern& pat : held.parked) (void)sw->Quiesce(pat, false);
    return absl::AbortedError(
        StrCat("update ", p.update(), " was aborted while it prepared"));
  }
  held.lease_end = absl::Now() +
                   absl::Milliseconds(p.lease_ms() == 0 ? 30000 : p.lease_ms());
  prepared.emplace(p.update(), std::move(held));
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> ControllerAgent::Impl::Commit(uint64_t update) {
  MutexLock cl(&control_mu);
  auto it = prepared.find(update);
  if (it == prepared.end()) {
    return absl::NotFoundError(
        StrCat("update ", update, " is not held (its lease ran out?)"));
  }
  Prepared held = std::move(it->second);
  prepared.erase(it);
  auto ids = sw->Update(
      std::move(held.insert),
      held.owners.empty() ? std::vector<std::string>{""} : held.owners,
      held.remove_ids);
  absl::Status status = ids.status();
  if (ids.ok()) {
    for (size_t i = 0; i < held.remove_ids.size(); ++i) {
      id_to_cid.erase(held.remove_ids[i]);
      cid_to_id.erase(held.remove_cids[i]);
    }
    for (size_t i = 0; i < ids->size(); ++i) {
      cid_to_id[held.insert_cids[i]] = (*ids)[i];
      id_to_cid[(*ids)[i]] = held.insert_cids[i];
    }
  }
  // Released only now: parked IOs go by the new rules.
  for (const HeaderPattern& pat : held.parked) (void)sw->Quiesce(pat, false);
  if (!status.ok()) return status;
  return sw->version();
}

void ControllerAgent::Impl::Abort(uint64_t update) {
  MutexLock cl(&control_mu);
  if (auto p = preparing.find(update); p != preparing.end()) {
    p->second = true;  // its Prepare gives the flows back when it ends
    return;
  }
  auto it = prepared.find(update);
  if (it == prepared.end()) return;
  for (const HeaderPattern& pat : it->second.parked) {
    (void)sw->Quiesce(pat, false);
  }
  prepared.erase(it);
}

void ControllerAgent::Impl::Execute(const proto::Command& c) {
  absl::Status status;
  proto::ControlResponse stages;   // a Stages command's answer
  proto::ControlResponse control;  // a control command's answer
  switch (c.body_case()) {
    case proto::Command::kPrepare:
      status = Prepare(c.prepare());
      break;
    case proto::Command::kCommit: {
      auto v = Commit(c.commit().update());
      status = v.status();
      break;
    }
    case proto::Command::kAbort:
      Abort(c.abort().update());
      break;
    case proto::Command::kQuiesce: {
      auto p = ParsePattern(c.quiesce().pattern());
      status = p.ok() ? sw->Quiesce(*p, c.quiesce().on()) : p.status();
      break;
    }
    case proto::Command::kDrain: {
      auto p = ParsePattern(c.drain().pattern());
      status = p.ok()
                   ? sw->Drain(*p, absl::Milliseconds(c.drain().timeout_ms()))
                   : p.status();
      break;
    }
    case proto::Command::kReconcile:
      status = Reconcile(c.reconcile().rules());
      break;
    case proto::Command::kStages:
      status = HandleStagesRequest(*sw, c.stages(), &stages,
                                   ControlOrigin::kNetwork);
      break;
    case proto::Command::kControl: {
      // No rule change: the controller's rules change by updates alone.
      const auto what = c.control().request_case();
      if (what != proto::ControlRequest::kTraces &&
          what != proto::ControlRequest::kSlowOps &&
          what != proto::ControlRequest::kStats &&
          what != proto::ControlRequest::kCopy &&
          what != proto::ControlRequest::kSetProfiles &&
          what != proto::ControlRequest::kProfileEndpoint) {
        status = absl::InvalidArgumentError(
            "through the controller a host answers traces, slow_ops, stats, "
            "copy, set_profiles and profile_endpoint requests only");
        break;
      }
      bool changed = false;
      control = HandleControlRequest(*sw, c.control(), nullptr, &changed,
                                     ControlOrigin::kNetwork);
      break;
    }
    case proto::Command::BODY_NOT_SET:
      status = absl::InvalidArgumentError("empty command");
      break;
  }
  proto::RpcRequest req;
  proto::CommandResult* r = req.mutable_controller()->mutable_command_result();
  r->set_session(session_id());
  r->set_command(c.id());
  r->set_code(static_cast<int>(status.code()));
  r->set_message(std::string(status.message()));
  r->set_version(sw->version());
  for (proto::StageStats& st : *stages.mutable_stages()) {
    *r->add_stages() = std::move(st);
  }
  if (c.body_case() == proto::Command::kControl && status.ok()) {
    *r->mutable_control() = std::move(control);
  }
  auto reply = channel().CallSync(req, kCallTimeout);
  if (!reply.ok()) Disconnected(reply.status());
}

// --- Background loops ---

void ControllerAgent::Impl::Disconnected(const absl::Status& why) {
  MutexLock l(&mu);
  if (connected && !stopping) {
    LogWarning("lost the controller at ", address(), ": ", why.message());
  }
  connected = false;
  cv.SignalAll();
}

void ControllerAgent::Impl::PollLoop() {
  while (!Stopping()) {
    bool is_connected;
    {
      MutexLock l(&mu);
      is_connected = connected;
    }
    if (!is_connected) {
      absl::Status s = Register(
          /*fresh=*/false,
          controllers->size() > 1 ? kRegisterEachTimeout : kCallTimeout);
      if (!s.ok()) {
        MutexLock l(&mu);
        cv.WaitFor(&mu, std::chrono::milliseconds(500),
                   [&]()
                       ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return stopping; });
        continue;
      }
      LogInfo("registered again with the controller at ", address());
    }
    proto::RpcRequest req;
    req.mutable_controller()->mutable_wait_commands()->set_session(
        session_id());
    // The poll is abandoned when the heartbeat finds the controller gone
    // meanwhile: a paused controller would hold it for kPollTimeout.
    auto poll = std::make_shared<PendingPoll>();
    std::weak_ptr<Impl> weak = weak_from_this();
    channel().Call(req, {}, kPollTimeout,
                   [poll, weak](const absl::Status& s, proto::RpcReply& r,
                                std::span<const char>) {
                     {
                       MutexLock l(&poll->mu);
                       poll->status =
                           s.ok() ? ReplyStatus(r) : UnsharedStatus(s);
                       poll->reply = std::move(r);
                       poll->done = true;
                     }
                     if (auto self = weak.lock()) {
                       MutexLock l(&self->mu);
                       self->cv.SignalAll();
                     }
                   });
    bool abandoned;
    {
      MutexLock l(&mu);
      cv.Wait(&mu, [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
        return stopping || !connected || poll->Done();
      });
      abandoned = !poll->Done();
    }
    if (abandoned) continue;  // stopping, or registering again
    absl::Status status;
    proto::RpcReply got;
    {
      MutexLock pl(&poll->mu);
      status = poll->status;
      got = std::move(poll->reply);
    }
    if (!status.ok()) {
      Disconnected(status);
      continue;
    }
    const proto::RpcReply* reply = &got;
    auto self = shared_from_this();
    for (const proto::Command& c : reply->controller().commands().commands()) {
      work.Run([self, c] { self->Execute(c); });
    }
  }
}

void ControllerAgent::Impl::TickLoop() {
  next_stats = absl::Now();
  while (true) {
    absl::Duration every;
    {
      MutexLock l(&mu);
      cv.WaitFor(&mu, std::chrono::nanoseconds(absl::ToInt64Nanoseconds(kTick)),
                 [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return stopping; });
      if (stopping) return;
      every = interval;
    }
    // Updates whose controller went silent are given up, also while it is
    // unreachable: IO never waits for a controller that may not come back
    // (registering again reconciles the host to the stored rules).
    {
      MutexLock cl(&control_mu);
      const absl::Time now = absl::Now();
      for (auto it = prepared.begin(); it != prepared.end();) {
        if (now > it->second.lease_end) {
          LogWarning("update ", it->first, " was neither committed nor ",
                     "aborted in time: aborted");
          for (const HeaderPattern& pat : it->second.parked) {
            (void)sw->Quiesce(pat, false);
          }
          it = prepared.erase(it);
        } else {
          ++it;
        }
      }
    }
    {
      MutexLock l(&mu);
      if (!connected) continue;
    }
    FlushEvents();
    if (absl::Now() >= next_stats) {
      next_stats = absl::Now() + every;
      SendStats();
    }
  }
}

void ControllerAgent::Impl::SendStats() {
  proto::RpcRequest req;
  proto::StatsReport* rep = req.mutable_controller()->mutable_stats();
  rep->set_session(session_id());
  {
    MutexLock l(&mu);
    rep->set_interval_ms(
        static_cast<uint32_t>(absl::ToInt64Milliseconds(interval)));
  }
  rep->set_version(sw->version());
  rep->set_total_in_flight(sw->in_flight());
  {
    proto::ControlResponse stages;
    AddStageStats(*sw, &stages);
    for (proto::StageStats& st : *stages.mutable_stages()) {
      *rep->add_stages() = std::move(st);
    }
  }
  AddEndpointGauges(*sw, rep->mutable_gauges());
  std::unordered_map<uint64_t, uint64_t> cids;
  {
    MutexLock cl(&control_mu);
    cids = id_to_cid;
  }
  ++generation;
  LatencyHistogram::Counts latency;
  sw->VisitCounters(
      [&](uint64_t id, const std::string&, const RuleCounters& counters) {
        const uint64_t ops = counters.ops();
        Reported& last = reported[id];
        last.generation = generation;
        if (ops == last.ops && last.in_flight == 0) return;  // nothing new
        const RuleCountersSnapshot now = counters.Read(/*percentiles=*/false);
        counters.LatencyCounts(&latency);
        auto it = cids.find(id);
        const uint64_t cid = it == cids.end() ? 0 : it->second;
        rep->add_cid(cid);
        rep->add_host_id(cid == 0 ? id : 0);
        rep->add_reads(now.reads - last.reads);
        rep->add_writes(now.writes - last.writes);
        rep->add_others(now.others - last.others);
        rep->add_read_bytes(now.read_bytes - last.read_bytes);
        rep->add_write_bytes(now.write_bytes - last.write_bytes);
        rep->add_in_flight(now.in_flight);
        rep->add_errors(now.errors - last.errors);
        rep->add_p50_us(
            LatencyHistogram::PercentileOfGrowth(last.latency, latency, 0.5) /
            1000);
        rep->add_p99_us(
            LatencyHistogram::PercentileOfGrowth(last.latency, latency, 0.99) /
            1000);
        last.ops = now.ops;
        last.reads = now.reads;
        last.writes = now.writes;
        last.others = now.others;
        last.read_bytes = now.read_bytes;
        last.write_bytes = now.write_bytes;
        last.errors = now.errors;
        last.in_flight = now.in_flight;
        last.latency.swap(latency);
      });
  for (auto it = reported.begin(); it != reported.end();) {
    it = it->second.generation == generation ? std::next(it)
                                             : reported.erase(it);
  }
  auto reply = channel().CallSync(req, kHeartbeatTimeout);
  if (!reply.ok()) Disconnected(reply.status());
}

void ControllerAgent::Impl::QueueEvent(const IoHeader& h, uint64_t rule_id,
                                       const std::string* value) {
  proto::HeaderEventItem item;
  *item.mutable_header() = ToMsg(h);
  item.set_file(h.file);
  item.set_rule_id(rule_id);
  if (value != nullptr) {
    item.set_has_value(true);
    item.set_value(*value);
  }
  MutexLock l(&events_mu);
  if (events.size() >= kMaxQueuedEvents) {
    events.pop_front();
    ++events_dropped;
  }
  events.emplace_back(std::move(item), absl::Now());
}

void ControllerAgent::Impl::FlushEvents() {
  while (true) {
    proto::RpcRequest req;
    proto::HeaderEvent* e = req.mutable_controller()->mutable_header_event();
    e->set_session(session_id());
    {
      MutexLock l(&events_mu);
      // Events older than the deadline are given up.
      const absl::Time too_old = absl::Now() - options.detour_timeout;
      while (!events.empty() && events.front().second < too_old) {
        events.pop_front();
        ++events_dropped;
      }
      for (size_t i = 0; i < events.size() && i < kEventsPerMessage; ++i) {
        *e->add_items() = events[i].first;
      }
    }
    if (e->items_size() == 0) return;
    auto reply = channel().CallSync(req, kCallTimeout);
    if (!reply.ok()) {
      Disconnected(reply.status());
      return;  // kept for the next try
    }
    MutexLock l(&events_mu);
    for (int i = 0; i < e->items_size() && !events.empty(); ++i) {
      events.pop_front();
    }
  }
}

void ControllerAgent::Impl::TakeTurn(Io* io) {
  auto self = shared_from_this();
  work.Run([self, io] {
    const absl::Time deadline = absl::Now() + self->options.detour_timeout;
    absl::Status last;
    uint64_t turn = 0;
    while (absl::Now() < deadline && !self->Stopping()) {
      proto::RpcRequest req;
      proto::IoTurn* t = req.mutable_controller()->mutable_io_turn();
      t->set_session(self->session_id());
      t->set_file(io->header.file);
      *t->mutable_header() = ToMsg(io->header);
      auto reply = self->channel().CallSync(req, deadline - absl::Now());
      if (reply.ok()) {
        turn = reply->controller().turn();
        break;
      }
      last = reply.status();
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    if (turn == 0) {
      io->Complete(StatusWithErrno(
          absl::StatusCode::kUnavailable,
          StrCat("the controller did not order this IO within ",
                 absl::FormatDuration(self->options.detour_timeout),
                 last.ok() ? "" : StrCat(": ", last.message())),
          absl::IsDeadlineExceeded(last) ? ETIMEDOUT : EIO));
      return;
    }
    const std::string file = io->header.file;
    std::weak_ptr<Impl> weak = self;
    io->AddResponseHook([weak, file, turn](Io&) {
      auto i = weak.lock();
      if (!i) return;
      proto::RpcRequest done;
      proto::IoTurnDone* d = done.mutable_controller()->mutable_io_turn_done();
      d->set_session(i->session_id());
      d->set_file(file);
      d->set_turn(turn);
      i->channel().Call(
          done, {}, kCallTimeout,
          [](const absl::Status&, proto::RpcReply&, std::span<const char>) {});
    });
    self->sw->Resume(io, "controller");
  });
}

// --- ControllerAgent ---

absl::StatusOr<std::unique_ptr<ControllerAgent>> ControllerAgent::Start(
    SSwitch* sw, IoThreads* threads, AgentOptions options) {
  if (options.host.sswitch().empty()) {
    options.host.set_sswitch(sw->name());
  }
  if (options.host.instance() == 0) {
    std::random_device random;
    options.host.set_instance((uint64_t{random()} << 32) | random() | 1);
  }
  auto impl = std::make_shared<Impl>(sw, threads, std::move(options));
  {
    RpcChannel::Options co;
    co.secret = impl->options.secret;
    co.name = impl->options.host.sswitch();
    co.role = impl->options.host.role();
    co.connections = 2;  // one may hold the poll for commands
    auto controllers =
        ControllerChannels::Create(threads, impl->options.address, co);
    if (!controllers.ok()) return controllers.status();
    impl->controllers = *std::move(controllers);
  }
  // Register before serving: retry while the controller is unreachable,
  // or while another process holds the name (this host's previous life,
  // until the controller finds it silent), up to the deadline; any other
  // refusal is final.
  const absl::Time deadline = absl::Now() + impl->options.register_timeout;
  absl::Status s;
  while (true) {
    const bool several = impl->controllers->size() > 1;
    absl::Duration left =
        std::max(deadline - absl::Now(), absl::Milliseconds(1));
    if (several) left = std::min(left, kRegisterEachTimeout);
    s = impl->Register(impl->options.fresh, left);
    if (s.ok() || absl::Now() >= deadline) break;
    // Absent (or, with several, slow): try again, or the next controller.
    if (!absl::IsUnavailable(s) && !absl::IsAlreadyExists(s) &&
        !(several && absl::IsDeadlineExceeded(s))) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (!s.ok() && !impl->options.require_registration) {
    LogWarning("cannot register with the controller at ", impl->address(),
               " yet (", s.message(), "); retrying in the background");
    s = absl::OkStatus();
  }
  if (!s.ok()) {
    for (RpcChannel* c : impl->controllers->All()) c->Shutdown();
    return absl::Status(s.code(),
                        StrCat("cannot register with the controller at ",
                               impl->address(), ": ", s.message()));
  }
  sw->SetControllerSink(std::make_shared<AgentSink>(impl));
  impl->poll_thread = std::thread([p = impl.get()] { p->PollLoop(); });
  impl->tick_thread = std::thread([p = impl.get()] { p->TickLoop(); });
  LogInfo("registered with the controller at ", impl->address(), " as ",
          impl->options.host.sswitch(), " (", impl->restored.load(),
          " delegate rules restored)");
  return std::unique_ptr<ControllerAgent>(new ControllerAgent(impl));
}

ControllerAgent::ControllerAgent(std::shared_ptr<Impl> impl)
    : impl_(std::move(impl)) {}

ControllerAgent::~ControllerAgent() {
  impl_->sw->SetControllerSink(nullptr);
  {
    MutexLock l(&impl_->mu);
    impl_->stopping = true;
  }
  impl_->cv.SignalAll();
  // Ends the poll waiting for commands.
  for (RpcChannel* c : impl_->controllers->All()) c->Shutdown();
  impl_->poll_thread.join();
  impl_->tick_thread.join();
  // Commands and controller-bound IOs in progress use the sSwitch, which
  // may go right after this.
  impl_->work.Wait();
  // Updates prepared and never committed or aborted end with the agent: the
  // flows they parked go on by the rules in place (as when a lease runs
  // out), or they would wait for a controller that can no longer reach
  // this sSwitch through us.
  MutexLock cl(&impl_->control_mu);
  for (const auto& [update, prepared] : impl_->prepared) {
    for (const HeaderPattern& pat : prepared.parked) {
      (void)impl_->sw->Quiesce(pat, false);
    }
  }
  impl_->prepared.clear();
}

bool ControllerAgent::connected() const {
  MutexLock l(&impl_->mu);
  return impl_->connected;
}

size_t ControllerAgent::records_restored() const { return impl_->restored; }

}  // namespace sroute
