// SPDX-License-Identifier: Apache-2.0
// A host's congestion watch on one of its endpoints (issue 49): every read
// and write sent there is timed, the times go to a CongestionDetector
// against the endpoint's profile, and while it judges the device
// congested the replies carry the mark (Io::congested, IoReply.congested),
// and a traced IO gets a "congested" hop naming the endpoint. Installed by
// the SetProfiles control request (SSwitch::WatchEndpoint).
//
// Thread-safe.
#ifndef SROUTE_STAGES_STEERING_WATCH_H_
#define SROUTE_STAGES_STEERING_WATCH_H_

#include <memory>
#include <string>

#include "sswitch/endpoint.h"
#include "stages/steering/congestion.h"

namespace sroute {

class CongestionWatch : public EndpointWatch,
                        public std::enable_shared_from_this<CongestionWatch> {
 public:
  // `host`: the sSwitch's name, for trace hops; `endpoint`: the
  // endpoint's.
  CongestionWatch(std::string host, std::string endpoint,
                  std::shared_ptr<const Profile> profile,
                  CongestionOptions options);

  void Sending(Io* io) override;
  // steer.NAME.congested (0|1), latency_us, expected_us,
  // baseline_permille (the learned calm ratio), iops,
  // write_permille, marked_windows, mode_switches, marked_replies.
  void Gauges(
      std::string_view name,
      const absl::FunctionRef<void(std::string, int64_t)>& add) const override;

  const Profile& profile() const { return *profile_; }
  const CongestionOptions& options() const { return options_; }
  CongestionDetector& detector() { return detector_; }

 private:
  const std::string host_, endpoint_;
  const std::shared_ptr<const Profile> profile_;
  const CongestionOptions options_;
  CongestionDetector detector_;
  std::atomic<uint64_t> marked_replies_{0};
};

}  // namespace sroute

#endif  // SROUTE_STAGES_STEERING_WATCH_H_
