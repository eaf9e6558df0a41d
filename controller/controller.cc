// SPDX-License-Identifier: Apache-2.0
// Over 1 200 lines: registration and housekeeping still share the
// sessions' state here; moving them to files of their own is issue 52.
// The controller: start and stop, the apps' API, commands to hosts, the
// hosts' registration and traffic, views and housekeeping. The RPC dispatch
// and the administrator's requests are in requests.cc, the update protocol
// in update.cc (controller_impl.h).
#include "controller/controller.h"

#include <algorithm>
#include <deque>
#include <future>
#include <map>
#include <optional>
#include <set>
#include <thread>

#include "controller/controller_impl.h"
#include "controller/store.h"
#include "rpc/channel.h"
#include "rpc/io_threads.h"
#include "rpc/leader.h"
#include "rpc/server.h"
#include "rules/parser.h"
#include "sswitch/stats.h"
#include "util/background.h"
#include "util/log.h"
#include "util/mutex.h"
#include "util/strings.h"

namespace sroute {

using controller_internal::ReplyWith;
using controller_internal::ResultStatus;

namespace {

// A WaitCommands or WaitEvents call is answered (empty) after this long,
// well inside the caller's own deadline.
constexpr absl::Duration kHoldCall = absl::Seconds(15);
constexpr size_t kMaxEvents = 10000;
// A host that got its turn for a controller-bound IO and never said it was
// done loses the turn after this long.
constexpr absl::Duration kTurnLease = absl::Seconds(30);
constexpr uint32_t kRecordPage = 20000;

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

// Where the controller keeps the apps started with sroutectl (a line each,
// "NAME" or "NAME:ARGS"), among the apps' states.
constexpr char kControllerApp[] = "controller";
constexpr char kKeptApps[] = "kept-apps";

}  // namespace

// One control application on a thread of its own: Start, then stats,
// headers and timers, one at a time.
class AppRunner {
 public:
  AppRunner(Controller::Impl* impl, std::string name, std::string args,
            bool from_command_line, std::unique_ptr<ControlApp> app)
      : name_(std::move(name)),
        args_(std::move(args)),
        from_command_line_(from_command_line),
        app_(std::move(app)),
        api_(impl, name_, this),
        thread_([this] { Loop(); }) {
    Post([this] {
      absl::Status s = app_->Start(api_);
      if (!s.ok()) {
        LogError("app ", name_, " failed to start: ", s.message());
        {
          MutexLock l(&mu_);
          failure_ = std::string(s.message());
        }
        failed_ = true;
      } else {
        LogInfo("app ", name_, " started");
      }
    });
  }
  ~AppRunner() { Stop(); }

  const std::string& name() const { return name_; }
  const std::string& args() const { return args_; }
  bool from_command_line() const { return from_command_line_; }
  // "running", or "failed: WHY".
  std::string state() ABSL_LOCKS_EXCLUDED(mu_) {
    if (!failed_) return "running";
    MutexLock l(&mu_);
    return "failed: " + failure_;
  }

  // Ends the app's thread (its calls into the controller end with it); the
  // runner stays usable: events delivered afterwards are dropped and turns
  // pass straight on. The controller stops every app before it stops the
  // threads that deliver to them, and destroys them after those are gone.
  // REQUIRES: not called from the app's own thread.
  void Stop() ABSL_LOCKS_EXCLUDED(mu_) {
    {
      MutexLock l(&mu_);
      stop_ = true;
    }
    stopped_.store(true);
    cv_.SignalAll();
    if (thread_.joinable()) thread_.join();
  }

