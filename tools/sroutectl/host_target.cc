// SPDX-License-Identifier: Apache-2.0
// HostTarget: one host's control port. A FUSE host's is its control socket
// (--host unix:PATH, ControlClient); a storage server's is its RPC port
// (--host HOST:PORT with --secret-file, the ControlRequest wrapped in an
// RpcRequest). Each call connects anew.
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "endpoints/remote_endpoint.h"
#include "hostctl/control_client.h"
#include "hostctl/control_handler.h"
#include "proto/hostctl.pb.h"
#include "rpc/channel.h"
#include "rpc/handshake.h"
#include "rpc/io_threads.h"
#include "rpc/rule_codec.h"
#include "stages/steering/sweep_wait.h"
#include "tools/sroutectl/format.h"
#include "tools/sroutectl/json_output.h"
#include "tools/sroutectl/target.h"

namespace sroute::ctl {
namespace {

constexpr absl::Duration kCallTimeout = absl::Seconds(10);

// The rules of a response as `rules ls --json` prints them.
proto::CtlRules RulesOf(const proto::ControlResponse& resp) {
  proto::CtlRules rules;
  for (const proto::RuleRecord& r : resp.rules()) {
    *rules.add_rules() = CtlRuleOf(r);
  }
  return rules;
}

// Nanoseconds as microseconds with one decimal, without the unit (a table
// column says it).
std::string MicrosNoUnit(uint64_t ns) {
  return Printf("%.1f", static_cast<double>(ns) / 1000.0);
}

// The gauges and unmatched-ops counts of a response, sorted by name.
std::map<std::string, int64_t> Gauges(const proto::ControlResponse& resp) {
  return {resp.gauges().begin(), resp.gauges().end()};
}
std::map<std::string, uint64_t> Unmatched(const proto::ControlResponse& resp) {
  return {resp.unmatched_ops().begin(), resp.unmatched_ops().end()};
}

std::string StatsText(const proto::ControlResponse& resp) {
  std::string out =
      Printf("%6s %12s %14s %9s %8s %10s %10s %10s  %s\n", "ID", "OPS", "BYTES",
             "IN_FLIGHT", "ERRORS", "P50_US", "P99_US", "P999_US", "RULE");
  for (const proto::RuleRecord& r : resp.rules()) {
    out += Printf("%6llu %12llu %14llu %9lld %8llu %10s %10s %10s  %s\n",
                  static_cast<unsigned long long>(r.id()),
                  static_cast<unsigned long long>(r.ops()),
                  static_cast<unsigned long long>(r.bytes()),
                  static_cast<long long>(r.in_flight()),
                  static_cast<unsigned long long>(r.errors()),
                  MicrosNoUnit(r.p50_ns()).c_str(),
                  MicrosNoUnit(r.p99_ns()).c_str(),
                  MicrosNoUnit(r.p999_ns()).c_str(), r.text().c_str());
  }
  out += Printf("version %llu, in flight %lld, parked %llu\n",
                static_cast<unsigned long long>(resp.version()),
                static_cast<long long>(resp.in_flight()),
                static_cast<unsigned long long>(resp.parked()));
  if (!resp.unmatched_ops().empty()) {
    out += "unmatched (default route):";
    for (const auto& [op, n] : Unmatched(resp)) {
      out += Printf(" %s %llu", op.c_str(), static_cast<unsigned long long>(n));
    }
    out += "\n";
  }
  for (const auto& [name, value] : Gauges(resp)) {
    out += Printf("%s %lld\n", name.c_str(), static_cast<long long>(value));
  }
  out += StagesText(resp.stages());
  return out;
}

// One request to the storage server at `host`.
absl::StatusOr<proto::RpcReply> CallServer(const std::string& host,
                                           const std::string& secret_file,
                                           proto::RpcRequest& req,
                                           absl::Duration timeout) {
  if (secret_file.empty()) {
    return absl::InvalidArgumentError(
        "a storage server needs the cluster secret: give --secret-file "
        "FILE");
  }
  auto secret = LoadSecretFile(secret_file);
  if (!secret.ok()) return secret.status();
  IoThreads threads(1);
  RpcChannel::Options o;
  o.address = host;
  o.secret = *secret;
  o.name = "sroutectl";
  o.role = "sroutectl";
  o.connections = 1;
  auto channel = RpcChannel::Create(&threads, o);
  if (!channel.ok()) return channel.status();
  return (*channel)->CallSync(req, timeout);
}

}  // namespace

absl::StatusOr<proto::ControlResponse> CallHost(
    const std::string& host, const std::string& secret_file,
    const proto::ControlRequest& req, absl::Duration timeout) {
  if (host.empty()) {
    return absl::InvalidArgumentError(
        "this command needs --host unix:PATH or HOST:PORT");
  }
  absl::StatusOr<proto::ControlResponse> r;
  if (IsServerAddress(host)) {
    proto::RpcRequest rpc;
    *rpc.mutable_control() = req;
    rpc.mutable_control()->set_protocol_version(kControlProtocolVersion);
    auto reply = CallServer(host, secret_file, rpc, timeout);
    if (!reply.ok()) return reply.status();
    r = std::move(*reply->mutable_control());
  } else {
    if (host.rfind("unix:", 0) != 0 || host.size() == 5) {
      return absl::InvalidArgumentError(
          "--host wants unix:PATH or HOST:PORT, got '" + host + "'");
    }
    auto client = ControlClient::Connect(host.substr(5));
    if (!client.ok()) return NotReached(client.status());
    r = (*client)->Call(req, timeout);
    if (!r.ok()) return Refused(r.status());
  }
  if (r->code() != 0) {
    const auto code = static_cast<absl::StatusCode>(r->code());
    return Refused(absl::Status(code, r->message().empty()
                                          ? absl::StatusCodeToString(code)
                                          : r->message()));
  }
  return r;
}

namespace {

class HostTarget : public ControlTarget {
 public:
  HostTarget(std::string host, std::string secret_file)
      : host_(std::move(host)), secret_file_(std::move(secret_file)) {}

