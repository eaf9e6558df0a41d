// SPDX-License-Identifier: Apache-2.0
// SSwitch's members for files open past it (sswitch/bypass.h): what leaves
// a file alone, and the hold-and-wait a change naming such files goes
// through.
#include "sswitch/bypass.h"

#include <algorithm>
#include <memory>

#include "rules/pattern_matcher.h"
#include "sswitch/snapshot.h"
#include "sswitch/sswitch.h"
#include "util/strings.h"

namespace sroute {

BypassGuard::Names NamedByRules(const std::vector<Rule>& rules) {
  auto matchers = std::make_shared<std::vector<PatternMatcher>>();
  for (const Rule& r : rules) {
    auto m = PatternMatcher::Create(r.pattern);
    if (m.ok()) matchers->push_back(std::move(*m));
  }
  return [matchers](const std::string& file) {
    return std::any_of(
        matchers->begin(), matchers->end(),
        [&](const PatternMatcher& m) { return m.MatchesFile(file); });
  };
}

bool SSwitch::LeavesAlone(const std::string& file) const {
  std::shared_ptr<const Snapshot> snap = Current();
  if (snap->table->MayRoute(file) || snap->table->MayTap(file)) return false;
  for (const auto& gate : snap->quiesced) {
    if (gate->matcher.MatchesFile(file)) return false;
  }
  FileName name;
  if (!SplitFileName(file, &name)) return false;
  auto e = snap->endpoints->find(std::string(name.host));
  return e != snap->endpoints->end() && e->second.watch == nullptr;
}

void SSwitch::SetBypassGuard(std::shared_ptr<BypassGuard> guard,
                             absl::Duration wait) {
  MutexLock l(&bypass_mu_);
  bypass_ = std::move(guard);
  bypass_wait_ = wait;
}

bool SSwitch::HasBypassGuard() const {
  MutexLock l(&bypass_mu_);
  return bypass_ != nullptr;
}

absl::Status SSwitch::ClearOfBypass(BypassGuard::Names names,
                                    const std::function<void()>& change) {
  std::shared_ptr<BypassGuard> guard;
  absl::Duration wait;
  {
    MutexLock l(&bypass_mu_);
    guard = bypass_;
    wait = bypass_wait_;
  }
  if (guard == nullptr) {
    change();
    return absl::OkStatus();
  }
  const uint64_t hold = guard->Hold(std::move(names));
  const std::vector<std::string> open =
      guard->WaitClosed(hold, absl::Now() + wait);
  if (open.empty()) change();
  guard->Unhold(hold);
  if (open.empty()) return absl::OkStatus();
  std::string list;
  for (size_t i = 0; i < open.size() && i < 5; ++i) {
    StrAppend(&list, i ? ", " : "", open[i]);
  }
  if (open.size() > 5) StrAppend(&list, " and ", open.size() - 5, " more");
  return absl::FailedPreconditionError(StrCat(
      open.size(),
      " file(s) the change names are open with kernel "
      "passthrough (their IO does not reach the sSwitch) and stayed open ",
      absl::FormatDuration(wait), ": ", list,
      "; nothing changed: close them and retry, or mount with "
      "--passthrough=off"));
}

}  // namespace sroute
