#include "sswitch/stats.h"

#include <time.h>

#include <bit>

namespace sroute {

uint64_t MonotonicNanos() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000u + ts.tv_nsec;
}

int LatencyHistogram::BucketOf(uint64_t ns) {
  if (ns < (uint64_t{1} << kMinShift)) return 0;
  const int msb = 63 - std::countl_zero(ns);
  const int octave = msb - kMinShift;
  if (octave >= kOctaves) return kBuckets - 1;
  const int sub = static_cast<int>((ns >> (msb - 3)) & (kSubBuckets - 1));
  return 1 + octave * kSubBuckets + sub;
}

uint64_t LatencyHistogram::UpperEdge(int bucket) {
  if (bucket == 0) return uint64_t{1} << kMinShift;
  if (bucket >= kBuckets - 1) return uint64_t{1} << (kMinShift + kOctaves);
  const int octave = (bucket - 1) / kSubBuckets;
  const int sub = (bucket - 1) % kSubBuckets;
  const int msb = octave + kMinShift;
  return (uint64_t{1} << msb) + (uint64_t(sub + 1) << (msb - 3));
}

void LatencyHistogram::Record(uint64_t ns) {
  counts_[BucketOf(ns)].fetch_add(1, std::memory_order_relaxed);
}

uint64_t LatencyHistogram::count() const {
  uint64_t n = 0;
  for (const auto& c : counts_) n += c.load(std::memory_order_relaxed);
  return n;
}

uint64_t LatencyHistogram::Percentile(double q) const {
  std::array<uint32_t, kBuckets> snap;
  uint64_t total = 0;
  for (int i = 0; i < kBuckets; ++i) {
    snap[i] = counts_[i].load(std::memory_order_relaxed);
    total += snap[i];
  }
  if (total == 0) return 0;
  uint64_t rank = static_cast<uint64_t>(q * static_cast<double>(total));
  if (rank >= total) rank = total - 1;
  uint64_t seen = 0;
  for (int i = 0; i < kBuckets; ++i) {
    seen += snap[i];
    if (seen > rank) return UpperEdge(i);
  }
  return UpperEdge(kBuckets - 1);
}

void LatencyHistogram::NonZero(Counts* out) const {
  out->clear();
  for (int i = 0; i < kBuckets; ++i) {
    const uint32_t c = counts_[i].load(std::memory_order_relaxed);
    if (c != 0) out->emplace_back(static_cast<uint16_t>(i), c);
  }
}

uint64_t LatencyHistogram::PercentileOfGrowth(const Counts& before,
                                              const Counts& now, double q) {
  // now - before, bucket by bucket (both sorted by bucket).
  Counts grown;
  size_t j = 0;
  uint64_t total = 0;
  for (const auto& [bucket, count] : now) {
    while (j < before.size() && before[j].first < bucket) ++j;
    const uint32_t was =
        j < before.size() && before[j].first == bucket ? before[j].second : 0;
    if (count > was) {
      grown.emplace_back(bucket, count - was);
      total += count - was;
    }
  }
  if (total == 0) return 0;
  uint64_t rank = static_cast<uint64_t>(q * static_cast<double>(total));
  if (rank >= total) rank = total - 1;
  uint64_t seen = 0;
  for (const auto& [bucket, count] : grown) {
    seen += count;
    if (seen > rank) return UpperEdge(bucket);
  }
  return UpperEdge(grown.back().first);
}

void RuleCounters::Finish(OpClass cls, uint64_t bytes, bool error,
                          uint64_t latency_ns) {
  class_bytes_[Slot(cls)].fetch_add(bytes, std::memory_order_relaxed);
  in_flight_.fetch_sub(1, std::memory_order_relaxed);
  if (error) errors_.fetch_add(1, std::memory_order_relaxed);
  LatencyHistogram* h = latency_.load(std::memory_order_acquire);
  if (h == nullptr) {
    auto* fresh = new LatencyHistogram();
    if (latency_.compare_exchange_strong(h, fresh, std::memory_order_acq_rel)) {
      h = fresh;
    } else {
      delete fresh;
    }
  }
  h->Record(latency_ns);
}

uint64_t RuleCounters::ops() const {
  return class_ops_[0].load(std::memory_order_relaxed) +
         class_ops_[1].load(std::memory_order_relaxed) +
         class_ops_[2].load(std::memory_order_relaxed);
}

void RuleCounters::LatencyCounts(LatencyHistogram::Counts* out) const {
  out->clear();
  if (const LatencyHistogram* h = latency_.load(std::memory_order_acquire)) {
    h->NonZero(out);
  }
}

RuleCountersSnapshot RuleCounters::Read(bool percentiles) const {
  RuleCountersSnapshot s;
  s.reads = class_ops_[0].load(std::memory_order_relaxed);
  s.writes = class_ops_[1].load(std::memory_order_relaxed);
  s.others = class_ops_[2].load(std::memory_order_relaxed);
  s.ops = s.reads + s.writes + s.others;
  s.read_bytes = class_bytes_[0].load(std::memory_order_relaxed);
  s.write_bytes = class_bytes_[1].load(std::memory_order_relaxed);
  s.bytes = s.read_bytes + s.write_bytes +
            class_bytes_[2].load(std::memory_order_relaxed);
  s.in_flight = in_flight_.load(std::memory_order_relaxed);
  s.errors = errors_.load(std::memory_order_relaxed);
  const LatencyHistogram* h =
      percentiles ? latency_.load(std::memory_order_acquire) : nullptr;
  if (h != nullptr) {
    s.p50_ns = h->Percentile(0.5);
    s.p99_ns = h->Percentile(0.99);
    s.p999_ns = h->Percentile(0.999);
  }
  return s;
}

}  // namespace sroute
