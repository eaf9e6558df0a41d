// sroutectl: the admin client. `rules check` and `rules fmt` work on rule
// files offline; with `--host unix:PATH` (a FUSE host's control socket) or
// `--host HOST:PORT --secret-file F` (a storage server) it talks to one
// host's control port: rules ls/add/rm/load, stats, quiesce, drain, and a
// server's delegate-rule records. With `--controller ADDR --secret-file F`
// it talks to sroute-controller instead: hosts, the managed rules of every
// sSwitch (changed in consistent updates), stats, quiesce and drain; then
// `--host` names an sSwitch registered at the controller.
//
// Exit codes: 0 done, 1 refused or bad input, 2 the host or controller
// could not be reached.
#include <algorithm>
#include <charconv>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "control/control_client.h"
#include "control/control_handler.h"
#include "controller/client.h"
#include "proto/control.pb.h"
#include "rpc/channel.h"
#include "rpc/handshake.h"
#include "rpc/io_threads.h"
#include "rpc/remote_endpoint.h"
#include "rules/parser.h"

namespace {

bool ReadInput(const std::string& path, std::string* out) {
  if (path == "-") {
    std::stringstream ss;
    ss << std::cin.rdbuf();
    *out = ss.str();
    return true;
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::cerr << "sroutectl: cannot read " << path << "\n";
    return false;
  }
  std::stringstream ss;
  ss << in.rdbuf();
  *out = ss.str();
  return true;
}

// Prints every parse error as FILE:LINE:COL: reason; returns the count.
size_t PrintErrors(const std::string& path, const sroute::ParsedRules& parsed) {
  for (const sroute::ParseError& e : parsed.errors) {
    std::cerr << path << ":" << e.line << ":" << e.column << ": " << e.reason
              << "\n";
  }
  return parsed.errors.size();
}

int Check(const std::vector<std::string>& files) {
  int status = 0;
  for (const std::string& path : files) {
    std::string text;
    if (!ReadInput(path, &text)) {
      status = 2;
      continue;
    }
    sroute::ParsedRules parsed = sroute::ParseRules(text);
    if (PrintErrors(path, parsed) > 0) {
      status = std::max(status, 1);
      continue;
    }
    std::cout << (files.size() > 1 ? path + ": " : "")
              << "OK: " << parsed.rules.size() << " rule"
              << (parsed.rules.size() == 1 ? "" : "s") << "\n";
  }
  return status;
}

int Fmt(const std::string& path) {
  std::string text;
  if (!ReadInput(path, &text)) return 2;
  sroute::ParsedRules parsed = sroute::ParseRules(text);
  if (PrintErrors(path, parsed) > 0) return 1;
  for (const sroute::Rule& r : parsed.rules) {
    std::cout << sroute::FormatRule(r) << "\n";
  }
  return 0;
}

// --- Online commands (--host unix:PATH).

constexpr absl::Duration kCallTimeout = absl::Seconds(10);

int Fail(const std::string& msg, int code = 1) {
  std::cerr << "sroutectl: " << msg << "\n";
  return code;
}

std::string g_secret_file;  // --secret-file, for storage servers

// One request to a storage server's RPC port.
absl::StatusOr<sroute::proto::RpcReply> CallServer(
    const std::string& address, sroute::proto::RpcRequest& req,
    absl::Duration timeout) {
  if (g_secret_file.empty()) {
    return absl::InvalidArgumentError(
        "a storage server needs the cluster secret: give --secret-file FILE");
  }
  auto secret = sroute::LoadSecretFile(g_secret_file);
  if (!secret.ok()) return secret.status();
  sroute::IoThreads threads(1);
  sroute::RpcChannel::Options o;
  o.address = address;
  o.secret = *secret;
  o.name = "sroutectl";
  o.role = "sroutectl";
  o.connections = 1;
  auto channel = sroute::RpcChannel::Create(&threads, o);
  if (!channel.ok()) return channel.status();
  return (*channel)->CallSync(req, timeout);
}

// Connects and sends one request. On failure prints the error and returns
// the exit code in *exit_code.
bool Call(const std::string& host, const sroute::proto::ControlRequest& req,
          absl::Duration timeout, sroute::proto::ControlResponse* resp,
          int* exit_code) {
  if (host.empty()) {
    *exit_code = Fail("this command needs --host unix:PATH or HOST:PORT");
    return false;
  }
  absl::StatusOr<sroute::proto::ControlResponse> r;
  if (sroute::IsServerAddress(host)) {
    sroute::proto::RpcRequest rpc;
    *rpc.mutable_control() = req;
    rpc.mutable_control()->set_protocol_version(
        sroute::kControlProtocolVersion);
    auto reply = CallServer(host, rpc, timeout);
    if (!reply.ok()) {
      *exit_code = Fail(std::string(reply.status().message()),
                        absl::IsUnavailable(reply.status()) ? 2 : 1);
      return false;
    }
    r = std::move(*reply->mutable_control());
  } else {
    if (host.rfind("unix:", 0) != 0 || host.size() == 5) {
      *exit_code =
          Fail("--host wants unix:PATH or HOST:PORT, got '" + host + "'");
      return false;
    }
    const std::string path = host.substr(5);
    auto client = sroute::ControlClient::Connect(path);
    if (!client.ok()) {
      *exit_code = Fail(std::string(client.status().message()), 2);
      return false;
    }
    r = (*client)->Call(req, timeout);
  }
  if (!r.ok()) {
    *exit_code = Fail(std::string(r.status().message()));
    return false;
  }
  if (r->code() != 0) {
    *exit_code = Fail(
        r->message().empty()
            ? absl::StatusCodeToString(static_cast<absl::StatusCode>(r->code()))
            : r->message());
    return false;
  }
  *resp = *std::move(r);
  return true;
}

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

void PrintJson(const sroute::proto::ControlResponse& resp) {
  std::cout << "[";
  for (int i = 0; i < resp.rules_size(); ++i) {
    const sroute::proto::RuleRecord& r = resp.rules(i);
    std::cout << (i == 0 ? "\n  " : ",\n  ") << "{\"id\": " << r.id()
              << ", \"rule\": " << JsonString(r.text())
              << ", \"owner\": " << JsonString(r.owner())
              << ", \"ops\": " << r.ops() << ", \"bytes\": " << r.bytes()
              << ", \"in_flight\": " << r.in_flight()
              << ", \"errors\": " << r.errors()
              << ", \"p50_ns\": " << r.p50_ns()
              << ", \"p99_ns\": " << r.p99_ns()
              << ", \"p999_ns\": " << r.p999_ns() << "}";
  }
  std::cout << (resp.rules_size() > 0 ? "\n]\n" : "]\n");
}

int RulesLs(const std::string& host, bool json) {
  sroute::proto::ControlRequest req;
  req.mutable_list_rules();
  sroute::proto::ControlResponse resp;
  int code = 0;
  if (!Call(host, req, kCallTimeout, &resp, &code)) return code;
  if (json) {
    PrintJson(resp);
    return 0;
  }
  // As sroute::FormatRuleInfo prints it.
  for (const sroute::proto::RuleRecord& r : resp.rules()) {
    std::cout << r.id() << ": " << r.text();
    if (!r.owner().empty()) std::cout << "  # owner=" << r.owner();
    std::cout << "\n";
  }
  return 0;
}

int RulesAdd(const std::string& host, const std::vector<std::string>& rules,
             const std::string& owner) {
  sroute::proto::ControlRequest req;
  for (const std::string& r : rules) req.mutable_add_rules()->add_text(r);
  req.mutable_add_rules()->set_owner(owner);
  sroute::proto::ControlResponse resp;
  int code = 0;
  if (!Call(host, req, kCallTimeout, &resp, &code)) return code;
  for (uint64_t id : resp.ids()) std::cout << id << "\n";
  return 0;
}

int RulesRm(const std::string& host, const std::vector<std::string>& args) {
  sroute::proto::ControlRequest by_id;
  std::vector<std::string> patterns;
  for (const std::string& a : args) {
    if (!a.empty() && a[0] == '<') {
      patterns.push_back(a);
      continue;
    }
    uint64_t id = 0;
    const auto [end, ec] = std::from_chars(a.data(), a.data() + a.size(), id);
    if (a.empty() || ec != std::errc() || end != a.data() + a.size()) {
      return Fail("'" + a + "' is neither a rule id nor a pattern <...>");
    }
    by_id.mutable_delete_rules()->add_id(id);
  }
  sroute::proto::ControlResponse resp;
  int code = 0;
  if (by_id.has_delete_rules() &&
      !Call(host, by_id, kCallTimeout, &resp, &code)) {
    return code;
  }
  for (const std::string& p : patterns) {
    sroute::proto::ControlRequest req;
    req.mutable_delete_rules()->set_pattern(p);
    if (!Call(host, req, kCallTimeout, &resp, &code)) return code;
  }
  return 0;
}

// Reads and parses the rules file `path` for `rules load`: on success its
// rules in canonical text; otherwise its errors are printed (as FILE:LINE:COL
// like `rules check`) and *exit_code is set.
bool ReadRulesFile(const std::string& path, std::vector<std::string>* rules,
                   int* exit_code) {
  std::string text;
  if (!ReadInput(path, &text)) {
    *exit_code = 1;
    return false;
  }
  const sroute::ParsedRules parsed = sroute::ParseRules(text);
  if (PrintErrors(path, parsed) > 0) {
    *exit_code = Fail(path + ": nothing installed");
    return false;
  }
  if (parsed.rules.empty()) {
    *exit_code = Fail(path + " holds no rules");
    return false;
  }
  for (const sroute::Rule& r : parsed.rules) {
    rules->push_back(sroute::FormatRule(r));
  }
  return true;
}

int RulesLoad(const std::string& host, const std::string& path,
              const std::string& owner) {
  std::vector<std::string> rules;
  int code = 0;
  if (!ReadRulesFile(path, &rules, &code)) return code;
  return RulesAdd(host, rules, owner);
}

std::string Micros(uint64_t ns) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f", static_cast<double>(ns) / 1000.0);
  return buf;
}

