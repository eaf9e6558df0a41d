// SPDX-License-Identifier: Apache-2.0
// The controller's RPC: the dispatch of every request to its handler, and
// the handlers of the administrator's requests (sroutectl, out-of-process
// apps: controller/client.h). The hosts' requests are handled in
// controller.cc.
#include <map>

#include "controller/controller_impl.h"
#include "rpc/rule_codec.h"
#include "util/strings.h"

namespace sroute {

using controller_internal::ReplyWith;

void Controller::Impl::Handle(std::unique_ptr<Call> call) {
  if (!call->request().has_controller()) {
    call->ReplyStatus(absl::UnimplementedError(
        "this is the controller: it serves controller requests only"));
    return;
  }
  using R = proto::ControllerRequest;
  if (call->request().controller().body_case() == R::kListControllers) {
    return InBackground(std::move(call), &Impl::HandleListControllers);
  }
  // Only the leader serves; a follower names it (rpc/leader.h).
  if (!leading.load()) {
    call->ReplyStatus(FollowerError());
    return;
  }
  // Handlers that wait for hosts or for other updates run in the
  // background; the others answer (or park the call) at once.
  switch (call->request().controller().body_case()) {
    // From hosts (host/agent.h).
    case R::kRegister:
      return InBackground(std::move(call), &Impl::HandleRegister);
    case R::kWaitCommands:
      return HandleWaitCommands(std::move(call));
    case R::kCommandResult:
      return HandleCommandResult(std::move(call));
    case R::kStats:
      return HandleStats(std::move(call));
    case R::kHeaderEvent:
      return HandleHeaderEvent(std::move(call));
    case R::kIoTurn:
      return HandleIoTurn(std::move(call));
    case R::kIoTurnDone:
      return HandleIoTurnDone(std::move(call));
    // From administrators and out-of-process apps (controller/client.h).
    case R::kListHosts:
      return HandleListHosts(std::move(call));
    case R::kListRules:
      return HandleListRules(std::move(call));
    case R::kUpdate:
      return InBackground(std::move(call), &Impl::HandleUpdate);
    case R::kQuiesce:
      return InBackground(std::move(call), &Impl::HandleQuiesce);
    case R::kDrain:
      return InBackground(std::move(call), &Impl::HandleDrain);
    case R::kGetStats:
      return HandleGetStats(std::move(call));
    case R::kWaitEvents:
      return HandleWaitEvents(std::move(call));
    case R::kPutState:
      return HandlePutState(std::move(call));
    case R::kGetState:
      return HandleGetState(std::move(call));
    case R::kStages:
      return InBackground(std::move(call), &Impl::HandleStages);
    case R::kRenewLease:
      return InBackground(std::move(call), &Impl::HandleRenewLease);
    case R::kControlAt:
      return InBackground(std::move(call), &Impl::HandleControlAt);
    case R::kApps:
      return InBackground(std::move(call), &Impl::HandleApps);
    case R::kCheck:
      return InBackground(std::move(call), &Impl::HandleCheck);
    case R::kAppCall:
      return InBackground(std::move(call), &Impl::HandleAppCall);
    case R::kListControllers:  // above
      break;
    case R::BODY_NOT_SET:
      break;
  }
  call->ReplyStatus(absl::InvalidArgumentError("empty controller request"));
}

void Controller::Impl::InBackground(std::unique_ptr<Call> call,
                                    void (Impl::*handler)(Call&)) {
  background->Run([this, handler, c = std::shared_ptr<Call>(std::move(call))] {
    (this->*handler)(*c);
  });
}

// Any controller answers: the members as the election lists them (or just
// itself on RocksDB) and the health of each store member, asked directly.
void Controller::Impl::HandleListControllers(Call& call) {
  proto::ControllerReply reply;
  proto::ControllerMembers* m = reply.mutable_controllers();
  m->set_self(SelfAddress());
  m->set_store(store->kv().Describe());
  if (etcd == nullptr) {
    proto::ControllerMember* me = m->add_members();
    me->set_id(SelfAddress());
    me->set_address(SelfAddress());
    me->set_leader(true);
    proto::StoreMember* sm = m->add_store_members();
    sm->set_endpoint(options.store.empty() ? options.db_dir
                                           : options.store.substr(8));
    sm->set_healthy(true);
    ReplyWith(call, std::move(reply));
    return;
  }
  absl::StatusOr<std::vector<Leadership::Member>> members =
      absl::UnavailableError("the election has not started yet");
  {
    // Held across the read: the election may not go meanwhile (a leaf
    // that only ~Controller waits for).
    MutexLock l(&leadership_mu);
    if (leadership != nullptr) members = leadership->Members();
  }
  if (!members.ok()) {
    call.ReplyStatus(
        absl::Status(members.status().code(),
                     StrCat("the store does not list the controllers: ",
                            members.status().message())));
    return;
  }
  for (const Leadership::Member& member : *members) {
    proto::ControllerMember* pm = m->add_members();
    pm->set_id(member.id);
    pm->set_address(member.address);
    pm->set_leader(member.leader);
  }
  for (const std::string& endpoint : etcd->endpoints()) {
    proto::StoreMember* sm = m->add_store_members();
    sm->set_endpoint(endpoint);
    auto st = etcd->MemberStatus(endpoint);
    if (!st.ok()) {
      sm->set_error(std::string(st.status().message()));
      continue;
    }
    sm->set_healthy(st->errors_size() == 0 && st->leader() != 0);
    if (st->errors_size() > 0) {
      sm->set_error(st->errors(0));
    } else if (st->leader() == 0) {
      sm->set_error("no raft leader (a quorum of the cluster is down)");
    }
    sm->set_version(st->version());
    sm->set_db_size(st->dbsize());
    // The raft leader names itself as the leader.
    sm->set_leader(st->leader() != 0 &&
                   st->leader() == st->header().member_id());
  }
  ReplyWith(call, std::move(reply));
}

void Controller::Impl::HandleListHosts(std::unique_ptr<Call> call) {
  proto::ControllerReply reply;
  const absl::Time now = absl::Now();
  auto stored = store->Hosts();
  if (!stored.ok()) {
    call->ReplyStatus(stored.status());
    return;
  }
  const std::vector<proto::HostInfo>& hosts = *stored;
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
}

void Controller::Impl::HandleListRules(std::unique_ptr<Call> call) {
  const proto::ListManagedRules& req =
      call->request().controller().list_rules();
  proto::ControllerReply reply;
  std::vector<std::string> names;
  if (req.sswitch().empty()) {
    auto all = store->SSwitches();
    if (!all.ok()) {
      call->ReplyStatus(all.status());
      return;
    }
    names = *std::move(all);
  } else {
    names.push_back(req.sswitch());
  }
  absl::StatusOr<bool> known = true;
  if (names.size() == 1) known = store->Known(names[0]);
  if (!known.ok()) {
    call->ReplyStatus(known.status());
    return;
  }
  if (!*known) {
    call->ReplyStatus(absl::NotFoundError(
        StrCat("no sSwitch named '", names[0], "' at the controller")));
    return;
  }
  std::vector<std::pair<std::string, std::vector<proto::ManagedRule>>> stored;
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
}

void Controller::Impl::HandleUpdate(Call& call) {
  const proto::Update& u = call.request().controller().update();
  UpdateSpec spec;
  for (const proto::Change& ch : u.changes()) {
    RuleChanges& c = spec.changes.emplace_back(RuleChanges{
        ch.sswitch(),
        std::vector<RuleToInsert>(ch.insert().begin(), ch.insert().end()),
        std::vector<uint64_t>(ch.remove().begin(), ch.remove().end())});
    // Parsed by the sender, after its texts: PlanUpdate checks them.
    for (const proto::RuleMsg& m : ch.rules()) {
      auto rule = RuleFromMsg(m);
      if (!rule.ok()) {
        call.ReplyStatus(absl::InvalidArgumentError(
            StrCat(ch.sswitch(), ": rule ", c.insert.size() + 1, ": ",
                   rule.status().message())));
        return;
      }
      c.insert.push_back(*std::move(rule));
    }
  }
  spec.flows.assign(u.flows().begin(), u.flows().end());
  if (u.timeout_ms() > 0) spec.timeout = absl::Milliseconds(u.timeout_ms());
  spec.lease = absl::Milliseconds(u.lease_ms());
  spec.force = u.force();
  auto r = Update(spec, u.owner().empty() ? call.peer_name() : u.owner());
  if (!r.ok()) {
    call.ReplyStatus(r.status());
    return;
  }
  proto::ControllerReply reply;
  reply.mutable_update()->set_version(r->version);
  for (uint64_t cid : r->cids) reply.mutable_update()->add_cids(cid);
  reply.mutable_update()->set_report(r->report);
  ReplyWith(call, std::move(reply));
}

void Controller::Impl::HandleQuiesce(Call& call) {
  const proto::QuiesceAt& q = call.request().controller().quiesce();
  call.ReplyStatus(admin->Quiesce(q.sswitch(), q.pattern(), q.on()));
}

void Controller::Impl::HandleDrain(Call& call) {
  const proto::DrainAt& d = call.request().controller().drain();
  call.ReplyStatus(admin->Drain(
      d.sswitch(), d.pattern(),
      absl::Milliseconds(d.timeout_ms() == 0 ? 10000 : d.timeout_ms())));
}

void Controller::Impl::HandleGetStats(std::unique_ptr<Call> call) {
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
}

void Controller::Impl::HandleStages(Call& call) {
  const proto::StagesAt& at = call.request().controller().stages();
  proto::ControllerReply reply;
  if (at.sswitch().empty()) {
    if (at.request().action() != proto::Stages::LIST) {
      call.ReplyStatus(absl::InvalidArgumentError(
          "which host's stage? name its sSwitch (sroutectl --host)"));
      return;
    }
    // Every host's, from its last report.
    StatsSnapshot snap = Stats();
    for (const HostStats& h : snap.hosts) {
      proto::HostStages* hs = reply.mutable_stages()->add_hosts();
      hs->set_sswitch(h.sswitch);
      for (const proto::StageStats& st : h.stages) *hs->add_stages() = st;
      hs->mutable_gauges()->insert(h.gauges.begin(), h.gauges.end());
    }
    ReplyWith(call, std::move(reply));
    return;
  }
  auto stages = admin->Stages(at.sswitch(), at.request());
  if (!stages.ok()) {
    call.ReplyStatus(stages.status());
    return;
  }
  proto::HostStages* hs = reply.mutable_stages()->add_hosts();
  hs->set_sswitch(at.sswitch());
  for (proto::StageStats& st : *stages) *hs->add_stages() = std::move(st);
  ReplyWith(call, std::move(reply));
}

void Controller::Impl::HandlePutState(std::unique_ptr<Call> call) {
  const proto::PutAppState& p = call->request().controller().put_state();
  call->ReplyStatus(store->PutAppState(p.app(), p.key(), p.value()));
}

void Controller::Impl::HandleGetState(std::unique_ptr<Call> call) {
  const proto::GetAppState& g = call->request().controller().get_state();
  auto v = store->GetAppState(g.app(), g.key());
  if (!v.ok()) {
    call->ReplyStatus(v.status());
    return;
  }
  proto::ControllerReply reply;
  reply.set_state(*v);
  ReplyWith(*call, std::move(reply));
}

}  // namespace sroute
