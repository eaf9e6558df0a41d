#include "controller/controller.h"

#include <algorithm>
#include <deque>
#include <future>
#include <map>
#include <set>
#include <thread>

#include "controller/store.h"
#include "rpc/channel.h"
#include "rpc/io_threads.h"
#include "rpc/server.h"
#include "rules/parser.h"
#include "sswitch/stats.h"
#include "util/background.h"
#include "util/log.h"
#include "util/mutex.h"
#include "util/strings.h"

namespace sroute {
namespace {

// A WaitCommands or WaitEvents call is answered (empty) after this long,
// well inside the caller's own deadline.
constexpr absl::Duration kHoldCall = absl::Seconds(15);
constexpr size_t kMaxEvents = 10000;
// A host that got its turn for a controller-bound IO and never said it was
// done loses the turn after this long.
constexpr absl::Duration kTurnLease = absl::Seconds(30);
constexpr uint32_t kRecordPage = 20000;

struct PendingCommand {
  // Guards done and result. A leaf.
  Mutex mu;
  CondVar cv;
  bool done ABSL_GUARDED_BY(mu) = false;
  proto::CommandResult result ABSL_GUARDED_BY(mu);
};

struct Session {
  uint64_t id = 0;
  proto::HostInfo host;
  bool connected = false;
  absl::Time last_seen;
  uint64_t version = 0;
  int64_t in_flight = 0;
  absl::Duration interval;
  std::unique_ptr<RpcServer::Call> poll;
  absl::Time poll_since;
  std::vector<proto::Command> queue;
  // Counters by (cid, host id): totals, and the last interval's growth.
  std::map<std::pair<uint64_t, uint64_t>, RuleStats> rules;
  std::vector<std::pair<uint64_t, uint64_t>> active;  // in the last report
};

struct FileTurns {
  bool busy = false;
  uint64_t turn = 0;
  absl::Time granted;
  std::deque<std::unique_ptr<RpcServer::Call>> waiting;
};

void ReplyWith(RpcServer::Call& call, proto::ControllerReply body) {
  proto::RpcReply reply;
  *reply.mutable_controller() = std::move(body);
  call.Reply(reply);
}

absl::Status ResultStatus(const proto::CommandResult& r) {
  return absl::Status(static_cast<absl::StatusCode>(r.code()), r.message());
}

IoHeader FromMsg(const proto::IoHeaderMsg& m, const std::string& file) {
  IoHeader h;
  h.source = m.source();
  h.stage = m.stage();
  h.op = m.op() < static_cast<uint32_t>(kNumOps) ? static_cast<Op>(m.op())
                                                 : Op::kRead;
  h.file = file;
  h.offset = m.offset();
  h.length = m.length();
  return h;
}

}  // namespace

class AppRunner;

// The ControllerApi of the controller's own process, for one app (or the
// administrator): updates are owned by `owner`, state is kept under it.
class LocalApi : public ControllerApi {
 public:
  LocalApi(Controller::Impl* impl, std::string owner, AppRunner* runner)
      : impl_(impl), owner_(std::move(owner)), runner_(runner) {}
  std::vector<TopologyHost> Topology() override;
  absl::StatusOr<std::vector<proto::ManagedRule>> Rules(
      const std::string& sswitch) override;
  absl::StatusOr<UpdateOutcome> Update(const UpdateSpec& spec) override;
  absl::Status Quiesce(const std::string& sswitch, const std::string& pattern,
                       bool on) override;
  absl::Status Drain(const std::string& sswitch, const std::string& pattern,
                     absl::Duration timeout) override;
  StatsSnapshot Stats() override;
  void AddTimer(absl::Duration period, std::function<void()> fn) override;
  absl::Status PutState(const std::string& key,
                        const std::string& value) override;
  absl::StatusOr<std::string> GetState(const std::string& key) override;

 private:
  Controller::Impl* const impl_;
  const std::string owner_;
  AppRunner* const runner_;
};

// One control application on a thread of its own: Start, then stats,
// headers and timers, one at a time.
class AppRunner {
 public:
  AppRunner(Controller::Impl* impl, std::string name,
            std::unique_ptr<ControlApp> app)
      : name_(std::move(name)),
        app_(std::move(app)),
        api_(impl, name_, this),
        thread_([this] { Loop(); }) {
    Post([this] {
      absl::Status s = app_->Start(api_);
      if (!s.ok()) {
        LogError("app ", name_, " failed to start: ", s.message());
        failed_ = true;
      } else {
        LogInfo("app ", name_, " started");
      }
    });
  }
  ~AppRunner() {
    {
      MutexLock l(&mu_);
      stop_ = true;
    }
    cv_.SignalAll();
    thread_.join();
  }

  void Post(std::function<void()> fn) ABSL_LOCKS_EXCLUDED(mu_) {
    {
      MutexLock l(&mu_);
      if (tasks_.size() > 10000) return;  // a stuck app loses events
      tasks_.push_back(std::move(fn));
    }
    cv_.SignalAll();
  }
  void OnStats(const StatsSnapshot& s) {
    Post([this, s] {
      if (!failed_) app_->OnStats(s);
    });
  }
  void OnHeader(const HeaderEvent& e) {
    Post([this, e] {
      if (!failed_) app_->OnHeader(e);
    });
  }
  void AddTimer(absl::Duration period, std::function<void()> fn) {
    MutexLock l(&mu_);
    timers_.push_back(Timer{std::max(period, absl::Milliseconds(1)),
                            absl::Now() + period, std::move(fn)});
    cv_.SignalAll();
  }

 private:
  struct Timer {
    absl::Duration period;
    absl::Time next;
    std::function<void()> fn;
  };

  void Loop() ABSL_LOCKS_EXCLUDED(mu_) {
    ReleasableMutexLock l(&mu_);
    while (!stop_) {
      absl::Time wake = absl::InfiniteFuture();
      for (const Timer& t : timers_) wake = std::min(wake, t.next);
      if (tasks_.empty()) {
        if (wake == absl::InfiniteFuture()) {
          cv_.Wait(&mu_);
        } else {
          cv_.WaitFor(&mu_,
                      std::chrono::nanoseconds(std::max<int64_t>(
                          0, absl::ToInt64Nanoseconds(wake - absl::Now()))));
        }
        if (stop_) break;
      }
      std::vector<std::function<void()>> run;
      run.swap(tasks_);
      const absl::Time now = absl::Now();
      for (Timer& t : timers_) {
        if (t.next <= now && !failed_) {
          run.push_back(t.fn);
          t.next = now + t.period;
        }
      }
      l.Unlock();
      for (auto& fn : run) fn();
      l.Lock();
    }
  }

