// SPDX-License-Identifier: Apache-2.0
// The built-in stage kinds (and the delegates that go with them),
// registered by StageRegistry::Global().
#include "sswitch/delegate.h"
#include "stages/cache/cache_stage.h"
#include "stages/cache/shards_delegate.h"
#include "stages/delay/delay_stage.h"
#include "stages/qos/qos_stage.h"
#include "stages/replica_set/replica_set_stage.h"
#include "stages/stage.h"

namespace sroute {

void RegisterBuiltinStages(StageRegistry& registry) {
  RegisterCacheStage(registry);
  RegisterDelayStage(registry);
  RegisterQosStage(registry);
  RegisterReplicaSetStage(registry);
  // Delegates that belong with stages (they are registered with the stage
  // kinds, before any host loads rules: HostRuntime::AddStages).
  RegisterShardsDelegate(DelegateRegistry::Global());
}

}  // namespace sroute
