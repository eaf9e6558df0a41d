// The built-in stage kinds, registered by StageRegistry::Global().
#include "stages/cache/cache_stage.h"
#include "stages/delay/delay_stage.h"
#include "stages/stage.h"

namespace sroute {

void RegisterBuiltinStages(StageRegistry& registry) {
  RegisterCacheStage(registry);
  RegisterDelayStage(registry);
}

}  // namespace sroute
