// SPDX-License-Identifier: Apache-2.0
// Thread shards: state that every IO updates is kept in shards, handed to
// threads in turn as they first ask (so threads share one only after
// kThreadShards threads came), so that threads on different CPUs rarely
// write to the same cache line.
#ifndef SROUTE_UTIL_THREAD_SHARD_H_
#define SROUTE_UTIL_THREAD_SHARD_H_

#include <sched.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>

namespace sroute {

inline constexpr int kThreadShards = 16;

// The calling thread's shard, in [0, kThreadShards).
inline int ThreadShard() {
  static std::atomic<int> next{0};
  thread_local int shard = next.fetch_add(1) % kThreadShards;
  return shard;
}

// The shard of the CPU the calling thread runs on, in [0, kThreadShards):
// for counters that every thread may update, whatever threads there are
// (sched_getcpu reads the kernel's rseq area: a few ns).
inline int CpuShard() {
  const int cpu = sched_getcpu();
  return cpu < 0 ? 0 : cpu % kThreadShards;
}

// Another reference to `*p` with a reference count of its own, for a shard
// to hand out: copying it touches only that count (whose cache line the
// shard's threads share) instead of the one every thread shares, and it
// keeps `p` alive until its last copy is gone.
template <typename T>
std::shared_ptr<T> ShardLocalRef(std::shared_ptr<T> p) {
  auto holder = std::make_shared<std::shared_ptr<T>>(std::move(p));
  T* raw = holder->get();
  return std::shared_ptr<T>(std::move(holder), raw);
}

// N counters that any thread adds to and a reader sums: one block of them
// per CPU shard, so that an add touches a line only threads of its CPU
// write (a few ns, where one shared atomic costs a line transfer per add
// once two CPUs add). Thread-safe; lock-free; reads are not a snapshot
// across counters.
template <size_t N>
class ShardedCounters {
 public:
  void Add(size_t i, uint64_t n = 1) {
    shards_[CpuShard()].v[i].fetch_add(n, std::memory_order_relaxed);
  }
  uint64_t Read(size_t i) const {
    uint64_t sum = 0;
    for (const Shard& s : shards_)
      sum += s.v[i].load(std::memory_order_relaxed);
    return sum;
  }

 private:
  struct alignas(64) Shard {
    std::array<std::atomic<uint64_t>, N> v{};
  };
  std::array<Shard, kThreadShards> shards_{};
};

}  // namespace sroute

#endif  // SROUTE_UTIL_THREAD_SHARD_H_
