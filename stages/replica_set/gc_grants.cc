// SPDX-License-Identifier: Apache-2.0
#include "stages/replica_set/gc_grants.h"

#include <algorithm>

namespace sroute {

const char* GcGrantName(GcGrant grant) {
  switch (grant) {
    case GcGrant::kSoft:
      return "soft";
    case GcGrant::kRegular:
      return "regular";
    case GcGrant::kBackground:
      return "bg";
  }
  return "?";
}

void DecideGc(bool background, uint64_t now, std::vector<GcMember>& members,
              const GcGrantCalls& calls) {
  auto grant = [&](size_t i, GcGrant kind) {
    if (std::optional<uint64_t> until = calls.grant(i, kind)) {
      members[i].until_ns = *until;
    }
  };
  auto others_collect = [&](size_t self) {
    for (size_t o = 0; o < members.size(); ++o) {
      if (o != self && members[o].until_ns > now) return true;
    }
    return false;
  };
  // Regular requests first: they are always granted.
  for (size_t i = 0; i < members.size(); ++i) {
    if (!members[i].collecting && members[i].need == GcNeed::kRegular) {
      grant(i, GcGrant::kRegular);
    }
  }
  for (size_t i = 0; i < members.size(); ++i) {
    const GcMember& m = members[i];
    if (m.until_ns > now) continue;
    const bool blocked = others_collect(i);
    if (m.need == GcNeed::kSoft) {
      if (!blocked) {
        grant(i, GcGrant::kSoft);
      } else {
        calls.delayed(i);
      }
    } else if (background && m.bg_ok && !blocked) {
      grant(i, GcGrant::kBackground);
    }
    if (m.need == GcNeed::kNone) calls.no_need(i);
  }
}

}  // namespace sroute
