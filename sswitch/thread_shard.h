// Thread shards: state that every IO updates is kept in shards, handed to
// threads in turn as they first ask (so threads share one only after
// kThreadShards threads came), so that threads on different CPUs rarely
// write to the same cache line (internal to sswitch/).
#ifndef SROUTE_SSWITCH_THREAD_SHARD_H_
#define SROUTE_SSWITCH_THREAD_SHARD_H_

#include <sched.h>

#include <atomic>
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

}  // namespace sroute

#endif  // SROUTE_SSWITCH_THREAD_SHARD_H_
