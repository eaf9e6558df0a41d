// sroutectl: the admin client. `rules check` and `rules fmt` work on rule
// files offline; with `--host unix:PATH` (a FUSE host's control socket) or
// `--host HOST:PORT --secret-file F` (a storage server) it talks to one
// host's control port: rules ls/add/rm, stats, quiesce, drain, and a
// server's delegate-rule records.
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

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"sroutectl: manage sroute rules"};
  app.require_subcommand(1);
  std::string host;
  app.add_option("--host", host,
                 "the host to control: unix:PATH (a FUSE host's control "
                 "socket) or HOST:PORT (a storage server)");
  app.add_option("--secret-file", g_secret_file,
                 "the cluster secret, for storage servers");
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
  CLI::App* ls = rules->add_subcommand("ls", "list the host's rules");
  ls->add_flag("--json", ls_json, "print a JSON array of rule records");

  std::vector<std::string> add_rules;
  std::string owner;
  CLI::App* add = rules->add_subcommand(
      "add", "install rules (all or nothing); prints their ids");
  add->add_option("RULE", add_rules, "rules, one per argument")->required();
  add->add_option("--owner", owner, "owner recorded with the rules");

  std::vector<std::string> rm_args;
  CLI::App* rm = rules->add_subcommand(
      "rm", "delete rules by id, or every rule with a pattern <...>");
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

  std::string rec_sswitch;
  bool rec_json = false;
  CLI::App* records = app.add_subcommand(
      "records", "a storage server's delegate-rule records, oldest first");
  records->add_option("--sswitch", rec_sswitch,
                      "only the records of this sSwitch");
  records->add_flag("--json", rec_json, "print a JSON array");

  CLI11_PARSE(app, argc, argv);
  if (records->parsed()) return Records(host, rec_sswitch, rec_json);
  if (check->parsed()) return Check(check_files);
  if (fmt->parsed()) return Fmt(fmt_file);
  if (ls->parsed()) return RulesLs(host, ls_json);
  if (add->parsed()) return RulesAdd(host, add_rules, owner);
  if (rm->parsed()) return RulesRm(host, rm_args);
  if (stats->parsed()) return Stats(host, stats_json);
  if (quiesce->parsed()) return Quiesce(host, q_pattern, q_on);
  if (drain->parsed()) return Drain(host, d_pattern, d_timeout_ms);
  return 2;
}
