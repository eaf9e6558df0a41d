// SPDX-License-Identifier: Apache-2.0
// SHARDS sampling, miss ratio curves and the cache budget allocator
// (stages/cache/shards.h, stages/cache/allocate.h).
#include "stages/cache/shards.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "stages/cache/allocate.h"

namespace sroute {
namespace {

// A uniform double in [0, 1) from the top 53 bits (same on every standard
// library, unlike std::uniform_real_distribution).
double Uniform(std::mt19937_64& rng) {
  return static_cast<double>(rng() >> 11) * 0x1.0p-53;
}

// `n` references over `keys` keys with P(rank i) ~ 1/i^alpha.
std::vector<uint64_t> ZipfTrace(size_t n, size_t keys, double alpha,
                                uint64_t seed) {
  std::vector<double> cdf(keys);
  double sum = 0;
  for (size_t i = 0; i < keys; ++i) {
    sum += 1.0 / std::pow(static_cast<double>(i + 1), alpha);
    cdf[i] = sum;
  }
  std::vector<uint64_t> key_of(keys);
  for (size_t i = 0; i < keys; ++i) key_of[i] = BlockKey("zipf.dat", i);
  std::mt19937_64 rng(seed);
  std::vector<uint64_t> trace(n);
  for (uint64_t& key : trace) {
    const double u = Uniform(rng) * sum;
    const size_t rank =
        std::upper_bound(cdf.begin(), cdf.end(), u) - cdf.begin();
    key = key_of[std::min(rank, keys - 1)];
  }
  return trace;
}

// The curve of `trace` sampled at `rate`, after renaming every key by
// Mix64(key ^ salt): a bijection, so the exact curve is the same but each
// salt samples other keys.
MissRatioCurve SampledMrc(const std::vector<uint64_t>& trace, double rate,
                          const MrcOptions& options, bool adjust,
                          uint64_t salt = 0) {
  std::unique_ptr<ShardsSampler> sampler =
      *ShardsSampler::Create({.rate = rate});
  MrcBuilder builder(options);
  for (uint64_t key : trace) {
    const uint64_t renamed = Mix64(key ^ salt);
    if (sampler->Sample(renamed)) builder.Add(renamed, sampler->rate());
  }
  return builder.Build(adjust ? trace.size() : 0);
}

// Mean and max of f(salt) over kSalts salts.
constexpr int kSalts = 5;
std::pair<double, double> MeanAndMax(const std::function<double(int)>& f) {
  double sum = 0, max = 0;
  for (int salt = 0; salt < kSalts; ++salt) {
    const double v = f(salt);
    sum += v;
    max = std::max(max, v);
  }
  return {sum / kSalts, max};
}

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since)
      .count();
}

TEST(BlockKeyTest, StableAndDistinct) {
  // Stable across processes: no per-process seed (little-endian hosts).
  EXPECT_EQ(BlockKey("a/b.dat", 7), BlockKey("a/b.dat", 7));
  EXPECT_NE(BlockKey("a/b.dat", 7), BlockKey("a/b.dat", 8));
  EXPECT_NE(BlockKey("a/b.dat", 7), BlockKey("a/b.dax", 7));
  EXPECT_NE(BlockKey("", 0), BlockKey(std::string(1, '\0'), 0));
  EXPECT_NE(BlockKey("12345678", 0), BlockKey("123456789", 0));
}

TEST(ShardsSamplerTest, RejectsBadRates) {
  EXPECT_FALSE(ShardsSampler::Create({.rate = 0}).ok());
  EXPECT_FALSE(ShardsSampler::Create({.rate = -0.5}).ok());
  EXPECT_FALSE(ShardsSampler::Create({.rate = 1.5}).ok());
  EXPECT_FALSE(ShardsSampler::Create({.rate = std::nan("")}).ok());
  EXPECT_EQ((*ShardsSampler::Create({.rate = 1e-12}))->threshold(), 1u);
}