  const std::string name_;
  std::unique_ptr<ControlApp> app_;
  LocalApi api_;
  // Guards tasks_, timers_, stop_. A leaf: tasks and timers run without it.
  Mutex mu_;
  CondVar cv_;
  std::vector<std::function<void()>> tasks_ ABSL_GUARDED_BY(mu_);
  std::vector<Timer> timers_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::atomic<bool> failed_{false};
  std::thread thread_;  // last: starts after everything above
};

struct Controller::Impl {
  explicit Impl(ControllerOptions o) : options(std::move(o)) {}

  // --- RPC.
  void Handle(std::unique_ptr<RpcServer::Call> call);
  void HandleRegister(RpcServer::Call& call);
  void HandleWaitCommands(std::unique_ptr<RpcServer::Call> call);
  void HandleCommandResult(const proto::CommandResult& r);
  void HandleStats(const proto::StatsReport& r);
  void HandleHeaderEvent(const proto::HeaderEvent& e);
  void HandleIoTurn(std::unique_ptr<RpcServer::Call> call);
  void HandleIoTurnDone(const proto::IoTurnDone& d);
  void HandleWaitEvents(std::unique_ptr<RpcServer::Call> call);

  // --- Hosts.
  absl::StatusOr<proto::CommandResult> SendCommand(const std::string& sswitch,
                                                   proto::Command command,
                                                   absl::Duration timeout);
  // Sends each command to its sSwitch at once; results in the same order.
  std::vector<absl::StatusOr<proto::CommandResult>> SendAll(
      const std::vector<std::pair<std::string, proto::Command>>& commands,
      absl::Duration timeout);
  // Takes the session's waiting poll if it has commands to hand out; the
  // caller answers it after unlocking.
  std::unique_ptr<RpcServer::Call> TakePoll(Session& s,
                                            proto::ControllerReply* reply)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  absl::StatusOr<std::vector<proto::DelegateRecord>> RecoverRecords(
      const proto::HostInfo& host);
  RpcChannel* ServerChannel(const std::string& address);

  // --- The API.
  absl::StatusOr<UpdateOutcome> Update(const UpdateSpec& spec,
                                       const std::string& owner);
  std::vector<TopologyHost> Topology();
  StatsSnapshot Stats();
  void AddEvent(proto::Event e);
  void Sweep();

  const ControllerOptions options;
  uint64_t epoch = 0;
  std::unique_ptr<ControllerStore> store;
  std::unique_ptr<IoThreads> threads;
  std::unique_ptr<Background> background;

  // One update (or adoption of a new host's rules) at a time, from its
  // checks to its last commit: held across the store's writes and the waits
  // for hosts. Order: before mu and ControllerStore::mu_.
  Mutex update_mu;
  // Guards the sessions, pending commands, rule cache, events and turns
  // (below). Order: after update_mu; else a leaf: no store access, reply or
  // wait happens under it.
  Mutex mu ABSL_ACQUIRED_AFTER(update_mu);
  // By sSwitch.
  std::map<std::string, Session> sessions ABSL_GUARDED_BY(mu);
  // By command.
  std::map<uint64_t, std::shared_ptr<PendingCommand>> pending
      ABSL_GUARDED_BY(mu);
  // By cid.
  std::map<uint64_t, proto::ManagedRule> rule_cache ABSL_GUARDED_BY(mu);
  uint64_t next_session ABSL_GUARDED_BY(mu) = 1;
  uint64_t next_command ABSL_GUARDED_BY(mu) = 1;
  uint64_t next_update ABSL_GUARDED_BY(mu) = 1;
  std::deque<proto::Event> events ABSL_GUARDED_BY(mu);
  uint64_t next_event ABSL_GUARDED_BY(mu) = 1;
  std::vector<std::pair<std::unique_ptr<RpcServer::Call>, absl::Time>>
      event_waiters ABSL_GUARDED_BY(mu);
  std::map<std::string, FileTurns> turns ABSL_GUARDED_BY(mu);
  bool stopping ABSL_GUARDED_BY(mu) = false;
  CondVar sweep_cv;  // on mu: stopping

  // Guards channels. A leaf.
  Mutex channels_mu;
  std::map<std::string, std::unique_ptr<RpcChannel>> channels
      ABSL_GUARDED_BY(channels_mu);

