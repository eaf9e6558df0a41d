// SPDX-License-Identifier: Apache-2.0
#include "tools/sroutectl/target.h"

#include <cstdio>
#include <map>
#include <string>

#include "stages/stage_spec.h"
#include "tools/sroutectl/format.h"
#include "tools/sroutectl/json_output.h"

namespace sroute::ctl {

absl::Status NotReached(const absl::Status& s) {
  return absl::UnavailableError(std::string(s.message()));
}

absl::Status Refused(const absl::Status& s) {
  // Aborted: the call was made and did not complete.
  return absl::IsUnavailable(s) ? absl::AbortedError(std::string(s.message()))
                                : s;
}

}  // namespace sroute::ctl

namespace sroute::ctl {
namespace {

std::map<std::string, int64_t> Counters(const proto::StageStats& s) {
  return {s.counters().begin(), s.counters().end()};
}

}  // namespace

std::string StagesText(
    const google::protobuf::RepeatedPtrField<proto::StageStats>& stages,
    const std::string& sswitch) {
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> head = {"STAGE",     "KIND",   "IOS",
                                   "IN_FLIGHT", "PARKED", "OPTIONS"};
  if (!sswitch.empty()) head.insert(head.begin(), "SSWITCH");
  rows.push_back(head);
  std::string counters;
  for (const proto::StageStats& s : stages) {
    std::vector<std::string> row = {
        s.config().name(),          s.config().kind(),
        std::to_string(s.ios()),    std::to_string(s.in_flight()),
        std::to_string(s.parked()), FormatStageOptions(s.config())};
    if (!sswitch.empty()) row.insert(row.begin(), sswitch);
    rows.push_back(row);
    if (s.counters().empty()) continue;
    // A line for the stage's own counters, then one per group ("alice.hits"
    // is counter "hits" of partition alice).
    std::map<std::string, std::string> lines;
    for (const auto& [name, value] : Counters(s)) {
      const size_t dot = name.rfind('.');
      const std::string group =
          dot == std::string::npos ? "" : " " + name.substr(0, dot);
      lines[group] += " " +
                      name.substr(dot == std::string::npos ? 0 : dot + 1) +
                      " " + std::to_string(value);
    }
    for (const auto& [group, line] : lines) {
      counters += "stage " + s.config().name() + group + ":" + line + "\n";
    }
  }
  if (stages.empty()) return "";
  return Table(rows) + counters;
}

namespace {

// Nanoseconds as microseconds with one decimal.
std::string Micros(uint64_t ns) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f us", static_cast<double>(ns) / 1000);
  return buf;
}

std::string CodeName(int32_t code) {
  return code == 0
             ? "ok"
             : absl::StatusCodeToString(static_cast<absl::StatusCode>(code));
}

}  // namespace

namespace {

// One IO's line and its hops' lines.
std::string RecordText(const proto::TraceRecord& t) {
  std::string text = "#" + std::to_string(t.seq()) + " " + t.op() + " " +
                     t.file() + " [" + std::to_string(t.offset()) + "+" +
                     std::to_string(t.length()) + "] tenant " + t.source() +
                     ", rule " + std::to_string(t.rule_id()) + ": " +
                     Micros(t.end_ns() - t.start_ns()) + ", " +
                     CodeName(t.code()) + "\n";
  for (const proto::TraceHop& h : t.hops()) {
    // "HOST rule N -> NEXT" for a rule's hop, "HOST KIND -> NEXT (rule
    // N)" for the others.
    text += std::string(2 + 2 * h.depth(), ' ') + h.host() + " " + h.kind();
    const std::string rule = std::to_string(h.rule_id());
    if (h.kind() == "rule") text += " " + rule;
    text += " -> " + h.next();
    if (h.kind() != "rule" && h.rule_id() != 0) text += " (rule " + rule + ")";
    text += ": " + Micros(h.end_ns() - h.start_ns());
    if (h.code() != 0) text += ", " + CodeName(h.code());
    text += "\n";
  }
  if (t.hops_dropped() > 0) {
    text += "  (" + std::to_string(t.hops_dropped()) + " more hops not kept)\n";
  }
  return text;
}

}  // namespace

Report TracesReport(const proto::ControlResponse& resp) {
  Report report;
  proto::CtlTraces json;
  for (const proto::TraceRecord& t : resp.traces()) {
    *json.add_traces() = CtlTraceOf(t);
    report.text += RecordText(t);
  }
  json.set_traces_sampled(resp.traces_sampled());
  report.json = ToJson(json);
  return report;
}

Report SlowOpsReport(const proto::ControlResponse& resp) {
  Report report;
  report.text = "slow: " + std::to_string(resp.slow_total()) +
                " IOs at or over " + Micros(resp.slow_threshold_ns()) + " (" +
                std::to_string(resp.slow_overwritten()) +
                " let go by the recent list)\n";
  report.text += "recent:\n";
  for (const proto::TraceRecord& t : resp.slow_recent()) {
    report.text += RecordText(t);
  }
  report.text += "longest:\n";
  for (const proto::TraceRecord& t : resp.slow_top()) {
    report.text += RecordText(t);
  }
  report.json = ToJson(CtlSlowOpsOf(resp));
  return report;
}

}  // namespace sroute::ctl
