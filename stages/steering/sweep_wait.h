// SPDX-License-Identifier: Apache-2.0
// How long one ProfileEndpoint call (stages/steering/sweep.h) may take at
// its host: header-only, for the callers that wait for it (the
// controller's relay, its client) without linking the stages.
#ifndef SROUTE_STAGES_STEERING_SWEEP_WAIT_H_
#define SROUTE_STAGES_STEERING_SWEEP_WAIT_H_

#include <cstdint>

#include "absl/time/time.h"
#include "proto/hostctl.pb.h"

namespace sroute {

inline constexpr uint32_t kSweepStepMs = 200;
inline constexpr uint32_t kSweepWarmupMs = 100;
inline constexpr uint32_t kSweepBudgetMs = 5000;

// The budget, one step past it at its longest (ten times its length), and
// the making of the file and the wait for a step's IOs.
inline absl::Duration ProfileSweepWait(const proto::ProfileEndpoint& r) {
  const uint32_t step = r.step_ms() == 0 ? kSweepStepMs : r.step_ms();
  const uint32_t warmup = r.warmup_ms() == 0 ? kSweepWarmupMs : r.warmup_ms();
  const uint32_t budget = r.budget_ms() == 0 ? kSweepBudgetMs : r.budget_ms();
  return absl::Milliseconds(budget) +
         absl::Milliseconds(uint64_t{10} * (warmup + step)) + absl::Seconds(90);
}

}  // namespace sroute

#endif  // SROUTE_STAGES_STEERING_SWEEP_WAIT_H_
