// SPDX-License-Identifier: Apache-2.0
// Delegate shards(rate=R, block=B[, writes=1]): samples the blocks a rule's
// IOs read (and write, with writes=1) with SHARDS spatial hashing
// (shards.h) and emits the sampled block keys, for the controller's
// cache_sizing app to build the miss-ratio curve of the rule's tenant. It
// never changes where an IO goes.
//
// An IO with at least one sampled block emits
//   "shards v=1 rate=R refs=N keys=K1,K2,..."
// with N the references (blocks) this rule counted so far (cumulative, so
// a lost event loses no count) and K the sampled keys (BlockKey of file and
// block, hex), in block order. Fixed-size sampling, when wanted, is applied
// at the controller over these keys.
#ifndef SROUTE_STAGES_CACHE_SHARDS_DELEGATE_H_
#define SROUTE_STAGES_CACHE_SHARDS_DELEGATE_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "sswitch/delegate.h"

namespace sroute {

void RegisterShardsDelegate(DelegateRegistry& registry);

// One emitted sample, parsed (the app's side).
struct ShardsSample {
  double rate = 0;
  uint64_t refs = 0;  // cumulative references of the rule
  std::vector<uint64_t> keys;
};
absl::StatusOr<ShardsSample> ParseShardsSample(std::string_view value);

}  // namespace sroute

#endif  // SROUTE_STAGES_CACHE_SHARDS_DELEGATE_H_
