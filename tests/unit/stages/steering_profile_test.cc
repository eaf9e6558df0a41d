// SPDX-License-Identifier: Apache-2.0
// Load-latency profiles (stages/steering/profile.h): checks with the mix
// and point named, interpolation in load, write shares rounded up,
// saturation past the top, capacity as the inverse; and the flash presets'
// profiles in model time (endpoints/flash_profile.h): the pool is as
// heterogeneous as Sandook's (0.28 : 0.36 : 0.99 at a 1 ms p90 with 10 %
// writes), writes cost reads, and a sweep is deterministic.
#include "endpoints/flash_profile.h"
#include "gtest/gtest.h"
#include "stages/steering/profile.h"

namespace sroute {
namespace {

// Two mixes: reads only (100 us up to 10 K IOPS, then 300 us at 20 K) and
// 20 % writes (twice as slow).
proto::DeviceProfile TwoMixes() {
  proto::DeviceProfile p;
  p.set_endpoint("//s1/ssd");
  auto add = [&](uint32_t percent, double scale) {
    auto* mix = p.add_mix();
    mix->set_write_percent(percent);
    mix->set_peak_iops(20'000 / scale);
    for (auto [iops, p90] : {std::pair{10'000.0, 100.0}, {20'000.0, 300.0}}) {
      auto* pt = mix->add_point();
      pt->set_iops(iops / scale);
      pt->set_p50_us(p90 * scale / 2);
      pt->set_p90_us(p90 * scale);
      pt->set_p99_us(p90 * scale * 2);
    }
  };
  add(0, 1);
  add(20, 2);
  return p;
}

TEST(SteeringProfileTest, LooksUpByLoadAndRoundsTheWriteShareUp) {
  auto p = Profile::Make(TwoMixes());
  ASSERT_TRUE(p.ok()) << p.status();
  const auto k90 = Percentile::kP90;
  EXPECT_DOUBLE_EQ(p->LatencyUs(5'000, 0, k90), 100);   // below: the first
  EXPECT_DOUBLE_EQ(p->LatencyUs(15'000, 0, k90), 200);  // halfway
  EXPECT_DOUBLE_EQ(p->LatencyUs(15'000, 0, Percentile::kP99), 400);
  // 5 % and 20 % of writes both take the 20 % mix; more than its share
  // too (the last mix).
  EXPECT_DOUBLE_EQ(p->LatencyUs(7'500, 0.05, k90), 400);
  EXPECT_DOUBLE_EQ(p->LatencyUs(7'500, 0.2, k90), 400);
  EXPECT_DOUBLE_EQ(p->LatencyUs(7'500, 0.9, k90), 400);
  // Past the top the latency keeps rising, at least doubling per 10 %.
  EXPECT_GE(p->LatencyUs(22'000, 0, k90), 600);
  EXPECT_GT(p->LatencyUs(30'000, 0, k90), p->LatencyUs(22'000, 0, k90));
  // Capacity is the inverse.
  EXPECT_DOUBLE_EQ(p->Capacity(0, 200, k90), 15'000);
  EXPECT_DOUBLE_EQ(p->Capacity(0.1, 400, k90), 7'500);
  EXPECT_DOUBLE_EQ(p->Capacity(0, 50, k90), 0);        // not even at the first
  EXPECT_DOUBLE_EQ(p->Capacity(0, 600, k90), 20'000);  // not past the peak
  // Past the peak the queue grows: +50 ms at 10 % over it.
  EXPECT_GE(p->LatencyUs(22'000, 0, k90), 50'000);
  // A mix whose every step is fast (a write buffer) promises no more than
  // its peak.
  proto::DeviceProfile buffered = TwoMixes();
  for (auto& pt : *buffered.mutable_mix(1)->mutable_point()) {
    pt.set_p50_us(10);
    pt.set_p90_us(20);
    pt.set_p99_us(40);
  }
  auto b = Profile::Make(buffered);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_DOUBLE_EQ(b->Capacity(1, 1000, k90), 10'000);
  EXPECT_DOUBLE_EQ(p->PeakIops(0.1), 10'000);
  auto named = ParsePercentile("p99");
  ASSERT_TRUE(named.ok());
  EXPECT_EQ(*named, Percentile::kP99);
  EXPECT_FALSE(ParsePercentile("p95").ok());
}

TEST(SteeringProfileTest, BadProfilesNameTheMixAndPoint) {
  auto expect_bad = [](proto::DeviceProfile p, const std::string& text) {
    auto made = Profile::Make(std::move(p));
    ASSERT_FALSE(made.ok());
    EXPECT_NE(made.status().message().find(text), std::string::npos)
        << made.status();
  };
  expect_bad(proto::DeviceProfile(), "no mix");
  proto::DeviceProfile p = TwoMixes();
  p.mutable_mix(1)->set_write_percent(0);
  expect_bad(p, "mix 0% writes: write shares must rise");
  p = TwoMixes();
  p.mutable_mix(1)->mutable_point(1)->set_iops(1);
  expect_bad(p, "mix 20% writes, point 2: loads must be positive and rise");
  p = TwoMixes();
  p.mutable_mix(0)->mutable_point(0)->set_p99_us(1);
  expect_bad(p, "mix 0% writes, point 1: latencies must satisfy");
  p = TwoMixes();
  p.mutable_mix(0)->clear_point();
  expect_bad(p, "mix 0% writes has no point");
}

ModelSweep QuickSweep() {
  ModelSweep s;
  s.write_percents = {0, 10, 100};
  s.step_percent = 5;
  s.ios_per_step = 3000;
  return s;
}

TEST(SteeringProfileTest, FlashPresetsAreAsHeterogeneousAsSandooksPool) {
  double at_1ms[3], reads_only[3];
  const char* names[3] = {"worn", "healthy", "fast"};
  for (int i = 0; i < 3; ++i) {
    auto options = FlashModel::Preset(names[i]);
    ASSERT_TRUE(options.ok());
    auto p = Profile::Make(ProfileModel(*options, QuickSweep()));
    ASSERT_TRUE(p.ok()) << p.status();
    at_1ms[i] = p->Capacity(0.1, 1000, Percentile::kP90);
    reads_only[i] = p->Capacity(0, 1000, Percentile::kP90);
    // 10 % of writes cost a fifth of the reads' rate or more (Sandook
    // §2.3.2: 30 %).
    EXPECT_LT(at_1ms[i], 0.8 * reads_only[i]) << names[i];
    EXPECT_GT(p->PeakIops(0), 2 * p->PeakIops(1)) << names[i];
  }
  // 0.28 : 0.36 : 0.99 MOPS, within 15 %.
  EXPECT_NEAR(at_1ms[0] / at_1ms[1], 0.28 / 0.36, 0.15 * 0.28 / 0.36);
  EXPECT_NEAR(at_1ms[2] / at_1ms[1], 0.99 / 0.36, 0.15 * 0.99 / 0.36);
}

TEST(SteeringProfileTest, AModelSweepIsDeterministic) {
  auto options = FlashModel::Preset("healthy");
  ASSERT_TRUE(options.ok());
  ModelSweep s = QuickSweep();
  s.write_percents = {25};
  const proto::DeviceProfile a = ProfileModel(*options, s);
  const proto::DeviceProfile b = ProfileModel(*options, s);
  EXPECT_EQ(a.SerializeAsString(), b.SerializeAsString());
  ASSERT_EQ(a.mix_size(), 1);
  EXPECT_EQ(a.mix(0).point_size(), 20);
  s.seed = 2;
  EXPECT_NE(ProfileModel(*options, s).SerializeAsString(),
            a.SerializeAsString());
}

}  // namespace
}  // namespace sroute
