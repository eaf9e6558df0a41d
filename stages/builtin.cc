// The built-in stage kinds, registered by StageRegistry::Global().
#include "stages/delay/delay_stage.h"
#include "stages/stage.h"

namespace sroute {

void RegisterBuiltinStages(StageRegistry& registry) {
  RegisterDelayStage(registry);
}

}  // namespace sroute