std::map<std::string, int64_t> SortedGauges(
    const sroute::proto::ControlResponse& resp) {
  return {resp.gauges().begin(), resp.gauges().end()};
}

std::map<std::string, uint64_t> SortedUnmatched(
    const sroute::proto::ControlResponse& resp) {
  return {resp.unmatched_ops().begin(), resp.unmatched_ops().end()};
}

int Stats(const std::string& host, bool json) {
  sroute::proto::ControlRequest req;
  req.mutable_stats();
  sroute::proto::ControlResponse resp;
  int code = 0;
  if (!Call(host, req, kCallTimeout, &resp, &code)) return code;
  if (json) {
    std::cout << "{\"version\": " << resp.version()
              << ", \"in_flight\": " << resp.in_flight()
              << ", \"parked\": " << resp.parked() << ", \"gauges\": {";
    bool first = true;
    for (const auto& [name, value] : SortedGauges(resp)) {
      std::cout << (first ? "" : ", ") << JsonString(name) << ": " << value;
      first = false;
    }
    std::cout << "}, \"unmatched_ops\": {";
    first = true;
    for (const auto& [op, n] : SortedUnmatched(resp)) {
      std::cout << (first ? "" : ", ") << JsonString(op) << ": " << n;
      first = false;
    }
    std::cout << "},\n\"rules\": ";
    PrintJson(resp);
    std::cout << "}\n";
    return 0;
  }
  std::printf("%6s %12s %14s %9s %8s %10s %10s %10s  %s\n", "ID", "OPS",
              "BYTES", "IN_FLIGHT", "ERRORS", "P50_US", "P99_US", "P999_US",
              "RULE");
  for (const sroute::proto::RuleRecord& r : resp.rules()) {
    std::printf("%6llu %12llu %14llu %9lld %8llu %10s %10s %10s  %s\n",
                static_cast<unsigned long long>(r.id()),
                static_cast<unsigned long long>(r.ops()),
                static_cast<unsigned long long>(r.bytes()),
                static_cast<long long>(r.in_flight()),
                static_cast<unsigned long long>(r.errors()),
                Micros(r.p50_ns()).c_str(), Micros(r.p99_ns()).c_str(),
                Micros(r.p999_ns()).c_str(), r.text().c_str());
  }
  std::printf("version %llu, in flight %lld, parked %llu\n",
              static_cast<unsigned long long>(resp.version()),
              static_cast<long long>(resp.in_flight()),
              static_cast<unsigned long long>(resp.parked()));
  if (!resp.unmatched_ops().empty()) {
    std::printf("unmatched (default route):");
    for (const auto& [op, n] : SortedUnmatched(resp)) {
      std::printf(" %s %llu", op.c_str(), static_cast<unsigned long long>(n));
    }
    std::printf("\n");
  }
  for (const auto& [name, value] : SortedGauges(resp)) {
    std::printf("%s %lld\n", name.c_str(), static_cast<long long>(value));
  }
  return 0;
}