TEST(ShardsSamplerTest, SamplesKeysAtTheRate) {
  std::unique_ptr<ShardsSampler> sampler =
      *ShardsSampler::Create({.rate = 0.01});
  EXPECT_DOUBLE_EQ(sampler->rate(), 167772.0 / ShardsSampler::kModulus);
  int sampled = 0;
  for (uint64_t block = 0; block < 1'000'000; ++block) {
    const uint64_t key = BlockKey("f", block);
    const bool s = sampler->Sample(key);
    EXPECT_EQ(s, sampler->Sample(key));  // a key, not a reference
    sampled += s;
  }
  EXPECT_NEAR(sampled, 10'000, 400);  // 4 sigma
}

TEST(ShardsSamplerTest, FixedSizeKeepsTheSmallestHashes) {
  std::unique_ptr<ShardsSampler> sampler =
      *ShardsSampler::Create({.rate = 1.0, .max_keys = 100});
  std::vector<uint64_t> kept;
  for (uint64_t key = 0; key < 5000; ++key) {
    ASSERT_TRUE(sampler->fixed_size());
    if (!sampler->Sample(key)) continue;
    kept.push_back(key);
    for (uint64_t gone : sampler->Admit(key)) {
      EXPECT_GE(ShardsSampler::Hash(gone), sampler->threshold());
      std::erase(kept, gone);
    }
    ASSERT_LE(sampler->sampled_keys(), 100u);
    ASSERT_EQ(sampler->sampled_keys(), kept.size());
  }
  // What is left is exactly the 100 smallest hashes, and T is the 101st.
  std::vector<uint64_t> hashes;
  for (uint64_t key = 0; key < 5000; ++key) {
    hashes.push_back(ShardsSampler::Hash(key));
  }
  std::sort(hashes.begin(), hashes.end());
  EXPECT_EQ(kept.size(), 100u);
  EXPECT_EQ(sampler->threshold(), hashes[100]);
  for (uint64_t key : kept) {
    EXPECT_LT(ShardsSampler::Hash(key), hashes[100]);
  }
}

TEST(ExactMrcTest, CyclicTrace) {
  constexpr int kKeys = 50, kCycles = 10;
  std::vector<uint64_t> trace;
  for (int c = 0; c < kCycles; ++c) {
    for (int k = 0; k < kKeys; ++k) trace.push_back(k);
  }
  MissRatioCurve mrc = ExactMrc(trace);
  EXPECT_EQ(mrc.references, kKeys * kCycles);
  ASSERT_EQ(mrc.points.size(), kKeys + 1u);
  for (const MrcPoint& p : mrc.points) {
    // LRU thrashes below the loop's size; at it only the first pass misses.
    EXPECT_DOUBLE_EQ(p.miss_ratio, p.size_blocks < kKeys ? 1.0 : 0.1)
        << p.size_blocks;
  }
  EXPECT_DOUBLE_EQ(mrc.MissRatioAt(1000), 0.1);
}

TEST(ExactMrcTest, HandComputedDistancesAndBuckets) {
  // A B A C B A: A, B, C cold; A at distance 2; B and A at distance 3.
  const std::vector<uint64_t> trace = {1, 2, 1, 3, 2, 1};
  MissRatioCurve mrc = ExactMrc(trace);
  ASSERT_EQ(mrc.points.size(), 4u);
  EXPECT_DOUBLE_EQ(mrc.MissRatioAt(0), 1.0);
  EXPECT_DOUBLE_EQ(mrc.MissRatioAt(1), 1.0);
  EXPECT_DOUBLE_EQ(mrc.MissRatioAt(2), 5.0 / 6);
  EXPECT_DOUBLE_EQ(mrc.MissRatioAt(3), 0.5);

  MissRatioCurve coarse = ExactMrc(trace, {.bucket_blocks = 2});
  ASSERT_EQ(coarse.points.size(), 3u);
  EXPECT_EQ(coarse.points[2].size_blocks, 4u);
  EXPECT_DOUBLE_EQ(coarse.points[1].miss_ratio, 5.0 / 6);
  EXPECT_DOUBLE_EQ(coarse.points[2].miss_ratio, 0.5);
  EXPECT_DOUBLE_EQ(coarse.MissRatioAt(3), 5.0 / 6);  // conservative

  // max_blocks pads and cuts: distance 3 is past size 2.
  MissRatioCurve cut = ExactMrc(trace, {.max_blocks = 2});
  ASSERT_EQ(cut.points.size(), 3u);
  EXPECT_DOUBLE_EQ(cut.points[2].miss_ratio, 5.0 / 6);
  MissRatioCurve padded = ExactMrc(trace, {.max_blocks = 6});
  ASSERT_EQ(padded.points.size(), 7u);
  EXPECT_DOUBLE_EQ(padded.points[6].miss_ratio, 0.5);
}

// The builder against a plain LRU stack, long enough to renumber its
// timestamps many times, with keys removed along the way.
TEST(MrcBuilderTest, MatchesNaiveLruStackWithRemovals) {
  std::mt19937_64 rng(7);
  std::vector<uint64_t> stack;  // most recent first
  std::vector<uint64_t> count_at(400, 0);
  uint64_t refs = 0;
  MrcBuilder builder;
  for (int i = 0; i < 30'000; ++i) {
    if (rng() % 50 == 0) {
      const uint64_t key = rng() % 300;
      builder.Remove(key);
      std::erase(stack, key);
      continue;
    }
    // Skewed so that both short and long distances occur.
    const uint64_t key = (rng() % 2) ? rng() % 20 : rng() % 300;
    ++refs;
    builder.Add(key, 1.0);
    auto it = std::find(stack.begin(), stack.end(), key);
    if (it != stack.end()) {
      ++count_at[it - stack.begin() + 1];
      stack.erase(it);
    }
    stack.insert(stack.begin(), key);
  }
  EXPECT_EQ(builder.tracked_keys(), stack.size());
  MissRatioCurve mrc = builder.Build(refs);
  uint64_t hits = 0;
  for (uint64_t size = 1; size < count_at.size(); ++size) {
    hits += count_at[size];
    ASSERT_NEAR(mrc.MissRatioAt(size),
                1.0 - static_cast<double>(hits) / static_cast<double>(refs),
                1e-12)
        << size;
  }
}

// The paper's setting: a skewed trace, 1% and 0.1% spatial sampling and a
// fixed-size sample, against the exact curve.
class ShardsAccuracyTest : public ::testing::Test {
 protected:
  static constexpr size_t kRefs = 2'000'000;
  static constexpr size_t kKeys = 100'000;
  static constexpr MrcOptions kOptions = {.bucket_blocks = 1000,
                                          .max_blocks = kKeys};

  static void SetUpTestSuite() {
    auto start = std::chrono::steady_clock::now();
    trace_ = new std::vector<uint64_t>(ZipfTrace(kRefs, kKeys, 0.99, 42));
    const double generate = Seconds(start);
    start = std::chrono::steady_clock::now();
    exact_ = new MissRatioCurve(ExactMrc(*trace_, kOptions));
    std::printf("trace %.2fs, exact MRC %.2fs (%zu refs, %zu keys)\n", generate,
                Seconds(start), kRefs, kKeys);
  }
  static void TearDownTestSuite() {
    delete trace_;
    delete exact_;
  }

  static std::vector<uint64_t>* trace_;
  static MissRatioCurve* exact_;
};
std::vector<uint64_t>* ShardsAccuracyTest::trace_ = nullptr;
MissRatioCurve* ShardsAccuracyTest::exact_ = nullptr;

TEST_F(ShardsAccuracyTest, ExactCurveIsSane) {
  ASSERT_EQ(exact_->points.size(), kKeys / 1000 + 1);
  for (size_t i = 1; i < exact_->points.size(); ++i) {
    ASSERT_LE(exact_->points[i].miss_ratio, exact_->points[i - 1].miss_ratio);
  }
  // Past every key only first references miss.
  EXPECT_GT(exact_->points.back().miss_ratio, 0.0);
  EXPECT_LT(exact_->points.back().miss_ratio, 0.05);
  EXPECT_GT(exact_->MissRatioAt(1000), exact_->points.back().miss_ratio + 0.2);
}

// Each figure is the mean and the max over kSalts samples (salts).
TEST_F(ShardsAccuracyTest, FixedRateOnePercent) {
  const auto [adjusted, adjusted_max] = MeanAndMax([](int salt) {
    return MeanAbsoluteError(SampledMrc(*trace_, 0.01, kOptions, true, salt),
                             *exact_);
  });
  const auto [plain, plain_max] = MeanAndMax([](int salt) {
    return MeanAbsoluteError(SampledMrc(*trace_, 0.01, kOptions, false, salt),
                             *exact_);
  });
  std::printf(
      "R=1%%: MAE mean %.4f max %.4f with SHARDS_adj; %.4f, %.4f "
      "without\n",
      adjusted, adjusted_max, plain, plain_max);
  // The paper reports about 0.01 at 1% on real traces.
  EXPECT_LT(adjusted_max, 0.03);
}

TEST_F(ShardsAccuracyTest, FixedRateTenthOfAPercent) {
  const auto [adjusted, adjusted_max] = MeanAndMax([](int salt) {
    return MeanAbsoluteError(SampledMrc(*trace_, 0.001, kOptions, true, salt),
                             *exact_);
  });
  const auto [plain, plain_max] = MeanAndMax([](int salt) {
    return MeanAbsoluteError(SampledMrc(*trace_, 0.001, kOptions, false, salt),
                             *exact_);
  });
  std::printf(
      "R=0.1%%: MAE mean %.4f max %.4f with SHARDS_adj; %.4f, %.4f "
      "without\n",
      adjusted, adjusted_max, plain, plain_max);
  // About 100 sampled keys: coarser.
  EXPECT_LT(adjusted_max, 0.06);
}

TEST_F(ShardsAccuracyTest, FixedSize) {
  double rate = 0;
  std::vector<double> adjusted, plain;
  for (int salt = 0; salt < kSalts; ++salt) {
    std::unique_ptr<ShardsProfiler> profiler =
        *ShardsProfiler::Create({.rate = 1.0, .max_keys = 8192}, kOptions);
    for (uint64_t key : *trace_) profiler->Access(Mix64(key ^ salt));
    ASSERT_EQ(profiler->references(), kRefs);
    ASSERT_LE(profiler->sampler().sampled_keys(), 8192u);
    // Nearly every key is referenced, so the rate ends near 8192/100k.
    EXPECT_NEAR(profiler->sampler().rate(), 8192.0 / kKeys, 0.02);
    rate += profiler->sampler().rate() / kSalts;
    adjusted.push_back(MeanAbsoluteError(profiler->Curve(), *exact_));
    plain.push_back(MeanAbsoluteError(profiler->Curve(false), *exact_));
  }
  const auto [mean, max] = MeanAndMax([&](int salt) { return adjusted[salt]; });
  const auto [plain_mean, plain_max] =
      MeanAndMax([&](int salt) { return plain[salt]; });
  std::printf(
      "fixed size 8192 keys (final R %.4f): MAE mean %.4f max %.4f "
      "with SHARDS_adj; %.4f, %.4f without\n",
      rate, mean, max, plain_mean, plain_max);
  EXPECT_LT(max, 0.02);
}

TEST_F(ShardsAccuracyTest, ProfilerFixedRateMatchesTheLoop) {
  std::unique_ptr<ShardsProfiler> profiler =
      *ShardsProfiler::Create({.rate = 0.01}, kOptions);
  for (uint64_t key : *trace_) profiler->Access(Mix64(key));  // salt 0
  const MissRatioCurve a = profiler->Curve();
  const MissRatioCurve b = SampledMrc(*trace_, 0.01, kOptions, true);
  ASSERT_EQ(a.points.size(), b.points.size());
  for (size_t i = 0; i < a.points.size(); ++i) {
    EXPECT_DOUBLE_EQ(a.points[i].miss_ratio, b.points[i].miss_ratio);
  }
}

TEST(ShardsProfilerTest, ConcurrentAccess) {
  std::unique_ptr<ShardsProfiler> profiler =
      *ShardsProfiler::Create({.rate = 1.0, .max_keys = 64});
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&profiler, t] {
      for (uint64_t i = 0; i < 20'000; ++i) {
        profiler->Access(BlockKey("f", (i * 7 + t) % 1000));
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(profiler->references(), 80'000u);
  EXPECT_LE(profiler->sampler().sampled_keys(), 64u);
  const MissRatioCurve mrc = profiler->Curve();
  EXPECT_GT(mrc.references, 0);
  EXPECT_DOUBLE_EQ(mrc.MissRatioAt(0), 1.0);
}

TEST(MeanAbsoluteErrorTest, OverCommonSizes) {
  MissRatioCurve a{.points = {{0, 1}, {1, 0.5}, {2, 0.5}, {3, 0.2}}};
  MissRatioCurve b{.points = {{0, 1}, {2, 0.3}}};
  // Sizes 1 and 2: |0.5 - 1| and |0.5 - 0.3|.
  EXPECT_DOUBLE_EQ(MeanAbsoluteError(a, b), (0.5 + 0.2) / 2);
  EXPECT_TRUE(std::isnan(MeanAbsoluteError(a, MissRatioCurve{})));
}

// Allocation.

// A curve with points every `step` blocks for `steps` steps, whose miss
// ratio drops by drops[i] at step i + 1.
MissRatioCurve CurveFromDrops(const std::vector<double>& drops, uint64_t step) {
  MissRatioCurve mrc;
  mrc.bucket_blocks = step;
  double miss = 1.0;
  mrc.points.push_back({0, miss});
  for (size_t i = 0; i < drops.size(); ++i) {
    miss = std::max(0.0, miss - drops[i]);
    mrc.points.push_back({(i + 1) * step, miss});
  }
  return mrc;
}

// Random tenants; convex: drops shrink with size. Non-convex: drops in any
// order, with cliffs (zeros then a large drop).
std::vector<TenantCurve> RandomTenants(std::mt19937_64& rng, bool convex,
                                       uint64_t step) {
  const int n = 2 + static_cast<int>(rng() % 3);
  std::vector<TenantCurve> tenants(n);
  for (TenantCurve& tenant : tenants) {
    const int steps = 1 + static_cast<int>(rng() % 12);
    std::vector<double> drops(steps);
    double sum = 0;
    for (double& d : drops) {
      d = rng() % 4 == 0 && !convex ? 0.0 : Uniform(rng);
      sum += d;
    }
    if (convex) std::sort(drops.rbegin(), drops.rend());
    const double scale = (0.3 + 0.7 * Uniform(rng)) / std::max(sum, 1e-9);
    for (double& d : drops) d *= scale;
    tenant.mrc = CurveFromDrops(drops, step);
    tenant.references = 100 + static_cast<double>(rng() % 10'000);
  }
  return tenants;
}

// Every split into multiples of step, literally.
double EnumerateBest(const std::vector<TenantCurve>& tenants, uint64_t total,
                     uint64_t step) {
  std::vector<uint64_t> sizes(tenants.size());
  double best = 0;
  std::function<void(size_t, uint64_t)> go = [&](size_t t, uint64_t left) {
    if (t == tenants.size()) {
      best = std::max(best, TotalHits(tenants, sizes));
      return;
    }
    for (uint64_t s = 0; s <= left; s += step) {
      sizes[t] = s;
      go(t + 1, left - s);
    }
  };
  go(0, total);
  return best;
}

void ExpectValidSplit(const std::vector<uint64_t>& sizes, size_t tenants,
                      uint64_t total, uint64_t step) {
  ASSERT_EQ(sizes.size(), tenants);
  uint64_t sum = 0;
  for (uint64_t s : sizes) {
    EXPECT_EQ(s % step, 0u);
    sum += s;
  }
  EXPECT_LE(sum, total);
}

TEST(AllocateTest, BruteForceIsTheOptimum) {
  std::mt19937_64 rng(11);
  constexpr uint64_t kStep = 4;
  for (int i = 0; i < 200; ++i) {
    const std::vector<TenantCurve> tenants = RandomTenants(rng, false, kStep);
    const uint64_t total = kStep * (rng() % 16) + rng() % kStep;
    const std::vector<uint64_t> sizes =
        BruteForceAllocate(tenants, total, kStep);
    ExpectValidSplit(sizes, tenants.size(), total, kStep);
    EXPECT_NEAR(TotalHits(tenants, sizes), EnumerateBest(tenants, total, kStep),
                1e-6);
  }
}

TEST(AllocateTest, GreedyIsOptimalOnConvexCurves) {
  std::mt19937_64 rng(12);
  constexpr uint64_t kStep = 4;
  for (int i = 0; i < 500; ++i) {
    const std::vector<TenantCurve> tenants = RandomTenants(rng, true, kStep);
    const uint64_t total = kStep * (rng() % 40);
    const std::vector<uint64_t> sizes = AllocateBudget(tenants, total, kStep);
    ExpectValidSplit(sizes, tenants.size(), total, kStep);
    const double best =
        TotalHits(tenants, BruteForceAllocate(tenants, total, kStep));
    EXPECT_NEAR(TotalHits(tenants, sizes), best, 1e-9 * best) << i;
  }
}

TEST(AllocateTest, GreedyOnNonConvexCurves) {
  std::mt19937_64 rng(13);
  constexpr uint64_t kStep = 4;
  constexpr int kCases = 1000;
  int exact = 0;
  double worst = 1.0;
  for (int i = 0; i < kCases; ++i) {
    const std::vector<TenantCurve> tenants = RandomTenants(rng, false, kStep);
    const uint64_t total = kStep * (rng() % 40);
    const std::vector<uint64_t> sizes = AllocateBudget(tenants, total, kStep);
    ExpectValidSplit(sizes, tenants.size(), total, kStep);
    const double got = TotalHits(tenants, sizes);
    const double best =
        TotalHits(tenants, BruteForceAllocate(tenants, total, kStep));
    ASSERT_LE(got, best + 1e-9 * best);
    if (got >= best - 1e-9 * best) ++exact;
    if (best > 0) worst = std::min(worst, got / best);
  }
  std::printf("non-convex: greedy optimal in %d/%d cases, worst %.3f of it\n",
              exact, kCases, worst);
  // Measured: 978/1000 optimal, the worst at 0.926 of the optimum.
  EXPECT_GE(worst, 0.9);
  EXPECT_GE(exact, kCases * 95 / 100);
}

TEST(AllocateTest, HullJumpsACliff) {
  // Tenant 0 gains nothing until its whole working set (8 blocks) fits;
  // tenant 1 gains a little per block. Stepwise greedy would feed tenant 1;
  // the hull sees tenant 0's 1000 hits / 8 blocks.
  std::vector<TenantCurve> tenants(2);
  tenants[0].mrc = CurveFromDrops({0, 0, 0, 0, 0, 0, 0, 1.0}, 1);
  tenants[0].references = 1000;
  tenants[1].mrc = CurveFromDrops({0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1}, 1);
  tenants[1].references = 1000;
  EXPECT_EQ(AllocateBudget(tenants, 8, 1), (std::vector<uint64_t>{8, 0}));
  EXPECT_EQ(AllocateBudget(tenants, 12, 1), (std::vector<uint64_t>{8, 4}));
  // 7 blocks cannot reach the cliff: the fix-up gives them to tenant 1.
  EXPECT_EQ(AllocateBudget(tenants, 7, 1), (std::vector<uint64_t>{0, 7}));
  // Nothing left to gain: the rest stays unassigned.
  EXPECT_EQ(AllocateBudget(tenants, 100, 1), (std::vector<uint64_t>{8, 8}));
}

TEST(AllocateTest, CoarserStepThanTheCurve) {
  std::vector<TenantCurve> tenants(2);
  tenants[0].mrc = CurveFromDrops({0.5, 0.3, 0.1, 0.05}, 1);
  tenants[0].references = 100;
  tenants[1].mrc = CurveFromDrops({0.4, 0.4, 0.1, 0.1}, 1);
  tenants[1].references = 100;
  const std::vector<uint64_t> sizes = AllocateBudget(tenants, 5, 2);
  ExpectValidSplit(sizes, 2, 5, 2);
  EXPECT_NEAR(TotalHits(tenants, sizes),
              TotalHits(tenants, BruteForceAllocate(tenants, 5, 2)), 1e-9);
  EXPECT_EQ(AllocateBudget({}, 10, 1), std::vector<uint64_t>{});
}

}  // namespace
}  // namespace sroute
