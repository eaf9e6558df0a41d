// SPDX-License-Identifier: Apache-2.0
#include "util/interned.h"

#include "absl/container/node_hash_set.h"
#include "util/mutex.h"

namespace sroute {

const std::string* InternName(std::string_view text) {
  static Mutex mu;
  // Never freed: the pointers handed out stay valid until the process ends.
  static auto* names = new absl::node_hash_set<std::string>;
  MutexLock l(&mu);
  return &*names->emplace(text).first;
}

}  // namespace sroute
