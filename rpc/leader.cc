// SPDX-License-Identifier: Apache-2.0
#include "rpc/leader.h"

#include "absl/strings/cord.h"
#include "util/strings.h"

namespace sroute {
namespace {

constexpr char kLeaderPayload[] = "sroute/leader";

}  // namespace

absl::Status NotLeaderError(std::string_view self, std::string_view leader,
                            std::string_view why) {
  std::string message =
      leader.empty()
          ? StrCat("controller ", self, " does not lead and no controller ",
                   "leads yet (an election is under way)")
          : StrCat("controller ", self, " does not lead; the leader is at ",
                   leader);
  if (!why.empty()) StrAppend(&message, ": ", why);
  absl::Status s = absl::UnavailableError(message);
  return WithLeader(std::move(s), leader);
}

absl::Status WithLeader(absl::Status s, std::string_view leader) {
  if (!s.ok()) s.SetPayload(kLeaderPayload, absl::Cord(std::string(leader)));
  return s;
}

bool IsNotLeader(const absl::Status& s) {
  return s.GetPayload(kLeaderPayload).has_value();
}

std::string LeaderOf(const absl::Status& s) {
  if (auto p = s.GetPayload(kLeaderPayload)) return std::string(*p);
  return std::string();
}

}  // namespace sroute
