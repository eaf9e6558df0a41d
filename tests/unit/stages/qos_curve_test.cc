// SPDX-License-Identifier: Apache-2.0
// The qos stage's device curves (stages/qos/device_curve.h): lookups, checks,
// and calibration's fit against a device model whose write cost is known.
#include <cmath>
#include <vector>

#include "gtest/gtest.h"
#include "stages/qos/device_curve.h"

namespace sroute {
namespace {

const std::vector<QosCurvePoint> kCurve = {
    {absl::Milliseconds(1), 1000, 2000},
    {absl::Milliseconds(5), 3000, 5000},
    {absl::Milliseconds(20), 4000, 8000},
};

TEST(QosCurveTest, RateAtInterpolatesBetweenTargets) {
  EXPECT_DOUBLE_EQ(RateAt(kCurve, absl::Milliseconds(1)).tokens_per_s, 1000);
  const CurveRate mid = RateAt(kCurve, absl::Milliseconds(3));
  EXPECT_DOUBLE_EQ(mid.tokens_per_s, 2000);
  EXPECT_DOUBLE_EQ(mid.read_only_tokens_per_s, 3500);
  EXPECT_FALSE(mid.below_curve);
  // Past the last target: the last rate (the device gives no more).
  EXPECT_DOUBLE_EQ(RateAt(kCurve, absl::Seconds(1)).tokens_per_s, 4000);
  EXPECT_DOUBLE_EQ(RateAt(kCurve, absl::InfiniteDuration()).tokens_per_s, 4000);
  // Stricter than the first: flagged, never silently the first rate.
  const CurveRate strict = RateAt(kCurve, absl::Microseconds(200));
  EXPECT_TRUE(strict.below_curve);
  EXPECT_DOUBLE_EQ(RateAt({}, absl::Milliseconds(1)).tokens_per_s, 0);
}

TEST(QosCurveTest, CheckCurveRefusesDisorderAndZeros) {
  EXPECT_TRUE(CheckCurve(kCurve).ok());
  EXPECT_TRUE(CheckCurve({}).ok());
  std::vector<QosCurvePoint> bad = kCurve;
  std::swap(bad[0], bad[1]);
  EXPECT_FALSE(CheckCurve(bad).ok());
  bad = kCurve;
  bad[2].tokens_per_s = 10;  // more latency for fewer tokens
  EXPECT_FALSE(CheckCurve(bad).ok());
  bad = kCurve;
  bad[0].tokens_per_s = 0;
  EXPECT_FALSE(CheckCurve(bad).ok());
}

TEST(QosCurveTest, CurveOfSortsAStagesPoints) {
  proto::QosOptions o;
  for (auto [us, t] : {std::pair{20000u, 4000u}, std::pair{1000u, 1000u}}) {
    auto* p = o.add_curve();
    p->set_p95_us(us);
    p->set_tokens_per_s(t);
  }
  const std::vector<QosCurvePoint> c = CurveOf(o);
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[0].p95, absl::Milliseconds(1));
  EXPECT_TRUE(CheckCurve(c).ok());
}

// A device whose p95 depends on weighted load only, with a write costing
// `cost` reads: p95 = base / (1 - W / max).
std::vector<CalibrationSample> Sweep(double cost) {
  const double base_us = 100, max = 10000;
  std::vector<CalibrationSample> out;
  for (double w : {0.0, 0.1, 0.25, 0.5}) {
    const double per_io = 1 - w + w * cost;
    for (double load = 0.1; load < 0.96; load += 0.05) {
      const double weighted = load * max;
      out.push_back({w, weighted / per_io,
                     absl::Microseconds(base_us / (1 - weighted / max))});
    }
  }
  return out;
}

TEST(QosCurveTest, FitFindsTheWriteCostThatCollapsesTheMixes) {
  for (double cost : {4.0, 12.0, 20.0}) {
    EXPECT_NEAR(FitWriteCost(Sweep(cost)), cost, 0.5) << cost;
  }
  // Without a read-only sweep there is nothing to collapse onto.
  std::vector<CalibrationSample> mixed;
  for (const auto& s : Sweep(12)) {
    if (s.write_fraction > 0) mixed.push_back(s);
  }
  EXPECT_EQ(FitWriteCost(mixed), 1);
}

TEST(QosCurveTest, BuildCurveGivesTheRateWithinEachTarget) {
  const std::vector<CalibrationSample> samples = Sweep(12);
  const DeviceCurve c =
      BuildCurve(samples, 12,
                 {absl::Microseconds(50), absl::Microseconds(200),
                  absl::Microseconds(500), absl::Milliseconds(1)});
  // 50 us is below what the device does at any load: no point.
  ASSERT_EQ(c.points.size(), 3u);
  EXPECT_EQ(c.points[0].p95, absl::Microseconds(200));
  // The model's rate within T: max x (1 - base / T).
  for (const QosCurvePoint& p : c.points) {
    const double t_us = absl::ToDoubleMicroseconds(p.p95);
    const double truth = 10000 * (1 - 100 / t_us);
    EXPECT_NEAR(p.tokens_per_s, truth, 0.05 * truth) << t_us;
    EXPECT_NEAR(p.read_only_tokens_per_s, truth, 0.05 * truth) << t_us;
  }
  EXPECT_TRUE(CheckCurve(c.points).ok());
}

}  // namespace
}  // namespace sroute
