// SPDX-License-Identifier: Apache-2.0
// HelloApp: the smallest useful control application (docs/design.md §9). It
// moves one file's writes to another server for a while and back again:
//
//   away:  <*, w, FILE> -> track_writes(); <IO, TO>
//   home:  <*, w, FILE> -> track_writes(); <IO, FILE>
//
// track_writes makes reads of every written range follow the write, so
// readers of FILE always get the newest bytes, wherever they are. Each move
// is one consistent update on the sSwitch of the host that sees FILE's IO.
//
// Args, "key=value,key=value":
//   sswitch=NAME     the sSwitch to program (e.g. the FUSE host's --name)
//   file=//HOST/PATH the file whose writes move
//   to=//HOST/PATH   where its writes go while away
//   period_ms=N      how long to stay away (default 2000)
//   state=KEY        the app-state key of its progress (default: FILE)
//
// The same code runs in sroute-controller (plugin.cc) and in a process of
// its own (main.cc, through ControllerClient).
#ifndef SROUTE_EXAMPLES_HELLO_APP_HELLO_APP_H_
#define SROUTE_EXAMPLES_HELLO_APP_HELLO_APP_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "controller/app_api.h"

namespace sroute {

class HelloApp : public ControlApp {
 public:
  // The factory: parses and checks `args`; an error names the bad key.
  static absl::StatusOr<std::unique_ptr<HelloApp>> Create(
      const std::string& args);

  absl::Status Start(ControllerApi& api) override;

  // `fn` runs (on the app's thread) once the app has nothing left to do,
  // e.g. to let an out-of-process runner exit.
  void set_on_done(std::function<void()> fn) { on_done_ = std::move(fn); }

 private:
  // Progress, persisted (as "away" and "home") under the state key.
  enum class Phase { kStart, kAway, kHome };

  HelloApp() = default;
  // One step of the plan per timer tick; a step that fails is tried again
  // at the next tick (e.g. while the sSwitch's host is not connected yet).
  void Tick();
  // Makes `rule` route FILE's writes in place of `replaced`, in one update.
  absl::Status Route(const std::string& rule, const std::string& replaced);

  std::string sswitch_;
  std::string away_rule_;  // canonical rule text, as the controller keeps it
  std::string home_rule_;
  std::string state_key_;
  absl::Duration period_;
  ControllerApi* api_ = nullptr;
  Phase phase_ = Phase::kStart;
  bool done_ = false;
  std::function<void()> on_done_;
};

}  // namespace sroute

#endif  // SROUTE_EXAMPLES_HELLO_APP_HELLO_APP_H_