int Quiesce(const std::string& host, const std::string& pattern,
            const std::string& on) {
  sroute::proto::ControlRequest req;
  req.mutable_quiesce()->set_pattern(pattern);
  req.mutable_quiesce()->set_on(on == "on");
  sroute::proto::ControlResponse resp;
  int code = 0;
  return Call(host, req, kCallTimeout, &resp, &code) ? 0 : code;
}

// Clears the fences of `clear`, then lists the host's fenced files.
int Fences(const std::string& host, const std::vector<std::string>& clear) {
  sroute::proto::ControlRequest req;
  for (const std::string& f : clear) req.mutable_fences()->add_clear(f);
  req.mutable_fences();
  sroute::proto::ControlResponse resp;
  int code = 0;
  if (!Call(host, req, kCallTimeout, &resp, &code)) return code;
  for (const sroute::proto::FenceRecord& f : resp.fences()) {
    std::printf("%s: %s\n", f.file().c_str(), f.why().c_str());
  }
  return 0;
}

int Drain(const std::string& host, const std::string& pattern,
          uint32_t timeout_ms) {
  sroute::proto::ControlRequest req;
  req.mutable_drain()->set_pattern(pattern);
  req.mutable_drain()->set_timeout_ms(timeout_ms);
  sroute::proto::ControlResponse resp;
  int code = 0;
  return Call(host, req,
              absl::Milliseconds(timeout_ms == 0 ? 30000 : timeout_ms) +
                  kCallTimeout,
              &resp, &code)
             ? 0
             : code;
}

