// SPDX-License-Identifier: Apache-2.0
#include "stages/steering/steering_control.h"

#include <memory>
#include <set>

#include "stages/steering/sweep.h"
#include "stages/steering/watch.h"
#include "util/clock.h"
#include "util/strings.h"

namespace sroute {

absl::Status HandleSetProfiles(SSwitch& sw, const proto::SetProfiles& request,
                               proto::ControlResponse* resp) {
  std::set<std::string> endpoints;
  for (const auto& [name, e] : sw.Endpoints()) endpoints.insert(name);
  CongestionOptions options;
  if (request.threshold_percent() > 0) {
    if (request.threshold_percent() > 1000) {
      return absl::InvalidArgumentError("threshold_percent is at most 1000");
    }
    options.threshold = request.threshold_percent() / 100.0;
  }
  if (request.window_ms() > 0) {
    if (request.window_ms() > 10'000) {
      return absl::InvalidArgumentError("window_ms is at most 10000");
    }
    options.window_ns = uint64_t{request.window_ms()} * 1'000'000;
  }
  if (request.max_baseline_percent() > 0) {
    if (request.max_baseline_percent() < 100 ||
        request.max_baseline_percent() > 10'000) {
      return absl::InvalidArgumentError(
          "max_baseline_percent is 100..10000 (100: the profile alone)");
    }
    options.max_baseline = request.max_baseline_percent() / 100.0;
  }
  // Checked first, all of them: nothing changes unless everything can.
  std::vector<std::pair<std::string, std::shared_ptr<EndpointWatch>>> set;
  for (const proto::DeviceProfile& p : request.profile()) {
    if (!endpoints.contains(p.endpoint())) {
      return absl::NotFoundError(
          StrCat("no endpoint named '", p.endpoint(), "' on ", sw.name()));
    }
    auto profile = Profile::Make(p);
    if (!profile.ok()) return profile.status();
    set.emplace_back(
        p.endpoint(),
        std::make_shared<CongestionWatch>(
            sw.name(), p.endpoint(),
            std::make_shared<const Profile>(*std::move(profile)), options));
  }
  for (const std::string& name : request.clear()) {
    if (!endpoints.contains(name)) {
      return absl::NotFoundError(
          StrCat("no endpoint named '", name, "' on ", sw.name()));
    }
  }
  for (const std::string& name : request.mode_switched()) {
    if (!endpoints.contains(name)) {
      return absl::NotFoundError(
          StrCat("no endpoint named '", name, "' on ", sw.name()));
    }
  }
  for (auto& [name, watch] : set) {
    if (absl::Status s = sw.WatchEndpoint(name, std::move(watch)); !s.ok()) {
      return s;  // an endpoint removed meanwhile: not with this host's API
    }
  }
  for (const std::string& name : request.clear()) {
    if (absl::Status s = sw.WatchEndpoint(name, nullptr); !s.ok()) return s;
  }
  // After the profiles set: a watch set with them starts afresh anyway.
  const std::set<std::string> switched(request.mode_switched().begin(),
                                       request.mode_switched().end());
  for (const auto& [name, watch] : sw.EndpointWatches()) {
    auto* w = dynamic_cast<CongestionWatch*>(watch.get());
    if (w != nullptr && switched.contains(name)) {
      w->detector().ModeSwitched(MonotonicNanos());
    }
  }
  for (const auto& [name, watch] : sw.EndpointWatches()) {
    if (auto* w = dynamic_cast<const CongestionWatch*>(watch.get())) {
      *resp->add_profiles() = w->profile().proto();
    }
  }
  return absl::OkStatus();
}

absl::Status HandleProfileEndpoint(SSwitch& sw,
                                   const proto::ProfileEndpoint& request,
                                   proto::ControlResponse* resp) {
  return ProfileSweep(sw, request, resp->mutable_profile());
}

}  // namespace sroute
