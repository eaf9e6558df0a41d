// SPDX-License-Identifier: Apache-2.0
#include "controller/client.h"

#include <algorithm>
#include <thread>

#include "rpc/leader.h"
#include "rpc/rule_codec.h"
#include "stages/steering/sweep_wait.h"
#include "util/mutex.h"
#include "util/strings.h"

namespace sroute {

absl::StatusOr<std::unique_ptr<ControllerClient>> ControllerClient::Connect(
    Options options) {
  auto threads = std::make_unique<IoThreads>(1);
  RpcChannel::Options co;
  co.secret = options.secret;
  co.name = options.name;
  co.role = "client";
  co.connections = 2;  // one may hold a WaitEvents
  auto controllers =
      ControllerChannels::Create(threads.get(), options.address, co);
  if (!controllers.ok()) return controllers.status();
  // The first controller that answers; calls then follow the leader.
  const size_t count = (*controllers)->size();
  std::string why;
  for (size_t i = 0; i < count; ++i) {
    const absl::Duration timeout =
        count == 1 ? absl::Seconds(10) : absl::Seconds(3);
    absl::Status s = (*controllers)->at(i).Connect(timeout);
    if (s.ok()) {
      (*controllers)->Select(i);
      return std::unique_ptr<ControllerClient>(new ControllerClient(
          std::move(options), std::move(threads), *std::move(controllers)));
    }
    const std::string address = (*controllers)->address(i);
    if (count == 1 || absl::IsPermissionDenied(s)) {
      return absl::Status(s.code(),
                          StrCat("controller ", address, ": ", s.message()));
    }
    StrAppend(&why, why.empty() ? "" : "; ", address, ": ", s.message());
  }
  return absl::UnavailableError(StrCat("no controller answered (", why, ")"));
}

ControllerClient::ControllerClient(
    Options options, std::unique_ptr<IoThreads> threads,
    std::unique_ptr<ControllerChannels> controllers)
    : options_(std::move(options)),
      threads_(std::move(threads)),
      controllers_(std::move(controllers)) {}

ControllerClient::~ControllerClient() { Stop(); }

absl::StatusOr<proto::ControllerReply> ControllerClient::Call(
    proto::ControllerRequest req, absl::Duration timeout) {
  proto::RpcRequest rpc;
  *rpc.mutable_controller() = std::move(req);
  const absl::Time deadline = absl::Now() + timeout;
  size_t unreachable = 0;
  while (true) {
    const size_t at = controllers_->current_index();
    auto reply = controllers_->at(at).CallSync(
        rpc, std::max(deadline - absl::Now(), absl::Milliseconds(1)));
    if (reply.ok()) return std::move(*reply->mutable_controller());
    const absl::Status& s = reply.status();
    const bool moved = controllers_->Follow(at, s).has_value();
    if (NotSent(s)) {
      // A controller that is down (a follower may still name it as the
      // leader): the call never left, so it goes to the next one, after a
      // pause once every controller was tried.
      if (!moved) return s;
      if (++unreachable % controllers_->size() != 0) continue;
    } else if (!IsNotLeader(s)) {
      // An absent controller: the next call goes to another. This one is
      // not sent again: it may have been carried out.
      return s;
    } else if (moved) {
      continue;  // a follower did nothing: on to the leader it names
    }
    // An election under way, or no controller up: ask again shortly.
    if (absl::Now() + absl::Milliseconds(200) >= deadline) return s;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

absl::StatusOr<proto::ControllerMembers> ControllerClient::ListControllers() {
  proto::ControllerRequest req;
  req.mutable_list_controllers();
  auto r = Call(std::move(req));
  if (!r.ok()) return r.status();
  return r->controllers();
}

std::vector<TopologyHost> ControllerClient::Topology() {
  std::vector<TopologyHost> out;
  auto hosts = ListHosts();
  if (!hosts.ok()) return out;
  for (const proto::HostStatus& h : hosts->hosts()) {
    out.push_back(TopologyHost{h.host(), h.connected(), h.version()});
  }
  return out;
}

absl::StatusOr<proto::HostList> ControllerClient::ListHosts() {
  proto::ControllerRequest req;
  req.mutable_list_hosts();
  auto r = Call(std::move(req));
  if (!r.ok()) return r.status();
  return r->hosts();
}

absl::StatusOr<proto::RuleList> ControllerClient::ListRules(
    const std::string& sswitch) {
  proto::ControllerRequest req;
  req.mutable_list_rules()->set_sswitch(sswitch);
  auto r = Call(std::move(req));
  if (!r.ok()) return r.status();
  return r->rules();
}

absl::StatusOr<proto::RuleList> ControllerClient::IntervalStats() {
  proto::ControllerRequest req;
  req.mutable_get_stats();
  auto r = Call(std::move(req));
  if (!r.ok()) return r.status();
  return r->rules();
}

absl::StatusOr<std::vector<proto::ManagedRule>> ControllerClient::Rules(
    const std::string& sswitch) {
  auto list = ListRules(sswitch);
  if (!list.ok()) return list.status();
  std::vector<proto::ManagedRule> out;
  for (const proto::AdminRule& a : list->rules()) out.push_back(a.rule());
  return out;
}

absl::StatusOr<UpdateOutcome> ControllerClient::Update(const UpdateSpec& spec) {
  proto::ControllerRequest req;
  proto::Update* u = req.mutable_update();
  for (const RuleChanges& c : spec.changes) {
    proto::Change* ch = u->add_changes();
    ch->set_sswitch(c.sswitch);
    // Parsed rules travel parsed; in a change that mixes them with text
    // (which the controller reads first) all go as text, to keep the order.
    const bool mixed =
        std::any_of(c.insert.begin(), c.insert.end(),
                    [](const RuleToInsert& r) { return !r.rule; }) &&
        std::any_of(c.insert.begin(), c.insert.end(),
                    [](const RuleToInsert& r) { return r.rule.has_value(); });
    for (const RuleToInsert& r : c.insert) {
      if (r.rule && !mixed) {
        RuleToMsg(*r.rule, ch->add_rules());
      } else {
        ch->add_insert(r.Text());
      }
    }
    for (uint64_t cid : c.remove) ch->add_remove(cid);
  }
  for (const std::string& f : spec.flows) u->add_flows(f);
  u->set_owner(spec.owner.empty() ? options_.name : spec.owner);
  u->set_timeout_ms(
      static_cast<uint32_t>(absl::ToInt64Milliseconds(spec.timeout)));
  u->set_lease_ms(static_cast<uint32_t>(absl::ToInt64Milliseconds(spec.lease)));
  u->set_force(spec.force);
  auto r = Call(std::move(req), spec.timeout * 3 + absl::Seconds(10));
  if (!r.ok()) return r.status();
  UpdateOutcome out;
  out.version = r->update().version();
  out.cids.assign(r->update().cids().begin(), r->update().cids().end());
  out.report = r->update().report();
  return out;
}

absl::StatusOr<proto::CheckResult> ControllerClient::CheckRules(
    const std::string& sswitch, const std::vector<std::string>& add,
    bool deep) {
  proto::ControllerRequest req;
  proto::CheckAt* c = req.mutable_check();
  c->set_sswitch(sswitch);
  for (const std::string& r : add) c->mutable_rules()->add_add(r);
  c->mutable_rules()->set_deep(deep);
  auto r = Call(std::move(req), absl::Seconds(60));
  if (!r.ok()) return r.status();
  return r->check();
}

absl::StatusOr<uint64_t> ControllerClient::RenewLease(const std::string& owner,
                                                      absl::Duration ttl) {
  proto::ControllerRequest req;
  req.mutable_renew_lease()->set_owner(owner);
  req.mutable_renew_lease()->set_ttl_ms(
      static_cast<uint32_t>(absl::ToInt64Milliseconds(ttl)));
  auto r = Call(std::move(req));
  if (!r.ok()) return r.status();
  return r->update().version();
}

absl::StatusOr<proto::ControlResponse> ControllerClient::ControlAt(
    const std::string& sswitch, const proto::ControlRequest& request) {
  proto::ControllerRequest req;
  req.mutable_control_at()->set_sswitch(sswitch);
  *req.mutable_control_at()->mutable_request() = request;
  auto r = Call(std::move(req));
  if (!r.ok()) return r.status();
  return std::move(*r->mutable_control());
}

absl::StatusOr<std::vector<proto::DeviceProfile>> ControllerClient::SetProfiles(
    const std::string& sswitch, const proto::SetProfiles& request) {
  proto::ControlRequest control;
  *control.mutable_set_profiles() = request;
  auto r = ControlAt(sswitch, control);
  if (!r.ok()) return r.status();
  if (r->code() != 0) {
    return absl::Status(static_cast<absl::StatusCode>(r->code()), r->message());
  }
  return std::vector<proto::DeviceProfile>(r->profiles().begin(),
                                           r->profiles().end());
}

absl::StatusOr<proto::ProfileProgress> ControllerClient::ProfileStep(
    const std::string& sswitch, const proto::ProfileEndpoint& request) {
  proto::ControllerRequest req;
  req.mutable_control_at()->set_sswitch(sswitch);
  *req.mutable_control_at()->mutable_request()->mutable_profile_endpoint() =
      request;
  auto r = Call(std::move(req), ProfileSweepWait(request) + options_.timeout);
  if (!r.ok()) return r.status();
  const proto::ControlResponse& c = r->control();
  if (c.code() != 0) {
    return absl::Status(static_cast<absl::StatusCode>(c.code()), c.message());
  }
  return c.profile();
}

absl::StatusOr<proto::CopyProgress> ControllerClient::Copy(
    const std::string& sswitch, const proto::Copy& request) {
  proto::ControllerRequest req;
  req.mutable_control_at()->set_sswitch(sswitch);
  *req.mutable_control_at()->mutable_request()->mutable_copy() = request;
  auto r = Call(std::move(req),
                absl::Milliseconds(request.budget_ms()) + options_.timeout);
  if (!r.ok()) return r.status();
  const proto::ControlResponse& c = r->control();
  if (c.code() != 0) {
    return absl::Status(static_cast<absl::StatusCode>(c.code()), c.message());
  }
  return c.copy();
}

absl::Status ControllerClient::Quiesce(const std::string& sswitch,
                                       const std::string& pattern, bool on) {
  proto::ControllerRequest req;
  req.mutable_quiesce()->set_sswitch(sswitch);
  req.mutable_quiesce()->set_pattern(pattern);
  req.mutable_quiesce()->set_on(on);
  return Call(std::move(req)).status();
}

absl::Status ControllerClient::Drain(const std::string& sswitch,
                                     const std::string& pattern,
                                     absl::Duration timeout) {
  proto::ControllerRequest req;
  req.mutable_drain()->set_sswitch(sswitch);
  req.mutable_drain()->set_pattern(pattern);
  req.mutable_drain()->set_timeout_ms(
      static_cast<uint32_t>(absl::ToInt64Milliseconds(timeout)));
  return Call(std::move(req), timeout + options_.timeout).status();
}

absl::StatusOr<proto::StageLists> ControllerClient::StagesAt(
    const std::string& sswitch, const proto::Stages& request) {
  proto::ControllerRequest req;
  req.mutable_stages()->set_sswitch(sswitch);
  *req.mutable_stages()->mutable_request() = request;
  const absl::Duration wait = absl::Milliseconds(
      request.timeout_ms() == 0 ? 10000 : request.timeout_ms());
  auto r = Call(std::move(req), wait + options_.timeout);
  if (!r.ok()) return r.status();
  return r->stages();
}

absl::StatusOr<std::vector<proto::StageStats>> ControllerClient::Stages(
    const std::string& sswitch, const proto::Stages& request) {
  if (sswitch.empty()) {
    return absl::InvalidArgumentError("Stages: name the host's sSwitch");
  }
  auto lists = StagesAt(sswitch, request);
  if (!lists.ok()) return lists.status();
  std::vector<proto::StageStats> out;
  for (const proto::HostStages& h : lists->hosts()) {
    out.insert(out.end(), h.stages().begin(), h.stages().end());
  }
  return out;
}

StatsSnapshot ControllerClient::Stats() {
  StatsSnapshot snap;
  snap.at = absl::Now();
  auto hosts = ListHosts();
  auto rules = IntervalStats();
  if (hosts.ok()) {
    for (const proto::HostStatus& h : hosts->hosts()) {
      HostStats hs;
      hs.sswitch = h.host().sswitch();
      hs.connected = h.connected();
      hs.version = h.version();
      snap.hosts.push_back(std::move(hs));
    }
  }
  if (rules.ok()) {
    for (const proto::AdminRule& a : rules->rules()) {
      auto it = std::find_if(
          snap.hosts.begin(), snap.hosts.end(),
          [&](const HostStats& h) { return h.sswitch == a.sswitch(); });
      if (it == snap.hosts.end()) continue;
      RuleStats rs;
      rs.cid = a.rule().cid();
      rs.host_id = a.host_id();
      rs.text = a.rule().text();
      rs.owner = a.rule().owner();
      rs.reads = a.reads();
      rs.writes = a.writes();
      rs.others = a.others();
      rs.read_bytes = a.read_bytes();
      rs.write_bytes = a.write_bytes();
      rs.in_flight = a.in_flight();
      rs.errors = a.errors();
      rs.p50_us = a.p50_us();
      rs.p99_us = a.p99_us();
      it->rules.push_back(std::move(rs));
    }
  }
  proto::Stages list;
  list.set_action(proto::Stages::LIST);
  if (auto stages = StagesAt("", list); stages.ok()) {
    for (const proto::HostStages& hs : stages->hosts()) {
      for (HostStats& h : snap.hosts) {
        if (h.sswitch == hs.sswitch()) {
          h.stages.assign(hs.stages().begin(), hs.stages().end());
          h.gauges = {hs.gauges().begin(), hs.gauges().end()};
        }
      }
    }
  }
  return snap;
}

void ControllerClient::AddTimer(absl::Duration period,
                                std::function<void()> fn) {
  MutexLock l(&mu_);
  timers_.push_back(Timer{std::max(period, absl::Milliseconds(1)),
                          absl::Now() + period, std::move(fn)});
}

void ControllerClient::Post(std::function<void()> fn) {
  MutexLock l(&mu_);
  posted_.push_back(std::move(fn));
}

absl::Status ControllerClient::PutState(const std::string& key,
                                        const std::string& value) {
  proto::ControllerRequest req;
  req.mutable_put_state()->set_app(options_.name);
  req.mutable_put_state()->set_key(key);
  req.mutable_put_state()->set_value(value);
  return Call(std::move(req)).status();
}

absl::StatusOr<std::string> ControllerClient::GetState(const std::string& key) {
  return GetAppState(options_.name, key);
}

absl::StatusOr<std::string> ControllerClient::GetAppState(
    const std::string& app, const std::string& key) {
  proto::ControllerRequest req;
  req.mutable_get_state()->set_app(app);
  req.mutable_get_state()->set_key(key);
  auto r = Call(std::move(req));
  if (!r.ok()) return r.status();
  return r->state();
}

absl::StatusOr<proto::AppList> ControllerClient::Apps(
    const proto::Apps& request) {
  proto::ControllerRequest req;
  *req.mutable_apps() = request;
  auto r = Call(std::move(req));
  if (!r.ok()) return r.status();
  return r->apps();
}

absl::StatusOr<proto::AppAnswer> ControllerClient::CallApp(
    const proto::AppCall& request) {
  proto::ControllerRequest req;
  *req.mutable_app_call() = request;
  // The app may be busy for its 30 s before it answers.
  auto r = Call(std::move(req), std::max(options_.timeout, absl::Seconds(35)));
  if (!r.ok()) return r.status();
  return r->app_answer();
}

absl::Status ControllerClient::Run(ControlApp& app) {
  if (absl::Status s = app.Start(*this); !s.ok()) return s;
  uint64_t after = 0;
  while (!stop_) {
    // Wait for events at most until the next timer is due.
    absl::Duration wait = absl::Seconds(1);
    {
      MutexLock l(&mu_);
      for (const Timer& t : timers_) {
        wait = std::min(wait,
                        std::max(t.next - absl::Now(), absl::Milliseconds(1)));
      }
    }
    proto::ControllerRequest req;
    req.mutable_wait_events()->set_after(after);
    auto r = Call(std::move(req), wait);
    if (r.ok()) {
      bool stats = false;
      for (const proto::Event& e : r->events().events()) {
        after = std::max(after, e.number());
        if (e.stats()) {
          stats = true;
        } else if (e.has_header()) {
          HeaderEvent he;
          he.sswitch = e.sswitch();
          const proto::HeaderEventItem& item = e.header();
          he.header.source = item.header().source();
          he.header.stage = item.header().stage();
          he.header.op = item.header().op() < static_cast<uint32_t>(kNumOps)
                             ? static_cast<Op>(item.header().op())
                             : Op::kRead;
          he.header.file = item.file();
          he.header.offset = item.header().offset();
          he.header.length = item.header().length();
          he.rule_id = item.rule_id();
          if (item.has_value()) he.value = item.value();
          app.OnHeader(he);
        }
      }
      if (stats) app.OnStats(Stats());
    } else if (!absl::IsDeadlineExceeded(r.status())) {
      // The controller is away: try again shortly.
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    std::vector<std::function<void()>> due;
    {
      MutexLock l(&mu_);
      due.swap(posted_);
      const absl::Time now = absl::Now();
      for (Timer& t : timers_) {
        if (t.next <= now) {
          due.push_back(t.fn);
          t.next = now + t.period;
        }
      }
    }
    for (auto& fn : due) fn();
  }
  return absl::OkStatus();
}

void ControllerClient::Stop() { stop_ = true; }

}  // namespace sroute
