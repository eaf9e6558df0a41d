// SPDX-License-Identifier: Apache-2.0
#include "stages/cache/shards.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "absl/status/status.h"

namespace sroute {
namespace {

// Timestamps the Fenwick tree holds at first; it grows to twice the live
// keys at each renumbering.
constexpr uint64_t kInitialCapacity = 1024;

// A chained hash of the bytes, 8 at a time (host byte order).
uint64_t HashBytes(std::string_view s) {
  uint64_t h = Mix64(0x9e3779b97f4a7c15ULL ^ s.size());
  size_t i = 0;
  for (; i + 8 <= s.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, s.data() + i, 8);
    h = Mix64(h ^ w);
  }
  uint64_t tail = 0;
  std::memcpy(&tail, s.data() + i, s.size() - i);
  return Mix64(h ^ tail ^ 0x2545f4914f6cdd1dULL);
}

}  // namespace

uint64_t BlockKey(std::string_view file, uint64_t block) {
  return Mix64(HashBytes(file) ^ Mix64(block + 0x632be59bd9b4e019ULL));
}

// ShardsSampler

absl::StatusOr<std::unique_ptr<ShardsSampler>> ShardsSampler::Create(
    const ShardsConfig& config) {
  if (!(config.rate > 0 && config.rate <= 1)) {
    return absl::InvalidArgumentError("SHARDS rate must be in (0, 1]");
  }
  const uint64_t t = std::clamp<uint64_t>(
      static_cast<uint64_t>(std::llround(config.rate * kModulus)), 1, kModulus);
  return std::unique_ptr<ShardsSampler>(new ShardsSampler(t, config.max_keys));
}

std::vector<uint64_t> ShardsSampler::Admit(uint64_t key) {
  std::vector<uint64_t> evicted;
  if (max_keys_ == 0) return evicted;
  MutexLock l(&mu_);
  const uint64_t h = Hash(key);
  if (h >= threshold_.load(std::memory_order_relaxed)) return evicted;
  if (!keys_.insert(key).second) return evicted;
  by_hash_.emplace(h, key);
  if (keys_.size() <= max_keys_) return evicted;
  // The paper's fixed-size step: T becomes the largest hash held, which
  // drops every key with that hash (usually one).
  const uint64_t t = by_hash_.top().first;
  while (!by_hash_.empty() && by_hash_.top().first >= t) {
    evicted.push_back(by_hash_.top().second);
    keys_.erase(by_hash_.top().second);
    by_hash_.pop();
  }
  threshold_.store(t, std::memory_order_relaxed);
  return evicted;
}

size_t ShardsSampler::sampled_keys() const {
  MutexLock l(&mu_);
  return keys_.size();
}

// MissRatioCurve

double MissRatioCurve::MissRatioAt(uint64_t size_blocks) const {
  auto it = std::upper_bound(
      points.begin(), points.end(), size_blocks,
      [](uint64_t s, const MrcPoint& p) { return s < p.size_blocks; });
  if (it == points.begin()) return 1.0;
  return std::prev(it)->miss_ratio;
}

// MrcBuilder

MrcBuilder::MrcBuilder(const MrcOptions& options) : options_(options) {
  if (options_.bucket_blocks == 0) options_.bucket_blocks = 1;
  tree_.assign(kInitialCapacity + 1, 0);
}

void MrcBuilder::TreeAdd(uint64_t t, int64_t delta) {
  for (uint64_t i = t + 1; i < tree_.size(); i += i & (~i + 1)) {
    tree_[i] += delta;
  }
}

int64_t MrcBuilder::TreePrefix(uint64_t t) const {
  int64_t sum = 0;
  for (uint64_t i = t + 1; i > 0; i -= i & (~i + 1)) sum += tree_[i];
  return sum;
}

