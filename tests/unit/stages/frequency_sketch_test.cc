// SPDX-License-Identifier: Apache-2.0
// The cache's frequency sketch (stages/cache/frequency_sketch.h): counts
// never below the truth, saturating at 15, halved once the sample size is
// reached, and small.
#include "stages/cache/frequency_sketch.h"

#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace sroute {
namespace {

TEST(FrequencySketchTest, CountsAtLeastTheTruthAndSaturate) {
  FrequencySketch sketch(1024);
  EXPECT_EQ(sketch.Estimate(7), 0u);
  for (int i = 0; i < 5; ++i) sketch.Increment(7);
  EXPECT_GE(sketch.Estimate(7), 5u);
  EXPECT_LE(sketch.Estimate(7), 6u);  // a collision in all four rows: rare
  for (int i = 0; i < 50; ++i) sketch.Increment(7);
  EXPECT_EQ(sketch.Estimate(7), 15u);
  // Many keys, a few asks each: no estimate below its key's count.
  FrequencySketch many(4096);
  std::mt19937_64 rng(3);
  std::vector<uint32_t> truth(2000, 0);
  for (int i = 0; i < 6000; ++i) {
    const uint64_t key = rng() % truth.size();
    many.Increment(key);
    ++truth[key];
  }
  uint64_t over = 0;
  for (uint64_t key = 0; key < truth.size(); ++key) {
    const uint32_t want = std::min<uint32_t>(truth[key], 15);
    ASSERT_GE(many.Estimate(key), want) << key;
    over += many.Estimate(key) - want;
  }
  // Conservative update keeps collisions from inflating much.
  EXPECT_LT(over, truth.size() / 10);
}

TEST(FrequencySketchTest, AgingHalvesEveryCount) {
  FrequencySketch sketch(64);
  ASSERT_EQ(sketch.sample_size(), 640u);
  for (int i = 0; i < 12; ++i) sketch.Increment(1);
  for (int i = 0; i < 6; ++i) sketch.Increment(2);
  const uint32_t before = sketch.Estimate(1);
  ASSERT_GE(before, 12u);
  // Other keys' asks fill the sample: then every counter is halved, and
  // what is not asked for again fades.
  uint64_t key = 1000;
  for (uint64_t n = 18; n < sketch.sample_size(); ++n) sketch.Increment(key++);
  EXPECT_LE(sketch.Estimate(1), before / 2 + 1);
  EXPECT_LE(sketch.Estimate(2), 4u);
}

TEST(FrequencySketchTest, AResizeKeepsCountsWhileTheRowsKeepTheirWidth) {
  FrequencySketch sketch(1000);  // rows of 1024
  for (int i = 0; i < 5; ++i) sketch.Increment(9);
  sketch.Resize(1024);
  EXPECT_GE(sketch.Estimate(9), 5u);
  EXPECT_EQ(sketch.sample_size(), 10240u);
  sketch.Resize(5000);  // rows of 8192: counts start again
  EXPECT_EQ(sketch.Estimate(9), 0u);
  EXPECT_GE(sketch.bytes(), 2u * 5000);
}

TEST(FrequencySketchTest, TwoToFourBytesPerBlockOfCapacity) {
  for (uint64_t capacity : {1000u, 1024u, 6554u, 100000u}) {
    const FrequencySketch sketch(capacity);
    EXPECT_GE(sketch.bytes(), 2 * capacity) << capacity;
    EXPECT_LE(sketch.bytes(), 4 * capacity) << capacity;
  }
}

}  // namespace
}  // namespace sroute
