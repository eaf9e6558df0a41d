// SPDX-License-Identifier: Apache-2.0
#include "examples/hello_app/hello_app.h"

#include <charconv>
#include <map>
#include <string_view>

#include "absl/memory/memory.h"
#include "rules/parser.h"
#include "util/log.h"
#include "util/strings.h"

namespace sroute {
namespace {

constexpr char kAway[] = "away";
constexpr char kHome[] = "home";

// `<*, w, FILE> -> track_writes(); <IO, TARGET>` in canonical form: the
// controller keeps rules in that form, so Route can find them by text.
absl::StatusOr<std::string> WriteRule(const std::string& file,
                                      const std::string& target) {
  const std::string text =
      StrCat("<*, w, ", file, "> -> track_writes(); <IO, ", target, ">");
  auto rule = ParseRule(text);
  if (!rule.ok()) {
    return absl::InvalidArgumentError(
        StrCat("in '", text, "' at column ", rule.status().message()));
  }
  return FormatRule(*rule);
}

}  // namespace

absl::StatusOr<std::unique_ptr<HelloApp>> HelloApp::Create(
    const std::string& args) {
  std::map<std::string, std::string> kv = {{"period_ms", "2000"}};
  for (std::string_view item : StrSplit(args, ',')) {
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    const std::string key(item.substr(0, eq));
    if (key != "sswitch" && key != "file" && key != "to" &&
        key != "period_ms" && key != "state") {
      return absl::InvalidArgumentError(
          StrCat("unknown key '", key,
                 "' (known: sswitch, file, to, period_ms, state)"));
    }
    if (eq == std::string_view::npos || eq + 1 == item.size()) {
      return absl::InvalidArgumentError(
          StrCat("key '", key, "' needs a value: ", key, "=VALUE"));
    }
    kv[key] = std::string(item.substr(eq + 1));
  }
  for (const char* key : {"sswitch", "file", "to"}) {
    if (kv[key].empty()) {
      return absl::InvalidArgumentError(StrCat("missing key '", key, "'"));
    }
  }
  // The rule parser checks the rest of a file name, but would also take a
  // pattern such as "*" for FILE, or a stage for TO.
  for (const char* key : {"file", "to"}) {
    if (!kv[key].starts_with("//")) {
      return absl::InvalidArgumentError(
          StrCat(key, "=", kv[key], ": want a file name //HOST/PATH"));
    }
  }
  const std::string& period = kv["period_ms"];
  int period_ms = 0;
  const auto [end, err] =
      std::from_chars(period.data(), period.data() + period.size(), period_ms);
  if (err != std::errc() || end != period.data() + period.size() ||
      period_ms <= 0) {
    return absl::InvalidArgumentError(StrCat(
        "period_ms=", period, ": want a positive number of milliseconds"));
  }
  // The home rule names only FILE: an error in it is FILE's; then one in
  // the away rule is TO's.
  auto home = WriteRule(kv["file"], kv["file"]);
  if (!home.ok()) {
    return absl::InvalidArgumentError(
        StrCat("file=", kv["file"], ": ", home.status().message()));
  }
  auto away = WriteRule(kv["file"], kv["to"]);
  if (!away.ok()) {
    return absl::InvalidArgumentError(
        StrCat("to=", kv["to"], ": ", away.status().message()));
  }

  auto app = absl::WrapUnique(new HelloApp());
  app->sswitch_ = kv["sswitch"];
  app->away_rule_ = *std::move(away);
  app->home_rule_ = *std::move(home);
  // Two hello apps moving different files keep their progress apart.
  app->state_key_ = kv.contains("state") ? kv["state"] : kv["file"];
  app->period_ = absl::Milliseconds(period_ms);
  return app;
}

absl::Status HelloApp::Start(ControllerApi& api) {
  api_ = &api;
  // A restarted app picks up where it stopped rather than going away again.
  auto state = api.GetState(state_key_);
  if (state.ok() && *state == kAway) {
    phase_ = Phase::kAway;
  } else if (state.ok() && *state == kHome) {
    phase_ = Phase::kHome;
  } else if (state.ok()) {
    return absl::DataLossError(StrCat("state ", state_key_, " is '", *state,
                                      "', not '", kAway, "' or '", kHome, "'"));
  } else if (!absl::IsNotFound(state.status())) {
    return state.status();
  }
  // Ticks are period_ apart, so writes stay away for one period (a
  // restarted app that was away stays away one more period).
  api.AddTimer(period_, [this] { Tick(); });
  Tick();
  return absl::OkStatus();
}

void HelloApp::Tick() {
  switch (phase_) {
    case Phase::kStart:
      if (absl::Status s = Route(away_rule_, home_rule_); !s.ok()) {
        LogWarning("hello: moving writes away: ", s.message(),
                   " (trying again in ", absl::FormatDuration(period_), ")");
      } else if (s = api_->PutState(state_key_, kAway); !s.ok()) {
        LogWarning("hello: recording progress: ", s.message());
      } else {
        LogInfo("hello: writes go away: ", away_rule_);
        phase_ = Phase::kAway;
      }
      return;
    case Phase::kAway:
      // Writes go home again, and nothing is copied back: reads of the
      // ranges written while away still follow the read rules track_writes
      // made for them, and each range moves home when it is written again.
      if (absl::Status s = Route(home_rule_, away_rule_); !s.ok()) {
        LogWarning("hello: moving writes home: ", s.message(),
                   " (trying again in ", absl::FormatDuration(period_), ")");
      } else if (s = api_->PutState(state_key_, kHome); !s.ok()) {
        LogWarning("hello: recording progress: ", s.message());
      } else {
        LogInfo("hello: writes go home: ", home_rule_);
        phase_ = Phase::kHome;
      }
      return;
    case Phase::kHome:
      if (done_) return;
      // Done, and the home rule stays. Removing it would strand the ranges
      // still on TO: a new write to one would no longer take over its read
      // rule (reads would return the old bytes from TO), and a restarted
      // host gets its read rules back only under a track_writes rule for
      // FILE.
      done_ = true;
      LogInfo("hello: done; writes are home");
      if (on_done_) on_done_();
      return;
  }
}

absl::Status HelloApp::Route(const std::string& rule,
                             const std::string& replaced) {
  auto installed = api_->Rules(sswitch_);
  if (!installed.ok()) return installed.status();
  RuleChanges changes{sswitch_, {rule}, {}};
  for (const proto::ManagedRule& r : *installed) {
    if (r.text() == replaced) changes.remove.push_back(r.cid());
    // An earlier life of the app made this update but stopped before it
    // recorded its progress: do not add the rule twice.
    if (r.text() == rule) changes.insert.clear();
  }
  if (changes.insert.empty() && changes.remove.empty()) {
    return absl::OkStatus();
  }
  UpdateSpec spec;
  spec.changes.push_back(std::move(changes));
  return api_->Update(spec).status();
}

}  // namespace sroute
