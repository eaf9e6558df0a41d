// SPDX-License-Identifier: Apache-2.0
#include "host/runtime.h"

#include <filesystem>
#include <thread>

#include "endpoints/flash_endpoint.h"
#include "host/host_metrics.h"
#include "hostctl/control_server.h"
#include "metrics/http_server.h"
#include "rpc/handshake.h"
#include "sswitch/endpoint.h"
#include "stages/host_stages.h"
#include "stages/stage.h"
#include "util/log.h"
#include "util/strings.h"

namespace sroute {
namespace {

constexpr int kDefaultIoThreads = 2;
// The longest adaptive poll: about a round trip through a storage server
// (a reply's wait for the next request from the same caller).
constexpr int kAdaptivePollUs = 200;

std::string WhereOf(const proto::HostConfig::Endpoint& e) {
  if (!e.flash().empty()) return "flash:" + e.flash();
  return e.dir().empty() ? e.server() : e.dir();
}

}  // namespace

HostRuntime::HostRuntime(proto::HostConfig config, HostKind kind)
    : config_(std::move(config)),
      kind_(kind),
      host_(kind == HostKind::kServer && config_.name().empty()
                ? "server"
                : config_.name()) {}

HostRuntime::~HostRuntime() {
  StopServices();
  if (absl::Status s = StopStages(); !s.ok()) LogError(s.message());
}

bool HostRuntime::home_is_remote() const {
  return IsServerAddress(home_where_);
}

absl::StatusOr<std::unique_ptr<HostRuntime>> HostRuntime::Build(
    const proto::HostConfig& config, HostKind kind, std::string secret) {
  std::unique_ptr<HostRuntime> rt(new HostRuntime(config, kind));
  absl::Status s = rt->PlaceHome();
  if (s.ok()) s = rt->SetUpNetwork(std::move(secret));
  if (s.ok()) s = rt->MakeReservedFolder();
  if (s.ok()) rt->PlaceState();
  if (s.ok()) s = rt->AddEndpoints();
  if (s.ok()) s = rt->AddStages();
  if (s.ok()) s = rt->LoadRules();
  if (!s.ok()) return s;
  return rt;
}

absl::Status HostRuntime::PlaceHome() {
  if (kind_ == HostKind::kFuse) {
    home_name_ = "home";
    home_where_ = config_.backing();
    if (home_where_.empty()) {
      return absl::InvalidArgumentError(
          "no backing directory: give --backing DIR or backing: in --config");
    }
  } else {
    home_name_ = host_.sswitch().name();
    home_where_ = config_.root();
    if (home_where_.empty()) {
      return absl::InvalidArgumentError("no root directory (--root DIR)");
    }
  }
  return absl::OkStatus();
}

absl::Status HostRuntime::SetUpNetwork(std::string secret) {
  const proto::HostConfig& c = config_;
  bool any_remote = home_is_remote();
  for (const auto& e : c.endpoint()) any_remote |= !e.server().empty();
  const bool networked =
      kind_ == HostKind::kServer || any_remote || !c.controller().empty();
  remote_.local_name = host_.sswitch().name();
  remote_.role = HostKindName(kind_);
  remote_.timeout = absl::Milliseconds(
      c.has_remote_timeout_ms() ? c.remote_timeout_ms() : 10000);
  remote_.secret = std::move(secret);
  if (!networked) return absl::OkStatus();
  if (remote_.secret.empty()) {
    if (c.secret_file().empty()) {
      return absl::InvalidArgumentError(
          kind_ == HostKind::kServer
              ? "no cluster secret (--secret-file FILE)"
              : "storage servers and the controller need the cluster "
                "secret: give --secret-file FILE");
    }
    auto loaded = LoadSecretFile(c.secret_file());
    if (!loaded.ok()) return loaded.status();
    remote_.secret = *std::move(loaded);
  }
  // Adaptive polling by default (rpc/io_threads.h), on one thread; a
  // number of threads or a poll window given is taken as it is.
  const bool adaptive = !c.has_poll_us() && !c.has_io_threads();
  threads_ = std::make_unique<IoThreads>(
      c.has_io_threads() ? static_cast<int>(c.io_threads()) : kDefaultIoThreads,
      std::chrono::microseconds(adaptive ? kAdaptivePollUs : c.poll_us()),
      adaptive ? IoThreads::Polling::kAdaptive : IoThreads::Polling::kAlways);
  remote_.threads = threads_.get();
  return absl::OkStatus();
}

// The reserved folder of a local home: files unlinked while open wait there
// (a remote home's server makes its own).
absl::Status HostRuntime::MakeReservedFolder() {
  if (home_is_remote()) return absl::OkStatus();
  std::error_code ec;
  if (!std::filesystem::is_directory(home_where_, ec)) {
    return absl::InvalidArgumentError(
        StrCat(kind_ == HostKind::kFuse ? "backing directory " : "root ",
               home_where_, ": not a directory"));
  }
  const std::string unlinked =
      StrCat(home_where_, "/", kReservedDir, "/unlinked");
  std::filesystem::create_directories(unlinked, ec);
  if (ec == std::errc::read_only_file_system && kind_ == HostKind::kFuse) {
    // A read-only volume: nothing can be unlinked, nothing waits there.
    LogWarning(home_where_, " is read-only; the volume will be too");
    return absl::OkStatus();
  }
  if (ec) {
    return absl::UnavailableError(
        StrCat("cannot create ", unlinked, ": ", ec.message()));
  }
  return absl::OkStatus();
}

// The state directory: a local home keeps it in its reserved folder; a
// FUSE host on a remote home has one only if it is given.
void HostRuntime::PlaceState() {
  state_dir_ = config_.state_dir();
  if (state_dir_.empty() && !home_is_remote()) {
    state_dir_ = StrCat(home_where_, "/", kReservedDir, "/state");
  }
  host_.sswitch().set_state_dir(state_dir_);
}

absl::Status HostRuntime::AddEndpoints() {
  if (absl::Status s =
          AddEndpoint(host_.sswitch(), home_name_, home_where_, remote_);
      !s.ok()) {
    return absl::Status(s.code(),
                        StrCat(kind_ == HostKind::kServer ? "root "
                               : home_is_remote()         ? "backing server "
                                                  : "backing directory ",
                               home_where_, ": ", s.message()));
  }
  for (const auto& e : config_.endpoint()) {
    absl::Status s;
    if (!e.flash().empty()) {
      auto spec = ParseFlashSpec(e.flash());
      if (!spec.ok()) s = spec.status();
      for (const FlashEndpointSpec::Part& part :
           spec.ok() ? spec->Parts(e.name())
                     : std::vector<FlashEndpointSpec::Part>{}) {
        std::error_code ec;
        if (spec->vssds > 1) std::filesystem::create_directories(part.dir, ec);
        auto ssd = FlashEndpoint::Open(part.dir, part.options);
        s = ssd.ok() ? host_.AddEndpoint(part.name, *std::move(ssd))
                     : ssd.status();
        if (!s.ok()) break;
      }
    } else {
      s = AddEndpoint(host_.sswitch(), e.name(), WhereOf(e), remote_);
    }
    if (!s.ok()) {
      return absl::Status(s.code(), StrCat("endpoint ", e.name(), "=",
                                           WhereOf(e), ": ", s.message()));
    }
  }
  return absl::OkStatus();
}

absl::Status HostRuntime::AddStages() {
  // Registers the stage kinds and their delegates (shards) before rules
  // that use them load, with or without stages in the config.
  (void)StageRegistry::Global();
  for (const proto::StageConfig& st : config_.stage()) {
    if (absl::Status s = AddConfiguredStage(host_.sswitch(), st); !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<size_t> HostRuntime::ReloadRulesFile() {
  if (!config_.controller().empty()) {
    return absl::FailedPreconditionError(
        "the rules are the controller's (change them with sroutectl "
        "--controller)");
  }
  if (config_.rules_file().empty()) {
    return absl::FailedPreconditionError("no rules file to read again");
  }
  return host_.ReloadRulesFile(config_.rules_file());
}

// The rules file's, then the config's own, each file installed atomically.
absl::Status HostRuntime::LoadRules() {
  if (!config_.rules_file().empty()) {
    if (absl::Status s = host_.LoadRulesFile(config_.rules_file()); !s.ok()) {
      return s;
    }
  }
  if (config_.rule_size() == 0) return absl::OkStatus();
  std::string text;
  for (const std::string& r : config_.rule()) StrAppend(&text, r, "\n");
  return host_.LoadRules(text, "rule", "config");
}

absl::Status HostRuntime::StartAgent(const std::string& address) {
  if (config_.controller().empty()) return absl::OkStatus();
  AgentOptions ao;
  ao.address = config_.controller();
  ao.secret = remote_.secret;
  if (config_.has_controller_timeout_ms()) {
    ao.register_timeout = absl::Milliseconds(config_.controller_timeout_ms());
  }
  ao.host.set_sswitch(host_.sswitch().name());
  ao.host.set_role(HostKindName(kind_));
  if (!address.empty()) ao.host.set_address(address);
  auto describe = [&](const std::string& name, const std::string& where) {
    proto::EndpointInfo* e = ao.host.add_endpoints();
    e->set_name(name);
    e->set_kind(where.starts_with("flash:") ? "flash"
                : IsServerAddress(where)    ? "server"
                                            : "dir");
    e->set_address(where);
  };
  describe(home_name_, home_where_);
  for (const auto& e : config_.endpoint()) {
    auto spec = e.flash().empty() ? absl::StatusOr<FlashEndpointSpec>()
                                  : ParseFlashSpec(e.flash());
    if (!spec.ok() || spec->vssds <= 1) {
      describe(e.name(), WhereOf(e));
      continue;
    }
    for (const FlashEndpointSpec::Part& part : spec->Parts(e.name())) {
      describe(part.name, "flash:" + part.dir);
    }
  }
  auto agent = ControllerAgent::Start(&host_.sswitch(), threads_.get(), ao);
  if (!agent.ok()) return agent.status();
  agent_ = *std::move(agent);
  return absl::OkStatus();
}

absl::Status HostRuntime::StartControl(
    std::function<void(proto::ControlResponse*)> add_gauges) {
  if (config_.control_socket().empty()) return absl::OkStatus();
  auto server = ControlServer::Start(
      &host_.sswitch(), config_.control_socket(),
      /*on_rules_changed=*/nullptr,
      [this, add_gauges = std::move(add_gauges)](proto::ControlResponse* r) {
        if (add_gauges) add_gauges(r);
        if (agent_) {
          auto& gauges = *r->mutable_gauges();
          gauges["controller_connected"] = agent_->connected() ? 1 : 0;
          gauges["delegate_rules_restored"] =
              static_cast<int64_t>(agent_->records_restored());
        }
      });
  if (!server.ok()) return server.status();
  control_ = *std::move(server);
  return absl::OkStatus();
}

absl::Status HostRuntime::StartMetrics(
    std::function<void(metrics::Exposition*)> add_metrics) {
  if (config_.metrics().empty()) return absl::OkStatus();
  const size_t cap = config_.has_metrics_rules() ? config_.metrics_rules()
                                                 : kDefaultMetricsRuleCap;
  auto server = metrics::MetricsServer::Start(
      config_.metrics(), [this, cap, add_metrics = std::move(add_metrics)] {
        metrics::Exposition e;
        AddSwitchMetrics(host_.sswitch(), cap, agent_.get(), &e);
        if (add_metrics) add_metrics(&e);
        return e.Render();
      });
  if (!server.ok()) return server.status();
  metrics_ = *std::move(server);
  LogInfo("metrics at http://", metrics_->address(), "/metrics");
  return absl::OkStatus();
}

std::string HostRuntime::metrics_address() const {
  return metrics_ ? metrics_->address() : "";
}

void HostRuntime::StopServices() {
  control_.reset();
  // Before the agent: a scrape reads it.
  metrics_.reset();
  agent_.reset();
}

absl::Status HostRuntime::StopStages() {
  if (stages_stopped_) return absl::OkStatus();
  stages_stopped_ = true;
  return sroute::StopStages(host_.sswitch());
}

bool HostRuntime::WaitForIdle(std::chrono::milliseconds limit) {
  SSwitch& sw = host_.sswitch();
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while ((sw.in_flight() > 0 || sw.parked() > 0) &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return sw.in_flight() == 0 && sw.parked() == 0;
}

}  // namespace sroute
