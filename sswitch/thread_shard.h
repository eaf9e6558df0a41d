// Thread shards: state that every IO updates is kept in shards, handed to
// threads in turn as they first ask (so threads share one only after
// kThreadShards threads came), so that threads on different CPUs rarely
// write to the same cache line (internal to sswitch/).
#ifndef SROUTE_SSWITCH_THREAD_SHARD_H_
#define SROUTE_SSWITCH_THREAD_SHARD_H_

#include <atomic>

namespace sroute {

inline constexpr int kThreadShards = 16;

// The calling thread's shard, in [0, kThreadShards).
inline int ThreadShard() {
  static std::atomic<int> next{0};
  thread_local int shard = next.fetch_add(1) % kThreadShards;
  return shard;
}

}  // namespace sroute

#endif  // SROUTE_SSWITCH_THREAD_SHARD_H_
