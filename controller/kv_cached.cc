// SPDX-License-Identifier: Apache-2.0
// CachedKv: a KvStore with every key in memory (controller/kv.h).
#include <map>

#include "controller/kv.h"
#include "util/mutex.h"

namespace sroute {

struct CachedKv::State {
  std::unique_ptr<KvStore> inner;
  mutable Mutex mu;  // a leaf
  bool loaded ABSL_GUARDED_BY(mu) = false;
  std::map<std::string, std::string> copy ABSL_GUARDED_BY(mu);
};

CachedKv::CachedKv(std::unique_ptr<KvStore> inner) : state_(new State) {
  state_->inner = std::move(inner);
}

CachedKv::~CachedKv() = default;

absl::Status CachedKv::Refresh() {
  auto all = state_->inner->Scan("");
  MutexLock l(&state_->mu);
  state_->copy.clear();
  state_->loaded = false;
  if (!all.ok()) return all.status();
  for (auto& [key, value] : *all) state_->copy.emplace(key, std::move(value));
  state_->loaded = true;
  return absl::OkStatus();
}

absl::StatusOr<std::optional<std::string>> CachedKv::Get(
    const std::string& key) const {
  {
    MutexLock l(&state_->mu);
    if (state_->loaded) {
      auto it = state_->copy.find(key);
      if (it == state_->copy.end()) return std::nullopt;
      return it->second;
    }
  }
  return state_->inner->Get(key);
}

absl::StatusOr<std::vector<std::pair<std::string, std::string>>> CachedKv::Scan(
    const std::string& prefix, bool keys_only) const {
  {
    MutexLock l(&state_->mu);
    if (state_->loaded) {
      std::vector<std::pair<std::string, std::string>> out;
      for (auto it = state_->copy.lower_bound(prefix);
           it != state_->copy.end() && it->first.starts_with(prefix); ++it) {
        out.emplace_back(it->first, keys_only ? std::string() : it->second);
      }
      return out;
    }
  }
  return state_->inner->Scan(prefix, keys_only);
}

absl::Status CachedKv::Apply(const std::vector<Write>& writes, bool durable) {
  if (absl::Status s = state_->inner->Apply(writes, durable); !s.ok()) {
    return s;
  }
  MutexLock l(&state_->mu);
  for (const Write& w : writes) {
    if (w.value) {
      state_->copy[w.key] = *w.value;
    } else {
      state_->copy.erase(w.key);
    }
  }
  return absl::OkStatus();
}

std::string CachedKv::Describe() const { return state_->inner->Describe(); }

}  // namespace sroute
