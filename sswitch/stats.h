// Per-rule counters: ops, bytes, in flight, errors and a latency histogram.
#ifndef SROUTE_SSWITCH_STATS_H_
#define SROUTE_SSWITCH_STATS_H_

#include <array>
#include <atomic>
#include <cstdint>

namespace sroute {

// A log-linear histogram of latencies in nanoseconds: 8 buckets per power of
// two from 64 ns to about 69 s, so a percentile is within 1/8 of the truth.
// Thread-safe; lock-free.
class LatencyHistogram {
 public:
  static constexpr int kSubBuckets = 8;
  static constexpr int kMinShift = 6;  // 64 ns
  static constexpr int kOctaves = 30;  // up to 2^36 ns
  static constexpr int kBuckets = kOctaves * kSubBuckets + 2;

  void Record(uint64_t ns);
  // q in [0, 1]; 0 when nothing was recorded. Returns the bucket's upper edge.
  uint64_t Percentile(double q) const;
  uint64_t count() const;

 private:
  static int BucketOf(uint64_t ns);
  static uint64_t UpperEdge(int bucket);
  std::array<std::atomic<uint32_t>, kBuckets> counts_{};
};

struct RuleCountersSnapshot {
  uint64_t ops = 0;
  uint64_t bytes = 0;
  int64_t in_flight = 0;
  uint64_t errors = 0;
  uint64_t p50_ns = 0;
  uint64_t p99_ns = 0;
  uint64_t p999_ns = 0;
};

class RuleCounters {
 public:
  RuleCounters() = default;
  ~RuleCounters() { delete latency_.load(std::memory_order_relaxed); }
  RuleCounters(const RuleCounters&) = delete;
  RuleCounters& operator=(const RuleCounters&) = delete;

  void Start() {
    ops_.fetch_add(1, std::memory_order_relaxed);
    in_flight_.fetch_add(1, std::memory_order_relaxed);
  }
  void Finish(uint64_t bytes, bool error, uint64_t latency_ns);
  RuleCountersSnapshot Read() const;

 private:
  std::atomic<uint64_t> ops_{0};
  std::atomic<uint64_t> bytes_{0};
  std::atomic<int64_t> in_flight_{0};
  std::atomic<uint64_t> errors_{0};
  // Allocated on the first completion: most delegate-created rules see few
  // IOs, and a histogram is about 1 KiB.
  std::atomic<LatencyHistogram*> latency_{nullptr};
};

uint64_t MonotonicNanos();

}  // namespace sroute

#endif  // SROUTE_SSWITCH_STATS_H_
