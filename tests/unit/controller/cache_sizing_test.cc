// SPDX-License-Identifier: Apache-2.0
// The cache_sizing app's logic: curves from SHARDS samples as the hosts send
// them, and the budget split they give, against the best split of the exact
// curves.
#include "controller/apps/cache_sizing.h"

#include <cmath>
#include <random>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/util/zipf.h"

namespace sroute {
namespace {

using ::testing::HasSubstr;

using ::sroute::testing::Zipf;

TEST(CacheSizingArgsTest, ParsesAndRefusesClearly) {
  auto o = ParseCacheSizingArgs(
      "sswitch=fuse@h:/m,stage=c,budget=64M,tenants=alice+bob,rate=0.001,"
      "max_keys=8K,interval=3");
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->budget_bytes, 64u << 20);
  EXPECT_EQ(o->tenants, (std::vector<std::string>{"alice", "bob"}));
  EXPECT_EQ(o->max_keys, 8192u);
  EXPECT_EQ(o->interval, absl::Seconds(3));
  EXPECT_THAT(ParseCacheSizingArgs("sswitch=x,budget=1M").status().message(),
              HasSubstr("needs sswitch=, budget= and tenants="));
  EXPECT_THAT(ParseCacheSizingArgs("sswitch=x,budget=1M,tenants=a,speed=2")
                  .status()
                  .message(),
              HasSubstr("unknown argument 'speed'"));
  EXPECT_THAT(
      ParseCacheSizingArgs("sswitch=x,budget=big,tenants=a").status().message(),
      HasSubstr("budget: expected a size"));
}

// Two tenants with different working sets share a budget: the split from
// 1 % samples reaches at least 0.98 of the hits of the best split of the
// exact curves (what the benchmark also measures on real caches).
void SplitNearTheBest(size_t max_keys) {
  constexpr uint64_t kBlock = 4096;
  constexpr uint64_t kBudgetBlocks = 24000;
  CacheSizingOptions o;
  o.sswitch = "h";
  o.budget_bytes = kBudgetBlocks * kBlock;
  o.tenants = {"alice", "bob"};
  o.block = kBlock;
  o.max_keys = max_keys;
  CacheSizer sizer(o);

  std::mt19937_64 rng(7);
  Zipf zipf(60000, 0.9);
  std::uniform_int_distribution<uint64_t> uniform(0, 15999);
  auto sampler = *ShardsSampler::Create({.rate = 0.01});
  std::vector<uint64_t> trace_a, trace_b;
  uint64_t refs_a = 0, refs_b = 0;
  for (int i = 0; i < 600000; ++i) {
    const uint64_t a = BlockKey("//home/a", zipf(rng));
    const uint64_t b = BlockKey("//home/b", uniform(rng));
    trace_a.push_back(a);
    trace_b.push_back(b);
    ++refs_a;
    ++refs_b;
    if (sampler->Sample(a)) sizer.AddSample("alice", 0.01, refs_a, {a});
    if (sampler->Sample(b)) sizer.AddSample("bob", 0.01, refs_b, {b});
  }
  sizer.AddSample("mallory", 0.01, 5, {1});  // not a tenant: ignored
  ASSERT_EQ(sizer.Curves().size(), 2u);

  const std::map<std::string, uint64_t> split = sizer.Split();
  MrcOptions mo{.bucket_blocks = sizer.step_blocks(),
                .max_blocks = kBudgetBlocks};
  std::vector<TenantCurve> exact = {
      {ExactMrc(trace_a, mo), static_cast<double>(trace_a.size())},
      {ExactMrc(trace_b, mo), static_cast<double>(trace_b.size())}};
  const std::vector<uint64_t> ours = {split.at("alice") / kBlock,
                                      split.at("bob") / kBlock};
  EXPECT_LE(ours[0] + ours[1], kBudgetBlocks);
  const std::vector<uint64_t> best =
      BruteForceAllocate(exact, kBudgetBlocks, sizer.step_blocks());
  const double equal_hits =
      TotalHits(exact, {kBudgetBlocks / 2, kBudgetBlocks / 2});
  const double our_hits = TotalHits(exact, ours);
  const double best_hits = TotalHits(exact, best);
  std::printf(
      "split alice=%lu bob=%lu blocks (best %lu/%lu): %.4f of the "
      "best, equal split %.4f\n",
      ours[0], ours[1], best[0], best[1], our_hits / best_hits,
      equal_hits / best_hits);
  EXPECT_GE(our_hits, 0.98 * best_hits);
  EXPECT_GT(our_hits, equal_hits);
  const std::string text =
      FormatCurve("alice", sizer.Curves().at("alice"), kBlock);
  EXPECT_THAT(text, ::testing::StartsWith("# tenant alice references "));
  EXPECT_THAT(text, HasSubstr(" block 4096\n0 1\n"));
}

TEST(CacheSizerTest, FixedRateSplitIsNearTheBestOfTheExactCurves) {
  SplitNearTheBest(0);
}

TEST(CacheSizerTest, FixedSizeSplitIsNearTheBestOfTheExactCurves) {
  SplitNearTheBest(2048);
}

}  // namespace
}  // namespace sroute
