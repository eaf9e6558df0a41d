#include "tools/sroutectl/target.h"

#include <map>
#include <string>

#include "stages/stage_spec.h"
#include "tools/sroutectl/format.h"

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

std::vector<std::string> StagesJson(
    const google::protobuf::RepeatedPtrField<proto::StageStats>& stages,
    const std::string& sswitch) {
  std::vector<std::string> out;
  for (const proto::StageStats& s : stages) {
    JsonObject counters;
    for (const auto& [name, value] : Counters(s)) {
      counters.emplace_back(name, std::to_string(value));
    }
    JsonObject o;
    if (!sswitch.empty()) o.emplace_back("sswitch", JsonString(sswitch));
    o.emplace_back("name", JsonString(s.config().name()));
    o.emplace_back("kind", JsonString(s.config().kind()));
    o.emplace_back("options", JsonString(FormatStageOptions(s.config())));
    o.emplace_back("ios", std::to_string(s.ios()));
    o.emplace_back("in_flight", std::to_string(s.in_flight()));
    o.emplace_back("parked", std::to_string(s.parked()));
    o.emplace_back("counters", ToJson(counters));
    out.push_back(ToJson(o));
  }
  return out;
}

}  // namespace sroute::ctl
