// SPDX-License-Identifier: Apache-2.0
#include "host/host_metrics.h"

#include <algorithm>
#include <string>
#include <vector>

#include "host/agent.h"
#include "proto/hostctl.pb.h"
#include "rules/parser.h"
#include "stages/host_stages.h"
#include "util/strings.h"

namespace sroute {
namespace {

using metrics::Exposition;
using metrics::HistogramData;
using metrics::Labels;
using metrics::MetricType;

// One rule's numbers as exported (or the sum of the rules not exported).
struct RuleSeries {
  uint64_t id = 0;
  std::string owner;
  RuleCountersSnapshot counters;
  HistogramData latency = HistogramData::Empty(metrics::LatencyBounds());
};

void AddLatency(const RuleCounters& c, HistogramData* h) {
  LatencyHistogram::Counts buckets;
  c.LatencyCounts(&buckets);
  AddLatencyCounts(buckets, c.LatencySumNs(), h);
}

void Sum(const RuleCountersSnapshot& c, RuleCountersSnapshot* into) {
  into->reads += c.reads;
  into->writes += c.writes;
  into->others += c.others;
  into->read_bytes += c.read_bytes;
  into->write_bytes += c.write_bytes;
  into->in_flight += c.in_flight;
  into->errors += c.errors;
}

void AddRuleMetrics(const SSwitch& sw, size_t rule_cap, Exposition* out) {
  // Two visits: the ops of every rule, to choose the busiest; then their
  // counters (a rule added between the two is summed under "other"; the
  // counters are read inside the visit, which keeps the rules alive).
  std::vector<RuleSeries> exported;
  RuleSeries rest;
  size_t total = 0;
  {
    std::vector<std::pair<uint64_t, uint64_t>> by_ops;  // (ops, id)
    sw.VisitCounters(
        [&](uint64_t id, const std::string&, const RuleCounters& c) {
          by_ops.emplace_back(c.ops(), id);
        });
    total = by_ops.size();
    const size_t keep = std::min(rule_cap, by_ops.size());
    std::partial_sort(by_ops.begin(), by_ops.begin() + keep, by_ops.end(),
                      [](const auto& a, const auto& b) {
                        return a.first != b.first ? a.first > b.first
                                                  : a.second < b.second;
                      });
    std::vector<uint64_t> chosen;
    for (size_t i = 0; i < keep; ++i) chosen.push_back(by_ops[i].second);
    std::sort(chosen.begin(), chosen.end());
    sw.VisitCounters(
        [&](uint64_t id, const std::string& owner, const RuleCounters& c) {
          const RuleCountersSnapshot snap = c.Read(/*percentiles=*/false);
          if (std::binary_search(chosen.begin(), chosen.end(), id)) {
            RuleSeries& r = exported.emplace_back();
            r.id = id;
            r.owner = owner;
            r.counters = snap;
            AddLatency(c, &r.latency);
          } else {
            Sum(snap, &rest.counters);
            AddLatency(c, &rest.latency);
          }
        });
  }
  std::sort(
      exported.begin(), exported.end(),
      [](const RuleSeries& a, const RuleSeries& b) { return a.id < b.id; });

  out->Declare("sroute_rules", MetricType::kGauge, "Rules installed")
      .Add({}, static_cast<double>(total));
  out->Declare("sroute_rules_exported", MetricType::kGauge,
               "Rules with series of their own (the busiest, up to the cap); "
               "the others are summed under rule_id=\"other\"")
      .Add({}, static_cast<double>(exported.size()));
  out->Declare("sroute_rule_table_version", MetricType::kGauge,
               "Version of the rule table (every change adds one)")
      .Add({}, static_cast<double>(sw.version()));

  auto& ops = out->Declare("sroute_rule_ops_total", MetricType::kCounter,
                           "IOs a rule routed, by op class");
  auto& bytes = out->Declare("sroute_rule_bytes_total", MetricType::kCounter,
                             "Bytes a rule's IOs read or wrote");
  auto& errors = out->Declare("sroute_rule_errors_total", MetricType::kCounter,
                              "IOs a rule routed that returned an error "
                              "(a lookup's ENOENT too)");
  auto& in_flight = out->Declare("sroute_rule_in_flight", MetricType::kGauge,
                                 "IOs a rule routed, not completed");
  auto& latency =
      out->Declare("sroute_rule_latency_seconds", MetricType::kHistogram,
                   "Time from routing to completion of a rule's IOs");
  auto add = [&](const Labels& labels, const RuleSeries& r) {
    auto with = [&labels](const char* key, const char* value) {
      Labels l = labels;
      l.emplace_back(key, value);
      return l;
    };
    const RuleCountersSnapshot& c = r.counters;
    ops.Add(with("op", "read"), static_cast<double>(c.reads));
    ops.Add(with("op", "write"), static_cast<double>(c.writes));
    ops.Add(with("op", "other"), static_cast<double>(c.others));
    bytes.Add(with("op", "read"), static_cast<double>(c.read_bytes));
    bytes.Add(with("op", "write"), static_cast<double>(c.write_bytes));
    errors.Add(labels, static_cast<double>(c.errors));
    in_flight.Add(labels, static_cast<double>(c.in_flight));
    latency.AddHistogram(labels, r.latency);
  };
  for (const RuleSeries& r : exported) {
    auto rule = sw.GetRule(r.id);
    add({{"rule_id", StrCat(r.id)},
         {"rule", rule.ok() ? FormatRule(rule->rule) : ""},
         {"owner", r.owner}},
        r);
  }
  if (total > exported.size()) {
    add({{"rule_id", "other"}, {"rule", ""}, {"owner", ""}}, rest);
  }
}

void AddSwitchState(const SSwitch& sw, Exposition* out) {
  auto& unmatched =
      out->Declare("sroute_unmatched_ops_total", MetricType::kCounter,
                   "IOs (or pieces of split IOs) that matched no rule, by op");
  for (int op = 0; op < kNumOps; ++op) {
    unmatched.Add({{"op", std::string(OpName(static_cast<Op>(op)))}},
                  static_cast<double>(sw.unmatched_ops(static_cast<Op>(op))));
  }
  out->Declare("sroute_ios_in_flight", MetricType::kGauge,
               "IOs routed and not completed")
      .Add({}, static_cast<double>(sw.in_flight()));
  out->Declare("sroute_ios_parked", MetricType::kGauge,
               "IOs parked by a quiesce or a stage change")
      .Add({}, static_cast<double>(sw.parked()));
  out->Declare("sroute_route_errors_total", MetricType::kCounter,
               "IOs that found no endpoint, stage or controller for a "
               "detour, and scatter targets that failed an op others applied")
      .Add({}, static_cast<double>(sw.route_errors()));
  out->Declare("sroute_fenced_files", MetricType::kGauge,
               "Files fenced after replicas diverged")
      .Add({}, static_cast<double>(sw.Fences().size()));

  auto& endpoint_ios =
      out->Declare("sroute_endpoint_ios_total", MetricType::kCounter,
                   "IOs sent to an endpoint");
  for (const auto& [name, n] : sw.EndpointIos()) {
    endpoint_ios.Add({{"endpoint", name}}, static_cast<double>(n));
  }
  auto& endpoint_state = out->Declare(
      "sroute_endpoint_state", MetricType::kGauge,
      "An endpoint's own gauges, e.g. an emulated flash device's free "
      "space, GC and wear (key as in sroutectl stats)");
  for (const auto& [name, endpoint] : sw.Endpoints()) {
    endpoint->Gauges(name, [&](std::string key, int64_t value) {
      endpoint_state.Add({{"key", std::move(key)}}, static_cast<double>(value));
    });
  }

  proto::ControlResponse stages;
  AddStageStats(sw, &stages);
  auto& stage_ios = out->Declare("sroute_stage_ios_total", MetricType::kCounter,
                                 "IOs submitted to a stage");
  auto& stage_in = out->Declare("sroute_stage_in_flight", MetricType::kGauge,
                                "IOs inside a stage");
  auto& stage_parked =
      out->Declare("sroute_stage_parked", MetricType::kGauge,
                   "IOs waiting for a change of a stage to end");
  auto& stage_value = out->Declare(
      "sroute_stage_state", MetricType::kGauge,
      "A stage kind's own numbers, e.g. a cache's hits and bytes per "
      "tenant (key as in sroutectl stages)");
  for (const proto::StageStats& s : stages.stages()) {
    const std::string& name = s.config().name();
    stage_ios.Add({{"stage", name}, {"kind", s.config().kind()}},
                  static_cast<double>(s.ios()));
    stage_in.Add({{"stage", name}}, static_cast<double>(s.in_flight()));
    stage_parked.Add({{"stage", name}}, static_cast<double>(s.parked()));
    std::vector<std::pair<std::string, int64_t>> counters(s.counters().begin(),
                                                          s.counters().end());
    std::sort(counters.begin(), counters.end());
    for (const auto& [key, value] : counters) {
      stage_value.Add({{"stage", name}, {"key", key}},
                      static_cast<double>(value));
    }
  }
}

}  // namespace

void AddLatencyCounts(const LatencyHistogram::Counts& buckets, uint64_t sum_ns,
                      HistogramData* h) {
  for (const auto& [bucket, count] : buckets) {
    h->Observe(static_cast<double>(LatencyHistogram::UpperEdge(bucket)) * 1e-9,
               count);
  }
  h->sum += static_cast<double>(sum_ns) * 1e-9;
}

void AddRpcServerMetrics(const RpcServer::Counters& c, Exposition* out) {
  auto counter = [out](const char* name, const char* help, uint64_t v) {
    out->Declare(name, MetricType::kCounter, help)
        .Add({}, static_cast<double>(v));
  };
  counter("sroute_rpc_connections_accepted_total", "RPC connections accepted",
          c.accepted);
  counter("sroute_rpc_connections_authenticated_total",
          "RPC connections whose peer passed the handshake", c.authenticated);
  counter("sroute_rpc_handshakes_refused_total",
          "RPC connections refused: a wrong secret, a bad or late handshake",
          c.refused);
  counter("sroute_rpc_bad_frames_total",
          "RPC connections closed for a malformed or oversized frame",
          c.bad_frames);
  out->Declare("sroute_rpc_connections_open", MetricType::kGauge,
               "RPC connections open now")
      .Add({}, static_cast<double>(c.open));
  counter("sroute_rpc_received_bytes_total",
          "Bytes received on RPC connections", c.bytes_in);
  counter("sroute_rpc_sent_bytes_total", "Bytes sent on RPC connections",
          c.bytes_out);
}

void AddSwitchMetrics(const SSwitch& sw, size_t rule_cap,
                      const ControllerAgent* agent, Exposition* out) {
  out->Declare("sroute_info", MetricType::kGauge,
               "1, labelled with the sSwitch's name")
      .Add({{"sswitch", sw.name()}}, 1);
  AddRuleMetrics(sw, rule_cap, out);
  AddSwitchState(sw, out);
  if (agent != nullptr) {
    out->Declare("sroute_controller_connected", MetricType::kGauge,
                 "1 while the host is registered with its controller")
        .Add({}, agent->connected() ? 1 : 0);
    out->Declare("sroute_delegate_rules_restored", MetricType::kGauge,
                 "Delegate-made rules restored from the servers' records "
                 "at start")
        .Add({}, static_cast<double>(agent->records_restored()));
  }
}

}  // namespace sroute