int Records(const std::string& host, const std::string& sswitch, bool json) {
  if (!sroute::IsServerAddress(host)) {
    return Fail("records live on storage servers: give --host HOST:PORT");
  }
  std::vector<sroute::proto::DelegateRecord> all;
  uint64_t after = 0;
  while (true) {
    sroute::proto::RpcRequest req;
    req.mutable_list_records()->set_sswitch(sswitch);
    req.mutable_list_records()->set_after(after);
    req.mutable_list_records()->set_limit(sswitch.empty() ? 0 : 10000);
    auto reply = CallServer(host, req, kCallTimeout);
    if (!reply.ok()) {
      return Fail(std::string(reply.status().message()),
                  absl::IsUnavailable(reply.status()) ? 2 : 1);
    }
    for (auto& r : *reply->mutable_records()->mutable_records()) {
      after = r.seq();
      all.push_back(std::move(r));
    }
    if (!reply->records().more()) break;
  }
  if (json) {
    std::cout << "[";
    for (size_t i = 0; i < all.size(); ++i) {
      const auto& r = all[i];
      std::cout << (i == 0 ? "\n  " : ",\n  ")
                << "{\"sswitch\": " << JsonString(r.sswitch())
                << ", \"seq\": " << r.seq()
                << ", \"rule\": " << JsonString(r.rule())
                << ", \"anchor\": " << JsonString(r.anchor()) << "}";
    }
    std::cout << (all.empty() ? "]\n" : "\n]\n");
    return 0;
  }
  for (const auto& r : all) {
    std::cout << r.sswitch() << " " << r.seq() << " " << r.rule() << "\n";
  }
  return 0;
}

// --- Controller commands (--controller ADDR).

std::string g_controller;  // --controller

// Prints the error of a failed controller call and returns the exit code:
// 2 when the controller could not be reached, 1 when it said no. Both come
// back from ControllerClient as a status; only the RPC channel's own errors
// (no connection, connection lost, no reply in time) name the controller's
// address, the controller's answers never do.
int ControllerFail(const absl::Status& s) {
  const bool unreachable =
      (absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s) ||
       absl::IsCancelled(s)) &&
      s.message().find(g_controller) != absl::string_view::npos;
  return Fail(std::string(s.message()), unreachable ? 2 : 1);
}

// Connects to the controller; on failure prints why and returns the exit
// code.
int ConnectController(std::unique_ptr<sroute::ControllerClient>* client) {
  if (g_secret_file.empty()) {
    return Fail(
        "the controller needs the cluster secret: give --secret-file FILE");
  }
  auto secret = sroute::LoadSecretFile(g_secret_file);
  if (!secret.ok()) return Fail(std::string(secret.status().message()));
  sroute::ControllerClient::Options o;
  o.address = g_controller;
  o.secret = *std::move(secret);
  o.name = "sroutectl";  // the owner of the rules it installs by default
  auto c = sroute::ControllerClient::Connect(std::move(o));
  if (!c.ok()) return ControllerFail(c.status());
  *client = *std::move(c);
  return 0;
}

// The sSwitch a command acts on: `host`, which must be registered at the
// controller, or the only one registered when `host` is empty (so a
// one-host cluster needs no --host). Returns the exit code.
int ResolveSSwitch(sroute::ControllerClient& client, const std::string& host,
                   std::string* sswitch) {
  auto hosts = client.ListHosts();
  if (!hosts.ok()) return ControllerFail(hosts.status());
  std::vector<std::string> names;
  for (const sroute::proto::HostStatus& h : hosts->hosts()) {
    names.push_back(h.host().sswitch());
  }
  if (!host.empty()) {
    if (std::find(names.begin(), names.end(), host) == names.end()) {
      return Fail("no sSwitch '" + host +
                  "' is registered at the controller (see sroutectl hosts)");
    }
    *sswitch = host;
    return 0;
  }
  if (names.size() == 1) {
    *sswitch = names[0];
    return 0;
  }
  if (names.empty()) return Fail("no host is registered at the controller");
  std::string list;
  for (const std::string& n : names) list += (list.empty() ? "" : ", ") + n;
  return Fail(std::to_string(names.size()) + " sSwitches are registered (" +
              list + "): name one with --host SSWITCH");
}