void MrcBuilder::Compact() {
  // Renumber the live keys 0..m-1 in access order; pointers into the map
  // stay valid since nothing is inserted meanwhile.
  std::vector<std::pair<uint64_t, uint64_t*>> order;
  order.reserve(last_access_.size());
  for (auto& [key, t] : last_access_) order.emplace_back(t, &t);
  std::sort(order.begin(), order.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  const uint64_t m = order.size();
  for (uint64_t i = 0; i < m; ++i) *order[i].second = i;
  const uint64_t capacity = std::max(kInitialCapacity, 2 * (m + 1));
  tree_.assign(capacity + 1, 0);
  for (uint64_t i = 1; i <= m; ++i) tree_[i] = 1;
  for (uint64_t i = 1; i <= capacity; ++i) {  // O(capacity) Fenwick build
    const uint64_t parent = i + (i & (~i + 1));
    if (parent <= capacity) tree_[parent] += tree_[i];
  }
  now_ = m;
}

uint64_t MrcBuilder::Access(uint64_t key) {
  if (now_ + 1 >= tree_.size()) Compact();
  auto [it, inserted] = last_access_.try_emplace(key, now_);
  uint64_t distance = 0;
  if (!inserted) {
    const uint64_t t = it->second;
    // Keys touched since t, plus this one.
    distance = static_cast<uint64_t>(static_cast<int64_t>(last_access_.size()) -
                                     TreePrefix(t)) +
               1;
    TreeAdd(t, -1);
    it->second = now_;
  }
  TreeAdd(now_, 1);
  ++now_;
  return distance;
}

void MrcBuilder::Add(uint64_t key, double rate) {
  if (!(rate > 0)) return;
  rate = std::min(rate, 1.0);
  ++sampled_references_;
  const double weight = 1.0 / rate;
  const uint64_t distance = Access(key);
  if (distance == 0) {
    cold_weight_ += weight;
    return;
  }
  const uint64_t b = options_.bucket_blocks;
  uint64_t limit = kMaxMrcBuckets;
  if (options_.max_blocks > 0) {
    limit = std::min(limit, (options_.max_blocks + b - 1) / b);
  }
  uint64_t bucket;
  if (rate == 1.0) {
    bucket = (distance + b - 1) / b;
  } else {
    // The slack keeps d/R that is an integer in exact arithmetic (3/0.01)
    // from rounding up a bucket.
    const double scaled = static_cast<double>(distance) /
                          (rate * static_cast<double>(b)) * (1 - 1e-12);
    bucket = scaled >= static_cast<double>(limit)
                 ? limit + 1
                 : static_cast<uint64_t>(std::ceil(scaled));
  }
  if (bucket > limit) {  // a miss at every size the curve lists
    cold_weight_ += weight;
    return;
  }
  if (bucket >= histogram_.size()) histogram_.resize(bucket + 1, 0.0);
  histogram_[bucket] += weight;
}

void MrcBuilder::Remove(uint64_t key) {
  auto it = last_access_.find(key);
  if (it == last_access_.end()) return;
  TreeAdd(it->second, -1);
  last_access_.erase(it);
}

MissRatioCurve MrcBuilder::Build(uint64_t total_references) const {
  MissRatioCurve curve;
  const uint64_t b = options_.bucket_blocks;
  curve.bucket_blocks = b;
  std::vector<double> hist = histogram_;
  if (hist.size() < 2) hist.resize(2, 0.0);
  double total = cold_weight_;
  for (double w : hist) total += w;
  if (total_references > 0 && sampled_references_ > 0) {
    // SHARDS_adj: the expected minus the actual sample, in references, goes
    // to the shortest distances.
    hist[1] += static_cast<double>(total_references) - total;
    total = static_cast<double>(total_references);
  }
  curve.references =
      total_references > 0 ? static_cast<double>(total_references) : total;

  uint64_t last = 0;
  if (options_.max_blocks > 0) {
    last = (options_.max_blocks + b - 1) / b;
  } else {
    for (uint64_t k = hist.size() - 1; k > 0; --k) {
      if (hist[k] != 0) {
        last = k;
        break;
      }
    }
  }
  curve.points.reserve(last + 1);
  curve.points.push_back({0, 1.0});
  double hits = 0;
  for (uint64_t k = 1; k <= last; ++k) {
    if (k < hist.size()) hits += hist[k];
    const double miss =
        total > 0 ? std::clamp(1.0 - hits / total, 0.0, 1.0) : 1.0;
    curve.points.push_back({k * b, miss});
  }
  return curve;
}

MissRatioCurve ExactMrc(std::span<const uint64_t> trace,
                        const MrcOptions& options) {
  MrcBuilder builder(options);
  for (uint64_t key : trace) builder.Add(key, 1.0);
  return builder.Build(trace.size());
}

double MeanAbsoluteError(const MissRatioCurve& a, const MissRatioCurve& b) {
  const uint64_t limit = std::min(a.max_size_blocks(), b.max_size_blocks());
  std::vector<uint64_t> sizes;
  for (const MissRatioCurve* c : {&a, &b}) {
    for (const MrcPoint& p : c->points) {
      if (p.size_blocks > 0 && p.size_blocks <= limit) {
        sizes.push_back(p.size_blocks);
      }
    }
  }
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  if (sizes.empty()) return std::numeric_limits<double>::quiet_NaN();
  double sum = 0;
  for (uint64_t s : sizes) sum += std::abs(a.MissRatioAt(s) - b.MissRatioAt(s));
  return sum / static_cast<double>(sizes.size());
}

// ShardsProfiler

absl::StatusOr<std::unique_ptr<ShardsProfiler>> ShardsProfiler::Create(
    const ShardsConfig& config, const MrcOptions& options) {
  absl::StatusOr<std::unique_ptr<ShardsSampler>> sampler =
      ShardsSampler::Create(config);
  if (!sampler.ok()) return sampler.status();
  return std::unique_ptr<ShardsProfiler>(
      new ShardsProfiler(*std::move(sampler), options));
}

void ShardsProfiler::Access(uint64_t key) {
  references_.fetch_add(1, std::memory_order_relaxed);
  if (!sampler_->Sample(key)) return;
  MutexLock l(&mu_);
  // T may have dropped since the unlocked check; only this lock's holder
  // lowers it, so the answer is now stable.
  if (!sampler_->Sample(key)) return;
  builder_.Add(key, sampler_->rate());
  for (uint64_t gone : sampler_->Admit(key)) builder_.Remove(gone);
}

MissRatioCurve ShardsProfiler::Curve(bool shards_adj) const {
  const uint64_t references = this->references();
  MutexLock l(&mu_);
  return builder_.Build(shards_adj ? references : 0);
}

}  // namespace sroute
