// SPDX-License-Identifier: Apache-2.0
// Per-rule counters: ops, bytes, in flight, errors and a latency histogram.
#ifndef SROUTE_SSWITCH_STATS_H_
#define SROUTE_SSWITCH_STATS_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <utility>
#include <vector>

#include "rules/io_header.h"
#include "util/clock.h"

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
  // Adds `other`'s counts to these.
  void Add(const LatencyHistogram& other);
  // q in [0, 1]; 0 when nothing was recorded. Returns the bucket's upper edge.
  uint64_t Percentile(double q) const;
  uint64_t count() const;
  // Every latency recorded, added up (ns).
  uint64_t sum_ns() const { return sum_ns_.load(std::memory_order_relaxed); }
  // Bucket `bucket` holds latencies below this many ns (and at least the
  // edge of the bucket before).
  static uint64_t UpperEdge(int bucket);

  // The buckets that hold any count, as (bucket, count), for percentiles of
  // an interval: the difference of two of these (see PercentileOfGrowth).
  using Counts = std::vector<std::pair<uint16_t, uint32_t>>;
  void NonZero(Counts* out) const;
  // The q-percentile of what `now` recorded beyond `before` (both from
  // NonZero, sorted by bucket); 0 if nothing.
  static uint64_t PercentileOfGrowth(const Counts& before, const Counts& now,
                                     double q);

 private:
  static int BucketOf(uint64_t ns);
  std::atomic<uint64_t> sum_ns_{0};
  std::array<std::atomic<uint32_t>, kBuckets> counts_{};
};

struct RuleCountersSnapshot {
  uint64_t ops = 0;
  uint64_t bytes = 0;
  // By op class (docs/design.md §1): ops of class r, w, and c or d; bytes read
  // and written.
  uint64_t reads = 0;
  uint64_t writes = 0;
  uint64_t others = 0;
  uint64_t read_bytes = 0;
  uint64_t write_bytes = 0;
  int64_t in_flight = 0;
  uint64_t errors = 0;
  uint64_t p50_ns = 0;
  uint64_t p99_ns = 0;
  uint64_t p999_ns = 0;
};

// Thread-safe; lock-free. Every IO a rule routes updates its counters
// twice, from whichever threads serve it: they are kept in one cache line per
// CPU (up to 16), so that threads on different CPUs routing through one
// rule do not take turns owning one line. The lines (and a latency
// histogram per line) are allocated at the rule's first IO: most
// delegate-made rules see few IOs, if any.
class RuleCounters {
 public:
  RuleCounters() = default;
  ~RuleCounters();
  RuleCounters(const RuleCounters&) = delete;
  RuleCounters& operator=(const RuleCounters&) = delete;

  void Start(OpClass cls);
  void Finish(OpClass cls, uint64_t bytes, bool error, uint64_t latency_ns);
  // Sums over the slots; with percentiles=false the p* fields stay 0
  // (cheaper).
  RuleCountersSnapshot Read(bool percentiles = true) const;
  // Ops started, all classes.
  uint64_t ops() const;
  // The latency buckets (empty before the first completion).
  void LatencyCounts(LatencyHistogram::Counts* out) const;
  // Every completion's latency added up (ns).
  uint64_t LatencySumNs() const;

 private:
  struct Slot;
  Slot& LocalSlot();
  // Every slot's histogram added up into *out; false if none has one yet.
  bool MergedLatency(LatencyHistogram* out) const;

  std::atomic<Slot*> slots_{nullptr};  // SlotCount() of them, or null
};

}  // namespace sroute

#endif  // SROUTE_SSWITCH_STATS_H_
