// SPDX-License-Identifier: Apache-2.0
// Which garbage collection a replica set grants its members' devices at one
// poll (RackBlox §3.5): a device in mode=coordinated asks (soft: it could
// use a pass; regular: it must), and the set grants so that two replicas
// of one page seldom collect at once. The replica_set stage's GC loop
// (stages/replica_set/gc.cc) and sroute-sim's replica sets both decide
// with it, so the simulation grants what the stage would.
//
//   std::vector<GcMember> members = ...;  // each device's state now
//   DecideGc(/*background=*/true, now, members, {.grant = ..., ...});
//
// Thread safety: a plain function of its arguments.
#ifndef SROUTE_STAGES_REPLICA_SET_GC_GRANTS_H_
#define SROUTE_STAGES_REPLICA_SET_GC_GRANTS_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/functional/function_ref.h"
#include "endpoints/flash_model.h"

namespace sroute {

// A member's device as the set sees it at a poll.
struct GcMember {
  GcNeed need = GcNeed::kNone;
  bool collecting = false;  // a pass is under way
  bool bg_ok = false;       // it foresees idle time worth a background pass
  uint64_t until_ns = 0;    // when its collection ends (past: it does not)
};

enum class GcGrant : uint8_t { kSoft, kRegular, kBackground };
// "soft", "regular", "bg": the words the flash device's control takes.
const char* GcGrantName(GcGrant grant);

struct GcGrantCalls {
  // Starts `kind` on member `i`; returns when its collection now ends, or
  // nullopt if the grant failed (the member keeps its state).
  absl::FunctionRef<std::optional<uint64_t>(size_t i, GcGrant kind)> grant;
  // Member `i` asked for soft GC and waits: another member collects.
  absl::FunctionRef<void(size_t i)> delayed;
  // Member `i` needs no GC (a later soft request is a new one).
  absl::FunctionRef<void(size_t i)> no_need;
};

// One poll at `now`: every regular request is granted; then each member
// not collecting gets its soft request granted when no other member
// collects (else it is delayed), and with `background` a background pass
// when it foresees idle time and no other member collects. A grant updates
// the member's until_ns, so the members after it see it collect.
void DecideGc(bool background, uint64_t now, std::vector<GcMember>& members,
              const GcGrantCalls& calls);

}  // namespace sroute

#endif  // SROUTE_STAGES_REPLICA_SET_GC_GRANTS_H_