  absl::StatusOr<Report> ListRules() override {
    proto::ControlRequest req;
    req.mutable_list_rules();
    auto resp = Call(req);
    if (!resp.ok()) return resp.status();
    Report report{.text = "", .json = ToJson(RulesOf(*resp))};
    // As sroute::FormatRuleInfo prints it.
    for (const proto::RuleRecord& r : resp->rules()) {
      report.text += std::to_string(r.id()) + ": " + r.text();
      if (!r.owner().empty()) report.text += "  # owner=" + r.owner();
      report.text += "\n";
    }
    return report;
  }

  absl::StatusOr<proto::CheckResult> CheckRules(
      const std::vector<std::string>& add, bool deep) override {
    proto::ControlRequest req;
    for (const std::string& r : add) req.mutable_check_rules()->add_add(r);
    req.mutable_check_rules()->set_deep(deep);
    auto resp = Call(req);
    if (!resp.ok()) return resp.status();
    return resp->check();
  }

  // A host installs what it is given (the checker runs at the controller).
  absl::StatusOr<std::vector<uint64_t>> AddRules(const std::vector<Rule>& rules,
                                                 const std::string& owner,
                                                 bool) override {
    proto::ControlRequest req;
    for (const Rule& r : rules)
      RuleToMsg(r, req.mutable_add_rules()->add_rules());
    req.mutable_add_rules()->set_owner(owner);
    auto resp = Call(req);
    if (!resp.ok()) return resp.status();
    return std::vector<uint64_t>(resp->ids().begin(), resp->ids().end());
  }

