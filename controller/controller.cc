// SPDX-License-Identifier: Apache-2.0
// The controller: its start and stop, the apps' API (LocalApi) and the apps
// it runs. The rest of Controller::Impl is listed in controller_impl.h.
#include "controller/controller.h"

#include <algorithm>
#include <deque>
#include <future>
#include <map>
#include <optional>
#include <set>
#include <thread>

#include "controller/app_runner.h"
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

using controller_internal::kControllerApp;
using controller_internal::kKeptApps;
using controller_internal::ReplyWith;
using controller_internal::ResultStatus;

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