  std::unique_ptr<LocalApi> admin;
  std::vector<std::unique_ptr<AppRunner>> apps;
  std::thread sweeper;
  std::unique_ptr<RpcServer> rpc;  // last: no request before all is set up
};

// --- LocalApi ---

std::vector<TopologyHost> LocalApi::Topology() { return impl_->Topology(); }

absl::StatusOr<std::vector<proto::ManagedRule>> LocalApi::Rules(
    const std::string& sswitch) {
  return impl_->store->Rules(sswitch);
}

absl::StatusOr<UpdateOutcome> LocalApi::Update(const UpdateSpec& spec) {
  return impl_->Update(spec, spec.owner.empty() ? owner_ : spec.owner);
}

absl::Status LocalApi::Quiesce(const std::string& sswitch,
                               const std::string& pattern, bool on) {
  if (auto p = ParsePattern(pattern); !p.ok()) return p.status();
  proto::Command c;
  c.mutable_quiesce()->set_pattern(pattern);
  c.mutable_quiesce()->set_on(on);
  auto r =
      impl_->SendCommand(sswitch, std::move(c), impl_->options.command_timeout);
  return r.ok() ? ResultStatus(*r) : r.status();
}

absl::Status LocalApi::Drain(const std::string& sswitch,
                             const std::string& pattern,
                             absl::Duration timeout) {
  if (auto p = ParsePattern(pattern); !p.ok()) return p.status();
  proto::Command c;
  c.mutable_drain()->set_pattern(pattern);
  c.mutable_drain()->set_timeout_ms(
      static_cast<uint32_t>(absl::ToInt64Milliseconds(timeout)));
  auto r = impl_->SendCommand(sswitch, std::move(c),
                              timeout + impl_->options.command_timeout);
  return r.ok() ? ResultStatus(*r) : r.status();
}

StatsSnapshot LocalApi::Stats() { return impl_->Stats(); }

void LocalApi::AddTimer(absl::Duration period, std::function<void()> fn) {
  if (runner_ != nullptr) {
    runner_->AddTimer(period, std::move(fn));
  } else {
    LogWarning("AddTimer without an app: ignored");
  }
}

absl::Status LocalApi::PutState(const std::string& key,
                                const std::string& value) {
  return impl_->store->PutAppState(owner_, key, value);
}

absl::StatusOr<std::string> LocalApi::GetState(const std::string& key) {
  return impl_->store->GetAppState(owner_, key);
}

// --- Commands to hosts ---

std::unique_ptr<RpcServer::Call> Controller::Impl::TakePoll(
    Session& s, proto::ControllerReply* reply) {
  if (!s.poll || s.queue.empty()) return nullptr;
  for (proto::Command& c : s.queue) {
    *reply->mutable_commands()->add_commands() = std::move(c);
  }
  s.queue.clear();
  return std::move(s.poll);
}

absl::StatusOr<proto::CommandResult> Controller::Impl::SendCommand(
    const std::string& sswitch, proto::Command command,
    absl::Duration timeout) {
  auto p = std::make_shared<PendingCommand>();
  std::unique_ptr<RpcServer::Call> poll;
  proto::ControllerReply reply;
  uint64_t id;
  {
    MutexLock l(&mu);
    auto it = sessions.find(sswitch);
    if (it == sessions.end()) {
      return absl::NotFoundError(StrCat("no host '", sswitch, "'"));
    }
    if (!it->second.connected) {
      return absl::UnavailableError(
          StrCat("host ", sswitch, " is not connected"));
    }
    id = next_command++;
    command.set_id(id);
    pending[id] = p;
    it->second.queue.push_back(std::move(command));
    poll = TakePoll(it->second, &reply);
  }
  if (poll) ReplyWith(*poll, std::move(reply));
  bool done;
  proto::CommandResult result;
  {
    MutexLock l(&p->mu);
    done = p->cv.WaitFor(
        &p->mu, std::chrono::nanoseconds(absl::ToInt64Nanoseconds(timeout)),
        [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(p->mu) { return p->done; });
    if (done) result = std::move(p->result);
  }
  {
    MutexLock g(&mu);
    pending.erase(id);
  }
  if (!done) {
    return absl::DeadlineExceededError(StrCat("host ", sswitch,
                                              " did not answer within ",
                                              absl::FormatDuration(timeout)));
  }
  return result;
}

std::vector<absl::StatusOr<proto::CommandResult>> Controller::Impl::SendAll(
    const std::vector<std::pair<std::string, proto::Command>>& commands,
    absl::Duration timeout) {
  std::vector<std::future<absl::StatusOr<proto::CommandResult>>> futures;
  for (const auto& [sswitch, command] : commands) {
    futures.push_back(
        // (Copies by init-capture: clang 14 cannot capture a structured
        // binding.)
        std::async(std::launch::async,
                   [this, sswitch = sswitch, command = command, timeout] {
                     return SendCommand(sswitch, command, timeout);
                   }));
  }
  std::vector<absl::StatusOr<proto::CommandResult>> out;
  for (auto& f : futures) out.push_back(f.get());
  return out;
}

// --- Updates ---

absl::StatusOr<UpdateOutcome> Controller::Impl::Update(
    const UpdateSpec& spec, const std::string& owner) {
  // One update at a time, from its checks to its last commit.
  MutexLock serial(&update_mu);
  // Check everything before any host hears of it.
  struct Planned {
    std::string sswitch;
    std::vector<proto::ManagedRule> insert;
    std::vector<uint64_t> remove;
  };
  std::vector<Planned> plan;
  size_t inserts = 0;
  for (const RuleChanges& c : spec.changes) {
    auto it = std::find_if(plan.begin(), plan.end(), [&](const Planned& p) {
      return p.sswitch == c.sswitch;
    });
    if (it == plan.end()) {
      plan.push_back(Planned{c.sswitch, {}, {}});
      it = plan.end() - 1;
    }
    for (size_t i = 0; i < c.insert.size(); ++i) {
      auto rule = ParseRule(c.insert[i]);
      if (!rule.ok()) {
        return absl::InvalidArgumentError(
            StrCat(c.sswitch, ": rule ", i + 1, ": ", rule.status().message()));
      }
      proto::ManagedRule m;
      m.set_text(FormatRule(*rule));
      m.set_owner(owner);
      it->insert.push_back(std::move(m));
      ++inserts;
    }
    for (uint64_t cid : c.remove) {
      auto where = store->SSwitchOf(cid);
      if (!where || *where != c.sswitch) {
        return absl::NotFoundError(StrCat("no rule ", cid, " on ", c.sswitch));
      }
      it->remove.push_back(cid);
    }
  }
  for (const std::string& f : spec.flows) {
    if (auto p = ParsePattern(f); !p.ok()) {
      return absl::InvalidArgumentError(
          StrCat("flow ", f, ": ", p.status().message()));
    }
  }
  if (plan.empty()) return absl::InvalidArgumentError("an empty update");
  {
    MutexLock l(&mu);
    for (const Planned& p : plan) {
      auto it = sessions.find(p.sswitch);
      if (it == sessions.end() || !it->second.connected) {
        return absl::UnavailableError(StrCat("host ", p.sswitch,
                                             it == sessions.end()
                                                 ? " has never registered"
                                                 : " is not connected",
                                             "; nothing changed"));
      }
    }
  }
  std::vector<uint64_t> cids;
  if (inserts > 0) {
    auto first = store->NextCids(inserts);
    if (!first.ok()) return first.status();
    uint64_t next = *first;
    for (Planned& p : plan) {
      for (proto::ManagedRule& m : p.insert) {
        m.set_cid(next++);
        cids.push_back(m.cid());
      }
    }
  }
  uint64_t update_id;
  {
    MutexLock l(&mu);
    update_id = next_update++;
  }
  const uint32_t drain_ms =
      static_cast<uint32_t>(absl::ToInt64Milliseconds(spec.timeout));
  const uint32_t lease_ms = static_cast<uint32_t>(
      absl::ToInt64Milliseconds(spec.timeout + options.command_timeout * 2));

  // Phase 1: every host parks the flows, drains them and checks the changes.
  std::vector<std::pair<std::string, proto::Command>> prepares;
  for (const Planned& p : plan) {
    proto::Command c;
    proto::Prepare* pr = c.mutable_prepare();
    pr->set_update(update_id);
    for (const auto& m : p.insert) *pr->add_insert() = m;
    for (uint64_t cid : p.remove) pr->add_remove(cid);
    for (const std::string& f : spec.flows) pr->add_flows(f);
    pr->set_drain_timeout_ms(drain_ms);
    pr->set_lease_ms(lease_ms);
    prepares.emplace_back(p.sswitch, std::move(c));
  }
  auto prepared = SendAll(prepares, spec.timeout + options.command_timeout);
  absl::Status failure;
  for (size_t i = 0; i < prepared.size(); ++i) {
    absl::Status s =
        prepared[i].ok() ? ResultStatus(*prepared[i]) : prepared[i].status();
    if (!s.ok() && failure.ok()) {
      failure =
          absl::Status(s.code(), StrCat(plan[i].sswitch,
                                        " refused the update: ", s.message(),
                                        "; no host changed"));
    }
  }
  auto abort_all = [&] {
    std::vector<std::pair<std::string, proto::Command>> aborts;
    for (const Planned& p : plan) {
      proto::Command c;
      c.mutable_abort()->set_update(update_id);
      aborts.emplace_back(p.sswitch, std::move(c));
    }
    (void)SendAll(aborts, options.command_timeout);
  };
  if (!failure.ok()) {
    abort_all();
    return failure;
  }
  // Persist before anything is installed.
  const uint64_t version = store->version() + 1;
  std::vector<ControllerStore::RuleChange> changes;
  for (const Planned& p : plan) {
    changes.push_back({p.sswitch, p.insert, p.remove});
  }
  if (absl::Status s = store->Apply(changes, version); !s.ok()) {
    abort_all();
    return absl::Status(s.code(), StrCat(s.message(), "; no host changed"));
  }
  {
    MutexLock l(&mu);
    for (const Planned& p : plan) {
      for (uint64_t cid : p.remove) rule_cache.erase(cid);
      for (const auto& m : p.insert) rule_cache[m.cid()] = m;
    }
  }
  // Phase 2: install everywhere and release the flows.
  std::vector<std::pair<std::string, proto::Command>> commits;
  for (const Planned& p : plan) {
    proto::Command c;
    c.mutable_commit()->set_update(update_id);
    c.mutable_commit()->set_version(version);
    commits.emplace_back(p.sswitch, std::move(c));
  }
  auto committed = SendAll(commits, options.command_timeout);
  for (size_t i = 0; i < committed.size(); ++i) {
    absl::Status s =
        committed[i].ok() ? ResultStatus(*committed[i]) : committed[i].status();
    if (!s.ok()) {
      // The rules are persisted: the host gets them when it is reconciled
      // (now, or when it registers again).
      LogWarning("update ", update_id, ": commit on ", plan[i].sswitch,
                 " failed (", s.message(), "); reconciling it");
      auto rules = store->Rules(plan[i].sswitch);
      if (rules.ok()) {
        proto::Command c;
        for (auto& m : *rules) *c.mutable_reconcile()->add_rules() = m;
        (void)SendCommand(plan[i].sswitch, std::move(c),
                          options.command_timeout);
      }
    } else {
      MutexLock l(&mu);
      auto it = sessions.find(plan[i].sswitch);
      if (it != sessions.end()) it->second.version = committed[i]->version();
    }
  }
  return UpdateOutcome{version, std::move(cids)};
}

// --- Registration and recovery ---

RpcChannel* Controller::Impl::ServerChannel(const std::string& address) {
  MutexLock l(&channels_mu);
  auto& ch = channels[address];
  if (!ch) {
    RpcChannel::Options o;
    o.address = address;
    o.secret = options.secret;
    o.name = "controller";
    o.role = "controller";
    o.connections = 1;
    auto c = RpcChannel::Create(threads.get(), o);
    if (!c.ok()) return nullptr;
    ch = *std::move(c);
  }
  return ch.get();
}

absl::StatusOr<std::vector<proto::DelegateRecord>>
Controller::Impl::RecoverRecords(const proto::HostInfo& host) {
  std::vector<proto::DelegateRecord> out;
  std::set<std::string> asked;
  for (const proto::EndpointInfo& e : host.endpoints()) {
    if (e.kind() != "server" || !asked.insert(e.address()).second) continue;
    RpcChannel* ch = ServerChannel(e.address());
    if (ch == nullptr) {
      return absl::InvalidArgumentError(
          StrCat("bad server address ", e.address()));
    }
    uint64_t after = 0;
    while (true) {
      proto::RpcRequest req;
      req.mutable_list_records()->set_sswitch(host.sswitch());
      req.mutable_list_records()->set_after(after);
      req.mutable_list_records()->set_limit(kRecordPage);
      auto reply = ch->CallSync(req, options.command_timeout);
      if (!reply.ok()) {
        return absl::Status(
            reply.status().code(),
            StrCat("cannot recover the delegate rules of ", host.sswitch(),
                   " from server ", e.name(), " (", e.address(),
                   "): ", reply.status().message()));
      }
      for (auto& r : *reply->mutable_records()->mutable_records()) {
        after = r.seq();
        out.push_back(std::move(r));
      }
      if (!reply->records().more()) break;
    }
  }
  // A record may come from more than one server: keep one of each.
  std::sort(out.begin(), out.end(),
            [](const auto& a, const auto& b) { return a.seq() < b.seq(); });
  out.erase(std::unique(out.begin(), out.end(),
                        [](const auto& a, const auto& b) {
                          return a.seq() == b.seq() && a.rule() == b.rule();
                        }),
            out.end());
  return out;
}

void Controller::Impl::HandleRegister(RpcServer::Call& call) {
  const proto::Register& reg = call.request().controller().register_();
  const proto::HostInfo& host = reg.host();
  const std::string& name = host.sswitch();
  if (name.empty()) {
    call.ReplyStatus(
        absl::InvalidArgumentError("a host needs an sSwitch name"));
    return;
  }
  // A new sSwitch brings its own rules, which the controller adopts; a
  // known one gets its persisted rules back.
  std::vector<proto::ManagedRule> desired;
  if (!store->Known(name)) {
    MutexLock serial(&update_mu);
    std::vector<proto::ManagedRule> adopt(reg.rules().begin(),
                                          reg.rules().end());
    if (!adopt.empty()) {
      auto first = store->NextCids(adopt.size());
      if (!first.ok()) {
        call.ReplyStatus(first.status());
        return;
      }
      for (size_t i = 0; i < adopt.size(); ++i) adopt[i].set_cid(*first + i);
      if (absl::Status s =
              store->Apply({{name, adopt, {}}}, store->version() + 1);
          !s.ok()) {
        call.ReplyStatus(s);
        return;
      }
    }
    desired = std::move(adopt);
  } else {
    auto rules = store->Rules(name);
    if (!rules.ok()) {
      call.ReplyStatus(rules.status());
      return;
    }
    desired = *std::move(rules);
  }
  if (absl::Status s = store->PutHost(host); !s.ok()) {
    call.ReplyStatus(s);
    return;
  }
  std::vector<proto::DelegateRecord> records;
  if (reg.fresh()) {
    auto r = RecoverRecords(host);
    if (!r.ok()) {
      LogWarning("registration of ", name, " refused: ", r.status().message());
      call.ReplyStatus(r.status());
      return;
    }
    records = *std::move(r);
  }
  proto::ControllerReply out;
  proto::RegisterReply* rr = out.mutable_registered();
  std::unique_ptr<RpcServer::Call> old_poll;
  {
    MutexLock l(&mu);
    Session& s = sessions[name];
    old_poll = std::move(s.poll);
    s.queue.clear();
    s.id = next_session++;
    s.host = host;
    s.connected = true;
    s.last_seen = absl::Now();
    s.interval = options.stats_interval;
    s.rules.clear();
    s.active.clear();
    rr->set_session(s.id);
    for (const auto& m : desired) rule_cache[m.cid()] = m;
  }
  if (old_poll) {
    old_poll->ReplyStatus(absl::FailedPreconditionError("session replaced"));
  }
  for (auto& m : desired) *rr->add_rules() = std::move(m);
  for (auto& r : records) *rr->add_records() = std::move(r);
  rr->set_stats_interval_ms(
      static_cast<uint32_t>(absl::ToInt64Milliseconds(options.stats_interval)));
  rr->set_controller_epoch(epoch);
  LogInfo("host ", name, " (", host.role(), ") registered: ", rr->rules_size(),
          " rules, ", rr->records_size(), " delegate records to restore");
  ReplyWith(call, std::move(out));
}

// --- Host traffic ---

void Controller::Impl::HandleWaitCommands(
    std::unique_ptr<RpcServer::Call> call) {
  const uint64_t session =
      call->request().controller().wait_commands().session();
  std::unique_ptr<RpcServer::Call> old, ready;
  proto::ControllerReply reply;
  bool known = false;
  {
    MutexLock l(&mu);
    Session* s = nullptr;
    for (auto& [name, ses] : sessions) {
      if (ses.id == session) s = &ses;
    }
    if (s != nullptr) {
      known = true;
      s->last_seen = absl::Now();
      s->connected = true;
      old = std::move(s->poll);
      s->poll = std::move(call);
      s->poll_since = absl::Now();
      ready = TakePoll(*s, &reply);
    }
  }
  // Replies go out after unlocking.
  if (!known) {
    call->ReplyStatus(
        absl::FailedPreconditionError("unknown session: register again"));
    return;
  }
  if (old) ReplyWith(*old, proto::ControllerReply());
  if (ready) ReplyWith(*ready, std::move(reply));
}

void Controller::Impl::HandleCommandResult(const proto::CommandResult& r) {
  std::shared_ptr<PendingCommand> p;
  {
    MutexLock l(&mu);
    auto it = pending.find(r.command());
    if (it == pending.end()) return;  // timed out already
    p = it->second;
  }
  MutexLock l(&p->mu);
  p->result = r;
  p->done = true;
  p->cv.SignalAll();
}

void Controller::Impl::HandleStats(const proto::StatsReport& r) {
  MutexLock l(&mu);
  Session* s = nullptr;
  for (auto& [name, ses] : sessions) {
    if (ses.id == r.session()) s = &ses;
  }
  if (s == nullptr) return;
  s->last_seen = absl::Now();
  s->connected = true;
  s->version = r.version();
  s->in_flight = r.total_in_flight();
  if (r.interval_ms() > 0) s->interval = absl::Milliseconds(r.interval_ms());
  // Rules of the host's own and of delegates come and go: keep only those
  // active now. Managed rules keep their totals while they exist.
  for (auto it = s->rules.begin(); it != s->rules.end();) {
    const bool keep =
        it->first.first != 0 ? rule_cache.contains(it->first.first) : false;
    it = keep ? std::next(it) : s->rules.erase(it);
  }
  s->active.clear();
  const int n = r.cid_size();
  auto at = [](const auto& column, int i) -> uint64_t {
    return i < column.size() ? column.Get(i) : 0;
  };
  for (int i = 0; i < n; ++i) {
    const auto key = std::make_pair(r.cid(i), at(r.host_id(), i));
    RuleStats& rs = s->rules[key];
    rs.cid = key.first;
    rs.host_id = key.second;
    if (rs.cid != 0 && rs.text.empty()) {
      auto c = rule_cache.find(rs.cid);
      if (c != rule_cache.end()) {
        rs.text = c->second.text();
        rs.owner = c->second.owner();
      }
    }
    rs.reads = at(r.reads(), i);
    rs.writes = at(r.writes(), i);
    rs.others = at(r.others(), i);
    rs.read_bytes = at(r.read_bytes(), i);
    rs.write_bytes = at(r.write_bytes(), i);
    rs.total_reads += rs.reads;
    rs.total_writes += rs.writes;
    rs.total_others += rs.others;
    rs.total_read_bytes += rs.read_bytes;
    rs.total_write_bytes += rs.write_bytes;
    rs.in_flight = i < r.in_flight_size() ? r.in_flight(i) : 0;
    rs.errors = at(r.errors(), i);
    rs.p50_us = at(r.p50_us(), i);
    rs.p99_us = at(r.p99_us(), i);
    s->active.push_back(key);
  }
}

void Controller::Impl::AddEvent(proto::Event e) {
  std::vector<std::unique_ptr<RpcServer::Call>> wake;
  proto::ControllerReply reply;
  {
    MutexLock l(&mu);
    e.set_number(next_event++);
    events.push_back(e);
    while (events.size() > kMaxEvents) events.pop_front();
    if (!event_waiters.empty()) {
      *reply.mutable_events()->add_events() = e;
      for (auto& [c, t] : event_waiters) wake.push_back(std::move(c));
      event_waiters.clear();
    }
  }
  for (auto& c : wake) ReplyWith(*c, reply);
}

void Controller::Impl::HandleHeaderEvent(const proto::HeaderEvent& e) {
  std::string sswitch;
  {
    MutexLock l(&mu);
    for (auto& [name, ses] : sessions) {
      if (ses.id == e.session()) {
        sswitch = name;
        ses.last_seen = absl::Now();
      }
    }
  }
  if (sswitch.empty()) return;
  for (const proto::HeaderEventItem& item : e.items()) {
    HeaderEvent he;
    he.sswitch = sswitch;
    he.header = FromMsg(item.header(), item.file());
    he.rule_id = item.rule_id();
    if (item.has_value()) he.value = item.value();
    for (auto& app : apps) app->OnHeader(he);
    proto::Event ev;
    ev.set_sswitch(sswitch);
    *ev.mutable_header() = item;
    AddEvent(std::move(ev));
  }
}

void Controller::Impl::HandleIoTurn(std::unique_ptr<RpcServer::Call> call) {
  const std::string file = call->request().controller().io_turn().file();
  std::unique_ptr<RpcServer::Call> grant;
  uint64_t turn = 0;
  {
    MutexLock l(&mu);
    FileTurns& t = turns[file];
    if (t.busy) {
      t.waiting.push_back(std::move(call));
      return;
    }
    t.busy = true;
    t.turn++;
    t.granted = absl::Now();
    turn = t.turn;
    grant = std::move(call);
  }
  proto::ControllerReply reply;
  reply.set_turn(turn);
  ReplyWith(*grant, std::move(reply));
}

void Controller::Impl::HandleIoTurnDone(const proto::IoTurnDone& d) {
  std::unique_ptr<RpcServer::Call> next;
  uint64_t turn = 0;
  {
    MutexLock l(&mu);
    auto it = turns.find(d.file());
    if (it == turns.end() || it->second.turn != d.turn()) return;
    FileTurns& t = it->second;
    if (t.waiting.empty()) {
      turns.erase(it);
      return;
    }
    next = std::move(t.waiting.front());
    t.waiting.pop_front();
    t.turn++;
    t.granted = absl::Now();
    turn = t.turn;
  }
  proto::ControllerReply reply;
  reply.set_turn(turn);
  ReplyWith(*next, std::move(reply));
}

void Controller::Impl::HandleWaitEvents(std::unique_ptr<RpcServer::Call> call) {
  uint64_t after = call->request().controller().wait_events().after();
  proto::ControllerReply reply;
  {
    MutexLock l(&mu);
    if (after == 0) after = next_event - 1;  // from now on
    for (const proto::Event& e : events) {
      if (e.number() > after) *reply.mutable_events()->add_events() = e;
      if (reply.events().events_size() >= 1000) break;
    }
    if (reply.events().events_size() == 0) {
      event_waiters.emplace_back(std::move(call), absl::Now());
      return;
    }
  }
  ReplyWith(*call, std::move(reply));
}

// --- Views ---

std::vector<TopologyHost> Controller::Impl::Topology() {
  std::vector<TopologyHost> out;
  // Read from the store (RocksDB) before taking mu, as kListHosts does.
  const std::vector<proto::HostInfo> hosts = store->Hosts();
  MutexLock l(&mu);
  for (const proto::HostInfo& h : hosts) {
    TopologyHost t;
    t.info = h;
    auto it = sessions.find(h.sswitch());
    if (it != sessions.end()) {
      t.info = it->second.host;
      t.connected = it->second.connected;
      t.version = it->second.version;
    }
    out.push_back(std::move(t));
  }
  return out;
}

StatsSnapshot Controller::Impl::Stats() {
  StatsSnapshot snap;
  snap.at = absl::Now();
  MutexLock l(&mu);
  for (const auto& [name, s] : sessions) {
    HostStats h;
    h.sswitch = name;
    h.connected = s.connected;
    h.version = s.version;
    h.in_flight = s.in_flight;
    h.interval = s.interval;
    for (const auto& key : s.active) {
      auto it = s.rules.find(key);
      if (it != s.rules.end()) h.rules.push_back(it->second);
    }
    snap.hosts.push_back(std::move(h));
  }
  return snap;
}

// --- Housekeeping ---

void Controller::Impl::Sweep() {
  absl::Time next_stats = absl::Now() + options.stats_interval;
  ReleasableMutexLock l(&mu);
  while (!stopping) {
    sweep_cv.WaitFor(&mu, std::chrono::milliseconds(100));
    if (stopping) break;
    const absl::Time now = absl::Now();
    std::vector<std::unique_ptr<RpcServer::Call>> empty_replies;
    for (auto& [name, s] : sessions) {
      if (s.poll && now - s.poll_since > kHoldCall) {
        empty_replies.push_back(std::move(s.poll));
      }
      if (s.connected && now - s.last_seen > options.host_timeout) {
        s.connected = false;
        LogWarning("host ", name, " is silent: disconnected");
      }
    }
    for (auto it = event_waiters.begin(); it != event_waiters.end();) {
      if (now - it->second > kHoldCall) {
        empty_replies.push_back(std::move(it->first));
        it = event_waiters.erase(it);
      } else {
        ++it;
      }
    }
    // Turns held too long pass on (the host holding one is gone).
    std::vector<std::pair<std::unique_ptr<RpcServer::Call>, uint64_t>> grants;
    for (auto it = turns.begin(); it != turns.end();) {
      FileTurns& t = it->second;
      if (t.busy && now - t.granted > kTurnLease) {
        if (t.waiting.empty()) {
          it = turns.erase(it);
          continue;
        }
        t.turn++;
        t.granted = now;
        grants.emplace_back(std::move(t.waiting.front()), t.turn);
        t.waiting.pop_front();
      }
      ++it;
    }
    const bool stats_due = now >= next_stats;
    if (stats_due) next_stats = now + options.stats_interval;
    l.Unlock();
    for (auto& c : empty_replies) ReplyWith(*c, proto::ControllerReply());
    for (auto& [c, turn] : grants) {
      proto::ControllerReply reply;
      reply.set_turn(turn);
      ReplyWith(*c, std::move(reply));
    }
    if (stats_due) {
      StatsSnapshot snap = Stats();
      for (auto& app : apps) app->OnStats(snap);
      proto::Event e;
      e.set_stats(true);
      AddEvent(std::move(e));
    }
    l.Lock();
  }
}

void Controller::Impl::Handle(std::unique_ptr<RpcServer::Call> call) {
  if (!call->request().has_controller()) {
    call->ReplyStatus(absl::UnimplementedError(
        "this is the controller: it serves controller requests only"));
    return;
  }
  const proto::ControllerRequest& req = call->request().controller();
  switch (req.body_case()) {
    case proto::ControllerRequest::kRegister:
      background->Run([this, c = std::shared_ptr<RpcServer::Call>(
                                 std::move(call))] { HandleRegister(*c); });
      return;
    case proto::ControllerRequest::kWaitCommands:
      HandleWaitCommands(std::move(call));
      return;
    case proto::ControllerRequest::kCommandResult:
      HandleCommandResult(req.command_result());
      call->ReplyStatus(absl::OkStatus());
      return;
    case proto::ControllerRequest::kStats:
      HandleStats(req.stats());
      call->ReplyStatus(absl::OkStatus());
      return;
    case proto::ControllerRequest::kHeaderEvent:
      HandleHeaderEvent(req.header_event());
      call->ReplyStatus(absl::OkStatus());
      return;
    case proto::ControllerRequest::kIoTurn:
      HandleIoTurn(std::move(call));
      return;
    case proto::ControllerRequest::kIoTurnDone:
      HandleIoTurnDone(req.io_turn_done());
      call->ReplyStatus(absl::OkStatus());
      return;
    case proto::ControllerRequest::kListHosts: {
      proto::ControllerReply reply;
      const absl::Time now = absl::Now();
      const std::vector<proto::HostInfo> hosts = store->Hosts();
      std::map<std::string, size_t> rule_counts;
      for (const proto::HostInfo& h : hosts) {
        auto rules = store->Rules(h.sswitch());
        rule_counts[h.sswitch()] = rules.ok() ? rules->size() : 0;
      }
      {
        MutexLock l(&mu);
        for (const proto::HostInfo& h : hosts) {
          proto::HostStatus* hs = reply.mutable_hosts()->add_hosts();
          *hs->mutable_host() = h;
          auto it = sessions.find(h.sswitch());
          if (it != sessions.end()) {
            *hs->mutable_host() = it->second.host;
            hs->set_connected(it->second.connected);
            hs->set_version(it->second.version);
            hs->set_last_seen_ms_ago(
                absl::ToInt64Milliseconds(now - it->second.last_seen));
          }
          hs->set_rules(rule_counts[h.sswitch()]);
        }
      }
      // After unlocking: no reply is sent with mu held.
      ReplyWith(*call, std::move(reply));
      return;
    }
    case proto::ControllerRequest::kListRules: {
      proto::ControllerReply reply;
      std::vector<std::string> names;
      if (req.list_rules().sswitch().empty()) {
        names = store->SSwitches();
      } else {
        names.push_back(req.list_rules().sswitch());
      }
      if (names.size() == 1 && !store->Known(names[0])) {
        call->ReplyStatus(absl::NotFoundError(
            StrCat("no sSwitch named '", names[0], "' at the controller")));
        return;
      }
      std::vector<std::pair<std::string, std::vector<proto::ManagedRule>>>
          stored;
      for (const std::string& name : names) {
        auto rules = store->Rules(name);
        if (!rules.ok()) {
          call->ReplyStatus(rules.status());
          return;
        }
        stored.emplace_back(name, *std::move(rules));
      }
      {
        MutexLock l(&mu);
        for (auto& [name, rules] : stored) {
          auto ses = sessions.find(name);
          for (auto& m : rules) {
            proto::AdminRule* a = reply.mutable_rules()->add_rules();
            a->set_sswitch(name);
            if (ses != sessions.end()) {
              auto from = ses->second.rules.lower_bound({m.cid(), 0});
              for (auto it = from;
                   it != ses->second.rules.end() && it->first.first == m.cid();
                   ++it) {
                const RuleStats& rs = it->second;
                a->set_host_id(rs.host_id);
                a->set_reads(rs.total_reads);
                a->set_writes(rs.total_writes);
                a->set_others(rs.total_others);
                a->set_read_bytes(rs.total_read_bytes);
                a->set_write_bytes(rs.total_write_bytes);
                a->set_in_flight(rs.in_flight);
                a->set_errors(rs.errors);
                a->set_p50_us(rs.p50_us);
                a->set_p99_us(rs.p99_us);
              }
            }
            *a->mutable_rule() = std::move(m);
          }
        }
      }
      // After unlocking: no reply is sent with mu held.
      ReplyWith(*call, std::move(reply));
      return;
    }
    case proto::ControllerRequest::kUpdate:
      background->Run([this,
                       c = std::shared_ptr<RpcServer::Call>(std::move(call))] {
        const proto::Update& u = c->request().controller().update();
        UpdateSpec spec;
        for (const proto::Change& ch : u.changes()) {
          spec.changes.push_back(RuleChanges{
              ch.sswitch(),
              std::vector<std::string>(ch.insert().begin(), ch.insert().end()),
              std::vector<uint64_t>(ch.remove().begin(), ch.remove().end())});
        }
        spec.flows.assign(u.flows().begin(), u.flows().end());
        if (u.timeout_ms() > 0)
          spec.timeout = absl::Milliseconds(u.timeout_ms());
        auto r = Update(spec, u.owner().empty() ? c->peer_name() : u.owner());
        if (!r.ok()) {
          c->ReplyStatus(r.status());
          return;
        }
        proto::ControllerReply reply;
        reply.mutable_update()->set_version(r->version);
        for (uint64_t cid : r->cids) reply.mutable_update()->add_cids(cid);
        ReplyWith(*c, std::move(reply));
      });
      return;
    case proto::ControllerRequest::kQuiesce:
      background->Run(
          [this, c = std::shared_ptr<RpcServer::Call>(std::move(call))] {
            const proto::QuiesceAt& q = c->request().controller().quiesce();
            c->ReplyStatus(admin->Quiesce(q.sswitch(), q.pattern(), q.on()));
          });
      return;
    case proto::ControllerRequest::kDrain:
      background->Run([this,
                       c = std::shared_ptr<RpcServer::Call>(std::move(call))] {
        const proto::DrainAt& d = c->request().controller().drain();
        c->ReplyStatus(admin->Drain(
            d.sswitch(), d.pattern(),
            absl::Milliseconds(d.timeout_ms() == 0 ? 10000 : d.timeout_ms())));
      });
      return;
    case proto::ControllerRequest::kGetStats: {
      // As RuleList: the latest interval's rules of every host.
      proto::ControllerReply reply;
      StatsSnapshot snap = Stats();
      for (const HostStats& h : snap.hosts) {
        for (const RuleStats& rs : h.rules) {
          proto::AdminRule* a = reply.mutable_rules()->add_rules();
          a->set_sswitch(h.sswitch);
          a->set_host_id(rs.host_id);
          a->mutable_rule()->set_cid(rs.cid);
          a->mutable_rule()->set_text(rs.text);
          a->mutable_rule()->set_owner(rs.owner);
          a->set_reads(rs.reads);
          a->set_writes(rs.writes);
          a->set_others(rs.others);
          a->set_read_bytes(rs.read_bytes);
          a->set_write_bytes(rs.write_bytes);
          a->set_in_flight(rs.in_flight);
          a->set_errors(rs.errors);
          a->set_p50_us(rs.p50_us);
          a->set_p99_us(rs.p99_us);
        }
      }
      ReplyWith(*call, std::move(reply));
      return;
    }
    case proto::ControllerRequest::kWaitEvents:
      HandleWaitEvents(std::move(call));
      return;
    case proto::ControllerRequest::kPutState: {
      const proto::PutAppState& p = req.put_state();
      call->ReplyStatus(store->PutAppState(p.app(), p.key(), p.value()));
      return;
    }
    case proto::ControllerRequest::kGetState: {
      auto v = store->GetAppState(req.get_state().app(), req.get_state().key());
      if (!v.ok()) {
        call->ReplyStatus(v.status());
        return;
      }
      proto::ControllerReply reply;
      reply.set_state(*v);
      ReplyWith(*call, std::move(reply));
      return;
    }
    case proto::ControllerRequest::BODY_NOT_SET:
      break;
  }
  call->ReplyStatus(absl::InvalidArgumentError("empty controller request"));
}

// --- Controller ---

absl::StatusOr<std::unique_ptr<Controller>> Controller::Start(
    ControllerOptions options) {
  if (options.db_dir.empty()) {
    return absl::InvalidArgumentError("no database directory (--db DIR)");
  }
  if (options.secret.empty()) {
    return absl::InvalidArgumentError("no cluster secret (--secret-file FILE)");
  }
  auto impl = std::make_unique<Impl>(std::move(options));
  auto store = ControllerStore::Open(impl->options.db_dir);
  if (!store.ok()) return store.status();
  impl->store = *std::move(store);
  auto epoch = impl->store->NextEpoch();
  if (!epoch.ok()) return epoch.status();
  impl->epoch = *epoch;
  for (const std::string& name : impl->store->SSwitches()) {
    auto rules = impl->store->Rules(name);
    if (!rules.ok()) return rules.status();
    MutexLock l(&impl->mu);  // nothing else runs yet
    for (auto& m : *rules) impl->rule_cache[m.cid()] = m;
  }
  impl->threads =
      std::make_unique<IoThreads>(std::max(1, impl->options.io_threads));
  impl->background = std::make_unique<Background>();
  impl->admin = std::make_unique<LocalApi>(impl.get(), "api", nullptr);
  for (const std::string& spec : impl->options.apps) {
    std::string name;
    auto app = ControlAppRegistry::Global().Create(spec, &name);
    if (!app.ok()) return app.status();
    impl->apps.push_back(
        std::make_unique<AppRunner>(impl.get(), name, *std::move(app)));
  }
  impl->sweeper = std::thread([p = impl.get()] { p->Sweep(); });
  RpcServer::Options ro;
  ro.name = "controller";
  ro.secret = impl->options.secret;
  Impl* raw = impl.get();
  auto rpc = RpcServer::Start(impl->threads.get(), impl->options.listen, ro,
                              [raw](std::unique_ptr<RpcServer::Call> call) {
                                raw->Handle(std::move(call));
                              });
  if (!rpc.ok()) {
    {
      MutexLock l(&impl->mu);
      impl->stopping = true;
    }
    impl->sweep_cv.SignalAll();
    impl->sweeper.join();
    return rpc.status();
  }
  impl->rpc = *std::move(rpc);
  LogInfo("controller (epoch ", impl->epoch, ") listening on ",
          impl->rpc->address());
  return std::unique_ptr<Controller>(new Controller(std::move(impl)));
}

Controller::Controller(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Controller::~Controller() {
  impl_->apps.clear();  // their calls into the controller end first
  impl_->rpc.reset();
  {
    MutexLock l(&impl_->mu);
    impl_->stopping = true;
    for (auto& [name, s] : impl_->sessions) s.poll.reset();
    impl_->event_waiters.clear();
    for (auto& [file, t] : impl_->turns) t.waiting.clear();
  }
  impl_->sweep_cv.SignalAll();
  impl_->sweeper.join();
  impl_->background.reset();
  // Channels close (waiting up to seconds for their calls) without the lock.
  std::map<std::string, std::unique_ptr<RpcChannel>> channels;
  {
    MutexLock l(&impl_->channels_mu);
    channels.swap(impl_->channels);
  }
  channels.clear();
}

uint16_t Controller::port() const { return impl_->rpc->port(); }
std::string Controller::address() const { return impl_->rpc->address(); }
ControllerApi& Controller::api() { return *impl_->admin; }
uint64_t Controller::bytes_in() const {
  return impl_->rpc->counters().bytes_in;
}
uint64_t Controller::bytes_out() const {
  return impl_->rpc->counters().bytes_out;
}

}  // namespace sroute
