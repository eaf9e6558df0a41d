// SPDX-License-Identifier: Apache-2.0
// The cache's eviction policies (stages/cache/block_cache.h) against naive
// reference models on random traces, and the metadata figure.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <deque>
#include <list>
#include <map>
#include <random>
#include <set>

#include "gtest/gtest.h"
#include "stages/cache/block_cache.h"
#include "tests/util/zipf.h"

namespace sroute {
namespace {

// O(n) LRU: front is the newest.
class RefLru {
 public:
  explicit RefLru(size_t capacity) : capacity_(capacity) {}
  // True on a hit; on a miss inserts (evicting the oldest).
  bool Access(uint64_t key) {
    auto it = std::find(list_.begin(), list_.end(), key);
    if (it != list_.end()) {
      list_.erase(it);
      list_.push_front(key);
      return true;
    }
    if (capacity_ == 0) return false;
    if (list_.size() >= capacity_) {
      list_.pop_back();
      ++evictions;
    }
    list_.push_front(key);
    return false;
  }
  std::set<uint64_t> Keys() const { return {list_.begin(), list_.end()}; }
  uint64_t evictions = 0;

 private:
  size_t capacity_;
  std::list<uint64_t> list_;
};

// S3-FIFO as the paper's Algorithm 1 reads, written plainly: small queue
// S (10% of the capacity, at least 1), main queue M, ghost queue G of up
// to `capacity` keys; a hit bumps a counter capped at 3; eviction from S
// moves blocks read since insertion to M (counter reset) and sends the
// rest to G; eviction from M reinserts blocks with a counter (minus one).
class RefS3Fifo {
 public:
  explicit RefS3Fifo(size_t capacity)
      : capacity_(capacity), small_cap_(std::max<size_t>(1, capacity / 10)) {}
  bool Access(uint64_t key) {
    if (freq_.contains(key)) {
      freq_[key] = std::min(freq_[key] + 1, 3);
      return true;
    }
    if (capacity_ == 0) return false;
    while (s_.size() + m_.size() >= capacity_) Evict();
    auto g = std::find(g_.begin(), g_.end(), key);
    if (g != g_.end()) {
      g_.erase(g);
      m_.push_front(key);
    } else {
      s_.push_front(key);
    }
    freq_[key] = 0;
    return false;
  }
  std::set<uint64_t> Keys() const {
    std::set<uint64_t> out(s_.begin(), s_.end());
    out.insert(m_.begin(), m_.end());
    return out;
  }
  uint64_t evictions = 0;

 private:
  void Evict() {
    if (s_.size() >= small_cap_) {
      while (!s_.empty()) {
        const uint64_t t = s_.back();
        s_.pop_back();
        if (freq_[t] >= 1) {
          freq_[t] = 0;
          m_.push_front(t);
          continue;
        }
        freq_.erase(t);
        g_.push_back(t);
        if (g_.size() > capacity_) g_.pop_front();
        ++evictions;
        return;
      }
    }
    while (true) {
      const uint64_t t = m_.back();
      m_.pop_back();
      if (freq_[t] >= 1) {
        --freq_[t];
        m_.push_front(t);
        continue;
      }
      freq_.erase(t);
      ++evictions;
      return;
    }
  }