// Prints rows as columns two spaces apart, each padded to its widest cell
// but the last (rule texts and endpoint lists run long).
void PrintTable(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width;
  for (const auto& row : rows) {
    for (size_t i = 0; i < row.size(); ++i) {
      if (width.size() <= i) width.push_back(0);
      width[i] = std::max(width[i], row[i].size());
    }
  }
  for (const auto& row : rows) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) {
        line += std::string(width[i] - row[i].size() + 2, ' ');
      }
    }
    std::cout << line << "\n";
  }
}

std::string SecondsAgo(int64_t ms) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1fs ago", static_cast<double>(ms) / 1e3);
  return buf;
}

// A host with no session at the controller (it has not registered since
// the controller started) is reported disconnected, last seen 0 ms ago; a
// session is disconnected only after seconds of silence.
bool NeverSeen(const sroute::proto::HostStatus& h) {
  return !h.connected() && h.last_seen_ms_ago() == 0;
}

int CtlHosts(bool json) {
  std::unique_ptr<sroute::ControllerClient> client;
  if (int code = ConnectController(&client); code != 0) return code;
  auto hosts = client->ListHosts();
  if (!hosts.ok()) return ControllerFail(hosts.status());
  if (json) {
    std::cout << "[";
    bool first = true;
    for (const sroute::proto::HostStatus& h : hosts->hosts()) {
      std::cout << (first ? "\n  " : ",\n  ")
                << "{\"sswitch\": " << JsonString(h.host().sswitch())
                << ", \"role\": " << JsonString(h.host().role())
                << ", \"address\": " << JsonString(h.host().address())
                << ", \"connected\": " << (h.connected() ? "true" : "false")
                << ", \"last_seen_ms_ago\": "
                << (NeverSeen(h) ? "null"
                                 : std::to_string(h.last_seen_ms_ago()))
                << ", \"version\": " << h.version()
                << ", \"rules\": " << h.rules() << ", \"endpoints\": [";
      for (int i = 0; i < h.host().endpoints_size(); ++i) {
        const sroute::proto::EndpointInfo& e = h.host().endpoints(i);
        std::cout << (i == 0 ? "" : ", ")
                  << "{\"name\": " << JsonString(e.name())
                  << ", \"address\": " << JsonString(e.address())
                  << ", \"kind\": " << JsonString(e.kind()) << "}";
      }
      std::cout << "], \"stages\": [";
      for (int i = 0; i < h.host().stages_size(); ++i) {
        std::cout << (i == 0 ? "" : ", ") << JsonString(h.host().stages(i));
      }
      std::cout << "]}";
      first = false;
    }
    std::cout << (first ? "]\n" : "\n]\n");
    return 0;
  }
  std::vector<std::vector<std::string>> rows = {
      {"SSWITCH", "ROLE", "ADDRESS", "STATE", "VERSION", "RULES", "ENDPOINTS"}};
  for (const sroute::proto::HostStatus& h : hosts->hosts()) {
    std::string endpoints;
    for (const sroute::proto::EndpointInfo& e : h.host().endpoints()) {
      endpoints += (endpoints.empty() ? "" : " ") + e.name() + "=" +
                   e.address() + "/" + e.kind();
    }
    std::string state =
        h.connected() ? "connected, seen " + SecondsAgo(h.last_seen_ms_ago())
        : NeverSeen(h)
            ? "disconnected, not seen since the controller started"
            : "disconnected, seen " + SecondsAgo(h.last_seen_ms_ago());
    rows.push_back({h.host().sswitch(), h.host().role(),
                    h.host().address().empty() ? "-" : h.host().address(),
                    std::move(state), std::to_string(h.version()),
                    std::to_string(h.rules()), std::move(endpoints)});
  }
  PrintTable(rows);
  return 0;
}

// One rule with its counters as a JSON object.
std::string AdminRuleJson(const sroute::proto::AdminRule& a) {
  std::ostringstream o;
  o << "{\"cid\": " << a.rule().cid()
    << ", \"sswitch\": " << JsonString(a.sswitch())
    << ", \"owner\": " << JsonString(a.rule().owner())
    << ", \"rule\": " << JsonString(a.rule().text())
    << ", \"reads\": " << a.reads() << ", \"writes\": " << a.writes()
    << ", \"others\": " << a.others() << ", \"read_bytes\": " << a.read_bytes()
    << ", \"write_bytes\": " << a.write_bytes()
    << ", \"in_flight\": " << a.in_flight() << ", \"errors\": " << a.errors()
    << ", \"p50_us\": " << a.p50_us() << ", \"p99_us\": " << a.p99_us() << "}";
  return o.str();
}

