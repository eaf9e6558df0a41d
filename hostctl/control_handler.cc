// SPDX-License-Identifier: Apache-2.0
#include "hostctl/control_handler.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "check/checker.h"
#include "check/report_proto.h"
#include "endpoints/remote_endpoint.h"
#include "hostctl/copy_tree.h"
#include "rpc/io_codec.h"
#include "rpc/rule_codec.h"
#include "rules/parser.h"
#include "rules/validate.h"
#include "stages/host_stages.h"
#include "stages/steering/steering_control.h"
#include "util/strings.h"

namespace sroute {
namespace {

// One IO and its path, as a TraceRecord (seq and drops left to the caller).
void FillRecord(const IoHeader& h, uint64_t rule_id, uint64_t start_ns,
                uint64_t end_ns, absl::StatusCode code,
                const std::vector<TraceHop>& hops, proto::TraceRecord* r) {
  r->set_source(h.source);
  r->set_op(std::string(OpName(h.op)));
  r->set_file(h.file);
  r->set_offset(h.offset);
  r->set_length(h.length);
  r->set_rule_id(rule_id);
  r->set_start_ns(start_ns);
  r->set_end_ns(end_ns);
  r->set_code(static_cast<int32_t>(code));
  for (const TraceHop& hop : hops) TraceHopToMsg(hop, r->add_hops());
}

void SetStatus(proto::ControlResponse* resp, const absl::Status& s) {
  resp->set_code(static_cast<int32_t>(s.code()));
  resp->set_message(std::string(s.message()));
}

void AddRecords(SSwitch& sw, proto::ControlResponse* resp) {
  for (const RuleInfo& info : sw.ListRules()) {
    proto::RuleRecord* r = resp->add_rules();
    r->set_id(info.id);
    r->set_text(FormatRule(info.rule));
    r->set_owner(info.owner);
    r->set_ops(info.counters.ops);
    r->set_bytes(info.counters.bytes);
    r->set_in_flight(info.counters.in_flight);
    r->set_errors(info.counters.errors);
    r->set_p50_ns(info.counters.p50_ns);
    r->set_p99_ns(info.counters.p99_ns);
    r->set_p999_ns(info.counters.p999_ns);
  }
}

absl::StatusOr<HeaderPattern> Pattern(const std::string& text) {
  auto p = ParsePattern(text);
  if (!p.ok()) {
    return absl::InvalidArgumentError(
        StrCat("pattern ", text, ": ", p.status().message()));
  }
  return p;
}

// The sSwitch as the rule checker sees it: its endpoints (a remote one is
// a server), stages and rules in their order.
check::SwitchView CheckerView(SSwitch& sw) {
  check::SwitchView v;
  v.name = sw.name();
  v.topology_known = true;
  for (const auto& [name, ep] : sw.Endpoints()) {
    const auto* remote = dynamic_cast<const RemoteEndpoint*>(ep.get());
    v.endpoints.push_back({name, remote != nullptr ? "server" : "dir",
                           remote != nullptr ? remote->address() : ""});
  }
  for (const SSwitch::StageInfo& st : sw.Stages()) v.stages.push_back(st.name);
  uint64_t seq = 0;
  for (RuleInfo& info : sw.ListRules()) {
    check::TableRule t;
    t.order.priority = info.rule.priority;
    t.order.seq = ++seq;  // the listing is in precedence order
    t.rule = std::move(info.rule);
    t.id = info.id;
    t.origin = info.owner.empty()
                   ? StrCat("rule ", info.id)
                   : StrCat("rule ", info.id, " (", info.owner, ")");
    v.rules.push_back(std::move(t));
  }
  return v;
}

absl::Status CheckRulesRequest(SSwitch& sw, const proto::CheckRules& req,
                               proto::ControlResponse* resp) {
  absl::StatusOr<std::vector<check::TableRule>> add = check::NewRules(
      std::vector<std::string>(req.add().begin(), req.add().end()));
  if (!add.ok()) return add.status();
  check::Checker checker({CheckerView(sw)});
  const check::CheckOptions options{.deep = req.deep()};
  const check::Report report =
      add->empty() ? checker.CheckAll(options)
                   : checker.CheckChange(sw.name(), *add, {}, options);
  *resp->mutable_check() = check::ToProto(report);
  return absl::OkStatus();
}

// What a request's handler works with: the sSwitch, the request, the
// response it fills, and whether it changed the rules.
struct Request {
  SSwitch& sw;
  const proto::ControlRequest& req;
  proto::ControlResponse& resp;
  const std::function<void(proto::ControlResponse*)>& add_stats;
  ControlOrigin origin;
  bool changed = false;
};

absl::Status HandleListRules(Request& r) {
  AddRecords(r.sw, &r.resp);
  return absl::OkStatus();
}

absl::Status HandleStats(Request& r) {
  SSwitch& sw = r.sw;
  proto::ControlResponse& resp = r.resp;
  AddRecords(sw, &resp);
  resp.set_in_flight(sw.in_flight());
  resp.set_parked(sw.parked());
  for (int op = 0; op < kNumOps; ++op) {
    if (uint64_t n = sw.unmatched_ops(static_cast<Op>(op)); n > 0) {
      (*resp.mutable_unmatched_ops())[std::string(
          OpName(static_cast<Op>(op)))] = n;
    }
  }
  // IOs that found no endpoint, stage or controller, and scatter targets
  // that failed an op others applied; files fenced for it.
  (*resp.mutable_gauges())["route_errors"] =
      static_cast<int64_t>(sw.route_errors());
  (*resp.mutable_gauges())["fenced_files"] =
      static_cast<int64_t>(sw.Fences().size());
  AddStageStats(sw, &resp);
  AddEndpointGauges(sw, resp.mutable_gauges());
  if (r.add_stats) r.add_stats(&resp);
  return absl::OkStatus();
}

absl::Status HandleAddRules(Request& r) {
  const proto::AddRules& add = r.req.add_rules();
  const int count = add.text_size() + add.rules_size();
  std::vector<Rule> rules;
  for (int i = 0; i < add.text_size(); ++i) {
    auto rule = ParseRule(add.text(i));
    if (!rule.ok()) {
      return absl::InvalidArgumentError(
          count > 1 ? StrCat("rule ", i + 1, ": ", rule.status().message())
                    : std::string(rule.status().message()));
    }
    rules.push_back(*std::move(rule));
  }
  // Parsed by the sender: checked, not parsed again.
  for (const proto::RuleMsg& m : add.rules()) {
    auto rule = RuleFromMsg(m);
    absl::Status s = rule.ok() ? ValidateRule(*rule) : rule.status();
    if (!s.ok()) {
      return absl::InvalidArgumentError(
          count > 1 ? StrCat("rule ", rules.size() + 1, ": ", s.message())
                    : std::string(s.message()));
    }
    rules.push_back(*std::move(rule));
  }
  if (rules.empty()) return absl::InvalidArgumentError("no rules to add");
  if (add.lease_ms() != 0 && add.owner().empty()) {
    return absl::InvalidArgumentError("a lease needs an owner name");
  }
  // The lease first: a client that dies right after still loses its rules.
  if (add.lease_ms() != 0) {
    (void)r.sw.HoldLease(add.owner(), absl::Milliseconds(add.lease_ms()));
  }
  auto ids = r.sw.Update(std::move(rules), {}, add.owner());
  if (!ids.ok()) return ids.status();
  for (uint64_t id : *ids) r.resp.add_ids(id);
  r.changed = true;
  return absl::OkStatus();
}

std::string Deleted(uint64_t n) {
  return StrCat("deleted ", n, " rule", n == 1 ? "" : "s");
}

absl::Status HandleDeleteRules(Request& r) {
  const proto::DeleteRules& del = r.req.delete_rules();
  if (del.id_size() == 0 && del.pattern().empty()) {
    return absl::InvalidArgumentError("no rule ids or pattern to delete");
  }
  if (del.id_size() > 0 && !del.pattern().empty()) {
    return absl::InvalidArgumentError(
        "delete by ids or by pattern, not both at once");
  }
  if (del.id_size() > 0) {
    std::vector<uint64_t> ids(del.id().begin(), del.id().end());
    if (absl::Status s = r.sw.Update({}, ids).status(); !s.ok()) return s;
    r.changed = true;
    r.resp.set_message(Deleted(ids.size()));
    return absl::OkStatus();
  }
  auto p = Pattern(del.pattern());
  if (!p.ok()) return p.status();
  auto n = r.sw.Delete(*p);
  if (!n.ok()) return n.status();
  if (*n == 0) {
    return absl::NotFoundError(
        StrCat("no rule has the pattern ", FormatPattern(*p)));
  }
  r.changed = true;
  r.resp.set_message(Deleted(*n));
  return absl::OkStatus();
}

absl::Status HandleQuiesce(Request& r) {
  auto p = Pattern(r.req.quiesce().pattern());
  return p.ok() ? r.sw.Quiesce(*p, r.req.quiesce().on()) : p.status();
}

absl::Status HandleDrain(Request& r) {
  auto p = Pattern(r.req.drain().pattern());
  if (!p.ok()) return p.status();
  // 0 means the default; a drain never holds a connection past 10 min.
  const uint32_t ms =
      r.req.drain().timeout_ms() == 0
          ? 30000
          : std::min<uint32_t>(r.req.drain().timeout_ms(), 600000);
  return r.sw.Drain(*p, absl::Milliseconds(ms));
}

absl::Status HandleFences(Request& r) {
  absl::Status status;
  for (const std::string& file : r.req.fences().clear()) {
    status.Update(r.sw.ClearFence(file));
  }
  for (const auto& [file, why] : r.sw.Fences()) {
    proto::FenceRecord* f = r.resp.add_fences();
    f->set_file(file);
    f->set_why(why);
  }
  return status;
}

absl::Status HandleTraces(Request& r) {
  const uint32_t limit = r.req.traces().limit() == 0
                             ? 256
                             : std::min(r.req.traces().limit(), 4096u);
  for (const SSwitch::KeptTrace& t :
       r.sw.Traces(r.req.traces().after(), limit)) {
    proto::TraceRecord* record = r.resp.add_traces();
    FillRecord(t.header, t.rule_id, t.start_ns, t.end_ns, t.code, t.hops,
               record);
    record->set_seq(t.seq);
    record->set_hops_dropped(t.hops_dropped);
  }
  r.resp.set_traces_sampled(r.sw.traces_sampled());
  return absl::OkStatus();
}

absl::Status HandleSlowOps(Request& r) {
  const proto::SlowOps& q = r.req.slow_ops();
  proto::ControlResponse& resp = r.resp;
  SlowOpLog& log = r.sw.slow_ops();
  if (q.set_threshold()) log.set_threshold_ns(q.threshold_ns());
  if (q.clear()) log.Clear();
  const SlowOpLog::View v = log.Get(q.after());
  auto add = [](const SlowIo& s, proto::TraceRecord* record) {
    FillRecord(s.header, s.rule_id, s.start_ns, s.end_ns, s.code, s.hops,
               record);
    record->set_seq(s.seq);
  };
  for (const SlowIo& s : v.recent) add(s, resp.add_slow_recent());
  for (const SlowIo& s : v.top) add(s, resp.add_slow_top());
  if (q.stale_ms() != 0) {
    for (const SSwitch::StaleIo& st :
         r.sw.StaleIos(absl::Milliseconds(q.stale_ms()))) {
      proto::StaleIoRecord* record = resp.add_stale();
      record->set_source(st.source);
      record->set_op(std::string(OpName(st.op)));
      record->set_file(st.file);
      record->set_offset(st.offset);
      record->set_length(st.length);
      record->set_age_ns(st.age_ns);
      record->set_parked(st.parked);
      record->set_waiting_at(st.waiting_at);
    }
  }
  resp.set_slow_total(v.total);
  resp.set_slow_overwritten(v.overwritten);
  resp.set_slow_threshold_ns(v.threshold_ns);
  return absl::OkStatus();
}

absl::Status HandleLease(Request& r) {
  auto n = r.sw.HoldLease(r.req.lease().owner(),
                          absl::Milliseconds(r.req.lease().ttl_ms()));
  if (!n.ok()) return n.status();
  if (r.req.lease().ttl_ms() == 0) {
    r.changed = *n > 0;
    r.resp.set_message(Deleted(*n));
  }
  return absl::OkStatus();
}

// One line per request, a named handler each.
absl::Status Dispatch(Request& r) {
  using R = proto::ControlRequest;
  switch (r.req.request_case()) {
    case R::kListRules:
      return HandleListRules(r);
    case R::kStats:
      return HandleStats(r);
    case R::kStages:
      return HandleStagesRequest(r.sw, r.req.stages(), &r.resp, r.origin);
    case R::kCheckRules:
      return CheckRulesRequest(r.sw, r.req.check_rules(), &r.resp);
    case R::kSetProfiles:
      return HandleSetProfiles(r.sw, r.req.set_profiles(), &r.resp);
    case R::kProfileEndpoint:
      return HandleProfileEndpoint(r.sw, r.req.profile_endpoint(), &r.resp);
    case R::kAddRules:
      return HandleAddRules(r);
    case R::kDeleteRules:
      return HandleDeleteRules(r);
    case R::kQuiesce:
      return HandleQuiesce(r);
    case R::kDrain:
      return HandleDrain(r);
    case R::kFences:
      return HandleFences(r);
    case R::kTraces:
      return HandleTraces(r);
    case R::kSlowOps:
      return HandleSlowOps(r);
    case R::kLease:
      return HandleLease(r);
    case R::kCopy:
      return CopyTree(r.sw, r.req.copy(), r.resp.mutable_copy());
    case R::REQUEST_NOT_SET:
      break;
  }
  return absl::InvalidArgumentError("empty control request");
}

}  // namespace

proto::ControlResponse HandleControlRequest(
    SSwitch& sw, const proto::ControlRequest& req,
    const std::function<void(proto::ControlResponse*)>& add_stats,
    bool* changed_out, ControlOrigin origin) {
  *changed_out = false;
  proto::ControlResponse resp;
  resp.set_protocol_version(kControlProtocolVersion);
  resp.set_request_id(req.request_id());
  if (req.protocol_version() > kControlProtocolVersion) {
    SetStatus(&resp, absl::FailedPreconditionError(
                         StrCat("protocol version ", req.protocol_version(),
                                " is newer than this host's (",
                                kControlProtocolVersion, ")")));
    return resp;
  }
  Request r{sw, req, resp, add_stats, origin};
  const absl::Status status = Dispatch(r);
  resp.set_version(sw.version());
  if (!status.ok()) {
    SetStatus(&resp, status);
    resp.clear_ids();
    return resp;
  }
  resp.set_code(0);
  *changed_out = r.changed;
  return resp;
}

}  // namespace sroute