  size_t capacity_;
  size_t small_cap_;
  std::deque<uint64_t> s_, m_, g_;  // front: newest
  std::map<uint64_t, int> freq_;
};

template <class Ref>
void CompareOnRandomTraces(Policy policy) {
  std::mt19937_64 rng(42);
  for (int trial = 0; trial < 40; ++trial) {
    const size_t capacity = 1 + rng() % 40;
    const uint64_t keys = 1 + rng() % (capacity * 3);
    Partition p(policy, capacity, 512);
    Ref ref(capacity);
    // A skewed trace: half the accesses to a small hot set.
    for (int step = 0; step < 3000; ++step) {
      const uint64_t key = (rng() % 2 == 0)
                               ? rng() % std::max<uint64_t>(1, keys / 5)
                               : rng() % keys;
      const bool want = ref.Access(key);
      bool got = p.Lookup(0, key) != nullptr;
      if (!got) {
        Block* b = p.Insert(0, key);
        ASSERT_NE(b, nullptr);
      }
      ASSERT_EQ(got, want) << "trial " << trial << " step " << step << " key "
                           << key << " capacity " << capacity;
    }
    std::set<uint64_t> have;
    p.ForEach([&](Block* b) { have.insert(b->index); });
    EXPECT_EQ(have, ref.Keys()) << "trial " << trial;
    EXPECT_EQ(p.evictions(), ref.evictions) << "trial " << trial;
    EXPECT_LE(p.size(), capacity);
  }
}

TEST(CachePolicyTest, LruMatchesReference) {
  CompareOnRandomTraces<RefLru>(Policy::kLru);
}

TEST(CachePolicyTest, S3FifoMatchesReference) {
  CompareOnRandomTraces<RefS3Fifo>(Policy::kS3Fifo);
}

TEST(CachePolicyTest, DirtyBlocksAreNeverEvicted) {
  for (auto [policy, admission] :
       {std::pair(Policy::kLru, Admission::kAll),
        std::pair(Policy::kS3Fifo, Admission::kAll),
        std::pair(Policy::kS3Fifo, Admission::kFrequency)}) {
    Partition p(policy, 4, 512, admission);
    for (uint64_t i = 0; i < 4; ++i) p.Insert(0, i)->dirty = 1;
    EXPECT_EQ(p.Insert(0, 99), nullptr);  // no room: all dirty
    p.Find(0, 2)->dirty = 0;
    ASSERT_NE(p.Insert(0, 99), nullptr);
    EXPECT_EQ(p.Find(0, 2), nullptr);  // the one clean block went
    for (uint64_t i : {0, 1, 3}) EXPECT_NE(p.Find(0, i), nullptr);
  }
}

TEST(CachePolicyTest, ShrinkEvictsGrowKeeps) {
  for (Admission admission : {Admission::kAll, Admission::kFrequency}) {
    Partition p(Policy::kS3Fifo, 100, 512, admission);
    for (uint64_t i = 0; i < 100; ++i) p.Insert(0, i);
    p.SetCapacity(10);
    EXPECT_EQ(p.size(), 10u);
    EXPECT_EQ(p.evictions(), 90u);
    p.SetCapacity(200);
    for (uint64_t i = 100; i < 290; ++i) p.Insert(0, i);
    EXPECT_EQ(p.size(), 200u);
  }
}

// Scan resistance: a hot set of half the partition, then a scan of ten
// times the partition: S3-FIFO keeps the hot set's hit ratio within 10%;
// LRU (for contrast) loses it.
double HotHitRatio(Policy policy, Admission admission = Admission::kAll) {
  const uint64_t capacity = 1000;
  Partition p(policy, capacity, 512, admission);
  auto access = [&](uint64_t key) {
    if (p.Lookup(0, key) != nullptr) return true;
    p.Insert(0, key);
    return false;
  };
  std::mt19937_64 rng(7);
  const uint64_t hot = capacity / 2;
  for (int i = 0; i < 20000; ++i) access(rng() % hot);  // warm
  int hits = 0;
  for (int i = 0; i < 5000; ++i) hits += access(rng() % hot);
  const double before = hits / 5000.0;
  // The scan, interleaved with the hot set's reads (one hot read per 4
  // scanned blocks).
  hits = 0;
  int hot_reads = 0;
  for (uint64_t s = 0; s < 10 * capacity; ++s) {
    access(1'000'000 + s);
    if (s % 4 == 0) {
      hits += access(rng() % hot);
      ++hot_reads;
    }
  }
  const double during = static_cast<double>(hits) / hot_reads;
  return during / before;
}

TEST(CachePolicyTest, S3FifoResistsScans) {
  EXPECT_GE(HotHitRatio(Policy::kS3Fifo), 0.9);
  EXPECT_GE(HotHitRatio(Policy::kS3Fifo, Admission::kFrequency), 0.9);
  EXPECT_LT(HotHitRatio(Policy::kLru), 0.9);
}

// Zipf(0.99) reads over `keys` blocks through a partition of a tenth of
// them (a miss fills), scattered as a file's offsets are; the hit ratio
// after a warm-up.
double ZipfHitRatio(Policy policy, Admission admission, uint64_t keys) {
  Partition p(policy, keys / 10, 512, admission);
  const testing::Zipf zipf(keys, 0.99);
  std::mt19937_64 rng(11);
  uint64_t hits = 0, counted = 0;
  for (int i = 0; i < 800'000; ++i) {
    const uint64_t key = zipf(rng) * 40503 % keys;
    const bool hit = p.Lookup(0, key) != nullptr;
    if (!hit) p.Insert(0, key);
    if (i >= 200'000) {
      hits += hit;
      ++counted;
    }
  }
  return static_cast<double>(hits) / static_cast<double>(counted);
}

TEST(CachePolicyTest, FrequencyAdmissionComesCloseToTheOracle) {
  // The best any cache of a tenth can do: hold the most popular blocks.
  const uint64_t keys = 16384;
  double top = 0, all = 0;
  for (uint64_t i = 0; i < keys; ++i) {
    const double w = 1 / std::pow(static_cast<double>(i + 1), 0.99);
    all += w;
    if (i < keys / 10) top += w;
  }
  const double oracle = top / all;
  const double lru = ZipfHitRatio(Policy::kLru, Admission::kAll, keys);
  const double s3fifo = ZipfHitRatio(Policy::kS3Fifo, Admission::kAll, keys);
  const double frequency =
      ZipfHitRatio(Policy::kS3Fifo, Admission::kFrequency, keys);
  EXPECT_GT(s3fifo, lru);
  EXPECT_GT(frequency, s3fifo + 0.005);
  EXPECT_GE(frequency, 0.97 * oracle);
  EXPECT_LE(frequency, oracle + 0.01);
}

TEST(CachePolicyTest, MetadataPerBlockIsSmall) {
  // Block header 32 B + malloc header 8 B + index slot (8 B + 1 control
  // byte) at the lowest load factor of a swiss table (7/16): 61 B.
  EXPECT_EQ(sizeof(Block), 32u);
  const double index_worst = (sizeof(void*) + 1) / (7.0 / 16);
  EXPECT_LE(sizeof(Block) + 8 + index_worst, kMetadataBytesPerBlock + 1.0);
  EXPECT_LT(kMetadataBytesPerBlock, 64u);
}

}  // namespace
}  // namespace sroute
