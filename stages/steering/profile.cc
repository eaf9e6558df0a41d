// SPDX-License-Identifier: Apache-2.0
#include "stages/steering/profile.h"

#include <algorithm>
#include <cmath>

#include "util/strings.h"

namespace sroute {
namespace {

double Of(const proto::DeviceProfile::Point& point, Percentile p) {
  switch (p) {
    case Percentile::kP50:
      return point.p50_us();
    case Percentile::kP90:
      return point.p90_us();
    case Percentile::kP99:
      return point.p99_us();
  }
  return point.p90_us();
}

// The slope (us per IOPS) past the last point: the last two points', at
// least doubling the latency for each 10 % of load over the top.
double SaturatedSlope(const proto::DeviceProfile::Mix& mix, Percentile p) {
  const int n = mix.point_size();
  const auto& last = mix.point(n - 1);
  double slope = Of(last, p) / (0.1 * last.iops());
  if (n >= 2) {
    const auto& before = mix.point(n - 2);
    slope = std::max(
        slope, (Of(last, p) - Of(before, p)) / (last.iops() - before.iops()));
  }
  return slope;
}

// Past the mix's peak (its closed-loop throughput) a device's queue grows
// without bound: a load over it by a share x waits, over a second, about x
// times half a second more. Without it a mix the device acknowledges from
// its write buffer at every step of a sweep would promise any load.
constexpr double kOverloadUsPerShare = 500'000;

double OverloadUs(const proto::DeviceProfile::Mix& mix, double iops) {
  const double peak = mix.peak_iops();
  return peak > 0 && iops > peak ? (iops - peak) / peak * kOverloadUsPerShare
                                 : 0;
}

}  // namespace

absl::StatusOr<Percentile> ParsePercentile(std::string_view name) {
  if (name == "p50") return Percentile::kP50;
  if (name == "p90") return Percentile::kP90;
  if (name == "p99") return Percentile::kP99;
  return absl::InvalidArgumentError(
      StrCat("percentile '", name, "' is not p50, p90 or p99"));
}

absl::StatusOr<Profile> Profile::Make(proto::DeviceProfile profile) {
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(
        StrCat("profile of '", profile.endpoint(), "': ", why));
  };
  if (profile.mix_size() == 0) return bad("it has no mix");
  int last_percent = -1;
  for (const auto& mix : profile.mix()) {
    const int percent = static_cast<int>(mix.write_percent());
    if (percent > 100 || percent <= last_percent) {
      return bad(StrCat("mix ", percent,
                        "% writes: write shares must rise strictly within "
                        "0..100"));
    }
    last_percent = percent;
    if (mix.point_size() == 0) {
      return bad(StrCat("mix ", percent, "% writes has no point"));
    }
    double last_iops = 0;
    for (int i = 0; i < mix.point_size(); ++i) {
      const auto& pt = mix.point(i);
      const std::string where =
          StrCat("mix ", percent, "% writes, point ", i + 1, ": ");
      if (!(pt.iops() > last_iops)) {
        return bad(where + "loads must be positive and rise strictly");
      }
      last_iops = pt.iops();
      if (!(pt.p50_us() > 0 && pt.p50_us() <= pt.p90_us() &&
            pt.p90_us() <= pt.p99_us())) {
        return bad(where + "latencies must satisfy 0 < p50 <= p90 <= p99");
      }
    }
  }
  // Latency never falls as load rises: a sweep's noise at light loads
  // (a step a little faster than the one before) is smoothed away, or a
  // search would see a device get faster as it is given more.
  for (auto& mix : *profile.mutable_mix()) {
    double p50 = 0, p90 = 0, p99 = 0;
    for (auto& pt : *mix.mutable_point()) {
      p50 = std::max(p50, pt.p50_us());
      p90 = std::max(p90, pt.p90_us());
      p99 = std::max(p99, pt.p99_us());
      pt.set_p50_us(p50);
      pt.set_p90_us(p90);
      pt.set_p99_us(p99);
    }
  }
  return Profile(std::move(profile));
}

Profile::Profile(proto::DeviceProfile profile) : profile_(std::move(profile)) {}

const proto::DeviceProfile::Mix& Profile::MixFor(double write_fraction) const {
  // Rounded up to the next mix measured; a hair of tolerance so that 0.1
  // (10.000000000000002 %) finds the 10 % mix.
  const double percent = write_fraction * 100 - 1e-6;
  for (const auto& mix : profile_.mix()) {
    if (mix.write_percent() >= percent) return mix;
  }
  return profile_.mix(profile_.mix_size() - 1);
}

double Profile::LatencyUs(double iops, double write_fraction,
                          Percentile p) const {
  const auto& mix = MixFor(write_fraction);
  const auto& points = mix.point();
  if (iops <= points[0].iops()) return Of(points[0], p);
  // Binary search: the steering app looks up every device many times an
  // epoch, over profiles of 100 steps.
  auto hi = std::lower_bound(points.begin(), points.end(), iops,
                             [](const proto::DeviceProfile::Point& pt,
                                double v) { return pt.iops() < v; });
  if (hi == points.end()) {
    const auto& last = points[points.size() - 1];
    return Of(last, p) + (iops - last.iops()) * SaturatedSlope(mix, p) +
           OverloadUs(mix, iops);
  }
  const auto& lo = *(hi - 1);
  const double t = (iops - lo.iops()) / (hi->iops() - lo.iops());
  return Of(lo, p) + t * (Of(*hi, p) - Of(lo, p)) + OverloadUs(mix, iops);
}

double Profile::Capacity(double write_fraction, double target_us,
                         Percentile p) const {
  const auto& mix = MixFor(write_fraction);
  const int n = mix.point_size();
  // Never past the peak: a sustained load over it has no bounded latency.
  const double peak = mix.peak_iops() > 0 ? mix.peak_iops() : 1e300;
  if (Of(mix.point(0), p) > target_us) return 0;
  for (int i = 1; i < n; ++i) {
    const auto& hi = mix.point(i);
    if (Of(hi, p) > target_us) {
      const auto& lo = mix.point(i - 1);
      const double t = (target_us - Of(lo, p)) / (Of(hi, p) - Of(lo, p));
      return std::min(peak, lo.iops() + t * (hi.iops() - lo.iops()));
    }
  }
  const auto& last = mix.point(n - 1);
  return std::min(
      peak, last.iops() + (target_us - Of(last, p)) / SaturatedSlope(mix, p));
}

double Profile::PeakIops(double write_fraction) const {
  const auto& mix = MixFor(write_fraction);
  return mix.peak_iops() > 0 ? mix.peak_iops()
                             : mix.point(mix.point_size() - 1).iops();
}

}  // namespace sroute
