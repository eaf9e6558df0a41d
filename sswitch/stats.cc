// SPDX-License-Identifier: Apache-2.0
#include "sswitch/stats.h"

#include <time.h>

#include <algorithm>
#include <bit>
#include <memory>
#include <thread>

#include "util/thread_shard.h"

namespace sroute {

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
  sum_ns_.fetch_add(ns, std::memory_order_relaxed);
  counts_[BucketOf(ns)].fetch_add(1, std::memory_order_relaxed);
}

void LatencyHistogram::Add(const LatencyHistogram& other) {
  sum_ns_.fetch_add(other.sum_ns(), std::memory_order_relaxed);
  for (int i = 0; i < kBuckets; ++i) {
    const uint32_t c = other.counts_[i].load(std::memory_order_relaxed);
    if (c != 0) counts_[i].fetch_add(c, std::memory_order_relaxed);
  }
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

namespace {

int ClassSlot(OpClass cls) {
  return cls == kOpClassRead ? 0 : cls == kOpClassWrite ? 1 : 2;
}

// Slots per rule: the CPUs, rounded up to a power of two, at most
// kThreadShards.
int SlotCount() {
  static const int n = [] {
    const unsigned cpus = std::max(1u, std::thread::hardware_concurrency());
    return static_cast<int>(
        std::bit_ceil(std::min(cpus, static_cast<unsigned>(kThreadShards))));
  }();
  return n;
}

// The object at `p`, or, while `p` is null, the one `make` returns (a
// std::unique_ptr) installed there; a thread that loses the race to install
// frees its own.
template <typename T, typename Make>
T* LoadOrInstall(std::atomic<T*>& p, Make make) {
  T* current = p.load(std::memory_order_acquire);
  if (current != nullptr) return current;
  auto fresh = make();
  if (p.compare_exchange_strong(current, fresh.get(),
                                std::memory_order_acq_rel)) {
    return fresh.release();
  }
  return current;
}

// The slot of the calling thread's CPU: threads on one CPU share one (they
// take turns on it anyway), threads on two never do while there are no more
// CPUs than slots.
int LocalSlot() { return CpuShard() & (SlotCount() - 1); }

}  // namespace

// One CPU slot's counters, in one cache line: an IO touches this line and
// one line of the slot's histogram.
struct alignas(64) RuleCounters::Slot {
  ~Slot() { delete latency.load(); }
  // The slot's histogram, made on its first use.
  LatencyHistogram& Latency() {
    return *LoadOrInstall(latency,
                          [] { return std::make_unique<LatencyHistogram>(); });
  }

  // By class: 0 reads, 1 writes, 2 creates and deletes.
  std::array<std::atomic<uint64_t>, 3> class_ops{};
  std::array<std::atomic<uint64_t>, 3> class_bytes{};
  std::atomic<uint64_t> errors{0};
  // No count in flight: it is the ops less the latencies recorded, which
  // saves two atomic updates per IO.
  std::atomic<LatencyHistogram*> latency{nullptr};
};

RuleCounters::~RuleCounters() {
  delete[] slots_.load(std::memory_order_relaxed);
}

RuleCounters::Slot& RuleCounters::LocalSlot() {
  static_assert(sizeof(Slot) == 64);
  Slot* s = LoadOrInstall(slots_,
                          [] { return std::make_unique<Slot[]>(SlotCount()); });
  return s[sroute::LocalSlot()];
}

void RuleCounters::Start(OpClass cls) {
  LocalSlot().class_ops[ClassSlot(cls)].fetch_add(1, std::memory_order_relaxed);
}

void RuleCounters::Finish(OpClass cls, uint64_t bytes, bool error,
                          uint64_t latency_ns) {
  Slot& slot = LocalSlot();
  slot.class_bytes[ClassSlot(cls)].fetch_add(bytes, std::memory_order_relaxed);
  if (error) slot.errors.fetch_add(1, std::memory_order_relaxed);
  slot.Latency().Record(latency_ns);
}

bool RuleCounters::MergedLatency(LatencyHistogram* out) const {
  const Slot* s = slots_.load(std::memory_order_acquire);
  if (s == nullptr) return false;
  bool any = false;
  for (int i = 0; i < SlotCount(); ++i) {
    if (const LatencyHistogram* h =
            s[i].latency.load(std::memory_order_acquire)) {
      out->Add(*h);
      any = true;
    }
  }
  return any;
}

uint64_t RuleCounters::ops() const {
  const Slot* s = slots_.load(std::memory_order_acquire);
  if (s == nullptr) return 0;
  uint64_t n = 0;
  for (int i = 0; i < SlotCount(); ++i) {
    for (const auto& c : s[i].class_ops) n += c.load(std::memory_order_relaxed);
  }
  return n;
}

void RuleCounters::LatencyCounts(LatencyHistogram::Counts* out) const {
  out->clear();
  LatencyHistogram merged;
  if (MergedLatency(&merged)) merged.NonZero(out);
}

uint64_t RuleCounters::LatencySumNs() const {
  const Slot* s = slots_.load(std::memory_order_acquire);
  if (s == nullptr) return 0;
  uint64_t sum = 0;
  for (int i = 0; i < SlotCount(); ++i) {
    if (const LatencyHistogram* h =
            s[i].latency.load(std::memory_order_acquire)) {
      sum += h->sum_ns();
    }
  }
  return sum;
}

RuleCountersSnapshot RuleCounters::Read(bool percentiles) const {
  RuleCountersSnapshot out;
  const Slot* s = slots_.load(std::memory_order_acquire);
  if (s == nullptr) return out;
  // Completions before starts: an IO counted as finished was started.
  LatencyHistogram merged;
  const bool any_latency = MergedLatency(&merged);
  const uint64_t finished = merged.count();
  for (int i = 0; i < SlotCount(); ++i) {
    const Slot& slot = s[i];
    out.reads += slot.class_ops[0].load(std::memory_order_relaxed);
    out.writes += slot.class_ops[1].load(std::memory_order_relaxed);
    out.others += slot.class_ops[2].load(std::memory_order_relaxed);
    out.read_bytes += slot.class_bytes[0].load(std::memory_order_relaxed);
    out.write_bytes += slot.class_bytes[1].load(std::memory_order_relaxed);
    out.bytes += slot.class_bytes[2].load(std::memory_order_relaxed);
    out.errors += slot.errors.load(std::memory_order_relaxed);
  }
  out.ops = out.reads + out.writes + out.others;
  out.bytes += out.read_bytes + out.write_bytes;
  out.in_flight = static_cast<int64_t>(out.ops - std::min(out.ops, finished));
  if (percentiles && any_latency) {
    out.p50_ns = merged.Percentile(0.5);
    out.p99_ns = merged.Percentile(0.99);
    out.p999_ns = merged.Percentile(0.999);
  }
  return out;
}

}  // namespace sroute
