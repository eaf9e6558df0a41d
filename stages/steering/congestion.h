// SPDX-License-Identifier: Apache-2.0
// Storage congestion detection (issue 49, Sandook NSDI'26 §6.1): a host
// watches an endpoint's completions in windows (10 ms), smooths each
// window's load, write share and latency percentile (EWMA), and compares
// the latency with what the endpoint's profile expects at that load and
// mix. Above it by more than `threshold` (10 %) the endpoint is congested
// (a GC pass, a noisy neighbour): replies leaving it carry the mark, and
// callers shift load away (stages/steering/aimd.h) without asking the
// controller. Hysteresis: it stays congested until the latency falls below
// the expectation by half the threshold's margin. For `quiet_ns` (1 ms)
// after the endpoint's mode switches (the steering app moves it between
// read and write mode) nothing is judged: the queue it had belongs to the
// mode before. The mark comes after `confirm_windows` (2) judged windows
// in a row above the threshold. A profile is of 4 KiB requests: larger IOs
// count in the load (in 4 KiB pages) but their latency is not compared. A
// window is judged once it holds enough completions (fewer when they are far
// over the expectation); a device that gets too few to judge in
// `forget_windows` windows (callers moved away from it) is not congested any
// more: callers then probe it again.
//
// The expectation is the profile's latency times the device's *calm ratio*,
// learned: a profile is measured one device at a time, with uniform
// addresses, on an idle host; in production a skewed workload (a hot page
// on one die) or the host's own scheduling make a healthy device steadily
// slower than it by some factor, which would mark it all the time. The
// first judged window sets the ratio (observed over profile, within 1 ..
// `max_baseline`); each unmarked window moves it by `learn`, counting a
// window over the threshold as at the threshold, so the ratio follows a
// drift of a few percent a window and never a jump: a GC pass (20x) or a
// noisy neighbour arriving is marked as before. `max_baseline` 1 judges
// against the profile alone (the default; the knob is for a deployment
// whose skew its profiles do not show).
//
//   CongestionDetector d(profile, CongestionOptions());
//   d.Note(now, /*write=*/false, latency_ns);     // each completion
//   if (d.Congested(now)) reply.congested = true;
//
// Time is the caller's (MonotonicNanos, or a scripted clock in tests).
// Thread-safe: completions on many threads may call it at once.
#ifndef SROUTE_STAGES_STEERING_CONGESTION_H_
#define SROUTE_STAGES_STEERING_CONGESTION_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "stages/steering/profile.h"
#include "util/mutex.h"

namespace sroute {

struct CongestionOptions {
  uint64_t window_ns = 10'000'000;
  double alpha = 0.5;       // the newest window's weight in the EWMAs
  double threshold = 0.10;  // above the profile by this share: congested
  uint64_t quiet_ns = 1'000'000;
  Percentile percentile = Percentile::kP90;
  // A window closes with this many completions at least (a percentile of
  // fewer is noise): a light load is judged over longer windows, up to
  // `forget_windows` of them, after which the device is not congested.
  uint32_t min_samples = 32;
  uint32_t forget_windows = 10;
  // A window whose latency is this many times its expectation is judged
  // with a quarter of `min_samples`: a GC pass (20x) on a member that gets
  // a tenth of the reads is seen in two short windows, not two of 70 ms.
  double far_over = 5;
  // Judged windows in a row above the threshold before the mark (1: at
  // once). A host's own scheduling delays last a window; a GC pass lasts.
  uint32_t confirm_windows = 2;
  // The calm ratio (above): learned at this weight per unmarked window,
  // within 1 .. max_baseline. Off (1) unless asked for: in the benchmarks
  // the ratios stayed at 1.00-1.12, and a device congested when its watch
  // is set would take its congestion as its normal.
  double learn = 0.05;
  double max_baseline = 1;
};

class CongestionDetector {
 public:
  // REQUIRES: profile != nullptr.
  CongestionDetector(std::shared_ptr<const Profile> profile,
                     CongestionOptions options);

  // One completion at `now_ns` that took `latency_ns`, of `pages` 4 KiB
  // pages.
  void Note(uint64_t now_ns, bool write, uint64_t latency_ns,
            uint32_t pages = 1);
  // Whether replies leaving at `now_ns` are marked (closes the window if
  // it is over).
  bool Congested(uint64_t now_ns) { return Mark(now_ns) != 0; }
  // The same, as the number of the judged window that marks them (1, 2,
  // ...; 0: not marked): one number per window, so a caller reacts once
  // to each refresh of the signal, not once to each reply.
  uint64_t Mark(uint64_t now_ns);
  // The endpoint changed mode: the windows so far are forgotten, and none
  // is judged until `quiet_ns` have passed.
  void ModeSwitched(uint64_t now_ns);

  struct View {
    double iops = 0;            // EWMA of the windows' rates
    double write_fraction = 0;  // EWMA
    double latency_us = 0;      // EWMA of the windows' percentile
    double expected_us = 0;     // the profile's at iops and write_fraction
    double baseline = 1;        // the calm ratio: judged against
                                // expected_us * baseline
    bool congested = false;
    uint64_t marked_windows = 0;  // windows judged congested so far
    uint64_t mode_switches = 0;   // ModeSwitched calls so far
  };
  View view() const;

 private:
  void CloseWindowLocked(uint64_t now_ns) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The window's percentile (us). Reorders latencies_.
  double WindowLatencyUsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::shared_ptr<const Profile> profile_;
  const CongestionOptions o_;
  mutable Mutex mu_;
  uint64_t window_start_ns_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t quiet_until_ns_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<uint64_t> latencies_ ABSL_GUARDED_BY(mu_);  // this window's
  uint64_t pages_ ABSL_GUARDED_BY(mu_) = 0;               // this window's load
  uint64_t write_pages_ ABSL_GUARDED_BY(mu_) = 0;         // of which written
  bool seen_ ABSL_GUARDED_BY(mu_) = false;  // a window has been judged
  uint32_t over_streak_ ABSL_GUARDED_BY(mu_) = 0;
  bool learned_ ABSL_GUARDED_BY(mu_) = false;  // baseline set (kept across
                                               // mode switches)
  View view_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sroute

#endif  // SROUTE_STAGES_STEERING_CONGESTION_H_
