// SPDX-License-Identifier: Apache-2.0
// SSwitch::Context: what a delegate sees of the sSwitch while it acts for
// its rule (DelegateContext, sswitch/delegate.h): updates, deletes,
// quiesces and drains on that sSwitch, and state shared among its
// delegates. Internal to the files of SSwitch's members (sswitch.h).
#ifndef SROUTE_SSWITCH_RULE_CONTEXT_H_
#define SROUTE_SSWITCH_RULE_CONTEXT_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "sswitch/delegate.h"
#include "sswitch/snapshot.h"
#include "sswitch/sswitch.h"
#include "util/mutex.h"
#include "util/strings.h"

namespace sroute {

class SSwitch::Context : public DelegateContext {
 public:
  Context(SSwitch* sw, const InstalledRule* rule) : sw_(sw), rule_(rule) {}

  absl::StatusOr<std::vector<uint64_t>> Update(
      std::vector<Rule> insert, const std::vector<uint64_t>& remove) override {
    MutexLock l(&sw_->control_mu_);
    return sw_->UpdateLocked(std::move(insert), remove,
                             {StrCat("delegate:", rule_->id())}, rule_);
  }
  absl::Status Delete(const HeaderPattern& pattern) override {
    return sw_->Delete(pattern).status();
  }
  absl::Status Quiesce(const HeaderPattern& pattern, bool on) override {
    return sw_->Quiesce(pattern, on);
  }
  absl::Status Drain(const HeaderPattern& pattern,
                     absl::Duration timeout) override {
    return sw_->Drain(pattern, timeout);
  }
  const Rule& rule() const override { return rule_->rule(); }
  uint64_t rule_id() const override { return rule_->id(); }
  std::shared_ptr<void> SharedState(
      const std::string& key,
      std::function<std::shared_ptr<void>()> make) override {
    MutexLock l(&sw_->shared_state_mu_);
    for (auto& [k, v] : sw_->shared_state_) {
      if (k == key) return v;
    }
    sw_->shared_state_.emplace_back(key, make());
    return sw_->shared_state_.back().second;
  }

 private:
  SSwitch* const sw_;
  const InstalledRule* const rule_;
};

}  // namespace sroute

#endif  // SROUTE_SSWITCH_RULE_CONTEXT_H_
