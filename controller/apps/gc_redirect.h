// SPDX-License-Identifier: Apache-2.0
// gc_redirect: the GC-coordination control application (docs/design.md §9.5,
// RackBlox §3.4-3.5). It finds the replica sets whose members are flash
// devices and sets their GC coordination (ReplicaSetOptions.gc) up: from
// then on each replica set holds, in its host's data path, the table of
// its members' GC status and replicas, asks the devices for their state,
// grants their GC requests (a soft one only while no partner collects) and
// sends reads away from a member that collects; no decision waits for the
// controller. The timeline of GC passes is in the stages' stats
// (`sroutectl gc status`).
//
//   sroute-controller --app gc_redirect:mode=background,poll_us=1000
//
// Arguments (key=value, comma-separated):
//   mode     redirect, delay or background (default background): as
//            ReplicaSetOptions.gc
//   poll_us  how often the stages ask their devices (default 1000)
//   stages   the replica_set stages to set up, '+'-separated names
//            (default: every one with a flash member)
//
// A member is a flash device if its host names it as a flash endpoint, or
// it is a storage server that reports flash gauges (flash.NAME.*). A stage
// whose coordination already matches is left alone; one that a host adds
// later is set up at the next stats report.
#ifndef SROUTE_CONTROLLER_APPS_GC_REDIRECT_H_
#define SROUTE_CONTROLLER_APPS_GC_REDIRECT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "controller/app_api.h"

namespace sroute {

struct GcRedirectOptions {
  std::string mode = "background";
  uint32_t poll_us = 1000;
  std::vector<std::string> stages;  // empty: every one with a flash member
};

absl::StatusOr<GcRedirectOptions> ParseGcRedirectArgs(const std::string& args);

class GcRedirect : public ControlApp {
 public:
  explicit GcRedirect(GcRedirectOptions options);

  absl::Status Start(ControllerApi& api) override;
  void OnStats(const StatsSnapshot& stats) override;

 private:
  // Whether `member` of a stage on `host` is a flash device.
  bool IsFlash(const TopologyHost& host, const std::string& member,
               const std::vector<TopologyHost>& topology,
               const StatsSnapshot& stats) const;

  const GcRedirectOptions options_;
  ControllerApi* api_ = nullptr;  // set by Start; app thread only
};

}  // namespace sroute

#endif  // SROUTE_CONTROLLER_APPS_GC_REDIRECT_H_
