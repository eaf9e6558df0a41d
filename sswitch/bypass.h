// SPDX-License-Identifier: Apache-2.0
// BypassGuard: files whose IO the kernel sends straight to their backing
// file, past the sSwitch (FUSE passthrough, fuse/passthrough.h).
//
// A file may be opened so only while the snapshot leaves it alone
// (SSwitch::LeavesAlone: no rule, tap or quiesce names it, and its
// endpoint is not watched), and nothing can take back an open the kernel
// already serves itself. So a change that would stop leaving such a file
// alone first holds (no new open of a file it names goes past the
// sSwitch), then waits for the opens past it to close, bounded: the
// change fails cleanly, having changed nothing, if they do not.
//
// Usage (SSwitch's control operations):
//   uint64_t hold = guard->Hold(names);
//   std::vector<std::string> open = guard->WaitClosed(hold, deadline);
//   if (open.empty()) { ...publish the change... }
//   guard->Unhold(hold);
//
// Thread safety: implementations are thread-safe.
#ifndef SROUTE_SSWITCH_BYPASS_H_
#define SROUTE_SSWITCH_BYPASS_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "rules/rule.h"

namespace sroute {

class BypassGuard {
 public:
  // Whether a change names `file` ("//HOST/PATH").
  using Names = std::function<bool(const std::string& file)>;

  virtual ~BypassGuard() = default;
  // From now until Unhold(), no file `names` names is opened past the
  // sSwitch. Returns the hold's ticket.
  virtual uint64_t Hold(Names names) = 0;
  // Waits until no file the hold names is open past the sSwitch, or until
  // `deadline`; returns those still open then (empty: none).
  virtual std::vector<std::string> WaitClosed(uint64_t ticket,
                                              absl::Time deadline) = 0;
  // Ends the hold.
  virtual void Unhold(uint64_t ticket) = 0;
};

// The files some of `rules` may name, whatever the source, op or range
// (a rule whose pattern does not compile names none).
BypassGuard::Names NamedByRules(const std::vector<Rule>& rules);

}  // namespace sroute

#endif  // SROUTE_SSWITCH_BYPASS_H_
