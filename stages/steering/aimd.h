// SPDX-License-Identifier: Apache-2.0
// Client-side congestion control for one replica-set member (issue 49,
// Sandook NSDI'26 §7.3): a multiplier in [floor, 1] on the member's
// routing weight. A reply marked congested halves it, at most once per
// round trip (the replies of one congested spell arrive together; one cut
// per spell, as TCP's) and at most once per judged window of the device's
// watch (Io::congested_window: the mark is refreshed once a window, 10 ms
// or more; cutting on every round trip of one window's mark would take any
// member marked for two windows to its floor, whatever it did in between);
// each round trip without a mark gives back
// `increase` (1 %) of the weight, until it is whole again (counted when the
// next unmarked reply comes, for every round trip since the last step). The
// round trip is the member's recent read time (the caller's estimate). No
// controller is asked: the reaction takes one round trip.
//
//   Aimd a(AimdOptions{});
//   a.OnReply(now, rtt, reply.congested, reply.congested_window);
//   double w = weight * a.multiplier();
//
// Thread-safe (replies on many threads); multiplier() is a relaxed load.
#ifndef SROUTE_STAGES_STEERING_AIMD_H_
#define SROUTE_STAGES_STEERING_AIMD_H_

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "util/mutex.h"

namespace sroute {

struct AimdOptions {
  double floor = 0.05;
  double decrease = 0.5;   // the multiplier after a cut, times
  double increase = 0.01;  // of the weight, per round trip without a mark
};

class Aimd {
 public:
  explicit Aimd(AimdOptions options = {}) : o_(options) {}

  // Changes the floor (a stage's options changed).
  void set_floor(double floor) {
    MutexLock l(&mu_);
    o_.floor = floor;
    if (multiplier_.load(std::memory_order_relaxed) < floor) {
      multiplier_.store(floor, std::memory_order_relaxed);
    }
  }

  // `window`: the watch's window that marked the reply (0: not said; the
  // round trip alone limits the cuts).
  void OnReply(uint64_t now_ns, uint64_t rtt_ns, bool congested,
               uint32_t window = 0) {
    MutexLock l(&mu_);
    double m = multiplier_.load(std::memory_order_relaxed);
    if (congested) {
      const bool new_window = window == 0 || window != last_cut_window_;
      if (new_window &&
          (now_ns >= last_cut_ns_ + rtt_ns || last_cut_ns_ == 0)) {
        m = std::max(o_.floor, m * o_.decrease);
        last_cut_ns_ = now_ns;
        last_cut_window_ = window;
        last_raise_ns_ = now_ns;
        ++cuts_;
      }
    } else if (m < 1 && rtt_ns > 0 && now_ns >= last_raise_ns_ + rtt_ns) {
      // One step for each round trip that passed without a mark (as a
      // timer per round trip would: a member sent little gets its weight
      // back as fast as one sent much).
      const uint64_t trips = (now_ns - last_raise_ns_) / rtt_ns;
      m = std::min(1.0, m + o_.increase * static_cast<double>(trips));
      last_raise_ns_ += trips * rtt_ns;
    }
    multiplier_.store(m, std::memory_order_relaxed);
  }
  double multiplier() const {
    return multiplier_.load(std::memory_order_relaxed);
  }
  uint64_t cuts() const {
    MutexLock l(&mu_);
    return cuts_;
  }
  void Reset() {
    MutexLock l(&mu_);
    multiplier_.store(1, std::memory_order_relaxed);
    last_cut_ns_ = last_raise_ns_ = 0;
    last_cut_window_ = 0;
  }

 private:
  mutable Mutex mu_;
  AimdOptions o_ ABSL_GUARDED_BY(mu_);
  std::atomic<double> multiplier_{1};
  uint64_t last_cut_ns_ ABSL_GUARDED_BY(mu_) = 0;
  uint32_t last_cut_window_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t last_raise_ns_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t cuts_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace sroute

#endif  // SROUTE_STAGES_STEERING_AIMD_H_
