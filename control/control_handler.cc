// SPDX-License-Identifier: Apache-2.0
#include "control/control_handler.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "check/checker.h"
#include "check/report_proto.h"
#include "control/copy_tree.h"
#include "rpc/io_codec.h"
#include "rpc/remote_endpoint.h"
#include "rules/parser.h"
#include "stages/stage_control.h"
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
  absl::Status status;
  bool changed = false;
  switch (req.request_case()) {
    case proto::ControlRequest::kListRules:
      AddRecords(sw, &resp);
      break;
    case proto::ControlRequest::kStats:
      AddRecords(sw, &resp);
      resp.set_in_flight(sw.in_flight());
      resp.set_parked(sw.parked());
      for (int op = 0; op < kNumOps; ++op) {
        if (uint64_t n = sw.unmatched_ops(static_cast<Op>(op)); n > 0) {
          (*resp.mutable_unmatched_ops())[std::string(
              OpName(static_cast<Op>(op)))] = n;
        }
      }
      // IOs that found no endpoint, stage or controller, and scatter
      // targets that failed an op others applied; files fenced for it.
      (*resp.mutable_gauges())["route_errors"] =
          static_cast<int64_t>(sw.route_errors());
      (*resp.mutable_gauges())["fenced_files"] =
          static_cast<int64_t>(sw.Fences().size());
      AddStageStats(sw, &resp);
      AddEndpointGauges(sw, resp.mutable_gauges());
      if (add_stats) add_stats(&resp);
      break;
    case proto::ControlRequest::kStages:
      status = HandleStagesRequest(sw, req.stages(), &resp, origin);
      break;
    case proto::ControlRequest::kCheckRules:
      status = CheckRulesRequest(sw, req.check_rules(), &resp);
      break;
    case proto::ControlRequest::kSetProfiles:
      status = HandleSetProfiles(sw, req.set_profiles(), &resp);
      break;
    case proto::ControlRequest::kProfileEndpoint:
      status = HandleProfileEndpoint(sw, req.profile_endpoint(), &resp);
      break;
    case proto::ControlRequest::kAddRules: {
      const proto::AddRules& add = req.add_rules();
      std::vector<Rule> rules;
      for (int i = 0; i < add.text_size() && status.ok(); ++i) {
        auto r = ParseRule(add.text(i));
        if (!r.ok()) {
          status = absl::InvalidArgumentError(
              add.text_size() > 1
                  ? StrCat("rule ", i + 1, ": ", r.status().message())
                  : std::string(r.status().message()));
        } else {
          rules.push_back(*std::move(r));
        }
      }
      if (status.ok() && rules.empty()) {
        status = absl::InvalidArgumentError("no rules to add");
      }
      if (status.ok() && add.lease_ms() != 0 && add.owner().empty()) {
        status = absl::InvalidArgumentError("a lease needs an owner name");
      }
      if (status.ok()) {
        // The lease first: a client that dies right after still loses its
        // rules.
        if (add.lease_ms() != 0) {
          (void)sw.HoldLease(add.owner(), absl::Milliseconds(add.lease_ms()));
        }
        auto ids = sw.Update(std::move(rules), {}, add.owner());
        if (ids.ok()) {
          for (uint64_t id : *ids) resp.add_ids(id);
          changed = true;
        } else {
          status = ids.status();
        }
      }
      break;
    }
    case proto::ControlRequest::kDeleteRules: {
      const proto::DeleteRules& del = req.delete_rules();
      if (del.id_size() == 0 && del.pattern().empty()) {
        status = absl::InvalidArgumentError("no rule ids or pattern to delete");
        break;
      }
      if (del.id_size() > 0 && !del.pattern().empty()) {
        status = absl::InvalidArgumentError(
            "delete by ids or by pattern, not both at once");
        break;
      }
      if (del.id_size() > 0) {
        std::vector<uint64_t> ids(del.id().begin(), del.id().end());
        auto r = sw.Update({}, ids);
        status = r.status();
        if (status.ok()) {
          changed = true;
          resp.set_message(StrCat("deleted ", ids.size(), " rule",
                                  ids.size() == 1 ? "" : "s"));
        }
      } else {
        auto p = Pattern(del.pattern());
        if (!p.ok()) {
          status = p.status();
          break;
        }
        auto n = sw.Delete(*p);
        if (!n.ok()) {
          status = n.status();
        } else if (*n == 0) {
          status = absl::NotFoundError(
              StrCat("no rule has the pattern ", FormatPattern(*p)));
        } else {
          changed = true;
          resp.set_message(StrCat("deleted ", *n, " rule", *n == 1 ? "" : "s"));
        }
      }
      break;
    }
    case proto::ControlRequest::kQuiesce: {
      auto p = Pattern(req.quiesce().pattern());
      status = p.ok() ? sw.Quiesce(*p, req.quiesce().on()) : p.status();
      break;
    }
    case proto::ControlRequest::kDrain: {
      auto p = Pattern(req.drain().pattern());
      if (!p.ok()) {
        status = p.status();
        break;
      }
      // 0 means the default; a drain never holds a connection past 10 min.
      const uint32_t ms =
          req.drain().timeout_ms() == 0
              ? 30000
              : std::min<uint32_t>(req.drain().timeout_ms(), 600000);
      status = sw.Drain(*p, absl::Milliseconds(ms));
      break;
    }
    case proto::ControlRequest::kFences: {
      for (const std::string& file : req.fences().clear()) {
        status.Update(sw.ClearFence(file));
      }
      for (const auto& [file, why] : sw.Fences()) {
        proto::FenceRecord* f = resp.add_fences();
        f->set_file(file);
        f->set_why(why);
      }
      break;
    }
    case proto::ControlRequest::kTraces: {
      const uint32_t limit = req.traces().limit() == 0
                                 ? 256
                                 : std::min(req.traces().limit(), 4096u);
      for (const SSwitch::KeptTrace& t :
           sw.Traces(req.traces().after(), limit)) {
        proto::TraceRecord* r = resp.add_traces();
        FillRecord(t.header, t.rule_id, t.start_ns, t.end_ns, t.code, t.hops,
                   r);
        r->set_seq(t.seq);
        r->set_hops_dropped(t.hops_dropped);
      }
      resp.set_traces_sampled(sw.traces_sampled());
      break;
    }
    case proto::ControlRequest::kSlowOps: {
      const proto::SlowOps& q = req.slow_ops();
      SlowOpLog& log = sw.slow_ops();
      if (q.set_threshold()) log.set_threshold_ns(q.threshold_ns());
      if (q.clear()) log.Clear();
      const SlowOpLog::View v = log.Get(q.after());
      for (const SlowIo& s : v.recent) {
        proto::TraceRecord* r = resp.add_slow_recent();
        FillRecord(s.header, s.rule_id, s.start_ns, s.end_ns, s.code, s.hops,
                   r);
        r->set_seq(s.seq);
      }
      for (const SlowIo& s : v.top) {
        proto::TraceRecord* r = resp.add_slow_top();
        FillRecord(s.header, s.rule_id, s.start_ns, s.end_ns, s.code, s.hops,
                   r);
        r->set_seq(s.seq);
      }
      if (q.stale_ms() != 0) {
        for (const SSwitch::StaleIo& st :
             sw.StaleIos(absl::Milliseconds(q.stale_ms()))) {
          proto::StaleIoRecord* r = resp.add_stale();
          r->set_source(st.source);
          r->set_op(std::string(OpName(st.op)));
          r->set_file(st.file);
          r->set_offset(st.offset);
          r->set_length(st.length);
          r->set_age_ns(st.age_ns);
          r->set_parked(st.parked);
          r->set_waiting_at(st.waiting_at);
        }
      }
      resp.set_slow_total(v.total);
      resp.set_slow_overwritten(v.overwritten);
      resp.set_slow_threshold_ns(v.threshold_ns);
      break;
    }
    case proto::ControlRequest::kLease: {
      auto n = sw.HoldLease(req.lease().owner(),
                            absl::Milliseconds(req.lease().ttl_ms()));
      status = n.status();
      if (n.ok() && req.lease().ttl_ms() == 0) {
        changed = *n > 0;
        resp.set_message(StrCat("deleted ", *n, " rule", *n == 1 ? "" : "s"));
      }
      break;
    }
    case proto::ControlRequest::kCopy:
      status = CopyTree(sw, req.copy(), resp.mutable_copy());
      break;
    case proto::ControlRequest::REQUEST_NOT_SET:
      status = absl::InvalidArgumentError("empty control request");
      break;
  }
  resp.set_version(sw.version());
  if (!status.ok()) {
    SetStatus(&resp, status);
    resp.clear_ids();
    return resp;
  }
  resp.set_code(0);
  *changed_out = changed;
  return resp;
}

}  // namespace sroute