  // The ids in one request, then each pattern in one of its own.
  absl::Status RemoveRules(const std::vector<std::string>& args) override {
    proto::ControlRequest by_id;
    std::vector<std::string> patterns;
    for (const std::string& a : args) {
      uint64_t id = 0;
      if (!a.empty() && a[0] == '<') {
        patterns.push_back(a);
      } else if (ParseId(a, &id)) {
        by_id.mutable_delete_rules()->add_id(id);
      } else {
        return absl::InvalidArgumentError(
            "'" + a + "' is neither a rule id nor a pattern <...>");
      }
    }
    if (by_id.has_delete_rules()) {
      if (auto resp = Call(by_id); !resp.ok()) return resp.status();
    }
    for (const std::string& p : patterns) {
      proto::ControlRequest req;
      req.mutable_delete_rules()->set_pattern(p);
      if (auto resp = Call(req); !resp.ok()) return resp.status();
    }
    return absl::OkStatus();
  }

  absl::StatusOr<Report> Stats() override {
    proto::ControlRequest req;
    req.mutable_stats();
    auto resp = Call(req);
    if (!resp.ok()) return resp.status();
    proto::CtlHostStats json;
    json.set_version(resp->version());
    json.set_in_flight(resp->in_flight());
    json.set_parked(resp->parked());
    *json.mutable_gauges() = resp->gauges();
    *json.mutable_unmatched_ops() = resp->unmatched_ops();
    *json.mutable_stages() = resp->stages();
    *json.mutable_rules() = RulesOf(*resp).rules();
    return Report{.text = StatsText(*resp), .json = ToJson(json)};
  }

  absl::Status Quiesce(const std::string& pattern, bool on) override {
    proto::ControlRequest req;
    req.mutable_quiesce()->set_pattern(pattern);
    req.mutable_quiesce()->set_on(on);
    return Call(req).status();
  }

  absl::Status Drain(const std::string& pattern,
                     absl::Duration timeout) override {
    proto::ControlRequest req;
    req.mutable_drain()->set_pattern(pattern);
    req.mutable_drain()->set_timeout_ms(
        static_cast<uint32_t>(absl::ToInt64Milliseconds(timeout)));
    // The host waits up to the timeout (its default 30 s) before it answers.
    return Call(req, (timeout == absl::ZeroDuration() ? absl::Seconds(30)
                                                      : timeout) +
                         kCallTimeout)
        .status();
  }

  absl::StatusOr<Report> Fences(
      const std::vector<std::string>& clear) override {
    proto::ControlRequest req;
    req.mutable_fences();
    for (const std::string& f : clear) req.mutable_fences()->add_clear(f);
    auto resp = Call(req);
    if (!resp.ok()) return resp.status();
    Report report;
    for (const proto::FenceRecord& f : resp->fences()) {
      report.text += f.file() + ": " + f.why() + "\n";
    }
    return report;
  }

  absl::StatusOr<Report> SlowOps(int64_t threshold_ms, bool clear) override {
    proto::ControlRequest req;
    proto::SlowOps* q = req.mutable_slow_ops();
    if (threshold_ms >= 0) {
      q->set_set_threshold(true);
      q->set_threshold_ns(static_cast<uint64_t>(threshold_ms) * 1'000'000);
    }
    q->set_clear(clear);
    auto resp = Call(req);
    if (!resp.ok()) return resp.status();
    return SlowOpsReport(*resp);
  }

  absl::StatusOr<proto::ProfileProgress> ProfileStep(
      const proto::ProfileEndpoint& request) override {
    proto::ControlRequest req;
    *req.mutable_profile_endpoint() = request;
    auto resp = Call(req, ProfileSweepWait(request));
    if (!resp.ok()) return resp.status();
    return resp->profile();
  }

  absl::StatusOr<std::vector<proto::DeviceProfile>> SetProfiles(
      const proto::SetProfiles& request) override {
    proto::ControlRequest req;
    *req.mutable_set_profiles() = request;
    auto resp = Call(req);
    if (!resp.ok()) return resp.status();
    return std::vector<proto::DeviceProfile>(resp->profiles().begin(),
                                             resp->profiles().end());
  }

  absl::StatusOr<Report> Traces(uint64_t after) override {
    proto::ControlRequest req;
    req.mutable_traces()->set_after(after);
    req.mutable_traces()->set_limit(4096);
    auto resp = Call(req);
    if (!resp.ok()) return resp.status();
    return TracesReport(*resp);
  }

