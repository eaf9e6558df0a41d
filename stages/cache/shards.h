// SPDX-License-Identifier: Apache-2.0
// SHARDS: miss ratio curves (MRCs) of an LRU cache from a spatially hashed
// sample of the reference stream (Waldspurger et al., "Efficient MRC
// Construction with SHARDS", FAST'15).
//
// A reference is to a key, a (file, block) pair hashed by BlockKey(). The
// ShardsSampler keeps a reference iff Mix(key) mod P < T, so it keeps every
// reference to a sampled key and none to the others, at rate R = T/P. The
// MrcBuilder measures the LRU stack (reuse) distance d of each kept
// reference among kept references, scales it to d/R, and histograms it; the
// curve's miss ratio at cache size c is the share of references with scaled
// distance > c (first references count as misses at every size).
//
//   std::unique_ptr<ShardsSampler> sampler =
//       *ShardsSampler::Create({.rate = 0.01});
//   MrcBuilder builder({.bucket_blocks = 64});
//   for (uint64_t key : trace) {
//     if (sampler->Sample(key)) builder.Add(key, sampler->rate());
//   }
//   MissRatioCurve mrc = builder.Build(trace.size());
//
// ShardsProfiler does the same for concurrent callers, including the
// fixed-size mode's evictions. Everything here depends only on absl, the
// standard library and the header-only util/mutex.h, so the controller can
// use it too.
#ifndef SROUTE_STAGES_CACHE_SHARDS_H_
#define SROUTE_STAGES_CACHE_SHARDS_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <queue>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "util/mutex.h"

namespace sroute {

// A 64-bit bijective mix (splitmix64's finalizer).
inline uint64_t Mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

// The key of block `block` of `file`. Stable across runs and processes (no
// per-process seed, unlike absl::Hash), so samples taken on several hosts of
// the same byte order agree on which blocks they keep.
uint64_t BlockKey(std::string_view file, uint64_t block);

struct ShardsConfig {
  // The sampling rate R in (0, 1]; in fixed-size mode the starting rate.
  double rate = 0.01;
  // 0: fixed rate. Otherwise fixed size: at most `max_keys` distinct keys are
  // sampled; past that the rate drops (see ShardsSampler::Admit).
  size_t max_keys = 0;
};

// Decides which references are sampled.
//
// Thread safety: Sample(), threshold() and rate() may be called from any
// number of threads; Admit() is serialized internally.
class ShardsSampler {
 public:
  // P: hashes are taken mod P (the paper's 2^24).
  static constexpr uint64_t kModulus = uint64_t{1} << 24;

  // InvalidArgument unless 0 < rate <= 1; a rate below 1/P rounds up to 1/P.
  static absl::StatusOr<std::unique_ptr<ShardsSampler>> Create(
      const ShardsConfig& config);

  ShardsSampler(const ShardsSampler&) = delete;
  ShardsSampler& operator=(const ShardsSampler&) = delete;

  // The hot path: one mix and a compare against T (a relaxed load; a
  // reference racing with a drop of T may see the old T, which only matters
  // to ShardsProfiler, which checks again under its lock).
  bool Sample(uint64_t key) const {
    return Hash(key) < threshold_.load(std::memory_order_relaxed);
  }

  // Fixed-size mode: records that sampled key `key` was referenced. When that
  // makes more than max_keys distinct sampled keys, lowers T to the largest
  // hash among them, so that key and any other with the same hash are no
  // longer sampled, and returns them (the caller drops them from its
  // distance structure; see MrcBuilder::Remove). Fixed-rate mode: returns
  // nothing. Keys for which Sample() is false are ignored.
  std::vector<uint64_t> Admit(uint64_t key);

  // T and R = T/P now.
  uint64_t threshold() const {
    return threshold_.load(std::memory_order_relaxed);
  }
  double rate() const {
    return static_cast<double>(threshold()) / static_cast<double>(kModulus);
  }
  bool fixed_size() const { return max_keys_ != 0; }
  // Distinct keys held in fixed-size mode (0 in fixed-rate mode).
  size_t sampled_keys() const;

  // Where `key` falls in [0, P).
  static uint64_t Hash(uint64_t key) { return Mix64(key) & (kModulus - 1); }

 private:
  ShardsSampler(uint64_t threshold, size_t max_keys)
      : threshold_(threshold), max_keys_(max_keys) {}

  std::atomic<uint64_t> threshold_;
  const size_t max_keys_;

  mutable Mutex mu_;  // guards the fixed-size set; a leaf lock
  // Max-heap of (hash, key) over the sampled keys, and their set.
  std::priority_queue<std::pair<uint64_t, uint64_t>> by_hash_
      ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<uint64_t> keys_ ABSL_GUARDED_BY(mu_);
};

// One point of a miss ratio curve.
struct MrcPoint {
  uint64_t size_blocks = 0;
  double miss_ratio = 1.0;
};

// An LRU cache's miss ratio as a function of its size in blocks.
struct MissRatioCurve {
  // Sizes 0, b, 2b, ... ascending, b = bucket_blocks; the miss ratio at size
  // 0 is 1. Non-increasing (every input here is an LRU stack distance).
  std::vector<MrcPoint> points;
  uint64_t bucket_blocks = 1;
  // The references the curve stands for: every reference for an exact curve,
  // or the total given to MrcBuilder::Build (else the sample's estimate).
  double references = 0;

