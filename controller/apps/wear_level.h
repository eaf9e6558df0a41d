// SPDX-License-Identifier: Apache-2.0
// wear_level: wear levelling across flash devices (RackBlox §3.6;
// docs/design.md §9.5). Every host reports its flash endpoints' wear (the
// gauges flash.NAME.erase_mean_milli and flash.NAME.erases). When the
// variance of the mean erase counts of one host's flash endpoints (its
// devices, or the vSSDs of one device) passes a threshold, the app swaps
// the data of the most worn endpoint, if it is also the one erased most
// lately (its data is the hot data), with the data of the least worn one,
// and the rules that send IO to them, so that the hot data wears the
// device with the most life left:
//
//   1. copy, live and rate-limited, each endpoint's data (the folders its
//      rules' targets lie in) into a new folder ".sroute-wl-G" on the
//      other (G: a number the app never uses twice);
//   2. park the rules' flows on the host and wait for their IOs (Quiesce,
//      Drain);
//   3. sync: write what changed since the copy, remove what went;
//   4. one consistent update replaces the rules with rules whose targets
//      name the new folders (same patterns, priorities and owner);
//   5. release the flows; remove the old data (if the update failed: the
//      new copies; nothing of the old changed).
// Every step is logged, and the app's state "status" (sroutectl --controller
// ... wear status) tells the swap under way, its step and bytes.
//
//   sroute-controller --app wear_level:variance=4,rate=16M,cooldown=60
//
// Arguments (key=value, comma-separated):
//   variance  of the mean erase counts, in erases squared, above which a
//             host's endpoints are levelled (default 4)
//   rate      bytes per second the live copy may write (default 16M)
//   cooldown  seconds between two swaps on one host (default 60)
//   hosts     '+'-separated sSwitches (default: every host with two or
//             more flash endpoints)
//
// The app levels what rules reach: an endpoint's data is where the targets
// of the managed rules (controller/store.h) naming it lie; rules with a
// delegate are not moved (the endpoints they name are left alone), nor are
// files a host reaches by name without a rule. A swap that fails at any
// step leaves the rules and the old data as they were.
#ifndef SROUTE_CONTROLLER_APPS_WEAR_LEVEL_H_
#define SROUTE_CONTROLLER_APPS_WEAR_LEVEL_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "controller/app_api.h"
#include "rules/rule.h"

namespace sroute {

struct WearLevelOptions {
  double variance = 4;
  uint64_t rate_bytes_per_s = 16 << 20;
  absl::Duration cooldown = absl::Seconds(60);
  std::vector<std::string> hosts;  // empty: every host
};

absl::StatusOr<WearLevelOptions> ParseWearLevelArgs(const std::string& args);

// The data folders on `endpoint` that `rule`'s targets lie in: "//EP/",
// or "//EP/.sroute-wl-N/" for a target in a folder a swap made.
std::vector<std::string> DataFoldersOn(const Rule& rule,
                                       const std::string& endpoint);

// `rule` with each target that lies in a folder of `folders` (old -> new,
// as DataFoldersOn names them) moved to the new folder, the rest of its
// path kept.
Rule RetargetRule(const Rule& rule,
                  const std::map<std::string, std::string>& folders);

class WearLevel : public ControlApp {
 public:
  explicit WearLevel(WearLevelOptions options);

  absl::Status Start(ControllerApi& api) override;
  void OnStats(const StatsSnapshot& stats) override;

 private:
  // Swaps the data and rules of endpoints `hot` and `cold` of `sswitch`.
  absl::Status Swap(const std::string& sswitch, const std::string& hot,
                    const std::string& cold);
  // Copies `from` to `to` (COPY or SYNC) in steps, telling the progress.
  absl::Status CopyInSteps(const std::string& sswitch, const std::string& from,
                           const std::string& to, bool sync, uint64_t total,
                           uint64_t* done);
  void Status(const std::string& text);

  const WearLevelOptions options_;
  ControllerApi* api_ = nullptr;  // set by Start; app thread only
  // App thread only.
  std::map<std::string, absl::Time> last_swap_;  // by sSwitch
  std::map<std::string, std::map<std::string, uint64_t>> erases_seen_;
  uint64_t generation_ = 0;  // the last .sroute-wl-G used
};

}  // namespace sroute

#endif  // SROUTE_CONTROLLER_APPS_WEAR_LEVEL_H_
