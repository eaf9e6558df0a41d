// SPDX-License-Identifier: Apache-2.0
// Steering's logic (stages/steering/): congestion detection on a scripted
// clock (windows, EWMA, threshold, hysteresis, quiet after a mode switch,
// the learned calm ratio),
// client-side AIMD, and the plan: the write-mode window against Sandook's
// Figure 7b (2 -> 3 -> 4 write-mode devices of ten as write demand grows),
// hill-climbing against the min-max optimum on Figure 2a's devices (0.28,
// 0.36, 0.99 MOPS at 1 ms), the fallback near saturation, members out.
#include <memory>

#include "gtest/gtest.h"
#include "stages/steering/aimd.h"
#include "stages/steering/congestion.h"
#include "stages/steering/planner.h"

namespace sroute {
namespace {

constexpr uint64_t kOneMs = 1'000'000;

// A device whose p90 rises linearly from `base_us` at no load to 1 ms at
// `capacity` (and on to twice that), for every mix given; write mixes
// serve `write_scale` times the rate.
std::shared_ptr<const Profile> Linear(double capacity, double base_us = 100,
                                      double write_scale = 1) {
  proto::DeviceProfile p;
  for (uint32_t percent : {0u, 100u}) {
    auto* mix = p.add_mix();
    mix->set_write_percent(percent);
    const double cap = percent == 0 ? capacity : capacity * write_scale;
    mix->set_peak_iops(1.2 * cap);
    for (int step = 1; step <= 20; ++step) {
      const double iops = cap * step / 10.0;
      const double p90 = base_us + (1000 - base_us) * iops / cap;
      auto* pt = mix->add_point();
      pt->set_iops(iops);
      pt->set_p50_us(p90 / 2);
      pt->set_p90_us(p90);
      pt->set_p99_us(p90 * 2);
    }
  }
  auto made = Profile::Make(std::move(p));
  EXPECT_TRUE(made.ok()) << made.status();
  return std::make_shared<const Profile>(*std::move(made));
}

// Feeds one 10 ms window of `n` completions of `us` each, starting at `t`.
void Window(CongestionDetector& d, uint64_t t, int n, uint64_t us) {
  for (int i = 0; i < n; ++i) {
    d.Note(t + static_cast<uint64_t>(i) * (10 * kOneMs / n), false, us * 1000);
  }
}

TEST(SteeringTest, CongestionIsMarkedAboveTheProfileWithHysteresis) {
  // 4 K IOPS (40 per 10 ms window) on a device that serves 1 M within 1
  // ms: below the profile's first point (100 K), whose 190 us it expects.
  // Marked at the first window over (confirmation: the next test).
  CongestionOptions once;
  once.confirm_windows = 1;
  CongestionDetector d(Linear(1'000'000), once);
  uint64_t t = 0;
  Window(d, t, 40, 190);
  t += 10 * kOneMs;
  EXPECT_FALSE(d.Congested(t));
  EXPECT_NEAR(d.view().iops, 4000, 1);
  EXPECT_NEAR(d.view().expected_us, 190, 0.5);
  // Slower by 40 %: the EWMA (half the new window) is 20 % over.
  Window(d, t, 40, 266);
  t += 10 * kOneMs;
  EXPECT_TRUE(d.Congested(t));
  // Back to normal: 10 % over, above half the threshold: still marked.
  Window(d, t, 40, 190);
  t += 10 * kOneMs;
  EXPECT_TRUE(d.Congested(t));
  // 3.7 % over: cleared.
  Window(d, t, 40, 185);
  t += 10 * kOneMs;
  EXPECT_FALSE(d.Congested(t));
  // 9.7 % over is under the threshold: not marked.
  Window(d, t, 40, 220);
  t += 10 * kOneMs;
  EXPECT_FALSE(d.Congested(t));
  EXPECT_EQ(d.view().marked_windows, 2u);
  // A light load is judged over a longer window: 16 slow completions a
  // window (twice the expectation), two windows.
  Window(d, t, 16, 400);
  t += 10 * kOneMs;
  EXPECT_FALSE(d.Congested(t));  // 16: not yet
  Window(d, t, 16, 400);
  t += 10 * kOneMs;
  EXPECT_TRUE(d.Congested(t));
  EXPECT_NEAR(d.view().iops, (4000 + 1600) / 2.0, 1);  // the EWMA
}

// A member that gets few reads and starts collecting (20x its profile):
// 10 completions a window are judged, as 40 would be, and it is marked
// after two windows in a row (20 ms), not after two 32-completion windows
// (64 ms here). 10 completions 3x over are not judged.
TEST(SteeringTest, FarOverTheProfileFewCompletionsAreEnough) {
  CongestionDetector d(Linear(1'000'000), CongestionOptions());
  uint64_t t = 0;
  Window(d, t, 40, 190);
  t += 10 * kOneMs;
  EXPECT_FALSE(d.Congested(t));
  Window(d, t, 10, 570);  // 3x: too few to judge yet
  t += 10 * kOneMs;
  EXPECT_FALSE(d.Congested(t));
  EXPECT_EQ(d.view().latency_us, 190);
  d.ModeSwitched(t);  // (a fresh start, the load kept)
  t += kOneMs;
  Window(d, t, 10, 4000);
  t += 10 * kOneMs;
  EXPECT_FALSE(d.Congested(t));  // one window: a hiccup, maybe
  EXPECT_GT(d.view().latency_us, 1000);
  Window(d, t, 10, 4000);
  t += 10 * kOneMs;
  EXPECT_TRUE(d.Congested(t));
  // Fewer than a quarter of min_samples say nothing, however slow.
  CongestionDetector e(Linear(1'000'000), CongestionOptions());
  Window(e, 0, 7, 20000);
  Window(e, 10 * kOneMs, 7, 20000);
  EXPECT_FALSE(e.Congested(20 * kOneMs));
  EXPECT_EQ(e.view().marked_windows, 0u);
}

TEST(SteeringTest, OneSlowWindowIsNotCongestionTwoAre) {
  CongestionDetector d(Linear(1'000'000), CongestionOptions());
  uint64_t t = 0;
  auto window = [&](uint64_t us) {
    Window(d, t, 40, us);
    t += 10 * kOneMs;
    return d.Congested(t);
  };
  EXPECT_FALSE(window(190));
  // One window 3x slower (a host's hiccup): the EWMA is 2x over, then
  // 1.5x, 1.25x... but no second window is slow: not marked.
  EXPECT_FALSE(window(570));
  EXPECT_FALSE(window(190));
  EXPECT_FALSE(window(190));
  EXPECT_FALSE(window(190));
  // Slower for two windows in a row (40 % over each): marked.
  EXPECT_FALSE(window(266));
  EXPECT_TRUE(window(266));
  EXPECT_EQ(d.view().marked_windows, 1u);
}

// A device steadily 40 % slower than its profile (a skewed workload, a
// busy host) is its normal: the first window sets the calm ratio and it is
// never marked, and a slow drift (0.4 % a window, 50 % a second) is
// followed. A jump to twice
// that (a noisy neighbour) is marked after two windows as before, and the
// ratio does not learn it. Judged against the profile alone
// (max_baseline 1, the default), the same device is marked at its second
// window.
TEST(SteeringTest, ASteadyOffsetIsLearnedAJumpIsStillMarked) {
  CongestionOptions learning;
  learning.max_baseline = 3;
  CongestionDetector d(Linear(1'000'000), learning);
  uint64_t t = 0;
  auto window = [&](CongestionDetector& det, double us) {
    Window(det, t, 40, static_cast<uint64_t>(us));
    t += 10 * kOneMs;
    return det.Congested(t);
  };
  for (int i = 0; i < 30; ++i) ASSERT_FALSE(window(d, 266)) << i;
  EXPECT_NEAR(d.view().baseline, 1.4, 0.01);
  double us = 266;
  for (int i = 0; i < 50; ++i) ASSERT_FALSE(window(d, us *= 1.004)) << i;
  EXPECT_GT(d.view().baseline, 1.5);
  const double learned = d.view().baseline;
  EXPECT_FALSE(window(d, 2 * us));
  EXPECT_TRUE(window(d, 2 * us));
  EXPECT_EQ(d.view().marked_windows, 1u);
  for (int i = 0; i < 10; ++i) window(d, 2 * us);
  EXPECT_TRUE(d.Congested(t));
  EXPECT_LT(d.view().baseline, learned * 1.11);

  CongestionDetector p(Linear(1'000'000), CongestionOptions());
  EXPECT_FALSE(window(p, 266));
  EXPECT_TRUE(window(p, 266));
  EXPECT_EQ(p.view().baseline, 1);
}

// A device that starts far over its profile (collecting from the first
// window) learns at most max_baseline (3x): a GC pass's 20x is still
// marked, and once it ends the ratio falls back to what the device shows.
TEST(SteeringTest, TheCalmRatioIsBoundedSoGcIsAlwaysSeen) {
  CongestionOptions learning;
  learning.max_baseline = 3;
  CongestionDetector d(Linear(1'000'000), learning);
  uint64_t t = 0;
  auto window = [&](double us) {
    Window(d, t, 40, static_cast<uint64_t>(us));
    t += 10 * kOneMs;
    return d.Congested(t);
  };
  EXPECT_FALSE(window(3800));
  EXPECT_EQ(d.view().baseline, 3);
  EXPECT_TRUE(window(3800));
  // GC over: the EWMA falls, the mark clears, the ratio follows the
  // device down to 1.
  for (int i = 0; i < 100; ++i) window(190);
  EXPECT_FALSE(d.Congested(t));
  EXPECT_NEAR(d.view().baseline, 1, 0.02);
  EXPECT_FALSE(window(3800));
  EXPECT_TRUE(window(3800));
}

TEST(SteeringTest, LargeIosLoadButAreNotTimedAndSilenceClearsTheMark) {
  CongestionOptions once;
  once.confirm_windows = 1;
  CongestionDetector d(Linear(1'000'000), once);
  // With 20 reads, 128 KiB writes taking 5 ms each: load (32 pages each),
  // but not compared with a 4 KiB profile.
  for (int i = 0; i < 20; ++i) d.Note(i * 500'000, true, 5 * kOneMs, 32);
  Window(d, 0, 40, 190);
  EXPECT_FALSE(d.Congested(10 * kOneMs));
  EXPECT_NEAR(d.view().iops, (20 * 32 + 40) * 100, 1);
  EXPECT_NEAR(d.view().write_fraction, 640.0 / 680, 1e-9);
  // Congested, then callers go away: ten windows later it is not.
  Window(d, 10 * kOneMs, 40, 2000);
  EXPECT_TRUE(d.Congested(20 * kOneMs));
  d.Note(21 * kOneMs, false, 2 * kOneMs);  // one sample: says nothing
  EXPECT_TRUE(d.Congested(50 * kOneMs));
  EXPECT_FALSE(d.Congested(120 * kOneMs));
}

TEST(SteeringTest, AModeSwitchForgetsAndIsQuietForAMillisecond) {
  CongestionOptions once;
  once.confirm_windows = 1;
  CongestionDetector d(Linear(1'000'000), once);
  Window(d, 0, 40, 1000);
  EXPECT_TRUE(d.Congested(10 * kOneMs));
  d.ModeSwitched(10 * kOneMs);
  EXPECT_FALSE(d.Congested(10 * kOneMs));
  // Slow completions in the quiet millisecond are not counted.
  for (int i = 0; i < 50; ++i)
    d.Note(10 * kOneMs + 10'000 * i, true, 5 * kOneMs);
  Window(d, 11 * kOneMs, 40, 190);
  EXPECT_FALSE(d.Congested(21 * kOneMs));
  EXPECT_NEAR(d.view().latency_us, 190, 0.5);
  EXPECT_NEAR(d.view().write_fraction, 0, 1e-9);
}

TEST(SteeringTest, AimdHalvesOncePerRoundTripAndClimbsBack) {
  Aimd a(AimdOptions{});
  const uint64_t rtt = kOneMs;
  a.OnReply(1 * kOneMs, rtt, true);
  EXPECT_DOUBLE_EQ(a.multiplier(), 0.5);
  a.OnReply(1 * kOneMs + rtt / 2, rtt, true);  // the same spell
  EXPECT_DOUBLE_EQ(a.multiplier(), 0.5);
  a.OnReply(2 * kOneMs + 1, rtt, true);
  EXPECT_DOUBLE_EQ(a.multiplier(), 0.25);
  for (int i = 0; i < 10; ++i) a.OnReply((3 + i) * kOneMs + 2, rtt, true);
  EXPECT_DOUBLE_EQ(a.multiplier(), 0.05);  // the floor
  EXPECT_EQ(a.cuts(), 12u);
  // Unmarked: 1 % of the weight per round trip.
  uint64_t t = 12 * kOneMs + 2;
  a.OnReply(t + rtt / 2, rtt, false);
  EXPECT_DOUBLE_EQ(a.multiplier(), 0.05);
  a.OnReply(t + rtt, rtt, false);
  EXPECT_NEAR(a.multiplier(), 0.06, 1e-12);
  // Ten round trips later, ten steps at once.
  a.OnReply(t + 11 * rtt, rtt, false);
  EXPECT_NEAR(a.multiplier(), 0.16, 1e-12);
  a.OnReply(t + 200 * rtt, rtt, false);
  EXPECT_DOUBLE_EQ(a.multiplier(), 1.0);
}

// Replies marked by one judged window of the watch cut once, however many
// round trips they span; each new window cuts again (still at most once a
// round trip). Late replies of the window already cut for do not cut again.
TEST(SteeringTest, AimdCutsOncePerMarkedWindow) {
  Aimd a(AimdOptions{});
  const uint64_t rtt = kOneMs;
  for (int i = 0; i < 10; ++i) a.OnReply((1 + i) * kOneMs, rtt, true, 7);
  EXPECT_DOUBLE_EQ(a.multiplier(), 0.5);
  a.OnReply(11 * kOneMs, rtt, true, 8);
  EXPECT_DOUBLE_EQ(a.multiplier(), 0.25);
  a.OnReply(11 * kOneMs + rtt / 2, rtt, true, 9);  // within the round trip
  EXPECT_DOUBLE_EQ(a.multiplier(), 0.25);
  a.OnReply(12 * kOneMs + 1, rtt, true, 8);  // the cut window, late
  EXPECT_DOUBLE_EQ(a.multiplier(), 0.25);
  a.OnReply(12 * kOneMs + 2, rtt, true, 9);
  EXPECT_DOUBLE_EQ(a.multiplier(), 0.125);
  EXPECT_EQ(a.cuts(), 3u);
}

std::vector<SteeringDevice> Ten(double write_capacity) {
  std::vector<SteeringDevice> devices;
  for (int i = 0; i < 10; ++i) {
    devices.push_back({"ssd" + std::to_string(i),
                       Linear(1'000'000, 100, write_capacity / 1'000'000)});
  }
  return devices;
}

TEST(SteeringTest, TheWriteWindowGrowsWithWriteDemandAsInSandooksFigure7b) {
  // Ten devices writing 0.375 MOPS each within 1 ms, k = 2 (each write on
  // two): 0.01 MOPS of writes take two, 0.50 three, 0.75 four.
  const auto devices = Ten(375'000);
  SteeringOptions o;
  auto window = [&](double writes, uint32_t start) {
    return PlanSteering(devices, 9 * writes, writes, start, o);
  };
  EXPECT_EQ(window(10'000, 0).window_size, 2u);
  EXPECT_EQ(window(500'000, 0).window_size, 3u);
  EXPECT_EQ(window(750'000, 0).window_size, 4u);
  // The window slides with `start` and wraps around the ring.
  const SteeringPlan p = window(10'000, 9);
  EXPECT_TRUE(p.write_mode[9]);
  EXPECT_TRUE(p.write_mode[0]);
  EXPECT_FALSE(p.write_mode[1]);
  // Reads go to the eight read-mode devices only, evenly (all alike);
  // writes to the two.
  for (int i = 1; i <= 8; ++i) EXPECT_NEAR(p.read_share[i], 1.0 / 8, 1e-3);
  EXPECT_DOUBLE_EQ(p.read_share[0] + p.read_share[9], 0);
  EXPECT_NEAR(p.write_share[0], 0.5, 1e-3);
  // A member out takes nothing and the window skips it.
  auto down = devices;
  down[0].up = false;
  const SteeringPlan q = PlanSteering(down, 90'000, 10'000, 9, o);
  EXPECT_FALSE(q.write_mode[0]);
  EXPECT_TRUE(q.write_mode[1]);
  EXPECT_DOUBLE_EQ(q.read_share[0], 0);
  // A member collecting (its AIMD multiplier under half) is passed over
  // while the others cover the writes, and taken last when they do not.
  auto collecting = devices;
  collecting[9].capacity_share = 0.3;
  const SteeringPlan r = PlanSteering(collecting, 90'000, 10'000, 9, o);
  EXPECT_FALSE(r.write_mode[9]);
  EXPECT_TRUE(r.write_mode[0]);
  EXPECT_TRUE(r.write_mode[1]);
  EXPECT_EQ(r.window_size, 2u);
  for (auto& d : collecting) d.capacity_share = 0.3;
  collecting[5].capacity_share = 1;
  const SteeringPlan all = PlanSteering(collecting, 90'000, 10'000, 9, o);
  EXPECT_TRUE(all.write_mode[5]);
  EXPECT_TRUE(all.write_mode[9]);
  EXPECT_EQ(all.window_size, 2u);
  // Without segregation every member takes both.
  o.segregate = false;
  EXPECT_EQ(PlanSteering(devices, 90'000, 10'000, 0, o).window_size, 10u);
}

TEST(SteeringTest, ASmallPoolMixesWhenSegregationWouldMissTheTarget) {
  // Four members of 100 K IOPS within 1 ms, two copies: the window takes
  // two of them from the reads.
  std::vector<SteeringDevice> devices;
  for (int i = 0; i < 4; ++i) {
    devices.push_back({"d" + std::to_string(i), Linear(100'000)});
  }
  SteeringOptions o;
  // Light: two readers at 50 K each are within the target: segregated.
  const SteeringPlan light = PlanSteering(devices, 100'000, 5'000, 0, o);
  EXPECT_TRUE(light.segregated);
  EXPECT_EQ(light.window_size, 2u);
  EXPECT_LE(light.read_latency_us, o.target_us);
  // 300 K reads would load two readers past their peak; on all four with
  // the 40 K device writes, 85 K each: 865 us.
  const SteeringPlan heavy = PlanSteering(devices, 300'000, 20'000, 1, o);
  EXPECT_FALSE(heavy.segregated);
  EXPECT_EQ(heavy.window_size, 4u);
  EXPECT_EQ(heavy.window_start, 1u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_TRUE(heavy.write_mode[i]);
    EXPECT_NEAR(heavy.read_share[i], 0.25, 1e-3);
  }
  EXPECT_NEAR(heavy.read_latency_us, 865, 5);
}

TEST(SteeringTest, HillClimbingLevelsLatencyOnSandooksFigure2aDevices) {
  // Worn, healthy and fast at 0.28, 0.36, 0.99 MOPS within 1 ms; 1.3 MOPS
  // of reads. The min-max optimum loads each in proportion to its
  // capacity: p90 = 100 + 900 x 1.3 / 1.63 = 817.8 us everywhere. An even
  // split puts the worn one past its peak (1.2 x 0.28 MOPS): its queue
  // grows without bound.
  std::vector<SteeringDevice> devices = {{"worn", Linear(280'000)},
                                         {"healthy", Linear(360'000)},
                                         {"fast", Linear(990'000)}};
  SteeringOptions o;
  o.segregate = false;
  const SteeringPlan p = PlanSteering(devices, 1'300'000, 0, 0, o);
  EXPECT_FALSE(p.fallback);
  EXPECT_NEAR(p.read_latency_us, 817.8, 0.02 * 817.8);
  EXPECT_NEAR(p.read_share[0], 0.28 / 1.63, 0.01);
  EXPECT_NEAR(p.read_share[2], 0.99 / 1.63, 0.01);
  EXPECT_GT(p.steps, 10u);
  const double even =
      devices[0].profile->LatencyUs(1'300'000 / 3.0, 0, Percentile::kP90);
  EXPECT_GT(even, 100'000);
  EXPECT_NEAR(IdealIops(devices, 0, o), 1'630'000, 1);
  // At 95 % of the peaks (1.2 x capacity) and more: shares by peak.
  const SteeringPlan full = PlanSteering(devices, 1.9e6, 0, 0, o);
  EXPECT_TRUE(full.fallback);
  EXPECT_NEAR(full.read_share[1], 0.36 / 1.63, 1e-9);
  // No demand: shares by capacity within the target.
  EXPECT_NEAR(PlanSteering(devices, 0, 0, 0, o).read_share[2], 0.99 / 1.63,
              1e-9);
  // The fast one collects (its AIMD multiplier at 10 %): planned as a
  // tenth of itself, 0.099 MOPS, and the others levelled among
  // themselves: p90 = 100 + 900 x 0.5 / 0.739 = 709 us everywhere.
  devices[2].capacity_share = 0.1;
  const SteeringPlan gc = PlanSteering(devices, 500'000, 0, 0, o);
  EXPECT_NEAR(gc.read_share[2], 0.099 / 0.739, 0.01);
  EXPECT_NEAR(gc.read_share[0], 0.28 / 0.739, 0.01);
  EXPECT_NEAR(gc.read_latency_us, 709, 0.02 * 709);
}

}  // namespace
}  // namespace sroute