void PrintAdminRulesJson(const sroute::proto::RuleList& list) {
  std::cout << "[";
  for (int i = 0; i < list.rules_size(); ++i) {
    std::cout << (i == 0 ? "\n  " : ",\n  ") << AdminRuleJson(list.rules(i));
  }
  std::cout << (list.rules_size() > 0 ? "\n]" : "]");
}

// Rules as a table; `with_owner` for the managed-rule listing (stats show
// counters only).
void PrintAdminRules(const sroute::proto::RuleList& list, bool with_owner) {
  std::vector<std::vector<std::string>> rows;
  rows.push_back({"CID", "SSWITCH"});
  if (with_owner) rows.back().push_back("OWNER");
  for (const char* h :
       {"READS", "WRITES", "OTHERS", "READ_BYTES", "WRITE_BYTES", "IN_FLIGHT",
        "ERRORS", "P50_US", "P99_US", "RULE"}) {
    rows.back().push_back(h);
  }
  for (const sroute::proto::AdminRule& a : list.rules()) {
    rows.push_back({std::to_string(a.rule().cid()), a.sswitch()});
    if (with_owner) rows.back().push_back(a.rule().owner());
    for (uint64_t n :
         {a.reads(), a.writes(), a.others(), a.read_bytes(), a.write_bytes()}) {
      rows.back().push_back(std::to_string(n));
    }
    rows.back().push_back(std::to_string(a.in_flight()));
    for (uint64_t n : {a.errors(), a.p50_us(), a.p99_us()}) {
      rows.back().push_back(std::to_string(n));
    }
    // Counters of a rule the host made itself (its rules file, a
    // delegate) come without its text: the controller does not manage it.
    rows.back().push_back(a.rule().cid() == 0 && a.rule().text().empty()
                              ? "(a rule of the host's own)"
                              : a.rule().text());
  }
  PrintTable(rows);
}

int CtlRulesLs(const std::string& host, bool json) {
  std::unique_ptr<sroute::ControllerClient> client;
  if (int code = ConnectController(&client); code != 0) return code;
  std::string sswitch;
  if (!host.empty()) {
    if (int code = ResolveSSwitch(*client, host, &sswitch); code != 0) {
      return code;
    }
  }
  auto rules = client->ListRules(sswitch);
  if (!rules.ok()) return ControllerFail(rules.status());
  if (json) {
    PrintAdminRulesJson(*rules);
    std::cout << "\n";
  } else {
    PrintAdminRules(*rules, /*with_owner=*/true);
  }
  return 0;
}

// Installs `rules` on one sSwitch in one consistent update; prints their
// cids.
int CtlRulesAdd(const std::string& host, const std::vector<std::string>& rules,
                const std::string& owner) {
  std::unique_ptr<sroute::ControllerClient> client;
  if (int code = ConnectController(&client); code != 0) return code;
  std::string sswitch;
  if (int code = ResolveSSwitch(*client, host, &sswitch); code != 0) {
    return code;
  }
  sroute::UpdateSpec spec;
  spec.changes.push_back(sroute::RuleChanges{sswitch, rules, {}});
  spec.owner = owner;
  auto r = client->Update(spec);
  if (!r.ok()) return ControllerFail(r.status());
  for (uint64_t cid : r->cids) std::cout << cid << "\n";
  return 0;
}

int CtlRulesLoad(const std::string& host, const std::string& path,
                 const std::string& owner) {
  std::vector<std::string> rules;
  int code = 0;
  if (!ReadRulesFile(path, &rules, &code)) return code;
  return CtlRulesAdd(host, rules, owner);
}

