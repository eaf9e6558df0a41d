// SPDX-License-Identifier: Apache-2.0
// PidCache: what /proc says about a caller, kept for a short time.
//
// Reading /proc per FUSE request costs several system calls (open, read,
// close) and the kernel's formatting of the file. A value is kept for
// `ttl_ns`: a process that changes it (moves to another cgroup, changes its
// groups without changing uid or gid), or a pid reused by another process
// within that time, is seen late by as much.
//
// Thread-safe.
#ifndef SROUTE_FUSE_PID_CACHE_H_
#define SROUTE_FUSE_PID_CACHE_H_

#include <sys/types.h>

#include <cstdint>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "util/clock.h"
#include "util/mutex.h"

namespace sroute {

template <typename Key, typename Value>
class PidCache {
 public:
  PidCache(uint64_t ttl_ns, size_t max_entries)
      : ttl_ns_(ttl_ns), max_entries_(max_entries) {}

  // The cached value for `key`, or read(key) (called without the lock).
  template <typename Read>
  Value Get(const Key& key, Read&& read) {
    const uint64_t now = MonotonicNanos();
    {
      MutexLock l(&mu_);
      auto it = entries_.find(key);
      if (it != entries_.end() && it->second.expires_ns > now) {
        return it->second.value;
      }
    }
    Value value = read(key);
    MutexLock l(&mu_);
    if (entries_.size() >= max_entries_) {
      absl::erase_if(entries_, [now](const auto& e) {
        return e.second.expires_ns <= now;
      });
      if (entries_.size() >= max_entries_) entries_.clear();
    }
    entries_[key] = Entry{value, now + ttl_ns_};
    return value;
  }

 private:
  struct Entry {
    Value value;
    uint64_t expires_ns = 0;
  };
  const uint64_t ttl_ns_;
  const size_t max_entries_;
  // Guards entries_. A leaf: `read` runs without it.
  Mutex mu_;
  absl::flat_hash_map<Key, Entry> entries_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sroute

#endif  // SROUTE_FUSE_PID_CACHE_H_