  void Post(std::function<void()> fn) ABSL_LOCKS_EXCLUDED(mu_) {
    {
      MutexLock l(&mu_);
      if (stop_) return;
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
  // On the caller's thread (ControlApp::OnIoTurn).
  void OnIoTurn(const HeaderEvent& e, std::function<void()> go) {
    if (failed_ || stopped_.load()) {
      go();
    } else {
      app_->OnIoTurn(e, std::move(go));
    }
  }
  // An administrator's request (ControlApp::OnCall), answered on the app's
  // thread after what is queued there; Unavailable when it does not answer
  // within `timeout`.
  absl::StatusOr<proto::AppAnswer> Call(const proto::AppCall& call,
                                        absl::Duration timeout) {
    if (failed_) {
      return absl::FailedPreconditionError(
          StrCat("app ", name_, " takes no requests: ", state()));
    }
    struct Pending {
      Mutex mu;
      CondVar done;
      std::optional<absl::StatusOr<proto::AppAnswer>> answer
          ABSL_GUARDED_BY(mu);
    };
    auto pending = std::make_shared<Pending>();
    Post([this, pending, call] {
      absl::StatusOr<proto::AppAnswer> answer = app_->OnCall(call);
      MutexLock l(&pending->mu);
      pending->answer = std::move(answer);
      pending->done.SignalAll();
    });
    MutexLock l(&pending->mu);
    if (!pending->done.WaitFor(&pending->mu, absl::ToChronoNanoseconds(timeout),
                               [&]()
                                   ABSL_EXCLUSIVE_LOCKS_REQUIRED(pending->mu) {
                                     return pending->answer.has_value();
                                   })) {
      return absl::UnavailableError(
          StrCat("app ", name_, " did not answer within ",
                 absl::FormatDuration(timeout), " (busy, or stopping)"));
    }
    return *std::move(pending->answer);
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
  const std::string args_;
  const bool from_command_line_;
  std::unique_ptr<ControlApp> app_;
  LocalApi api_;
  // Guards tasks_, timers_, stop_, failure_. A leaf: tasks and timers run
  // without it.
  Mutex mu_;
  std::string failure_ ABSL_GUARDED_BY(mu_);
  CondVar cv_;
  std::vector<std::function<void()>> tasks_ ABSL_GUARDED_BY(mu_);
  std::vector<Timer> timers_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::atomic<bool> failed_{false};
  std::atomic<bool> stopped_{false};
  std::thread thread_;  // last: starts after everything above
};

Controller::Impl::Impl(ControllerOptions o) : options(std::move(o)) {}
Controller::Impl::~Impl() = default;

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

absl::StatusOr<proto::CopyProgress> LocalApi::Copy(const std::string& sswitch,
                                                   const proto::Copy& request) {
  proto::Command c;
  *c.mutable_control()->mutable_copy() = request;
  auto r = impl_->SendCommand(
      sswitch, std::move(c),
      absl::Milliseconds(request.budget_ms()) + impl_->options.command_timeout);
  if (!r.ok()) return r.status();
  if (absl::Status s = ResultStatus(*r); !s.ok()) return s;
  const proto::ControlResponse& resp = r->control();
  if (resp.code() != 0) {
    return absl::Status(static_cast<absl::StatusCode>(resp.code()),
                        resp.message());
  }
  impl_->ForgetAfterReclaim(sswitch, request, resp.copy());
  return resp.copy();
}

absl::StatusOr<std::vector<proto::DeviceProfile>> LocalApi::SetProfiles(
    const std::string& sswitch, const proto::SetProfiles& request) {
  proto::Command c;
  *c.mutable_control()->mutable_set_profiles() = request;
  auto r =
      impl_->SendCommand(sswitch, std::move(c), impl_->options.command_timeout);
  if (!r.ok()) return r.status();
  if (absl::Status s = ResultStatus(*r); !s.ok()) return s;
  const proto::ControlResponse& resp = r->control();
  if (resp.code() != 0) {
    return absl::Status(static_cast<absl::StatusCode>(resp.code()),
                        resp.message());
  }
  return std::vector<proto::DeviceProfile>(resp.profiles().begin(),
                                           resp.profiles().end());
}

absl::StatusOr<std::vector<proto::StageStats>> LocalApi::Stages(
    const std::string& sswitch, const proto::Stages& request) {
  proto::Command c;
  *c.mutable_stages() = request;
  // The host waits for IOs inside the stage up to the request's timeout.
  const absl::Duration wait = absl::Milliseconds(
      request.timeout_ms() == 0 ? 10000 : request.timeout_ms());
  auto r = impl_->SendCommand(sswitch, std::move(c),
                              wait + impl_->options.command_timeout);
  if (!r.ok()) return r.status();
  if (absl::Status s = ResultStatus(*r); !s.ok()) return s;
  // The host's stages now: the rule checker goes by them at once, not from
  // the host's next report.
  {
    MutexLock l(&impl_->mu);
    auto it = impl_->sessions.find(sswitch);
    if (it != impl_->sessions.end()) {
      it->second.stages.assign(r->stages().begin(), r->stages().end());
      it->second.reported = true;
    }
  }
  // What the host has now is what it gets back when it registers again
  // (a restarted host would refuse the rules naming these stages).
  absl::Status kept;
  if (request.action() == proto::Stages::REMOVE) {
    kept = impl_->store->DeleteStage(sswitch, request.stage().name());
  } else if (request.action() != proto::Stages::LIST) {
    std::string name = request.stage().name();
    if (request.action() == proto::Stages::ADD && !request.spec().empty()) {
      name = request.spec().substr(0, request.spec().find('='));
    }
    for (const proto::StageStats& st : r->stages()) {
      if (st.config().name() == name) {
        kept = impl_->store->PutStage(sswitch, st.config());
      }
    }
  }
  if (!kept.ok()) {
    return absl::Status(
        kept.code(),
        StrCat("the stage changed on ", sswitch,
               " but the controller could not keep it: ", kept.message()));
  }
  return std::vector<proto::StageStats>(r->stages().begin(), r->stages().end());
}

void LocalApi::AddTimer(absl::Duration period, std::function<void()> fn) {
  if (runner_ != nullptr) {
    runner_->AddTimer(period, std::move(fn));
  } else {
    LogWarning("AddTimer without an app: ignored");
  }
}

void LocalApi::Post(std::function<void()> fn) {
  if (runner_ != nullptr) {
    runner_->Post(std::move(fn));
  } else {
    LogWarning("Post without an app: ignored");
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

std::shared_ptr<const Controller::Impl::AppList> Controller::Impl::Apps() {
  MutexLock l(&apps_mu);
  return apps;
}

absl::Status Controller::Impl::StartApp(const std::string& spec,
                                        bool from_command_line, bool keep) {
  const size_t colon = spec.find(':');
  const std::string name = spec.substr(0, colon);
  const std::string args =
      colon == std::string::npos ? "" : spec.substr(colon + 1);
  const std::shared_ptr<const AppList> running = Apps();
  for (const auto& a : *running) {
    if (a->name() == name) {
      return absl::AlreadyExistsError(StrCat("app ", name, " runs already"));
    }
  }
  std::string created;
  auto app = ControlAppRegistry::Global().Create(spec, &created);
  if (!app.ok()) return app.status();
  auto runner = std::make_shared<AppRunner>(this, created, args,
                                            from_command_line, *std::move(app));
  {
    MutexLock l(&apps_mu);
    auto next = std::make_shared<AppList>(*apps);
    next->push_back(std::move(runner));
    apps = std::move(next);
  }
  if (keep) {
    auto kept = store->GetAppState(kControllerApp, kKeptApps);
    std::string list = kept.ok() ? *kept : "";
    StrAppend(&list, spec, "\n");
    if (absl::Status s = store->PutAppState(kControllerApp, kKeptApps, list);
        !s.ok()) {
      return absl::Status(s.code(), StrCat("app ", name,
                                           " runs, but will not "
                                           "after a restart: ",
                                           s.message()));
    }
  }
  return absl::OkStatus();
}

absl::Status Controller::Impl::StopApp(const std::string& name) {
  std::shared_ptr<AppRunner> gone;
  {
    MutexLock l(&apps_mu);
    auto next = std::make_shared<AppList>();
    for (const auto& a : *apps) {
      if (a->name() == name) {
        gone = a;
      } else {
        next->push_back(a);
      }
    }
    if (gone == nullptr) {
      return absl::NotFoundError(StrCat("no app ", name, " runs"));
    }
    apps = std::move(next);
  }
  gone->Stop();
  LogInfo("app ", name, " stopped");
  auto kept = store->GetAppState(kControllerApp, kKeptApps);
  if (kept.ok()) {
    std::string list;
    for (std::string_view spec : StrSplit(*kept, '\n')) {
      if (!spec.empty() && spec.substr(0, spec.find(':')) != name) {
        StrAppend(&list, spec, "\n");
      }
    }
    return store->PutAppState(kControllerApp, kKeptApps, list);
  }
  return absl::OkStatus();
}

void Controller::Impl::HandleAppCall(Call& call) {
  const proto::AppCall& req = call.request().controller().app_call();
  std::shared_ptr<AppRunner> runner;
  const std::shared_ptr<const AppList> running = Apps();
  for (const auto& a : *running) {
    if (a->name() == req.app()) runner = a;
  }
  if (runner == nullptr) {
    call.ReplyStatus(
        absl::NotFoundError(StrCat("no app ", req.app(),
                                   " runs in this controller: start it with "
                                   "`sroutectl apps start ",
                                   req.app(), "`")));
    return;
  }
  auto answer = runner->Call(req, absl::Seconds(30));
  if (!answer.ok()) {
    call.ReplyStatus(answer.status());
    return;
  }
  proto::ControllerReply reply;
  *reply.mutable_app_answer() = *std::move(answer);
  ReplyWith(call, std::move(reply));
}

void Controller::Impl::HandleApps(Call& call) {
  const proto::Apps& req = call.request().controller().apps();
  absl::Status s;
  switch (req.action()) {
    case proto::Apps::START:
      s = StartApp(
          req.args().empty() ? req.name() : StrCat(req.name(), ":", req.args()),
          false, true);
      break;
    case proto::Apps::STOP:
      s = StopApp(req.name());
      break;
    default:
      break;
  }
  if (!s.ok()) {
    call.ReplyStatus(s);
    return;
  }
  proto::ControllerReply reply;
  proto::AppList* list = reply.mutable_apps();
  // The rules each app owns, from the store.
  std::map<std::string, std::vector<uint64_t>> owned;
  auto sswitches = store->SSwitches();
  if (!sswitches.ok()) {
    call.ReplyStatus(sswitches.status());
    return;
  }
  for (const std::string& sswitch : *sswitches) {
    auto rules = store->Rules(sswitch);
    if (!rules.ok()) continue;
    for (const proto::ManagedRule& r : *rules) {
      owned[r.owner()].push_back(r.cid());
    }
  }
  const std::shared_ptr<const AppList> running = Apps();
  for (const auto& a : *running) {
    proto::AppInfo* info = list->add_apps();
    info->set_name(a->name());
    info->set_args(a->args());
    info->set_state(a->state());
    info->set_from_command_line(a->from_command_line());
    for (uint64_t cid : owned[a->name()]) info->add_rule_cids(cid);
    if (auto d = store->GetAppState(a->name(), "decisions"); d.ok()) {
      for (std::string_view line : StrSplit(*d, '\n')) {
        if (!line.empty()) info->add_decisions(std::string(line));
      }
    }
  }
  for (const std::string& n : ControlAppRegistry::Global().Names()) {
    list->add_available(n);
  }
  ReplyWith(call, std::move(reply));
}

void Controller::Impl::ForgetAfterReclaim(const std::string& sswitch,
                                          const proto::Copy& req,
                                          const proto::CopyProgress& progress) {
  if (req.mode() != proto::Copy::RECLAIM || req.forget_anchor().empty() ||
      !progress.done()) {
    return;
  }
  proto::HostInfo host;
  {
    MutexLock l(&mu);
    auto it = sessions.find(sswitch);
    if (it == sessions.end()) return;
    host = it->second.host;
  }
  std::set<std::string> asked;
  for (const proto::EndpointInfo& e : host.endpoints()) {
    if (e.kind() != "server" || !asked.insert(e.address()).second) continue;
    RpcChannel* ch = ServerChannel(e.address());
    if (ch == nullptr) continue;
    proto::RpcRequest rq;
    rq.mutable_forget_records()->set_sswitch(sswitch);
    rq.mutable_forget_records()->set_anchor(req.forget_anchor());
    auto reply = ch->CallSync(rq, options.command_timeout);
    if (!reply.ok()) {
      LogWarning("dropping the records of ", sswitch, " under ",
                 req.forget_anchor(), " on ", e.name(), ": ",
                 reply.status().message());
    }
  }
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
  // Names are unique: another live process under this one is refused (not
  // let in to take the session over, back and forth, thousands of times a
  // second). A host that restarted gets in once its old session is found
  // silent (host_timeout); the same process registering again always does.
  std::optional<absl::Duration> taken_seen;
  bool log_refusal = false;
  {
    MutexLock l(&mu);
    auto it = sessions.find(name);
    if (it != sessions.end() && it->second.connected &&
        it->second.host.instance() != 0 && host.instance() != 0 &&
        it->second.host.instance() != host.instance()) {
      const absl::Time now = absl::Now();
      taken_seen = now - it->second.last_seen;
      absl::Time& logged = refusals_logged[name];
      log_refusal = now - logged > absl::Minutes(1);
      if (log_refusal) logged = now;
    }
  }
  if (taken_seen) {
    if (log_refusal) {
      LogWarning("registration of ", name,
                 " refused: another live host has that name");
    }
    call.ReplyStatus(absl::AlreadyExistsError(StrCat(
        "sSwitch name ", name, " is in use by another host (seen ",
        absl::FormatDuration(absl::Trunc(*taken_seen, absl::Milliseconds(1))),
        " ago): every host needs its own --name (a restarted host gets in "
        "once the old one has been silent for ",
        absl::FormatDuration(options.host_timeout), ")")));
    return;
  }
  // A new sSwitch brings its own rules, which the controller adopts; a
  // known one gets its persisted rules back.
  std::vector<proto::ManagedRule> desired;
  auto known = store->Known(name);
  if (!known.ok()) {
    call.ReplyStatus(known.status());
    return;
  }
  if (!*known) {
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
    s.reported = false;
    rr->set_session(s.id);
    for (const auto& m : desired) rule_cache[m.cid()] = m;
  }
  if (old_poll) {
    old_poll->ReplyStatus(absl::FailedPreconditionError("session replaced"));
  }
  for (auto& m : desired) *rr->add_rules() = std::move(m);
  auto stages = store->Stages(name);
  if (!stages.ok()) {
    call.ReplyStatus(stages.status());
    return;
  }
  for (auto& st : *stages) *rr->add_stages() = std::move(st);
  for (auto& r : records) *rr->add_records() = std::move(r);
  rr->set_stats_interval_ms(
      static_cast<uint32_t>(absl::ToInt64Milliseconds(options.stats_interval)));
  rr->set_controller_epoch(epoch);
  LogInfo("host ", name, " (", host.role(), ") registered: ", rr->rules_size(),
          " rules, ", rr->stages_size(), " stages, ", rr->records_size(),
          " delegate records to restore");
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

// Host reports need no answer but an OK, once taken in.
void Controller::Impl::HandleCommandResult(std::unique_ptr<Call> call) {
  RecordCommandResult(call->request().controller().command_result());
  call->ReplyStatus(absl::OkStatus());
}

void Controller::Impl::HandleStats(std::unique_ptr<Call> call) {
  RecordStats(call->request().controller().stats());
  call->ReplyStatus(absl::OkStatus());
}

void Controller::Impl::HandleHeaderEvent(std::unique_ptr<Call> call) {
  DeliverHeaderEvent(call->request().controller().header_event());
  call->ReplyStatus(absl::OkStatus());
}

void Controller::Impl::HandleIoTurnDone(std::unique_ptr<Call> call) {
  EndIoTurn(call->request().controller().io_turn_done());
  call->ReplyStatus(absl::OkStatus());
}

void Controller::Impl::RecordCommandResult(const proto::CommandResult& r) {
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

void Controller::Impl::RecordStats(const proto::StatsReport& r) {
  stats_reports.fetch_add(1, std::memory_order_relaxed);
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
  s->stages.assign(r.stages().begin(), r.stages().end());
  s->reported = true;
  s->gauges.clear();
  s->gauges.insert(r.gauges().begin(), r.gauges().end());
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

void Controller::Impl::DeliverHeaderEvent(const proto::HeaderEvent& e) {
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
    // A named snapshot: a temporary in the range would die before the loop.
    const std::shared_ptr<const AppList> apps = Apps();
    for (auto& app : *apps) app->OnHeader(he);
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
  Grant(std::move(grant), turn);
}

// The apps see the turn first (ControlApp::OnIoTurn); the last to let it
// go answers the host.
void Controller::Impl::Grant(std::unique_ptr<RpcServer::Call> call,
                             uint64_t turn) {
  struct Pending {
    std::atomic<size_t> left;
    std::unique_ptr<RpcServer::Call> call;
    uint64_t turn;
  };
  const std::shared_ptr<const AppList> apps = Apps();
  if (apps->empty()) {
    proto::ControllerReply reply;
    reply.set_turn(turn);
    ReplyWith(*call, std::move(reply));
    return;
  }
  const proto::IoTurn& t = call->request().controller().io_turn();
  HeaderEvent he;
  he.header = FromMsg(t.header(), t.file());
  {
    MutexLock l(&mu);
    for (auto& [name, ses] : sessions) {
      if (ses.id == t.session()) he.sswitch = name;
    }
  }
  auto p = std::make_shared<Pending>();
  p->left = apps->size();
  p->call = std::move(call);
  p->turn = turn;
  for (auto& app : *apps) {
    app->OnIoTurn(he, [p] {
      if (p->left.fetch_sub(1) != 1) return;
      proto::ControllerReply reply;
      reply.set_turn(p->turn);
      ReplyWith(*p->call, std::move(reply));
    });
  }
}

void Controller::Impl::EndIoTurn(const proto::IoTurnDone& d) {
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
  Grant(std::move(next), turn);
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
  // Read from the store before taking mu, as kListHosts does. A store that
  // cannot be read leaves the hosts connected now.
  auto stored = store->Hosts();
  if (!stored.ok()) {
    LogWarning("topology: the store cannot be read (",
               stored.status().message(), "); connected hosts only");
  }
  MutexLock l(&mu);
  std::vector<proto::HostInfo> hosts;
  if (stored.ok()) {
    hosts = *std::move(stored);
  } else {
    for (const auto& [name, s] : sessions) hosts.push_back(s.host);
  }
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
    h.stages = s.stages;
    h.gauges = s.gauges;
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
    for (auto& [c, turn] : grants) Grant(std::move(c), turn);
    if (stats_due) {
      StatsSnapshot snap = Stats();
      const std::shared_ptr<const AppList> apps = Apps();
      for (auto& app : *apps) app->OnStats(snap);
      proto::Event e;
      e.set_stats(true);
      AddEvent(std::move(e));
    }
    l.Lock();
  }
}

// --- Controller ---

namespace {

// "etcd://H:P,H:P/PREFIX" into its members and prefix ("/sroute/" by
// default; always ending in '/').
absl::Status ParseEtcdStore(const std::string& spec,
                            std::vector<std::string>* endpoints,
                            std::string* prefix) {
  std::string_view rest = std::string_view(spec).substr(7);
  const size_t slash = rest.find('/');
  *prefix = slash == std::string_view::npos ? "/sroute/"
                                            : std::string(rest.substr(slash));
  if (prefix->back() != '/') prefix->push_back('/');
  rest = rest.substr(0, slash);
  for (std::string_view e : StrSplit(rest, ',')) {
    if (!e.empty()) endpoints->emplace_back(e);
  }
  if (endpoints->empty()) {
    return absl::InvalidArgumentError(
        StrCat("store '", spec, "': no etcd member (etcd://HOST:PORT,...)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Controller::Impl::OpenStore() {
  std::string spec = options.store;
  if (spec.empty() && !options.db_dir.empty())
    spec = "rocksdb:" + options.db_dir;
  if (spec.empty()) {
    return absl::InvalidArgumentError(
        "no store (--store rocksdb:DIR or etcd://HOST:PORT,...; --db DIR)");
  }
  if (spec.rfind("rocksdb:", 0) == 0) {
    auto s = ControllerStore::Open(spec.substr(8));
    if (!s.ok()) return s.status();
    store = *std::move(s);
    return absl::OkStatus();
  }
  if (spec.rfind("etcd://", 0) != 0) {
    return absl::InvalidArgumentError(
        StrCat("store '", spec, "': not rocksdb:DIR nor etcd://HOST:PORT,..."));
  }
  std::vector<std::string> endpoints;
  std::string prefix;
  if (absl::Status s = ParseEtcdStore(spec, &endpoints, &prefix); !s.ok()) {
    return s;
  }
  EtcdClient::Options eo;
  eo.endpoints = endpoints;
  auto client = EtcdClient::Create(eo);
  if (!client.ok()) return client.status();
  etcd = *std::move(client);
  etcd_prefix = prefix;
  leader_key = prefix + "leader";
  // Members starting beside the controller (a boot) answer a little later:
  // no member answering is waited out, anything else is final.
  const absl::Time give_up = absl::Now() + options.store_wait;
  bool said = false;
  while (true) {
    // Under PREFIX"state/", beside the election's keys.
    auto kv = std::make_unique<EtcdKv>(etcd.get(), prefix + "state/",
                                       options.etcd_max_txn_ops);
    EtcdKv* const raw = kv.get();
    // The leader's reads stay in the process (CachedKv): it is the only
    // writer. Loaded again when this controller takes over (Reload).
    auto s = ControllerStore::Open(std::make_unique<CachedKv>(std::move(kv)));
    if (s.ok()) {
      etcd_kv = raw;
      store = *std::move(s);
      if (said) LogInfo("store ", spec, " answers");
      return absl::OkStatus();
    }
    if (!absl::IsUnavailable(s.status()) || absl::Now() >= give_up) {
      return absl::Status(
          s.status().code(),
          StrCat("store ", spec, ": ", s.status().message(),
                 absl::IsUnavailable(s.status())
                     ? StrCat(" (waited ",
                              absl::FormatDuration(options.store_wait),
                              ", --store-wait-s)")
                     : ""));
    }
    if (!said) {
      LogWarning("store ", spec, " does not answer yet (", s.status().message(),
                 "); waiting up to ", absl::FormatDuration(options.store_wait));
      said = true;
    }
    absl::SleepFor(absl::Milliseconds(200));
  }
}

std::string Controller::Impl::LeaderAddress() {
  MutexLock l(&leadership_mu);
  return leadership != nullptr ? leadership->leader_address() : "";
}

absl::Status Controller::Impl::FollowerError() {
  std::string why;
  {
    MutexLock l(&mu);
    why = deposed;
  }
  return NotLeaderError(SelfAddress(), LeaderAddress(), why);
}

std::string Controller::Impl::SelfAddress() {
  if (!options.advertise.empty()) return options.advertise;
  MutexLock l(&leadership_mu);
  return listening;
}

absl::Status Controller::Impl::BecomeLeader() {
  // What the previous leader wrote is the truth now.
  if (absl::Status s = store->Reload(); !s.ok()) return s;
  auto next_epoch = store->NextEpoch();
  if (!next_epoch.ok()) return next_epoch.status();
  epoch = *next_epoch;
  auto names = store->SSwitches();
  if (!names.ok()) return names.status();
  std::map<uint64_t, proto::ManagedRule> cache;
  for (const std::string& name : *names) {
    auto rules = store->Rules(name);
    if (!rules.ok()) return rules.status();
    for (auto& m : *rules) cache[m.cid()] = m;
  }
  {
    MutexLock l(&mu);
    rule_cache = std::move(cache);
  }
  RestoreLeases();
  for (const std::string& spec : options.apps) {
    if (absl::Status s = StartApp(spec, true, false);
        !s.ok() && !absl::IsAlreadyExists(s)) {
      return s;
    }
  }
  // Apps started by an administrator (sroutectl apps start) run again.
  if (auto kept = store->GetAppState(kControllerApp, kKeptApps); kept.ok()) {
    for (std::string_view spec : StrSplit(*kept, '\n')) {
      if (spec.empty()) continue;
      if (absl::Status s = StartApp(std::string(spec), false, false);
          !s.ok() && !absl::IsAlreadyExists(s)) {
        LogWarning("app ", spec,
                   " (started with sroutectl) does not start: ", s.message());
      }
    }
  }
  sweeper = std::thread([this] { Sweep(); });
  leading.store(true);
  return absl::OkStatus();
}

void Controller::Impl::LeadershipLost(const std::string& why) {
  leading.store(false);
  if (etcd_kv != nullptr) etcd_kv->SetFence("", 0);  // nothing more written
  LogWarning("the controller stops leading: ", why);
  {
    MutexLock l(&mu);
    deposed = why;
  }
  if (options.on_leadership_lost && etcd != nullptr &&
      !deposed_watch.joinable()) {
    deposed_watch = std::thread([this, why, key = leader_key] {
      while (true) {
        {
          MutexLock l(&mu);
          if (stopping) return;
        }
        // A read etcd serves only with a quorum (linearizable).
        etcd::RangeRequest probe;
        probe.set_key(key);
        if (etcd->Range(probe).ok()) break;
        MutexLock l(&mu);
        sweep_cv.WaitFor(
            &mu, std::chrono::milliseconds(500),
            [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return stopping; });
      }
      options.on_leadership_lost(why);
    });
  }
  // The apps stop; hosts polling here are told the leader.
  const auto running = Apps();
  for (auto& app : *running) app->Stop();
  std::vector<std::unique_ptr<Call>> polls;
  {
    MutexLock l(&mu);
    for (auto& [name, s] : sessions) {
      if (s.poll) polls.push_back(std::move(s.poll));
      s.connected = false;
    }
  }
  for (auto& c : polls) c->ReplyStatus(FollowerError());
}

absl::StatusOr<std::unique_ptr<Controller>> Controller::Start(
    ControllerOptions options) {
  if (options.secret.empty()) {
    return absl::InvalidArgumentError("no cluster secret (--secret-file FILE)");
  }
  auto impl = std::make_unique<Impl>(std::move(options));
  if (absl::Status s = impl->OpenStore(); !s.ok()) return s;
  impl->threads =
      std::make_unique<IoThreads>(std::max(1, impl->options.io_threads));
  impl->background = std::make_unique<Background>();
  impl->admin = std::make_unique<LocalApi>(impl.get(), "api", nullptr);
  impl->leases =
      std::make_unique<LeaseKeeper>([p = impl.get()](const std::string& owner) {
        auto v = p->EndLease(owner);
        if (v.ok()) {
          LogInfo("the lease of ", owner, " ran out: its rules are removed",
                  *v != 0 ? StrCat(" (version ", *v, ")") : std::string());
        } else if (p->leading.load()) {
          // Tried again (a host may be back by then).
          LogWarning("the lease of ", owner,
                     " ran out; removing its rules failed, trying again in "
                     "5 s: ",
                     v.status().message());
          p->HoldLease(owner, absl::Seconds(5));
        }
      });
  // On RocksDB the controller leads before it listens (as it always did:
  // hosts find its apps running); on etcd it listens first, to point hosts
  // and clients to the leader while it follows.
  if (impl->etcd == nullptr) {
    if (absl::Status s = impl->BecomeLeader(); !s.ok()) {
      std::unique_ptr<Controller> stop(new Controller(std::move(impl)));
      return s;
    }
  }
  RpcServer::Options ro;
  ro.name = "controller";
  ro.secret = impl->options.secret;
  Impl* raw = impl.get();
  auto rpc = RpcServer::Start(impl->threads.get(), impl->options.listen, ro,
                              [raw](std::unique_ptr<RpcServer::Call> call) {
                                raw->Handle(std::move(call));
                              });
  if (!rpc.ok()) {
    std::unique_ptr<Controller> stop(new Controller(std::move(impl)));
    return rpc.status();
  }
  impl->rpc = *std::move(rpc);
  {
    // Requests may come before this (and read it): "" until then.
    MutexLock l(&impl->leadership_mu);
    impl->listening = impl->rpc->address();
  }
  if (!impl->options.metrics.empty()) {
    auto server = metrics::MetricsServer::Start(impl->options.metrics, [raw] {
      metrics::Exposition e;
      raw->AddMetrics(&e);
      return e.Render();
    });
    // ~Controller stops what started; the caller hears why.
    if (!server.ok()) {
      std::unique_ptr<Controller> stop(new Controller(std::move(impl)));
      return server.status();
    }
    impl->metrics_server = *std::move(server);
    LogInfo("metrics at http://", impl->metrics_server->address(), "/metrics");
  }
  if (impl->etcd != nullptr) {
    // The apps start only once elected: a bad --app is an error now, not a
    // failed take-over later.
    for (const std::string& spec : impl->options.apps) {
      std::string name;
      if (auto app = ControlAppRegistry::Global().Create(spec, &name);
          !app.ok()) {
        std::unique_ptr<Controller> stop(new Controller(std::move(impl)));
        return app.status();
      }
    }
    const std::string self = impl->SelfAddress();
    std::string host;
    uint16_t port = 0;
    if (absl::Status s =
            SplitHostPort(self, &host, &port, "advertised address");
        !s.ok() || host == "0.0.0.0" || host == "::" || port == 0) {
      std::unique_ptr<Controller> stop(new Controller(std::move(impl)));
      return absl::InvalidArgumentError(StrCat(
          "controller address '", self, "' cannot be reached by others: ",
          "listen on a specific address or give --advertise HOST:PORT"));
    }
    Leadership::Options lo;
    lo.prefix = impl->etcd_prefix;
    lo.id = impl->options.id.empty() ? self : impl->options.id;
    lo.address = self;
    lo.ttl = impl->options.leader_ttl;
    lo.elected = [raw](int64_t revision) {
      raw->etcd_kv->SetFence(raw->leader_key, revision);
      if (absl::Status s = raw->BecomeLeader(); !s.ok()) {
        LogError("taking over failed: ", s.message());
        return false;  // lost: LeadershipLost runs, the lease is given back
      }
      LogInfo("controller (epoch ", raw->epoch, ") leads at ",
              raw->SelfAddress());
      return true;
    };
    lo.lost = [raw](const std::string& why) { raw->LeadershipLost(why); };
    EtcdClient::Options eo;
    eo.endpoints = impl->etcd->endpoints();
    auto leadership = Leadership::Start(eo, std::move(lo));
    if (!leadership.ok()) {
      std::unique_ptr<Controller> stop(new Controller(std::move(impl)));
      return leadership.status();
    }
    MutexLock l(&impl->leadership_mu);
    impl->leadership = *std::move(leadership);
    LogInfo("controller listening on ", impl->rpc->address(), ", store ",
            impl->store->kv().Describe(), ": following until elected");
  } else {
    LogInfo("controller (epoch ", impl->epoch, ") listening on ",
            impl->rpc->address());
  }
  return std::unique_ptr<Controller>(new Controller(std::move(impl)));
}

Controller::Controller(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Controller::~Controller() {
  // No election from here on; a leader hands over at once (its lease is
  // revoked). Its store writes nothing more.
  std::unique_ptr<Leadership> leadership;
  {
    MutexLock l(&impl_->leadership_mu);
    leadership = std::move(impl_->leadership);
  }
  leadership.reset();  // without the lock: its callbacks may want it
  impl_->leading.store(false);
  if (impl_->etcd_kv != nullptr) impl_->etcd_kv->SetFence("", 0);
  impl_->metrics_server.reset();  // a scrape reads everything below
  // No lease runs out on a controller going away; the keeper itself stays
  // until the RPC threads that renew leases are gone.
  if (impl_->leases) impl_->leases->Stop();
  // The apps' calls into the controller end first; the apps themselves go
  // last: the RPC threads and the sweeper deliver to them until they stop.
  const auto apps = impl_->Apps();
  for (auto& app : *apps) app->Stop();
  impl_->rpc.reset();
  {
    MutexLock l(&impl_->mu);
    impl_->stopping = true;
    for (auto& [name, s] : impl_->sessions) s.poll.reset();
    impl_->event_waiters.clear();
    for (auto& [file, t] : impl_->turns) t.waiting.clear();
  }
  impl_->sweep_cv.SignalAll();
  if (impl_->sweeper.joinable()) impl_->sweeper.join();
  if (impl_->deposed_watch.joinable()) impl_->deposed_watch.join();
  if (impl_->background) impl_->background.reset();
  impl_->leases.reset();
  {
    MutexLock l(&impl_->apps_mu);
    impl_->apps = std::make_shared<Impl::AppList>();
  }
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
bool Controller::leading() const { return impl_->leading.load(); }
std::string Controller::leader_address() const {
  if (impl_->etcd == nullptr) return impl_->rpc->address();
  return impl_->LeaderAddress();
}
ControllerApi& Controller::api() { return *impl_->admin; }
uint64_t Controller::bytes_in() const {
  return impl_->rpc->counters().bytes_in;
}
uint64_t Controller::bytes_out() const {
  return impl_->rpc->counters().bytes_out;
}

}  // namespace sroute
