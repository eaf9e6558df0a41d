// SPDX-License-Identifier: Apache-2.0
#include "stages/host_stages.h"

#include <algorithm>

#include "stages/stage.h"
#include "stages/stage_spec.h"
#include "util/strings.h"

namespace sroute {
namespace {

constexpr uint32_t kDefaultChangeTimeoutMs = 10000;
constexpr uint32_t kMaxChangeTimeoutMs = 600000;

HostStage* AsHostStage(Stage* s) { return dynamic_cast<HostStage*>(s); }

void FillStats(const SSwitch::StageInfo& info, proto::StageStats* out) {
  if (HostStage* hs = AsHostStage(info.stage.get())) {
    *out->mutable_config() = hs->config();
    hs->Report(out);
  }
  out->mutable_config()->set_name(info.name);
  out->set_ios(info.ios);
  out->set_in_flight(info.in_flight);
  out->set_parked(info.parked);
}

}  // namespace

absl::Status AddConfiguredStage(SSwitch& sw, const proto::StageConfig& config) {
  StageEnv env;
  env.sswitch = &sw;
  env.state_dir = sw.state_dir();
  auto stage = StageRegistry::Global().Create(config, env);
  if (!stage.ok()) return stage.status();
  if (absl::Status s = sw.AddStage(config.name(), *stage); !s.ok()) {
    (void)(*stage)->Stop();
    return s;
  }
  return absl::OkStatus();
}

absl::Status EnsureStage(SSwitch& sw, const proto::StageConfig& want,
                         absl::Duration timeout) {
  std::shared_ptr<Stage> present;
  for (const SSwitch::StageInfo& info : sw.Stages()) {
    if (info.name == want.name()) present = info.stage;
  }
  if (!present) return AddConfiguredStage(sw, want);
  auto change = [&](Stage& stage) -> absl::Status {
    HostStage* hs = AsHostStage(&stage);
    if (hs == nullptr) {
      return absl::FailedPreconditionError(
          StrCat("stage '", want.name(), "' was not made from a config"));
    }
    const proto::StageConfig now = hs->config();
    if (now.kind() != want.kind()) {
      return absl::FailedPreconditionError(StrCat("stage ", want.name(),
                                                  " is of kind ", now.kind(),
                                                  " here, not ", want.kind()));
    }
    if (now.SerializeAsString() == want.SerializeAsString()) {
      return absl::OkStatus();
    }
    absl::Status s = hs->Reconfigure(want);
    if (!s.ok()) {
      return absl::Status(s.code(),
                          StrCat("stage ", want.name(), ": ", s.message()));
    }
    return absl::OkStatus();
  };
  const HostStage* hs = AsHostStage(present.get());
  if (hs != nullptr && hs->ReconfiguresLive(want)) return change(*present);
  return sw.ChangeStage(want.name(), change, timeout);
}

void AddStageStats(const SSwitch& sw, proto::ControlResponse* resp) {
  for (const SSwitch::StageInfo& info : sw.Stages()) {
    FillStats(info, resp->add_stages());
  }
}

void AddEndpointGauges(const SSwitch& sw,
                       google::protobuf::Map<std::string, int64_t>* gauges) {
  for (const auto& [name, endpoint] : sw.Endpoints()) {
    endpoint->Gauges(name, [&](std::string key, int64_t value) {
      (*gauges)[std::move(key)] = value;
    });
  }
  for (const auto& [name, watch] : sw.EndpointWatches()) {
    watch->Gauges(name, [&](std::string key, int64_t value) {
      (*gauges)[std::move(key)] = value;
    });
  }
}

namespace {

// A directory a stage would keep data in, chosen over the network: refused
// unless it is the one the stage has already (from the host's own config).
absl::Status CheckNetworkDirectories(const proto::StageConfig& next,
                                     const proto::StageConfig* current) {
  const std::string& dir = next.cache().tier_dir();
  if (dir.empty()) return absl::OkStatus();
  if (current != nullptr && current->cache().tier_dir() == dir) {
    return absl::OkStatus();
  }
  return absl::PermissionDeniedError(StrCat(
      "stage ", next.name(), ": tier_dir ", dir,
      " names a directory of this machine, which only its own config, flags "
      "or control socket may choose (not a request over the network)"));
}

}  // namespace

absl::Status HandleStagesRequest(SSwitch& sw, const proto::Stages& req,
                                 proto::ControlResponse* resp,
                                 ControlOrigin origin) {
  const absl::Duration timeout = absl::Milliseconds(
      req.timeout_ms() == 0 ? kDefaultChangeTimeoutMs
                            : std::min(req.timeout_ms(), kMaxChangeTimeoutMs));
  absl::Status status;
  switch (req.action()) {
    case proto::Stages::LIST:
      break;
    case proto::Stages::ADD: {
      proto::StageConfig config = req.stage();
      if (!req.spec().empty()) {
        auto parsed = ParseStageSpec(req.spec());
        if (!parsed.ok()) return parsed.status();
        config = *std::move(parsed);
      }
      if (origin == ControlOrigin::kNetwork) {
        if (absl::Status s = CheckNetworkDirectories(config, nullptr);
            !s.ok()) {
          return s;
        }
      }
      status = AddConfiguredStage(sw, config);
      break;
    }
    case proto::Stages::SET: {
      const std::string& name = req.stage().name();
      // The stage's options after the request.
      auto next_of =
          [&](const HostStage& hs) -> absl::StatusOr<proto::StageConfig> {
        proto::StageConfig next = hs.config();
        if (!req.spec().empty()) {
          if (absl::Status s = ApplyStageOptions(req.spec(), &next); !s.ok()) {
            return absl::InvalidArgumentError(
                StrCat("stage ", name, ": ", s.message()));
          }
        } else {
          if (!req.stage().kind().empty() &&
              req.stage().kind() != next.kind()) {
            return absl::InvalidArgumentError(
                StrCat("stage ", name, " is of kind ", next.kind(), ", not ",
                       req.stage().kind(), "; remove it and add a new one"));
          }
          const std::string kind = next.kind();
          next = req.stage();
          next.set_kind(kind);
        }
        if (origin == ControlOrigin::kNetwork) {
          const proto::StageConfig current = hs.config();
          if (absl::Status s = CheckNetworkDirectories(next, &current);
              !s.ok()) {
            return s;
          }
        }
        return next;
      };
      auto change = [&](Stage& stage) -> absl::Status {
        HostStage* hs = AsHostStage(&stage);
        if (hs == nullptr) {
          return absl::FailedPreconditionError(
              StrCat("stage '", name, "' was not made from a config"));
        }
        auto next = next_of(*hs);
        if (!next.ok()) return next.status();
        absl::Status s = hs->Reconfigure(*next);
        if (!s.ok()) {
          return absl::Status(s.code(),
                              StrCat("stage ", name, ": ", s.message()));
        }
        return absl::OkStatus();
      };
      // A stage that takes the new options with IOs inside is changed in
      // place; the others through the sSwitch's park and drain.
      std::shared_ptr<Stage> live;
      for (const SSwitch::StageInfo& info : sw.Stages()) {
        const HostStage* hs = AsHostStage(info.stage.get());
        if (info.name != name || hs == nullptr) continue;
        auto next = next_of(*hs);
        if (next.ok() && hs->ReconfiguresLive(*next)) live = info.stage;
      }
      status = live ? change(*live) : sw.ChangeStage(name, change, timeout);
      break;
    }
    case proto::Stages::REMOVE: {
      auto removed = sw.RemoveStage(req.stage().name(), timeout);
      if (!removed.ok()) return removed.status();
      if (HostStage* hs = AsHostStage(removed->get())) {
        if (absl::Status s = hs->Stop(); !s.ok()) {
          return absl::Status(s.code(),
                              StrCat("stage ", req.stage().name(),
                                     " removed; stopping it: ", s.message()));
        }
      }
      break;
    }
    default:
      return absl::InvalidArgumentError("unknown stages action");
  }
  if (!status.ok()) return status;
  AddStageStats(sw, resp);
  return absl::OkStatus();
}

absl::Status StopStages(SSwitch& sw) {
  absl::Status first;
  for (const SSwitch::StageInfo& info : sw.Stages()) {
    if (HostStage* hs = AsHostStage(info.stage.get())) {
      if (absl::Status s = hs->Stop(); !s.ok() && first.ok()) {
        first = absl::Status(s.code(),
                             StrCat("stage ", info.name, ": ", s.message()));
      }
    }
  }
  return first;
}

}  // namespace sroute
