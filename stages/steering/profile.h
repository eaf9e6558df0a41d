// SPDX-License-Identifier: Apache-2.0
// A device's load-latency profile (issue 49, Sandook NSDI'26 §6.1): for each
// write share of the requests, the p50/p90/p99 latency at offered loads in
// steps up to the mix's peak (proto DeviceProfile). The steering app sizes
// the write-mode window and weighs devices by it, and hosts mark replies
// congested when a device is slower than it says.
//
//   auto profile = Profile::Make(measured);            // checks it
//   double p90 = profile->LatencyUs(40'000, 0.1, Percentile::kP90);
//   double iops = profile->Capacity(0.1, 1000, Percentile::kP90);
//
// Latencies are made non-decreasing in load (a sweep's noise at light
// loads). Lookups take the first mix whose write share is at least the one
// asked (rounded up: a device is assumed no better than the next mix measured)
// and interpolate linearly in load between its points; below the first
// point the first point's latency holds, and past the last the latency
// grows along the last two points' slope, at least doubling for each 10 %
// of load over the top (a device past its peak is saturated: the
// estimates must keep rising, or a search would pile load on it); past the
// mix's peak IOPS (closed loop) it rises by half a second per 100 % over
// (the queue grows without bound), and no capacity exceeds the peak: a
// device's write buffer acknowledges a short sweep's writes at once, and
// would otherwise promise writes it cannot sustain.
//
// Immutable after Make: thread-safe.
#ifndef SROUTE_STAGES_STEERING_PROFILE_H_
#define SROUTE_STAGES_STEERING_PROFILE_H_

#include <vector>

#include "absl/status/statusor.h"
#include "proto/config.pb.h"

namespace sroute {

enum class Percentile { kP50, kP90, kP99 };
// "p50", "p90", "p99"; InvalidArgument otherwise.
absl::StatusOr<Percentile> ParsePercentile(std::string_view name);

class Profile {
 public:
  // InvalidArgument naming the mix and point unless: at least one mix,
  // write shares 0..100 strictly ascending, each mix with a point, loads
  // positive and strictly ascending, latencies positive and p50 <= p90 <=
  // p99.
  static absl::StatusOr<Profile> Make(proto::DeviceProfile profile);

  // The latency at `iops` offered with `write_fraction` (0..1) of writes.
  double LatencyUs(double iops, double write_fraction, Percentile p) const;
  // The highest load whose latency stays within `target_us` (0 if even the
  // lightest load measured exceeds it).
  double Capacity(double write_fraction, double target_us, Percentile p) const;
  // The mix's peak (closed loop) rate.
  double PeakIops(double write_fraction) const;

  const proto::DeviceProfile& proto() const { return profile_; }

 private:
  explicit Profile(proto::DeviceProfile profile);
  const proto::DeviceProfile::Mix& MixFor(double write_fraction) const;

  proto::DeviceProfile profile_;
};

}  // namespace sroute

#endif  // SROUTE_STAGES_STEERING_PROFILE_H_
