// SPDX-License-Identifier: Apache-2.0
// Where sroute-trace installs its taps and reads the sampled paths: one
// host over its control port (HostTaps), or every sSwitch on a file's path
// through the controller (ControllerTaps: path found by following the
// rules across hosts, taps installed in one consistent update).
//
// The taps go where the path starts: a sampled IO carries its trace along,
// so every sSwitch after records its hops without a tap of its own (a tap
// there would sample again IOs the first one let go, and skew the rate).
//
// Either way the taps are owned by one owner name under a lease: Renew()
// within the lease keeps them; Remove() deletes them; if the tool dies the
// host or the controller deletes them when the lease runs out.
//
// Errors: kUnavailable exactly when the host or controller could not be
// reached (exit 2), another code for a refusal or bad input (exit 1).
//
// Thread safety: not thread-safe.
#ifndef SROUTE_TOOLS_TRACE_TAP_TARGET_H_
#define SROUTE_TOOLS_TRACE_TAP_TARGET_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/hostctl.pb.h"

namespace sroute::trace {

// One place on the path: an sSwitch and the file as it names it.
struct PathStep {
  std::string sswitch;             // empty for the host of HostTaps
  std::string file;                // the file pattern's text there
  std::vector<std::string> rules;  // the rules that may route it there
  bool entry = false;              // where the path starts: tapped
};

class TapTarget {
 public:
  virtual ~TapTarget() = default;
  // Finds the path of `file` (a file pattern's text) for IOs of `ops`
  // (op classes, rule syntax) of `tenant`.
  virtual absl::StatusOr<std::vector<PathStep>> FindPath(
      const std::string& tenant, const std::string& ops,
      const std::string& file) = 0;
  // Installs a tap `<tenant, ops, FILE_THERE> -> trace(rate)` on every
  // entry step of the path (one consistent update through the controller),
  // owned by `owner` under `lease`.
  virtual absl::Status Install(const std::vector<PathStep>& path,
                               const std::string& tenant,
                               const std::string& ops, double rate,
                               const std::string& owner,
                               absl::Duration lease) = 0;
  virtual absl::Status Renew() = 0;
  virtual absl::Status Remove() = 0;
  // The traces the taps sampled since the last call (every step's), with
  // rule ids as the user knows them (a host's, or the controller's cids).
  // *missed counts traces a host overwrote before they were read.
  virtual absl::StatusOr<std::vector<proto::TraceRecord>> Collect(
      uint64_t* missed) = 0;
  // Where it talks to, for titles.
  virtual std::string Describe() const = 0;
};

std::unique_ptr<TapTarget> MakeHostTaps(std::string host,
                                        std::string secret_file);
// `start`: the sSwitch where the path starts (empty: every FUSE host).
std::unique_ptr<TapTarget> MakeControllerTaps(std::string address,
                                              std::string secret_file,
                                              std::string start);

// Whether a rule of header pattern `rule_pattern` (its text) may route
// IOs of the file pattern `file` (its text): exact names compare; for
// prefixes, regexes and '*' it may.
bool MayRouteFile(const std::string& rule_pattern, const std::string& file);

}  // namespace sroute::trace

#endif  // SROUTE_TOOLS_TRACE_TAP_TARGET_H_