// Deletes rules by cid, wherever they are, in one consistent update.
int CtlRulesRm(const std::vector<std::string>& args) {
  std::vector<uint64_t> cids;
  for (const std::string& a : args) {
    uint64_t cid = 0;
    const auto [end, ec] = std::from_chars(a.data(), a.data() + a.size(), cid);
    if (a.empty() || ec != std::errc() || end != a.data() + a.size()) {
      return Fail("'" + a + "' is not a rule's cid (see sroutectl rules ls)");
    }
    cids.push_back(cid);
  }
  std::unique_ptr<sroute::ControllerClient> client;
  if (int code = ConnectController(&client); code != 0) return code;
  auto rules = client->ListRules("");
  if (!rules.ok()) return ControllerFail(rules.status());
  sroute::UpdateSpec spec;
  for (uint64_t cid : cids) {
    auto rule = std::find_if(rules->rules().begin(), rules->rules().end(),
                             [&](const sroute::proto::AdminRule& a) {
                               return a.rule().cid() == cid;
                             });
    if (rule == rules->rules().end()) {
      return Fail("no rule with cid " + std::to_string(cid) +
                  " at the controller; nothing removed");
    }
    auto change = std::find_if(spec.changes.begin(), spec.changes.end(),
                               [&](const sroute::RuleChanges& c) {
                                 return c.sswitch == rule->sswitch();
                               });
    if (change == spec.changes.end()) {
      spec.changes.push_back(sroute::RuleChanges{rule->sswitch(), {}, {}});
      change = spec.changes.end() - 1;
    }
    change->remove.push_back(cid);
  }
  auto r = client->Update(spec);
  return r.ok() ? 0 : ControllerFail(r.status());
}

int CtlStats(bool json) {
  std::unique_ptr<sroute::ControllerClient> client;
  if (int code = ConnectController(&client); code != 0) return code;
  auto hosts = client->ListHosts();
  if (!hosts.ok()) return ControllerFail(hosts.status());
  auto rules = client->IntervalStats();
  if (!rules.ok()) return ControllerFail(rules.status());
  if (json) {
    std::cout << "{\"hosts\": [";
    bool first = true;
    for (const sroute::proto::HostStatus& h : hosts->hosts()) {
      std::cout << (first ? "\n  " : ",\n  ")
                << "{\"sswitch\": " << JsonString(h.host().sswitch())
                << ", \"connected\": " << (h.connected() ? "true" : "false")
                << ", \"version\": " << h.version() << "}";
      first = false;
    }
    std::cout << (first ? "],\n\"rules\": " : "\n],\n\"rules\": ");
    PrintAdminRulesJson(*rules);
    std::cout << "}\n";
    return 0;
  }
  std::vector<std::vector<std::string>> rows = {
      {"SSWITCH", "STATE", "VERSION"}};
  for (const sroute::proto::HostStatus& h : hosts->hosts()) {
    rows.push_back({h.host().sswitch(),
                    h.connected() ? "connected" : "disconnected",
                    std::to_string(h.version())});
  }
  PrintTable(rows);
  std::cout << "\n";
  if (rules->rules_size() == 0) {
    std::cout << "no rule saw IO in the last interval\n";
  } else {
    PrintAdminRules(*rules, /*with_owner=*/false);
  }
  return 0;
}

int CtlQuiesce(const std::string& host, const std::string& pattern,
               const std::string& on) {
  std::unique_ptr<sroute::ControllerClient> client;
  if (int code = ConnectController(&client); code != 0) return code;
  std::string sswitch;
  if (int code = ResolveSSwitch(*client, host, &sswitch); code != 0) {
    return code;
  }
  absl::Status s = client->Quiesce(sswitch, pattern, on == "on");
  return s.ok() ? 0 : ControllerFail(s);
}