  // The miss ratio of the largest point <= size_blocks (1 below the first),
  // so exact at the points and conservative between them; flat past the
  // last point.
  double MissRatioAt(uint64_t size_blocks) const;
  uint64_t max_size_blocks() const {
    return points.empty() ? 0 : points.back().size_blocks;
  }
};

struct MrcOptions {
  // The curve's granularity in blocks (0 is taken as 1).
  uint64_t bucket_blocks = 1;
  // The curve's last point is the first multiple of bucket_blocks >=
  // max_blocks (padded flat if no distance reaches it; longer distances
  // count as misses at every point, so cutting them off is exact and bounds
  // the histogram). 0: up to the largest (scaled) distance seen.
  uint64_t max_blocks = 0;
};

// The histogram stops at this many buckets (32 MiB) so that a tiny rate
// cannot blow it up; longer scaled distances count as misses at every size.
inline constexpr uint64_t kMaxMrcBuckets = uint64_t{1} << 22;

// Builds a curve from a stream of references, each with the sampling rate it
// was taken at (1 for every reference). O(log n) per reference, n the number
// of distinct tracked keys; memory O(n + largest distance / bucket_blocks).
//
// Reuse distances: a Fenwick tree over last-access timestamps (one bit per
// tracked key, at its last access) and a hash map key -> timestamp; the
// distance of a reference is 1 + the number of bits after its key's bit.
// Timestamps are renumbered densely when they run out (the tree then holds
// twice the live keys), so memory tracks live keys, not references.
//
// Not thread-safe (ShardsProfiler adds the lock).
class MrcBuilder {
 public:
  explicit MrcBuilder(const MrcOptions& options = {});

  // A reference to `key`, kept at sampling rate `rate` in (0, 1]. Its
  // distance d (1 = re-reference of the most recent key) is scaled to d/rate
  // and weighted 1/rate: with fixed-size SHARDS' falling rate this equals the
  // paper's rescaling of the histogram by R_new/R_old at each drop.
  void Add(uint64_t key, double rate);
  // Forgets `key` (fixed-size SHARDS stopped sampling it): it no longer
  // counts in other keys' distances. No-op if unknown.
  void Remove(uint64_t key);

  // The curve. With `total_references` N > 0, the count of all references
  // sampled or not, Build applies SHARDS_adj: the sum of weights W (the
  // sample's estimate of N; N_s/R at a fixed rate) differs from N mostly
  // because hot keys were over- or under-sampled, and hot keys make short
  // distances, so N - W (= (N*R - N_s)/R at a fixed rate: expected minus
  // actual sample count) is added to the first bucket (distances in
  // (0, b]) and the curve is normalized by N, clamped to [0, 1]. The paper
  // applies this to fixed-rate sampling; it is applied here to fixed-size
  // sampling's 1/R_t weights too, since the same reasoning holds and it
  // cut the fixed-size error on a Zipf trace from about 0.03 to 0.004 mean
  // MAE (tests/unit/stages/shards_test.cc). With 0 the curve is normalized
  // by W.
  MissRatioCurve Build(uint64_t total_references = 0) const;

  uint64_t sampled_references() const { return sampled_references_; }
  size_t tracked_keys() const { return last_access_.size(); }

 private:
  // 0 for a first reference, else the stack distance (>= 1).
  uint64_t Access(uint64_t key);
  void Compact();
  void TreeAdd(uint64_t t, int64_t delta);
  int64_t TreePrefix(uint64_t t) const;  // bits at timestamps <= t

  MrcOptions options_;
  // Fenwick tree, 1-based: tree_[i] for timestamp i-1.
  std::vector<int64_t> tree_;
  absl::flat_hash_map<uint64_t, uint64_t> last_access_;  // key -> timestamp
  uint64_t now_ = 0;                                     // the next timestamp

  // Weights by bucket: [k] for scaled distances in ((k-1)b, kb], k >= 1.
  std::vector<double> histogram_;
  double cold_weight_ = 0;  // first references and past kMaxMrcBuckets
  uint64_t sampled_references_ = 0;
};

// The curve of `trace` with every reference (no sampling).
MissRatioCurve ExactMrc(std::span<const uint64_t> trace,
                        const MrcOptions& options = {});

// The mean of |a - b| over the sizes > 0 in a's or b's points up to the
// smaller of the two curves' largest sizes, each curve read with
// MissRatioAt. NaN if there is no such size.
double MeanAbsoluteError(const MissRatioCurve& a, const MissRatioCurve& b);

// A sampler and a builder for concurrent callers (a cache stage's IO
// threads). Access() of an unsampled key costs a relaxed counter increment
// and Sample(); sampled keys take a lock.
class ShardsProfiler {
 public:
  static absl::StatusOr<std::unique_ptr<ShardsProfiler>> Create(
      const ShardsConfig& config, const MrcOptions& options = {});

  // Thread-safe.
  void Access(uint64_t key);
  // The curve so far, with SHARDS_adj (MrcBuilder::Build) unless
  // `shards_adj` is false. Thread-safe.
  MissRatioCurve Curve(bool shards_adj = true) const;

  uint64_t references() const {
    return references_.load(std::memory_order_relaxed);
  }
  const ShardsSampler& sampler() const { return *sampler_; }

 private:
  ShardsProfiler(std::unique_ptr<ShardsSampler> sampler,
                 const MrcOptions& options)
      : sampler_(std::move(sampler)), builder_(options) {}

  const std::unique_ptr<ShardsSampler> sampler_;
  std::atomic<uint64_t> references_{0};
  // Guards the builder; taken before the sampler's lock.
  mutable Mutex mu_;
  MrcBuilder builder_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sroute

#endif  // SROUTE_STAGES_CACHE_SHARDS_H_
