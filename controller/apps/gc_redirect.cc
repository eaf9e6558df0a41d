// SPDX-License-Identifier: Apache-2.0
#include "controller/apps/gc_redirect.h"

#include <algorithm>
#include <cstdlib>
#include <utility>

#include "util/log.h"
#include "util/strings.h"

namespace sroute {
namespace {

constexpr uint32_t kGcStageChangeMs = 5000;

}  // namespace

absl::StatusOr<GcRedirectOptions> ParseGcRedirectArgs(const std::string& args) {
  GcRedirectOptions o;
  for (std::string_view kv : StrSplit(args, ',')) {
    if (kv.empty()) continue;
    const size_t eq = kv.find('=');
    if (eq == std::string_view::npos) {
      return absl::InvalidArgumentError(
          StrCat("gc_redirect: expected key=value, not '", kv, "'"));
    }
    const std::string_view key = kv.substr(0, eq);
    const std::string value(kv.substr(eq + 1));
    if (key == "mode") {
      if (value != "redirect" && value != "delay" && value != "background") {
        return absl::InvalidArgumentError(
            StrCat("gc_redirect: mode: redirect, delay or background, not '",
                   value, "'"));
      }
      o.mode = value;
    } else if (key == "poll_us") {
      char* end = nullptr;
      const long n = std::strtol(value.c_str(), &end, 10);
      if (value.empty() || *end != '\0' || n < 100 || n > 10'000'000) {
        return absl::InvalidArgumentError(
            StrCat("gc_redirect: poll_us: 100..10000000 microseconds, not '",
                   value, "'"));
      }
      o.poll_us = static_cast<uint32_t>(n);
    } else if (key == "stages") {
      for (std::string_view s : StrSplit(value, '+')) {
        if (!s.empty()) o.stages.emplace_back(s);
      }
    } else {
      return absl::InvalidArgumentError(StrCat(
          "gc_redirect: unknown argument '", key, "' (mode, poll_us, stages)"));
    }
  }
  return o;
}

GcRedirect::GcRedirect(GcRedirectOptions options)
    : options_(std::move(options)) {}

absl::Status GcRedirect::Start(ControllerApi& api) {
  api_ = &api;
  LogInfo("gc_redirect: replica sets of flash members coordinate GC (",
          options_.mode, ", devices asked every ", options_.poll_us, " us)");
  return absl::OkStatus();
}

bool GcRedirect::IsFlash(const TopologyHost& host, const std::string& member,
                         const std::vector<TopologyHost>& topology,
                         const StatsSnapshot& stats) const {
  for (const proto::EndpointInfo& e : host.info.endpoints()) {
    if (e.name() != member) continue;
    if (e.kind() == "flash") return true;
    if (e.kind() != "server") return false;
    // A server's devices: it reports their gauges.
    for (const TopologyHost& t : topology) {
      if (t.info.address() != e.address()) continue;
      const HostStats* s = stats.Host(t.info.sswitch());
      if (s == nullptr) return false;
      return std::any_of(s->gauges.begin(), s->gauges.end(), [](const auto& g) {
        return g.first.starts_with("flash.");
      });
    }
  }
  return false;
}

void GcRedirect::OnStats(const StatsSnapshot& stats) {
  if (api_ == nullptr) return;
  const std::vector<TopologyHost> topology = api_->Topology();
  for (const TopologyHost& host : topology) {
    if (!host.connected) continue;
    const HostStats* hs = stats.Host(host.info.sswitch());
    if (hs == nullptr) continue;
    for (const proto::StageStats& st : hs->stages) {
      const proto::StageConfig& c = st.config();
      if (c.kind() != "replica_set") continue;
      if (!options_.stages.empty() &&
          std::find(options_.stages.begin(), options_.stages.end(), c.name()) ==
              options_.stages.end()) {
        continue;
      }
      const proto::ReplicaSetOptions& o = c.replica_set();
      if (o.gc() == options_.mode && o.has_gc_poll_us() &&
          o.gc_poll_us() == options_.poll_us) {
        continue;  // set up already
      }
      const bool flash = std::any_of(o.member().begin(), o.member().end(),
                                     [&](const std::string& m) {
                                       return IsFlash(host, m, topology, stats);
                                     });
      if (!flash) continue;
      proto::Stages set;
      set.set_action(proto::Stages::SET);
      *set.mutable_stage() = c;
      set.mutable_stage()->mutable_replica_set()->set_gc(options_.mode);
      set.mutable_stage()->mutable_replica_set()->set_gc_poll_us(
          options_.poll_us);
      set.set_timeout_ms(kGcStageChangeMs);
      auto done = api_->Stages(host.info.sswitch(), set);
      if (done.ok()) {
        LogInfo("gc_redirect: ", host.info.sswitch(), " stage ", c.name(),
                ": GC coordination ", options_.mode);
      } else {
        LogWarning("gc_redirect: ", host.info.sswitch(), " stage ", c.name(),
                   ": ", done.status().message());
      }
    }
  }
}

namespace {

ControlAppRegistration gc_redirect_app(
    "gc_redirect",
    [](const std::string& args) -> absl::StatusOr<std::unique_ptr<ControlApp>> {
      auto o = ParseGcRedirectArgs(args);
      if (!o.ok()) return o.status();
      return std::make_unique<GcRedirect>(*std::move(o));
    });

}  // namespace
}  // namespace sroute