int CtlDrain(const std::string& host, const std::string& pattern,
             uint32_t timeout_ms) {
  std::unique_ptr<sroute::ControllerClient> client;
  if (int code = ConnectController(&client); code != 0) return code;
  std::string sswitch;
  if (int code = ResolveSSwitch(*client, host, &sswitch); code != 0) {
    return code;
  }
  absl::Status s =
      client->Drain(sswitch, pattern, absl::Milliseconds(timeout_ms));
  return s.ok() ? 0 : ControllerFail(s);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"sroutectl: manage sroute rules"};
  app.require_subcommand(1);
  std::string host;
  app.add_option("--host", host,
                 "the host to control: unix:PATH (a FUSE host's control "
                 "socket) or HOST:PORT (a storage server); with --controller, "
                 "an sSwitch registered at the controller");
  app.add_option("--controller", g_controller,
                 "work through the controller at HOST:PORT");
  app.add_option("--secret-file", g_secret_file,
                 "the cluster secret, for storage servers and the controller");
  app.fallthrough();
  CLI::App* rules = app.add_subcommand("rules", "rule files and rule tables");
  rules->require_subcommand(1);

  std::vector<std::string> check_files;
  CLI::App* check = rules->add_subcommand(
      "check", "parse rule files; print OK: N rules or FILE:LINE:COL errors");
  check->add_option("FILE", check_files, "rule files ('-' for stdin)")
      ->required();

  std::string fmt_file;
  CLI::App* fmt =
      rules->add_subcommand("fmt", "print a rule file in canonical form");
  fmt->add_option("FILE", fmt_file, "rule file ('-' for stdin)")->required();

  bool ls_json = false;
  CLI::App* ls = rules->add_subcommand(
      "ls", "list the host's rules (the controller's: every sSwitch's)");
  ls->add_flag("--json", ls_json, "print a JSON array of rule records");

  std::vector<std::string> add_rules;
  std::string owner;
  CLI::App* add = rules->add_subcommand(
      "add", "install rules (all or nothing); prints their ids");
  add->add_option("RULE", add_rules, "rules, one per argument")->required();
  add->add_option("--owner", owner, "owner recorded with the rules");

  std::string load_file;
  CLI::App* load = rules->add_subcommand(
      "load", "install every rule of a rules file (all or nothing)");
  load->add_option("FILE", load_file, "rule file ('-' for stdin)")->required();
  load->add_option("--owner", owner, "owner recorded with the rules");

  std::vector<std::string> rm_args;
  CLI::App* rm = rules->add_subcommand(
      "rm",
      "delete rules by id, or every rule with a pattern <...> (with "
      "--controller: by cid)");
  rm->add_option("ID|PATTERN", rm_args, "rule ids or patterns")->required();

  bool stats_json = false;
  CLI::App* stats = app.add_subcommand("stats", "per-rule counters");
  stats->add_flag("--json", stats_json, "print a JSON array of rule records");

  std::string q_pattern, q_on;
  CLI::App* quiesce =
      app.add_subcommand("quiesce", "park (on) or release (off) matching IOs");
  quiesce->add_option("PATTERN", q_pattern, "header pattern <...>")->required();
  quiesce->add_option("STATE", q_on, "on or off")
      ->required()
      ->check(CLI::IsMember({"on", "off"}));

  std::string d_pattern;
  uint32_t d_timeout_ms = 10000;
  CLI::App* drain = app.add_subcommand(
      "drain", "wait until matching IOs in flight now have completed");
  drain->add_option("PATTERN", d_pattern, "header pattern <...>")->required();
  drain->add_option("--timeout-ms", d_timeout_ms, "give up after this long");

  std::vector<std::string> fence_clear;
  CLI::App* fences = app.add_subcommand(
      "fences",
      "files fenced after a scatter failed on some of its targets only "
      "(their IOs fail until cleared)");
  fences->add_option("--clear", fence_clear,
                     "clear the fence of this file (//HOST/PATH) first, once "
                     "its copies are identical again");

  std::string rec_sswitch;
  bool rec_json = false;
  CLI::App* records = app.add_subcommand(
      "records", "a storage server's delegate-rule records, oldest first");
  records->add_option("--sswitch", rec_sswitch,
                      "only the records of this sSwitch");
  records->add_flag("--json", rec_json, "print a JSON array");

  bool hosts_json = false;
  CLI::App* hosts = app.add_subcommand(
      "hosts", "the hosts registered at the controller (--controller)");
  hosts->add_flag("--json", hosts_json, "print a JSON array");

  CLI11_PARSE(app, argc, argv);
  if (check->parsed()) return Check(check_files);
  if (fmt->parsed()) return Fmt(fmt_file);
  if (!g_controller.empty()) {
    if (hosts->parsed()) return CtlHosts(hosts_json);
    if (ls->parsed()) return CtlRulesLs(host, ls_json);
    if (add->parsed()) return CtlRulesAdd(host, add_rules, owner);
    if (load->parsed()) return CtlRulesLoad(host, load_file, owner);
    if (rm->parsed()) return CtlRulesRm(rm_args);
    if (stats->parsed()) return CtlStats(stats_json);
    if (quiesce->parsed()) return CtlQuiesce(host, q_pattern, q_on);
    if (drain->parsed()) return CtlDrain(host, d_pattern, d_timeout_ms);
    if (fences->parsed()) {
      return Fail("fences are a host's own: give --host, not --controller");
    }
    // What is left, records, is a storage server's own.
    return Fail(
        "records live on storage servers: give --host HOST:PORT, not "
        "--controller");
  }
  if (hosts->parsed()) {
    return Fail("hosts asks the controller: give --controller HOST:PORT");
  }
  if (records->parsed()) return Records(host, rec_sswitch, rec_json);
  if (fences->parsed()) return Fences(host, fence_clear);
  if (ls->parsed()) return RulesLs(host, ls_json);
  if (add->parsed()) return RulesAdd(host, add_rules, owner);
  if (load->parsed()) return RulesLoad(host, load_file, owner);
  if (rm->parsed()) return RulesRm(host, rm_args);
  if (stats->parsed()) return Stats(host, stats_json);
  if (quiesce->parsed()) return Quiesce(host, q_pattern, q_on);
  if (drain->parsed()) return Drain(host, d_pattern, d_timeout_ms);
  return 2;
}
