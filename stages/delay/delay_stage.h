// SPDX-License-Identifier: Apache-2.0
// Stage kind "delay": holds each IO DelayOptions.delay_us before handing it
// back to the sSwitch (a slower link or device, for experiments and tests);
// with 0 it hands IOs back at once and only counts them.
#ifndef SROUTE_STAGES_DELAY_DELAY_STAGE_H_
#define SROUTE_STAGES_DELAY_DELAY_STAGE_H_

#include "stages/stage.h"

namespace sroute {

void RegisterDelayStage(StageRegistry& registry);

}  // namespace sroute

#endif  // SROUTE_STAGES_DELAY_DELAY_STAGE_H_