  absl::StatusOr<Report> Records(const std::string& sswitch) override {
    if (!IsServerAddress(host_)) {
      return absl::InvalidArgumentError(
          "records live on storage servers: give --host HOST:PORT");
    }
    std::vector<proto::DelegateRecord> all;
    uint64_t after = 0;
    while (true) {
      proto::RpcRequest req;
      req.mutable_list_records()->set_sswitch(sswitch);
      req.mutable_list_records()->set_after(after);
      req.mutable_list_records()->set_limit(sswitch.empty() ? 0 : 10000);
      auto reply = CallServer(host_, secret_file_, req, kCallTimeout);
      if (!reply.ok()) return reply.status();
      for (auto& r : *reply->mutable_records()->mutable_records()) {
        after = r.seq();
        all.push_back(std::move(r));
      }
      if (!reply->records().more()) break;
    }
    Report report;
    proto::CtlRecords json;
    for (const proto::DelegateRecord& r : all) {
      report.text +=
          r.sswitch() + " " + std::to_string(r.seq()) + " " + r.rule() + "\n";
      *json.add_records() = CtlRecordOf(r);
    }
    report.json = ToJson(json);
    return report;
  }

  absl::StatusOr<Report> Hosts() override {
    return absl::InvalidArgumentError(
        "hosts asks the controller: give --controller HOST:PORT");
  }

  absl::StatusOr<Report> Controllers() override {
    return absl::InvalidArgumentError(
        "controllers asks a controller: give --controller HOST:PORT");
  }

  absl::StatusOr<Report> CacheCurves(const std::string&) override {
    return absl::InvalidArgumentError(
        "the curves are the cache_sizing app's: give --controller HOST:PORT");
  }

  absl::StatusOr<Report> WearStatus() override {
    return absl::InvalidArgumentError(
        "wear levelling is the wear_level app's: give --controller HOST:PORT");
  }

  absl::StatusOr<Report> Apps(proto::Apps::Action, const std::string&,
                              const std::string&, bool) override {
    return absl::InvalidArgumentError(
        "apps run in the controller: give --controller HOST:PORT");
  }

  absl::StatusOr<Report> CallApp(const std::string&, const std::string&,
                                 const std::vector<std::string>&) override {
    return absl::InvalidArgumentError(
        "apps run in the controller: give --controller HOST:PORT");
  }

  absl::StatusOr<Report> OffloadStatus() override {
    return absl::InvalidArgumentError(
        "off-loading is the tail_latency app's: give --controller HOST:PORT");
  }

  absl::StatusOr<proto::StageLists> StageStates(
      const proto::Stages& request) override {
    proto::ControlRequest req;
    *req.mutable_stages() = request;
    auto resp = Call(req, absl::Milliseconds(request.timeout_ms() == 0
                                                 ? 10000
                                                 : request.timeout_ms()) +
                              kCallTimeout);
    if (!resp.ok()) return resp.status();
    proto::StageLists lists;
    *lists.add_hosts()->mutable_stages() = resp->stages();
    return lists;
  }

  absl::StatusOr<Report> Stages(const proto::Stages& request) override {
    auto lists = StageStates(request);
    if (!lists.ok()) return lists.status();
    const auto& stages = lists->hosts(0).stages();
    proto::CtlStages json;
    *json.add_hosts()->mutable_stages() = stages;
    return Report{.text = StagesText(stages), .json = ToJson(json)};
  }

 private:
  absl::StatusOr<proto::ControlResponse> Call(
      const proto::ControlRequest& req, absl::Duration timeout = kCallTimeout) {
    return CallHost(host_, secret_file_, req, timeout);
  }

  const std::string host_;
  const std::string secret_file_;
};

}  // namespace

std::unique_ptr<ControlTarget> MakeHostTarget(std::string host,
                                              std::string secret_file) {
  return std::make_unique<HostTarget>(std::move(host), std::move(secret_file));
}

}  // namespace sroute::ctl
