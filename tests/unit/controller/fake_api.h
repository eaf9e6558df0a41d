// SPDX-License-Identifier: Apache-2.0
// FakeApi: a ControllerApi that records what a control app asks, for unit
// tests of an app's own logic (its effects on real hosts are tested in
// tests/integration/).
#ifndef SROUTE_TESTS_UNIT_CONTROLLER_FAKE_API_H_
#define SROUTE_TESTS_UNIT_CONTROLLER_FAKE_API_H_

#include <algorithm>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "controller/app_api.h"

namespace sroute::testing {

// A controller that records what the app asks (the app's own logic only:
// its copies against real hosts are in the integration test).
class FakeApi : public ControllerApi {
 public:
  std::vector<proto::ManagedRule> rules;
  bool update_fails = false;
  std::vector<std::string> log;  // "copy MODE FROM TO", "quiesce P on", ...
  std::vector<UpdateSpec> updates;
  std::map<std::string, std::string> state;
  std::vector<TopologyHost> topology;
  // Whether updates change `rules` (inserted rules get cids from next_cid).
  bool apply_updates = false;
  uint64_t next_cid = 100;

  std::vector<TopologyHost> Topology() override { return topology; }
  absl::StatusOr<std::vector<proto::ManagedRule>> Rules(
      const std::string&) override {
    return rules;
  }
  absl::StatusOr<UpdateOutcome> Update(const UpdateSpec& spec) override {
    log.push_back("update");
    if (update_fails) return absl::AbortedError("a host said no");
    updates.push_back(spec);
    UpdateOutcome out{.version = 7, .cids = {}, .report = {}};
    if (!apply_updates) return out;
    for (const RuleChanges& c : spec.changes) {
      std::erase_if(rules, [&](const proto::ManagedRule& r) {
        return std::find(c.remove.begin(), c.remove.end(), r.cid()) !=
               c.remove.end();
      });
      for (const RuleToInsert& in : c.insert) {
        proto::ManagedRule m;
        m.set_cid(next_cid);
        m.set_text(in.Text());
        m.set_owner(spec.owner);
        rules.push_back(m);
        out.cids.push_back(next_cid++);
      }
    }
    return out;
  }
  absl::Status Quiesce(const std::string&, const std::string& pattern,
                       bool on) override {
    log.push_back("quiesce " + pattern + (on ? " on" : " off"));
    return absl::OkStatus();
  }
  absl::Status Drain(const std::string&, const std::string& pattern,
                     absl::Duration) override {
    log.push_back("drain " + pattern);
    return absl::OkStatus();
  }
  StatsSnapshot Stats() override { return {}; }
  // Each sSwitch's stages: LIST returns them, SET replaces a stage's
  // config (recorded in stage_sets); an sSwitch in `unreachable` fails.
  std::map<std::string, std::vector<proto::StageStats>> stages;
  std::vector<std::pair<std::string, proto::StageConfig>> stage_sets;
  std::set<std::string> unreachable;
  absl::StatusOr<std::vector<proto::StageStats>> Stages(
      const std::string& sswitch, const proto::Stages& request) override {
    if (unreachable.count(sswitch) > 0) {
      return absl::UnavailableError("no host '" + sswitch + "'");
    }
    std::vector<proto::StageStats>& list = stages[sswitch];
    if (request.action() == proto::Stages::SET) {
      for (proto::StageStats& s : list) {
        if (s.config().name() == request.stage().name()) {
          *s.mutable_config() = request.stage();
          stage_sets.emplace_back(sswitch, request.stage());
        }
      }
    }
    return list;
  }
  absl::StatusOr<proto::CopyProgress> Copy(const std::string&,
                                           const proto::Copy& r) override {
    log.push_back("copy " + proto::Copy::Mode_Name(r.mode()) + " " + r.from() +
                  (r.to().empty() ? "" : " " + r.to()));
    proto::CopyProgress p;
    p.set_done(true);
    p.set_bytes(4096);
    return p;
  }
  // Each sSwitch's profiles, as SetProfiles leaves them.
  std::map<std::string, std::map<std::string, proto::DeviceProfile>> profiles;
  // "sswitch/endpoint" of each mode switch told, in order.
  std::vector<std::string> mode_switched;
  absl::StatusOr<std::vector<proto::DeviceProfile>> SetProfiles(
      const std::string& sswitch, const proto::SetProfiles& r) override {
    if (unreachable.count(sswitch) > 0) {
      return absl::UnavailableError(sswitch + " does not answer");
    }
    log.push_back("set_profiles " + sswitch);
    auto& mine = profiles[sswitch];
    for (const proto::DeviceProfile& p : r.profile()) mine[p.endpoint()] = p;
    for (const std::string& name : r.clear()) mine.erase(name);
    for (const std::string& name : r.mode_switched()) {
      mode_switched.push_back(sswitch + "/" + name);
    }
    std::vector<proto::DeviceProfile> out;
    for (const auto& [name, p] : mine) out.push_back(p);
    return out;
  }
  // Timers the app set, for the test to run by hand.
  std::vector<std::function<void()>> timers;
  void AddTimer(absl::Duration, std::function<void()> fn) override {
    timers.push_back(std::move(fn));
  }
  void Post(std::function<void()> fn) override { fn(); }
  absl::Status PutState(const std::string& key,
                        const std::string& value) override {
    state[key] = value;
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> GetState(const std::string& key) override {
    auto it = state.find(key);
    if (it == state.end()) return absl::NotFoundError(key);
    return it->second;
  }
};

}  // namespace sroute::testing

#endif  // SROUTE_TESTS_UNIT_CONTROLLER_FAKE_API_H_
