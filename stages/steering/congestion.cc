// SPDX-License-Identifier: Apache-2.0
#include "stages/steering/congestion.h"

#include <algorithm>

namespace sroute {

CongestionDetector::CongestionDetector(std::shared_ptr<const Profile> profile,
                                       CongestionOptions options)
    : profile_(std::move(profile)), o_(options) {}

void CongestionDetector::Note(uint64_t now_ns, bool write, uint64_t latency_ns,
                              uint32_t pages) {
  MutexLock l(&mu_);
  if (now_ns >= window_start_ns_ + o_.window_ns) CloseWindowLocked(now_ns);
  if (now_ns < quiet_until_ns_) return;
  pages_ += pages;
  if (write) write_pages_ += pages;
  if (pages == 1) latencies_.push_back(latency_ns);
}

uint64_t CongestionDetector::Mark(uint64_t now_ns) {
  MutexLock l(&mu_);
  if (now_ns >= window_start_ns_ + o_.window_ns) CloseWindowLocked(now_ns);
  return view_.congested && now_ns >= quiet_until_ns_ ? view_.marked_windows
                                                      : 0;
}

void CongestionDetector::ModeSwitched(uint64_t now_ns) {
  MutexLock l(&mu_);
  latencies_.clear();
  pages_ = write_pages_ = 0;
  over_streak_ = 0;
  seen_ = false;
  view_.congested = false;
  quiet_until_ns_ = now_ns + o_.quiet_ns;
  window_start_ns_ = quiet_until_ns_;
  ++view_.mode_switches;
}

double CongestionDetector::WindowLatencyUsLocked() {
  const double n = static_cast<double>(latencies_.size());
  double q = 0.9;
  if (o_.percentile == Percentile::kP50) q = 0.5;
  if (o_.percentile == Percentile::kP99) q = 0.99;
  const size_t k = std::min(latencies_.size() - 1, static_cast<size_t>(q * n));
  std::nth_element(latencies_.begin(), latencies_.begin() + k,
                   latencies_.end());
  return static_cast<double>(latencies_[k]) / 1e3;
}

void CongestionDetector::CloseWindowLocked(uint64_t now_ns) {
  const uint64_t length = now_ns - window_start_ns_;
  // Few completions, far over what the profile expects at the load seen
  // so far: enough to judge (a percentile of a handful is noise, but not
  // by 5x).
  const bool far_over =
      latencies_.size() < o_.min_samples &&
      latencies_.size() >= std::max<uint32_t>(1, o_.min_samples / 4) &&
      WindowLatencyUsLocked() > o_.far_over * view_.baseline *
                                    profile_->LatencyUs(view_.iops,
                                                        view_.write_fraction,
                                                        o_.percentile);
  if (latencies_.size() < o_.min_samples && !far_over) {
    // Too few to judge: the window goes on (a light load is judged over
    // a longer one), up to `forget_windows` windows; past that, callers
    // went elsewhere (or the load ended) and the device is not held
    // congested without evidence.
    if (length < o_.forget_windows * o_.window_ns) return;
    latencies_.clear();
    pages_ = write_pages_ = 0;
    window_start_ns_ = now_ns;
    view_.congested = false;
    return;
  }
  window_start_ns_ = now_ns;
  const double latency_us = WindowLatencyUsLocked();
  // The window's rate over the window's own length (at least one window:
  // a burst ending a long idle gap is not a rate of one IO per gap).
  const double iops = static_cast<double>(pages_) * 1e9 /
                      static_cast<double>(std::max(length, o_.window_ns));
  const double write_fraction =
      static_cast<double>(write_pages_) / static_cast<double>(pages_);
  latencies_.clear();
  pages_ = write_pages_ = 0;
  const double a = seen_ ? o_.alpha : 1.0;
  seen_ = true;
  view_.iops = a * iops + (1 - a) * view_.iops;
  view_.write_fraction = a * write_fraction + (1 - a) * view_.write_fraction;
  view_.latency_us = a * latency_us + (1 - a) * view_.latency_us;
  view_.expected_us =
      profile_->LatencyUs(view_.iops, view_.write_fraction, o_.percentile);
  const double ratio = latency_us / view_.expected_us;  // this window's own
  const double max_baseline = std::max(1.0, o_.max_baseline);
  if (!learned_) {
    view_.baseline = std::clamp(ratio, 1.0, max_baseline);
    learned_ = true;
  }
  const double calm_us = view_.expected_us * view_.baseline;
  const double over = view_.latency_us / calm_us - 1;
  // Windows in a row whose own latency is over: a scheduling hiccup of
  // the host is one window (the EWMA carries it a while), a GC pass many.
  over_streak_ =
      latency_us > calm_us * (1 + o_.threshold) ? over_streak_ + 1 : 0;
  if (view_.congested) {
    view_.congested = over > o_.threshold / 2;
  } else {
    view_.congested = over > o_.threshold && over_streak_ >= o_.confirm_windows;
  }
  if (!view_.congested) {
    // A window over the threshold counts as at it: the ratio drifts, it
    // does not jump to what a congested device shows.
    const double sample = std::min(ratio, view_.baseline * (1 + o_.threshold));
    view_.baseline = std::clamp(
        (1 - o_.learn) * view_.baseline + o_.learn * sample, 1.0, max_baseline);
  }
  if (view_.congested) ++view_.marked_windows;
}

CongestionDetector::View CongestionDetector::view() const {
  MutexLock l(&mu_);
  return view_;
}

}  // namespace sroute
