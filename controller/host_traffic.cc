// SPDX-License-Identifier: Apache-2.0
// The controller's hosts: commands handed to them on their long polls
// (SendCommand, SendAll), their registration and recovery, and what they
// send: command results, stats, header events, IO turns, events for
// WaitEvents (controller_impl.h).
#include <algorithm>
#include <deque>
#include <future>
#include <map>
#include <optional>
#include <set>
#include <thread>

#include "controller/app_runner.h"
#include "controller/controller.h"
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

constexpr size_t kMaxEvents = 10000;
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

}  // namespace

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

}  // namespace sroute
