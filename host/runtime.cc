#include "host/runtime.h"

#include <filesystem>
#include <thread>

#include "control/control_server.h"
#include "rpc/handshake.h"
#include "sswitch/endpoint.h"
#include "util/log.h"
#include "util/strings.h"

namespace sroute {
namespace {

constexpr int kDefaultIoThreads = 2;

std::string WhereOf(const proto::HostConfig::Endpoint& e) {
  return e.dir().empty() ? e.server() : e.dir();
}

}  // namespace

HostRuntime::HostRuntime(proto::HostConfig config, HostKind kind)
    : config_(std::move(config)),
      kind_(kind),
      host_(kind == HostKind::kServer && config_.name().empty()
                ? "server"
                : config_.name()) {}

HostRuntime::~HostRuntime() { StopServices(); }

bool HostRuntime::home_is_remote() const {
  return IsServerAddress(home_where_);
}

absl::StatusOr<std::unique_ptr<HostRuntime>> HostRuntime::Build(
    const proto::HostConfig& config, HostKind kind, std::string secret) {
  std::unique_ptr<HostRuntime> rt(new HostRuntime(config, kind));
  const proto::HostConfig& c = rt->config_;
  if (kind == HostKind::kFuse) {
    rt->home_name_ = "home";
    rt->home_where_ = c.backing();
    if (c.backing().empty()) {
      return absl::InvalidArgumentError(
          "no backing directory: give --backing DIR or backing: in --config");
    }
  } else {
    rt->home_name_ = rt->host_.sswitch().name();
    rt->home_where_ = c.root();
    if (c.root().empty()) {
      return absl::InvalidArgumentError("no root directory (--root DIR)");
    }
  }
  bool any_remote = rt->home_is_remote();
  for (const auto& e : c.endpoint()) any_remote |= !e.server().empty();
  const bool networked =
      kind == HostKind::kServer || any_remote || !c.controller().empty();

  RemoteContext& remote = rt->remote_;
  remote.local_name = rt->host_.sswitch().name();
  remote.role = HostKindName(kind);
  remote.timeout = absl::Milliseconds(
      c.has_remote_timeout_ms() ? c.remote_timeout_ms() : 10000);
  remote.secret = std::move(secret);
  if (networked && remote.secret.empty()) {
    if (c.secret_file().empty()) {
      return absl::InvalidArgumentError(
          kind == HostKind::kServer
              ? "no cluster secret (--secret-file FILE)"
              : "storage servers and the controller need the cluster "
                "secret: give --secret-file FILE");
    }
    auto loaded = LoadSecretFile(c.secret_file());
    if (!loaded.ok()) return loaded.status();
    remote.secret = *std::move(loaded);
  }
  if (networked) {
    rt->threads_ = std::make_unique<IoThreads>(
        c.has_io_threads() ? static_cast<int>(c.io_threads())
                           : kDefaultIoThreads,
        std::chrono::microseconds(c.poll_us()));
    remote.threads = rt->threads_.get();
  }

  // The reserved folder of a local home: files unlinked while open wait
  // there (a remote home's server makes its own).
  if (!rt->home_is_remote()) {
    std::error_code ec;
    const std::string reserved = rt->home_where_ + "/" + kReservedDir;
    if (!std::filesystem::is_directory(rt->home_where_, ec)) {
      return absl::InvalidArgumentError(
          StrCat(kind == HostKind::kFuse ? "backing directory " : "root ",
                 rt->home_where_, ": not a directory"));
    }
    std::filesystem::create_directories(reserved + "/unlinked", ec);
    if (ec == std::errc::read_only_file_system && kind == HostKind::kFuse) {
      // A read-only volume: nothing can be unlinked, nothing waits there.
      LogWarning(rt->home_where_, " is read-only; the volume will be too");
      ec.clear();
    }
    if (ec) {
      return absl::UnavailableError(
          StrCat("cannot create ", reserved, "/unlinked: ", ec.message()));
    }
  }
  if (absl::Status s =
          AddEndpoint(rt->host_, rt->home_name_, rt->home_where_, remote);
      !s.ok()) {
    return absl::Status(s.code(),
                        StrCat(kind == HostKind::kServer ? "root "
                               : rt->home_is_remote()    ? "backing server "
                                                         : "backing directory ",
                               rt->home_where_, ": ", s.message()));
  }
  for (const auto& e : c.endpoint()) {
    if (absl::Status s = AddEndpoint(rt->host_, e.name(), WhereOf(e), remote);
        !s.ok()) {
      return absl::Status(s.code(), StrCat("endpoint ", e.name(), "=",
                                           WhereOf(e), ": ", s.message()));
    }
  }
  if (!c.rules_file().empty()) {
    if (absl::Status s = rt->host_.LoadRulesFile(c.rules_file()); !s.ok()) {
      return s;
    }
  }
  if (c.rule_size() > 0) {
    std::string text;
    for (const std::string& r : c.rule()) StrAppend(&text, r, "\n");
    if (absl::Status s = rt->host_.LoadRules(text, "rule", "config"); !s.ok()) {
      return s;
    }
  }
  return rt;
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
    e->set_kind(IsServerAddress(where) ? "server" : "dir");
    e->set_address(where);
  };
  describe(home_name_, home_where_);
  for (const auto& e : config_.endpoint()) describe(e.name(), WhereOf(e));
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

void HostRuntime::StopServices() {
  control_.reset();
  agent_.reset();
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
