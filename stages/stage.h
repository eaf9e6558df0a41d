// SPDX-License-Identifier: Apache-2.0
// The stage layer (docs/design.md §8): stage kinds registered by name, stages
// made from a StageConfig (proto/config.proto) in any host.
//
//   StageEnv env{&sswitch};
//   auto stage = StageRegistry::Global().Create(config, env);
//   sswitch.AddStage(config.name(), *stage);
//
// A HostStage is the sSwitch's Stage plus what a host does with it: report
// counters, take new options live, and stop (write back what it holds).
// The sSwitch guarantees Reconfigure and Stop run with no IO inside the
// stage (SSwitch::ChangeStage parks and drains first), but for a stage that
// reconfigures live (ReconfiguresLive).
#ifndef SROUTE_STAGES_STAGE_H_
#define SROUTE_STAGES_STAGE_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/config.pb.h"
#include "proto/hostctl.pb.h"
#include "sswitch/endpoint.h"

namespace sroute {

class SSwitch;

class HostStage : public Stage {
 public:
  // The options it runs with now (name, kind and the kind's options).
  virtual proto::StageConfig config() const = 0;
  // Takes `next` (same name and kind), or fails and keeps the old options
  // (InvalidArgument naming the option).
  // REQUIRES: no IO inside the stage (the sSwitch parked and drained it).
  virtual absl::Status Reconfigure(const proto::StageConfig& next) = 0;
  // Whether Reconfigure may take `next` with IOs inside (it takes the
  // stage's own lock and keeps what is queued): the change then neither
  // parks nor drains the stage's IOs (a QoS stage's queues may hold many,
  // held back on purpose; a replica set's new read weights change no
  // placement).
  virtual bool ReconfiguresLive(const proto::StageConfig& next) const {
    (void)next;
    return false;
  }
  // Counters for stats, e.g. "alice.hits" (per partition) or "hits".
  // Thread-safe.
  virtual void Report(proto::StageStats* out) const = 0;
  // Writes back what it holds (a write-back cache's dirty blocks) and lets
  // go of its resources; an error is what it could not write back.
  // REQUIRES: no IO inside the stage; called at most once, last.
  virtual absl::Status Stop() { return absl::OkStatus(); }
};

// What a stage may use of the host it is made in.
struct StageEnv {
  // The host's sSwitch: a cache registers a change observer on it
  // (coherence). Outlives the stage.
  SSwitch* sswitch = nullptr;
  // The host's state directory (SSwitch::state_dir): a stage keeps its
  // durable state in STATE_DIR/KIND-NAME. Empty if the host has none;
  // stages that need one refuse to be made.
  std::string state_dir;
};

// Makes a stage of one kind from a config naming that kind. Errors are
// InvalidArgument naming the option ("cache: block_size 1000 is not a
// power of two").
using StageFactory = std::function<absl::StatusOr<std::shared_ptr<HostStage>>(
    const proto::StageConfig& config, const StageEnv& env)>;

// Stage kinds by name. The built-in kinds (stages/*/) are registered when
// Global() is first called, by name from its constructor rather than by
// static initializers, which a static library's link would drop; plug-ins
// call Register. Thread-safe.
// OK if `name` can be named by rules (stage:NAME): letters, digits, '_',
// '.', '-'.
absl::Status CheckStageName(const std::string& name);

class StageRegistry {
 public:
  static StageRegistry& Global();
  // AlreadyExists if `kind` is taken.
  absl::Status Register(const std::string& kind, StageFactory factory);
  // InvalidArgument for an unknown kind (listing the known ones), a
  // missing name, or options of another kind; else the factory's answer.
  absl::StatusOr<std::shared_ptr<HostStage>> Create(
      const proto::StageConfig& config, const StageEnv& env) const;
  std::vector<std::string> Kinds() const;

 private:
  StageRegistry();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace sroute

#endif  // SROUTE_STAGES_STAGE_H_
