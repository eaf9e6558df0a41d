// SPDX-License-Identifier: Apache-2.0
#include "stages/qos/device_curve.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "util/strings.h"

namespace sroute {
namespace {

// A mix's samples, by served IOPS.
using Sweep = std::vector<CalibrationSample>;

std::map<int, Sweep> ByMix(const std::vector<CalibrationSample>& samples) {
  std::map<int, Sweep> mixes;  // by write per mille
  for (const CalibrationSample& s : samples) {
    if (s.iops <= 0 || s.p95 <= absl::ZeroDuration()) continue;
    mixes[static_cast<int>(std::lround(s.write_fraction * 1000))].push_back(s);
  }
  for (auto& [mix, sweep] : mixes) {
    std::sort(sweep.begin(), sweep.end(),
              [](const auto& a, const auto& b) { return a.iops < b.iops; });
  }
  return mixes;
}

double Weighted(const CalibrationSample& s, double write_cost) {
  return s.iops * (1 - s.write_fraction + s.write_fraction * write_cost);
}

double LogUs(absl::Duration d) {
  return std::log(std::max(1e-3, absl::ToDoubleMicroseconds(d)));
}

// log p95 of the read-only sweep at `iops`, held at its ends.
double LogP95At(const Sweep& ro, double iops) {
  if (iops <= ro.front().iops) return LogUs(ro.front().p95);
  for (size_t i = 1; i < ro.size(); ++i) {
    if (iops <= ro[i].iops) {
      const double f = (iops - ro[i - 1].iops) / (ro[i].iops - ro[i - 1].iops);
      return LogUs(ro[i - 1].p95) +
             f * (LogUs(ro[i].p95) - LogUs(ro[i - 1].p95));
    }
  }
  return LogUs(ro.back().p95);
}

// The highest weighted IOPS of `sweep` before its p95 first passes
// `target` (linear between the samples around the crossing); 0 if its
// lowest load passes it already.
double WithinTarget(const Sweep& sweep, double write_cost,
                    absl::Duration target) {
  double best = 0;
  for (size_t i = 0; i < sweep.size(); ++i) {
    const double w = Weighted(sweep[i], write_cost);
    if (sweep[i].p95 <= target) {
      best = std::max(best, w);
      continue;
    }
    if (i == 0) return 0;
    const double prev_w = Weighted(sweep[i - 1], write_cost);
    const double f = absl::FDivDuration(target - sweep[i - 1].p95,
                                        sweep[i].p95 - sweep[i - 1].p95);
    return std::max(best, prev_w + f * (w - prev_w));
  }
  return best;
}

}  // namespace

std::vector<QosCurvePoint> CurveOf(const proto::QosOptions& options) {
  std::vector<QosCurvePoint> curve;
  for (const proto::QosOptions::CurvePoint& p : options.curve()) {
    curve.push_back({absl::Microseconds(p.p95_us()),
                     static_cast<double>(p.tokens_per_s()),
                     static_cast<double>(p.read_only_tokens_per_s())});
  }
  std::sort(curve.begin(), curve.end(),
            [](const auto& a, const auto& b) { return a.p95 < b.p95; });
  return curve;
}

absl::Status CheckCurve(const std::vector<QosCurvePoint>& points) {
  for (size_t i = 0; i < points.size(); ++i) {
    const QosCurvePoint& p = points[i];
    if (p.p95 <= absl::ZeroDuration() || p.tokens_per_s <= 0) {
      return absl::InvalidArgumentError(
          StrCat("curve point ", i + 1,
                 ": its p95 and tokens_per_s must be "
                 "above 0"));
    }
    if (p.read_only_tokens_per_s < 0) {
      return absl::InvalidArgumentError(StrCat(
          "curve point ", i + 1, ": read_only_tokens_per_s is negative"));
    }
    if (i > 0 && (p.p95 <= points[i - 1].p95 ||
                  p.tokens_per_s < points[i - 1].tokens_per_s)) {
      return absl::InvalidArgumentError(
          StrCat("curve point ", i + 1,
                 ": targets must increase and rates not decrease from one "
                 "point to the next"));
    }
  }
  return absl::OkStatus();
}

CurveRate RateAt(const std::vector<QosCurvePoint>& points, absl::Duration p95) {
  CurveRate r;
  if (points.empty()) return r;
  if (p95 < points.front().p95) {
    r.tokens_per_s = points.front().tokens_per_s;
    r.read_only_tokens_per_s = points.front().read_only_tokens_per_s;
    r.below_curve = true;
    return r;
  }
  for (size_t i = 1; i < points.size(); ++i) {
    if (p95 <= points[i].p95) {
      const QosCurvePoint& a = points[i - 1];
      const QosCurvePoint& b = points[i];
      const double f = absl::FDivDuration(p95 - a.p95, b.p95 - a.p95);
      r.tokens_per_s = a.tokens_per_s + f * (b.tokens_per_s - a.tokens_per_s);
      r.read_only_tokens_per_s =
          a.read_only_tokens_per_s +
          f * (b.read_only_tokens_per_s - a.read_only_tokens_per_s);
      return r;
    }
  }
  r.tokens_per_s = points.back().tokens_per_s;
  r.read_only_tokens_per_s = points.back().read_only_tokens_per_s;
  return r;
}

double FitWriteCost(const std::vector<CalibrationSample>& samples,
                    double min_cost, double max_cost) {
  const std::map<int, Sweep> mixes = ByMix(samples);
  auto ro = mixes.find(0);
  if (ro == mixes.end() || mixes.size() < 2 || ro->second.size() < 2) {
    return min_cost;
  }
  // Reference targets: the read-only sweep's p95 where it serves 50, 70
  // and 90 % of its most (the knee, where a device's cost shows).
  const Sweep& reads = ro->second;
  const double peak = reads.back().iops;
  std::vector<absl::Duration> targets;
  for (double f : {0.5, 0.7, 0.9}) {
    targets.push_back(absl::Microseconds(std::exp(LogP95At(reads, f * peak))));
  }
  // Least squares of iops_w(T) x (1 - w + w x C) - ro(T) over the mixes
  // and targets: linear in C.
  double aa = 0, ab = 0;
  for (absl::Duration t : targets) {
    const double ro_t = WithinTarget(reads, 1, t);
    for (const auto& [mix, sweep] : mixes) {
      if (mix == 0) continue;
      const double w = mix / 1000.0;
      const double iops = WithinTarget(sweep, 1, t);
      if (iops <= 0) continue;
      const double a = iops * w, b = iops * (1 - w) - ro_t;
      aa += a * a;
      ab += a * b;
    }
  }
  if (aa <= 0) return min_cost;
  return std::clamp(-ab / aa, min_cost, max_cost);
}

DeviceCurve BuildCurve(const std::vector<CalibrationSample>& samples,
                       double write_cost,
                       const std::vector<absl::Duration>& targets) {
  DeviceCurve curve;
  curve.write_cost = write_cost;
  const std::map<int, Sweep> mixes = ByMix(samples);
  const auto ro = mixes.find(0);
  const bool mixed = mixes.size() > (ro == mixes.end() ? 0u : 1u);
  for (absl::Duration target : targets) {
    double tokens = std::numeric_limits<double>::infinity();
    for (const auto& [mix, sweep] : mixes) {
      if (mix == 0 && mixed) continue;
      tokens = std::min(tokens, WithinTarget(sweep, write_cost, target));
    }
    if (!(tokens > 0) || std::isinf(tokens)) continue;
    QosCurvePoint p;
    p.p95 = target;
    p.tokens_per_s = tokens;
    if (ro != mixes.end()) {
      p.read_only_tokens_per_s = WithinTarget(ro->second, write_cost, target);
    }
    if (!curve.points.empty()) {
      const QosCurvePoint& last = curve.points.back();
      p.tokens_per_s = std::max(p.tokens_per_s, last.tokens_per_s);
      p.read_only_tokens_per_s =
          std::max(p.read_only_tokens_per_s, last.read_only_tokens_per_s);
      // A looser target the device does no more for says nothing new.
      if (p.tokens_per_s == last.tokens_per_s &&
          p.read_only_tokens_per_s == last.read_only_tokens_per_s) {
        continue;
      }
    }
    curve.points.push_back(p);
  }
  return curve;
}

}  // namespace sroute
