// SPDX-License-Identifier: Apache-2.0
#include "tools/sroutectl/commands.h"

#include <algorithm>
#include <filesystem>
#include <iostream>

#include "check/checker.h"
#include "check/report_proto.h"
#include "endpoints/remote_endpoint.h"
#include "host/config.h"
#include "rules/parser.h"
#include "tools/sroutectl/format.h"
#include "tools/sroutectl/json_output.h"
#include "tools/sroutectl/profile.h"
#include "tools/sroutectl/replicas.h"
#include "util/strings.h"

namespace sroute::ctl {
namespace {

// Prints why a command failed; returns its exit code.
int Fail(const absl::Status& s) {
  std::cerr << "sroutectl: " << s.message() << "\n";
  return absl::IsUnavailable(s) ? 2 : 1;
}

int Done(const absl::Status& s) { return s.ok() ? 0 : Fail(s); }

int Show(const absl::StatusOr<Report>& report, bool json) {
  if (!report.ok()) return Fail(report.status());
  std::cout << (json ? report->json : report->text);
  return 0;
}

// New rules' ids, one a line.
int ShowIds(const absl::StatusOr<std::vector<uint64_t>>& ids) {
  if (!ids.ok()) return Fail(ids.status());
  for (uint64_t id : *ids) std::cout << id << "\n";
  return 0;
}

// Prints every parse error as FILE:LINE:COL: reason; returns the count.
size_t PrintErrors(const std::string& path, const ParsedRules& parsed) {
  for (const ParseError& e : parsed.errors) {
    std::cerr << path << ":" << e.line << ":" << e.column << ": " << e.reason
              << "\n";
  }
  return parsed.errors.size();
}

// replicas add|rm|set-primary NAME MEMBER
void MemberArgs(CLI::App& c, Args& a) {
  c.add_option("NAME", a.name, "the replica set (its stage's name)")
      ->required();
  c.add_option("MEMBER", a.file, "an endpoint of the stage's host")->required();
  c.add_option("--timeout-ms", a.timeout_ms,
               "give up (and change nothing) if IOs are still inside the "
               "stage after this long");
}

std::string Plural(size_t n, const char* what) {
  return std::to_string(n) + " " + what + (n == 1 ? "" : "s");
}

// `rules check` offline: each file is one sSwitch's table (its endpoints
// and stages unknown, so they are not checked). With `json`, one CtlCheck
// of every file checked, as the live check's of every sSwitch.
int CheckFiles(const std::vector<std::string>& files, bool deep, bool json) {
  int status = 0;
  proto::CtlCheck all;
  for (const std::string& path : files) {
    std::string text;
    if (!ReadInput(path, &text)) {
      status = 2;
      continue;
    }
    const ParsedRules parsed = ParseRules(text);
    if (PrintErrors(path, parsed) > 0) {
      status = std::max(status, 1);
      continue;
    }
    // Named as its file, less directory and extension.
    check::SwitchView view;
    view.name = std::filesystem::path(path).stem().string();
    view.rules = check::TableRulesOf(parsed, path);
    const check::Report report =
        check::CheckTables({std::move(view)}, {.deep = deep});
    if (json) {
      const proto::CtlCheck one = CtlCheckOf(check::ToProto(report));
      all.set_report(all.report() + one.report());
      all.set_errors(all.errors() + one.errors());
      all.set_warnings(all.warnings() + one.warnings());
      all.mutable_findings()->MergeFrom(one.findings());
    } else {
      std::cout << report.Text(/*summary=*/false) << path << ": "
                << Plural(parsed.rules.size(), "rule") << ", "
                << Plural(report.errors(), "error") << ", "
                << Plural(report.warnings(), "warning") << "\n";
    }
    if (report.errors() > 0) status = std::max(status, 1);
  }
  if (json) std::cout << ToJson(all);
  return status;
}

// Prints a report of one sSwitch's check: its text and a summary line
// naming `what`, or (json) the CtlCheck. Returns the exit code.
int PrintReport(const check::Report& report, size_t rules,
                const std::string& what, bool json) {
  if (json) {
    std::cout << ToJson(CtlCheckOf(check::ToProto(report)));
  } else {
    std::cout << report.Text(/*summary=*/false) << what << ": "
              << Plural(rules, "rule") << ", "
              << Plural(report.errors(), "error") << ", "
              << Plural(report.warnings(), "warning") << "\n";
  }
  return report.errors() > 0 ? 1 : 0;
}

// `rules check` offline for one host whose endpoints and stages are known:
// those of its configuration (--config: its home, endpoints, stages and
// its own rules, which come first) and those named (--endpoints,
// --stages). FILEs' rules follow, as the host would have them in its
// table; a target the host does not have is then a black hole.
int CheckForHost(const Args& a) {
  check::SwitchView view;
  view.topology_known = true;
  std::vector<std::pair<std::string, std::string>> texts;  // origin, text
  if (!a.config.empty()) {
    auto config = LoadHostConfig(a.config);
    if (!config.ok()) return Fail(config.status());
    const HostKind kind = config->root().empty() && config->listen().empty()
                              ? HostKind::kFuse
                              : HostKind::kServer;
    if (absl::Status s = CheckHostConfig(*config, kind, a.config); !s.ok()) {
      return Fail(s);
    }
    view.name = config->name().empty() ? HostKindName(kind) : config->name();
    // The home: a volume's is "home", a server's is named as the server.
    const std::string home =
        kind == HostKind::kFuse ? config->backing() : config->root();
    if (!home.empty()) {
      const bool remote = IsServerAddress(home);
      view.endpoints.push_back(
          {kind == HostKind::kFuse ? "home" : config->name(),
           remote ? "server" : "dir", remote ? home : ""});
    }
    for (const auto& e : config->endpoint()) {
      view.endpoints.push_back({e.name(),
                                !e.server().empty()  ? "server"
                                : !e.flash().empty() ? "flash"
                                                     : "dir",
                                e.server()});
    }
    for (const auto& st : config->stage()) view.stages.push_back(st.name());
    if (!config->rules_file().empty()) {
      std::string text;
      if (!ReadInput(config->rules_file(), &text)) return 2;
      texts.emplace_back(config->rules_file(), std::move(text));
    }
    for (int i = 0; i < config->rule_size(); ++i) {
      texts.emplace_back(StrCat(a.config, ": rule ", i + 1), config->rule(i));
    }
  }
  if (view.name.empty()) view.name = "host";
  for (const std::string& e : a.endpoints)
    view.endpoints.push_back({e, "", ""});
  for (const std::string& st : a.stages) view.stages.push_back(st);
  for (const std::string& path : a.items) {
    std::string text;
    if (!ReadInput(path, &text)) return 2;
    texts.emplace_back(path, std::move(text));
  }
  int status = 0;
  size_t count = 0;
  for (const auto& [origin, text] : texts) {
    const ParsedRules parsed = ParseRules(text);
    if (PrintErrors(origin, parsed) > 0) {
      status = 1;
      continue;
    }
    // In the host's order: after every rule before them.
    for (check::TableRule& t : check::TableRulesOf(parsed, origin)) {
      t.order.seq = t.id = ++count;
      view.rules.push_back(std::move(t));
    }
  }
  if (status != 0) return status;
  const std::string what = view.name;
  const check::Report report =
      check::CheckTables({std::move(view)}, {.deep = a.deep});
  return PrintReport(report, count, what, a.json);
}

// `rules check` of a live table: the host's, or the cluster's at the
// controller; FILEs' rules are checked as if inserted.
int Check(const Args& a, ControlTarget& target) {
  const bool offline_host =
      !a.config.empty() || !a.endpoints.empty() || !a.stages.empty();
  if (a.host.empty() && a.controller.empty()) {
    if (offline_host) return CheckForHost(a);
    if (a.items.empty()) {
      return Fail(absl::InvalidArgumentError(
          "name rule files (with --config, or --endpoints and --stages, to "
          "know the host's), or a live table with --host or --controller"));
    }
    return CheckFiles(a.items, a.deep, a.json);
  }
  if (offline_host) {
    return Fail(absl::InvalidArgumentError(
        "--config, --endpoints and --stages describe a host offline; a live "
        "check (--host, --controller) asks the host itself"));
  }
  std::vector<std::string> add;
  for (const std::string& path : a.items) {
    std::string text;
    if (!ReadInput(path, &text)) return 2;
    const ParsedRules parsed = ParseRules(text);
    if (PrintErrors(path, parsed) > 0) return 1;
    for (const Rule& r : parsed.rules) add.push_back(FormatRule(r));
  }
  auto r = target.CheckRules(add, a.deep);
  if (!r.ok()) return Fail(r.status());
  if (a.json) {
    std::cout << ToJson(CtlCheckOf(*r));
  } else {
    std::cout << r->report();
  }
  return r->errors() > 0 ? 1 : 0;
}

int Fmt(const std::string& path) {
  std::string text;
  if (!ReadInput(path, &text)) return 2;
  const ParsedRules parsed = ParseRules(text);
  if (PrintErrors(path, parsed) > 0) return 1;
  for (const Rule& r : parsed.rules) std::cout << FormatRule(r) << "\n";
  return 0;
}

// `rules load`: installs the rules of the file `path`, all or none. Its
// parse errors are printed as `rules check` prints them, and nothing is
// sent.
int Load(const std::string& path, const std::string& owner, bool force,
         ControlTarget& target) {
  std::string text;
  if (!ReadInput(path, &text)) return 1;
  const ParsedRules parsed = ParseRules(text);
  if (PrintErrors(path, parsed) > 0) {
    return Fail(absl::InvalidArgumentError(path + ": nothing installed"));
  }
  if (parsed.rules.empty()) {
    return Fail(absl::InvalidArgumentError(path + " holds no rules"));
  }
  return ShowIds(target.AddRules(parsed.rules, owner, force));
}

// `rules add`: each argument one rule, read here; a malformed one is named
// ("rule 2: 14: ...") and nothing is sent.
int Add(const std::vector<std::string>& texts, const std::string& owner,
        bool force, ControlTarget& target) {
  std::vector<Rule> rules;
  for (size_t i = 0; i < texts.size(); ++i) {
    absl::StatusOr<Rule> rule = ParseRule(texts[i]);
    if (!rule.ok()) {
      return Fail(absl::InvalidArgumentError(
          texts.size() > 1
              ? StrCat("rule ", i + 1, ": ", rule.status().message())
              : std::string(rule.status().message())));
    }
    rules.push_back(*std::move(rule));
  }
  return ShowIds(target.AddRules(rules, owner, force));
}

// --json: print `message` (docs/reference/json.md) instead of text.
void JsonFlag(CLI::App& c, Args& a, const std::string& message) {
  c.add_flag("--json", a.json, "print proto " + message + " as JSON");
}

}  // namespace

const std::vector<Command>& Commands() {
  static const std::vector<Command> commands = {
      {.path = "rules", .help = "rule files and rule tables"},
      {.path = "rules check",
       .help = "check rules: shadowed, black holes, loops, hazards, each "
               "with a witness header (offline: FILEs, each alone, or one "
               "host's with --config or --endpoints/--stages; with --host or "
               "--controller: the live tables, FILEs as if added); exit 1 "
               "on errors",
       .setup =
           [](CLI::App& c, Args& a) {
             c.add_option("FILE", a.items, "rule files ('-' for stdin)");
             c.add_option("--config", a.config,
                          "offline: the host's configuration (HostConfig): "
                          "its endpoints, stages and rules are known, and "
                          "FILEs follow its rules");
             c.add_option("--endpoints", a.endpoints,
                          "offline: the host's endpoints, comma-separated")
                 ->delimiter(',')
                 ->allow_extra_args(false);
             c.add_option("--stages", a.stages,
                          "offline: the host's stages, comma-separated")
                 ->delimiter(',')
                 ->allow_extra_args(false);
             c.add_flag("--deep", a.deep,
                        "also re-route every witness through the table "
                        "(a self-check of the checker)");
             JsonFlag(c, a, "CtlCheck");
           },
       .run = [](const Args& a, ControlTarget& t) { return Check(a, t); }},
      {.path = "rules fmt",
       .help = "print a rule file in canonical form",
       .setup =
           [](CLI::App& c, Args& a) {
             c.add_option("FILE", a.file, "rule file ('-' for stdin)")
                 ->required();
           },
       .run = [](const Args& a, ControlTarget&) { return Fmt(a.file); }},
      {.path = "rules ls",
       .help = "list the host's rules (the controller's: every sSwitch's)",
       .setup = [](CLI::App& c, Args& a) { JsonFlag(c, a, "CtlRules"); },
       .run = [](const Args& a,
                 ControlTarget& t) { return Show(t.ListRules(), a.json); }},
      {.path = "rules add",
       .help = "install rules (all or nothing); prints their ids",
       .setup =
           [](CLI::App& c, Args& a) {
             c.add_option("RULE", a.items, "rules, one per argument")
                 ->required();
             c.add_option("--owner", a.owner, "owner recorded with the rules");
             c.add_flag("--force", a.force,
                        "--controller: install even if the rule checker "
                        "finds errors");
           },
       .run =
           [](const Args& a, ControlTarget& t) {
             return Add(a.items, a.owner, a.force, t);
           }},
      {.path = "rules load",
       .help = "install every rule of a rules file (all or nothing)",
       .setup =
           [](CLI::App& c, Args& a) {
             c.add_option("FILE", a.file, "rule file ('-' for stdin)")
                 ->required();
             c.add_option("--owner", a.owner, "owner recorded with the rules");
             c.add_flag("--force", a.force,
                        "--controller: install even if the rule checker "
                        "finds errors");
           },
       .run =
           [](const Args& a, ControlTarget& t) {
             return Load(a.file, a.owner, a.force, t);
           }},
      {.path = "rules rm",
       .help = "delete rules by id, or every rule with a pattern <...> (with "
               "--controller: by cid)",
       .setup =
           [](CLI::App& c, Args& a) {
             c.add_option("ID|PATTERN", a.items, "rule ids or patterns")
                 ->required();
           },
       .run = [](const Args& a,
                 ControlTarget& t) { return Done(t.RemoveRules(a.items)); }},
      {.path = "stats",
       .help = "per-rule counters",
       .setup =
           [](CLI::App& c, Args& a) {
             JsonFlag(c, a, "CtlHostStats (--controller: CtlClusterStats)");
           },
       .run = [](const Args& a,
                 ControlTarget& t) { return Show(t.Stats(), a.json); }},
      {.path = "quiesce",
       .help = "park (on) or release (off) matching IOs",
       .setup =
           [](CLI::App& c, Args& a) {
             c.add_option("PATTERN", a.pattern, "header pattern <...>")
                 ->required();
             c.add_option("STATE", a.state, "on or off")
                 ->required()
                 ->check(CLI::IsMember({"on", "off"}));
           },
       .run =
           [](const Args& a, ControlTarget& t) {
             return Done(t.Quiesce(a.pattern, a.state == "on"));
           }},
      {.path = "drain",
       .help = "wait until matching IOs in flight now have completed",
       .setup =
           [](CLI::App& c, Args& a) {
             c.add_option("PATTERN", a.pattern, "header pattern <...>")
                 ->required();
             c.add_option("--timeout-ms", a.timeout_ms,
                          "give up after this long");
           },
       .run =
           [](const Args& a, ControlTarget& t) {
             return Done(t.Drain(a.pattern, absl::Milliseconds(a.timeout_ms)));
           }},
      {.path = "fences",
       .help = "files fenced after a scatter failed on some of its targets "
               "only (their IOs fail until cleared)",
       .setup =
           [](CLI::App& c, Args& a) {
             c.add_option("--clear", a.items,
                          "clear the fence of this file (//HOST/PATH) first, "
                          "once its copies are identical again");
           },
       .run =
           [](const Args& a, ControlTarget& t) {
             return Show(t.Fences(a.items), /*json=*/false);
           }},
      {.path = "traces",
       .help = "the paths of the IOs this host sampled for tracing (rules "
               "with trace(P)), oldest first, hop by hop",
       .setup =
           [](CLI::App& c, Args& a) {
             c.add_option("--after", a.after, "only those after this seq");
             JsonFlag(c, a, "CtlTraces");
           },
       .run = [](const Args& a,
                 ControlTarget& t) { return Show(t.Traces(a.after), a.json); }},
      {.path = "slow",
       .help = "the IOs whose time at this host reached the slow threshold "
               "(default 500 ms): the last 256 and the 32 longest",
       .setup =
           [](CLI::App& c, Args& a) {
             c.add_option("--threshold-ms", a.threshold_ms,
                          "set the threshold first (0: capture off)");
             c.add_flag("--clear", a.clear, "forget what was caught first");
             JsonFlag(c, a, "CtlSlowOps");
           },
       .run =
           [](const Args& a, ControlTarget& t) {
             return Show(t.SlowOps(a.threshold_ms, a.clear), a.json);
           }},
      {.path = "records",
       .help = "a storage server's delegate-rule records, oldest first",
       .setup =
           [](CLI::App& c, Args& a) {
             c.add_option("--sswitch", a.sswitch,
                          "only the records of this sSwitch");
             JsonFlag(c, a, "CtlRecords");
           },
       .run =
           [](const Args& a, ControlTarget& t) {
             return Show(t.Records(a.sswitch), a.json);
           }},
      {.path = "stages", .help = "the host's stages (stage:NAME in rules)"},
      {.path = "stages ls",
       .help = "list the stages with their options and counters",
       .setup = [](CLI::App& c, Args& a) { JsonFlag(c, a, "CtlStages"); },
       .run =
           [](const Args& a, ControlTarget& t) {
             proto::Stages req;
             req.set_action(proto::Stages::LIST);
             return Show(t.Stages(req), a.json);
           }},
      {.path = "stages add",
       .help = "add a stage: NAME=KIND[:key=value,...]",
       .setup =
           [](CLI::App& c, Args& a) {
             c.add_option("SPEC", a.spec,
                          "e.g. cacheA=cache:partition_bytes=256M")
                 ->required();
           },
       .run =
           [](const Args& a, ControlTarget& t) {
             proto::Stages req;
             req.set_action(proto::Stages::ADD);
             req.set_spec(a.spec);
             return Show(t.Stages(req), false);
           }},
      {.path = "stages set",
       .help = "change a stage's options live (IO to it parks, drains, then "
               "goes on)",
       .setup =
           [](CLI::App& c, Args& a) {
             c.add_option("NAME", a.name, "the stage")->required();
             c.add_option("OPTIONS", a.spec, "key=value,...")->required();
             c.add_option("--timeout-ms", a.timeout_ms,
                          "give up (and change nothing) if IOs are still "
                          "inside the stage after this long");
           },
       .run =
           [](const Args& a, ControlTarget& t) {
             proto::Stages req;
             req.set_action(proto::Stages::SET);
             req.mutable_stage()->set_name(a.name);
             req.set_spec(a.spec);
             req.set_timeout_ms(a.timeout_ms);
             return Show(t.Stages(req), false);
           }},
      {.path = "stages rm",
       .help = "remove a stage no rule names (a write-back cache writes "
               "back first)",
       .setup =
           [](CLI::App& c, Args& a) {
             c.add_option("NAME", a.name, "the stage")->required();
             c.add_option("--timeout-ms", a.timeout_ms,
                          "give up if IOs are still inside after this long");
           },
       .run =
           [](const Args& a, ControlTarget& t) {
             proto::Stages req;
             req.set_action(proto::Stages::REMOVE);
             req.mutable_stage()->set_name(a.name);
             req.set_timeout_ms(a.timeout_ms);
             return Show(t.Stages(req), false);
           }},
      {.path = "replicas",
       .help = "replica sets (replica_set stages): members, stale regions, "
               "resync"},
      {.path = "replicas ls",
       .help = "list the replica sets: members (* primary), read and ack "
               "policies, resync",
       .setup = [](CLI::App& c, Args& a) { JsonFlag(c, a, "CtlReplicaSets"); },
       .run = [](const Args& a,
                 ControlTarget& t) { return ReplicasList(a, t, false); }},
      {.path = "replicas status",
       .help = "per member: in or out, stale regions and bytes, bytes "
               "resynced, ETA (a bar on a terminal), and conflicts",
       .setup =
           [](CLI::App& c, Args& a) {
             c.add_option("NAME", a.name, "only this replica set");
             JsonFlag(c, a, "CtlReplicaSets");
           },
       .run = [](const Args& a,
                 ControlTarget& t) { return ReplicasList(a, t, true); }},
      {.path = "replicas add",
       .help = "add a member (an endpoint of the stage's host): it comes in "
               "stale everywhere and resync copies the whole set to it",
       .setup = MemberArgs,
       .run = [](const Args& a,
                 ControlTarget& t) { return ReplicasChange(a, t, "add"); }},
      {.path = "replicas rm",
       .help = "remove a member (not the primary); its copy stays as it is",
       .setup = MemberArgs,
       .run = [](const Args& a,
                 ControlTarget& t) { return ReplicasChange(a, t, "rm"); }},
      {.path = "replicas set-primary",
       .help = "make a member the primary (reads with read=primary; the "
               "source resync prefers)",
       .setup = MemberArgs,
       .run =
           [](const Args& a, ControlTarget& t) {
             return ReplicasChange(a, t, "set-primary");
           }},
      {.path = "replicas resync", .help = "pause or resume resync"},
      {.path = "replicas resync pause",
       .help = "stop copying to stale members (they stay out of the reads "
               "of what they miss)",
       .setup = [](CLI::App& c,
                   Args& a) { c.add_option("NAME", a.name)->required(); },
       .run = [](const Args& a,
                 ControlTarget& t) { return ReplicasChange(a, t, "pause"); }},
      {.path = "replicas resync resume",
       .help = "go on copying",
       .setup = [](CLI::App& c,
                   Args& a) { c.add_option("NAME", a.name)->required(); },
       .run = [](const Args& a,
                 ControlTarget& t) { return ReplicasChange(a, t, "resume"); }},
      {.path = "replicas resolve",
       .help = "a file's regions no member holds current (conflicts in "
               "replicas status) take SOURCE's copy; resync copies it to the "
               "others",
       .setup =
           [](CLI::App& c, Args& a) {
             c.add_option("NAME", a.name, "the replica set")->required();
             c.add_option("FILE", a.items,
                          "the file as the status names it (PATH or "
                          "//HOST/PATH)")
                 ->required()
                 ->expected(1);
             c.add_option("--source", a.file, "the member whose copy wins")
                 ->required();
             c.add_option("--timeout-ms", a.timeout_ms,
                          "give up if IOs are still inside the stage after "
                          "this long");
           },
       .run = [](const Args& a,
                 ControlTarget& t) { return ReplicasChange(a, t, "resolve"); }},
      {.path = "gc",
       .help = "GC coordination of replica sets over flash devices (the "
               "gc_redirect app)"},
      {.path = "gc status",
       .help = "per replica set: its GC mode and counters (reads "
               "redirected, GC granted and delayed), its members' GC now, "
               "and the timeline of the latest GC passes",
       .setup =
           [](CLI::App& c, Args& a) {
             c.add_option("NAME", a.name, "only this replica set");
             c.add_option("--last", a.last, "passes shown (default 20)");
             JsonFlag(c, a, "CtlGcStatus");
           },
       .run = [](const Args& a, ControlTarget& t) { return GcStatus(a, t); }},
      {.path = "cache", .help = "the cache_sizing app (--controller)"},
      {.path = "cache mrc",
       .help = "the miss-ratio curves the app built: cache size in bytes "
               "and miss ratio",
       .setup =
           [](CLI::App& c, Args& a) {
             c.add_option("--tenant", a.name, "only this tenant's curve");
             JsonFlag(c, a, "CtlCacheCurves");
           },
       .run =
           [](const Args& a, ControlTarget& t) {
             return Show(t.CacheCurves(a.name), a.json);
           }},
      {.path = "wear", .help = "the wear_level app (--controller)"},
      {.path = "wear status",
       .help = "the swap under way (or the last) and every host's flash "
               "endpoints' wear",
       .setup = [](CLI::App& c, Args& a) { JsonFlag(c, a, "CtlWearStatus"); },
       .run = [](const Args& a,
                 ControlTarget& t) { return Show(t.WearStatus(), a.json); }},
      {.path = "apps", .help = "the controller's control apps (--controller)"},
      {.path = "apps ls",
       .help = "the apps the controller runs, their state and rules, and "
               "the names it can start",
       .setup = [](CLI::App& c, Args& a) { JsonFlag(c, a, "AppList"); },
       .run =
           [](const Args& a, ControlTarget& t) {
             return Show(t.Apps(proto::Apps::LIST, "", "", false), a.json);
           }},
      {.path = "apps status",
       .help = "one app's state, arguments, rules and last decisions",
       .setup =
           [](CLI::App& c, Args& a) {
             c.add_option("NAME", a.name, "the app")->required();
             JsonFlag(c, a, "AppInfo");
           },
       .run =
           [](const Args& a, ControlTarget& t) {
             return Show(t.Apps(proto::Apps::LIST, a.name, "", true), a.json);
           }},
      {.path = "apps start",
       .help = "starts an app by name (it runs again after a restart of the "
               "controller, until stopped)",
       .setup =
           [](CLI::App& c, Args& a) {
             c.add_option("NAME", a.name, "the app")->required();
             c.add_option("ARGS", a.spec, "its arguments, key=value,...");
           },
       .run =
           [](const Args& a, ControlTarget& t) {
             return Show(t.Apps(proto::Apps::START, a.name, a.spec, true),
                         false);
           }},
      {.path = "apps stop",
       .help = "stops an app (its rules stay; started again, it resumes "
               "from its state)",
       .setup =
           [](CLI::App& c, Args& a) {
             c.add_option("NAME", a.name, "the app")->required();
           },
       .run =
           [](const Args& a, ControlTarget& t) {
             return Show(t.Apps(proto::Apps::STOP, a.name, "", false), false);
           }},
      {.path = "apps call",
       .help = "a request to an app the controller runs: COMMAND and its "
               "arguments, answered by the app",
       .setup =
           [](CLI::App& c, Args& a) {
             c.add_option("NAME", a.name, "the app")->required();
             c.add_option("COMMAND", a.spec, "the app's command")->required();
             c.add_option("ARGS", a.items, "its arguments");
             c.add_flag("--json", a.json, "print the app's answer as JSON");
           },
       .run =
           [](const Args& a, ControlTarget& t) {
             return Show(t.CallApp(a.name, a.spec, a.items), a.json);
           }},
      {.path = "qos",
       .help = "tenants' latency SLOs on qos stages (the slo_admission app, "
               "--controller)"},
      {.path = "qos register",
       .help = "registers (or changes) a tenant: a latency-critical one "
               "reserves IOPS with a p95 target on the qos stage of each "
               "sSwitch named, and is refused, with the shortfall, if a "
               "device cannot hold it",
       .setup =
           [](CLI::App& c, Args& a) {
             c.add_option("TENANT", a.tenant,
                          "the IO header's tenant (or the rule id, for a "
                          "stage with by=rule)")
                 ->required();
             c.add_option("--class", a.qos_class,
                          "lc (latency-critical, default) or be")
                 ->check(CLI::IsMember({"lc", "be"}));
             c.add_option("--iops", a.iops, "lc: 4 KiB IOPS reserved");
             c.add_option("--read-percent", a.read_percent,
                          "lc: of those, reads (default 100)")
                 ->check(CLI::Range(0, 100));
             c.add_option("--p95-us", a.p95_us, "lc: the p95 latency target");
             c.add_option("--stage", a.name, "the qos stage's name")
                 ->required();
             c.add_option("--on", a.on,
                          "an sSwitch with that stage (repeat it: the "
                          "reservation is split by demand)")
                 ->required();
           },
       .run =
           [](const Args& a, ControlTarget& t) {
             std::vector<std::string> args = {
                 a.tenant,
                 "class=" + a.qos_class,
                 "iops=" + std::to_string(a.iops),
                 "read_percent=" + std::to_string(a.read_percent),
                 "p95_us=" + std::to_string(a.p95_us),
                 "stage=" + a.name};
             std::string on;
             for (const std::string& s : a.on)
               on += (on.empty() ? "" : "+") + s;
             args.push_back("on=" + on);
             return Show(t.CallApp("slo_admission", "register", args), false);
           }},
      {.path = "qos unregister",
       .help = "ends a tenant's registration (its stages forget it)",
       .setup = [](CLI::App& c,
                   Args& a) { c.add_option("TENANT", a.tenant)->required(); },
       .run =
           [](const Args& a, ControlTarget& t) {
             return Show(t.CallApp("slo_admission", "unregister", {a.tenant}),
                         false);
           }},
      {.path = "qos ls",
       .help = "the tenants registered",
       .setup = [](CLI::App& c, Args& a) { JsonFlag(c, a, "QosAdmission"); },
       .run =
           [](const Args& a, ControlTarget& t) {
             return Show(t.CallApp("slo_admission", "ls", {}), a.json);
           }},
      {.path = "qos status",
       .help = "each device's capacity and reservations; each tenant's share, "
               "demand, IOPS and p95 per device, and whether it should "
               "renegotiate (it keeps hitting its deficit floor)",
       .setup = [](CLI::App& c, Args& a) { JsonFlag(c, a, "QosAdmission"); },
       .run =
           [](const Args& a, ControlTarget& t) {
             return Show(t.CallApp("slo_admission", "status", {}), a.json);
           }},
      {.path = "qos calibrate",
       .help = "measures a device's curve through the route to PATH (a "
               "file that must not exist: made, filled and removed): the "
               "write cost and the tokens/s it serves within each p95 "
               "target, as qos stage options (offline: no --host needed)",
       .setup =
           [](CLI::App& c, Args& a) {
             CalibrateOptions& o = a.calibrate;
             c.add_option("PATH", o.path, "the file to calibrate through")
                 ->required();
             c.add_option("--size", o.size_bytes,
                          "its size in bytes (default 64 MiB)");
             c.add_option("--step-ms", o.step_ms,
                          "the measured length of each load step (default "
                          "1000)");
             c.add_option("--warmup-ms", o.warmup_ms,
                          "each step's load before it is measured (default "
                          "1000: a device's write buffer fills)");
             c.add_option("--depth", o.depth,
                          "requests in flight at most (default 16)");
             c.add_option("--mixes", o.write_percents,
                          "write percents to sweep, comma-separated; 0 must "
                          "be one (default 0,10,25,50)")
                 ->delimiter(',');
             c.add_option("--loads", o.loads,
                          "open-loop steps per mix, up to its peak "
                          "(default 10)");
             c.add_option("--targets-us", o.targets_us,
                          "p95 targets of the curve, comma-separated "
                          "(default 200 us to 200 ms)")
                 ->delimiter(',');
             JsonFlag(c, a, "CtlQosCalibration");
           },
       .run =
           [](const Args& a, ControlTarget&) {
             auto c = Calibrate(a.calibrate);
             if (!c.ok()) return Fail(c.status());
             std::cout << (a.json ? ToJson(*c) : CalibrationText(*c));
             return 0;
           }},
      {.path = "profile",
       .help = "devices' load-latency profiles, and the congestion watch a "
               "host keeps with them (steering)"},
      {.path = "profile measure",
       .help = "measures ENDPOINT's profile through the host's sSwitch (a "
               "file of its own in the endpoint's reserved folder): at each "
               "write share, the peak, then p50/p90/p99 at loads in steps of "
               "it; run it at idle",
       .setup =
           [](CLI::App& c, Args& a) {
             c.add_option("ENDPOINT", a.name, "an endpoint of the host")
                 ->required();
             c.add_option("--mixes", a.profile.write_percents,
                          "write percents, comma-separated (default "
                          "0,10,20,25,30,50,70,75,100)")
                 ->delimiter(',');
             c.add_option("--step-percent", a.profile.step_percent,
                          "load steps, percent of the peak (default 1)");
             c.add_option("--step-ms", a.profile.step_ms,
                          "each step's measured length (default 200)");
             c.add_option("--warmup-ms", a.profile.warmup_ms,
                          "each step's load before it is measured (default "
                          "100)");
             c.add_option("--depth", a.profile.depth,
                          "requests in flight for the peak (default 32)");
             c.add_option("--size-mib", a.profile.size_mib,
                          "the sweep's file (default 64)");
             c.add_option("--save", a.profile.save,
                          "writes the profile to FILE (protobuf text)");
             c.add_flag("--watch", a.profile.watch,
                        "then the host judges the endpoint's congestion by "
                        "it");
             c.add_option("--threshold-percent", a.profile.threshold_percent,
                          "with --watch: congested this far above the "
                          "profile (default 10)");
             JsonFlag(c, a, "DeviceProfile");
           },
       .run = [](const Args& a,
                 ControlTarget& t) { return ProfileMeasure(a, t); }},
      {.path = "profile model",
       .help = "the profile of an emulated flash preset (worn, healthy, "
               "fast, rackblox, small) in model time, undilated (offline)",
       .setup =
           [](CLI::App& c, Args& a) {
             c.add_option("PRESET", a.name, "the preset")->required();
             c.add_option("--mixes", a.profile.write_percents,
                          "write percents, comma-separated")
                 ->delimiter(',');
             c.add_option("--step-percent", a.profile.step_percent,
                          "load steps, percent of the peak (default 1)");
             c.add_option("--dilation", a.profile.dilation,
                          "as an endpoint with dilation=N serves it "
                          "(latencies times N, rates divided by N)")
                 ->check(CLI::Range(1.0, 1e6));
             c.add_option("--save", a.profile.save,
                          "writes the profile to FILE (protobuf text)");
             JsonFlag(c, a, "DeviceProfile");
           },
       .run = [](const Args& a, ControlTarget&) { return ProfileOfModel(a); }},
      {.path = "profile set",
       .help = "the host judges ENDPOINT's congestion by the profile in FILE "
               "(replies of a device slower than it says are marked)",
       .setup =
           [](CLI::App& c, Args& a) {
             c.add_option("ENDPOINT", a.name, "an endpoint of the host")
                 ->required();
             c.add_option("FILE", a.file, "a profile (protobuf text)")
                 ->required();
             c.add_option("--threshold-percent", a.profile.threshold_percent,
                          "congested this far above the profile (default "
                          "10)");
             c.add_option("--window-ms", a.profile.window_ms,
                          "the watch's window (default 10)");
             c.add_option("--max-baseline-percent",
                          a.profile.max_baseline_percent,
                          "learn a calm latency of at most this share of "
                          "the profile's (default 100: the profile alone)");
             JsonFlag(c, a, "SetProfiles");
           },
       .run = [](const Args& a, ControlTarget& t) { return ProfileSet(a, t); }},
      {.path = "profile clear",
       .help = "the host stops watching ENDPOINT",
       .setup =
           [](CLI::App& c, Args& a) {
             c.add_option("ENDPOINT", a.name, "an endpoint of the host")
                 ->required();
             JsonFlag(c, a, "SetProfiles");
           },
       .run = [](const Args& a,
                 ControlTarget& t) { return ProfileClear(a, t); }},
      {.path = "profile ls",
       .help = "the profiles the host watches its endpoints with (their "
               "state now: stats, steer.ENDPOINT.*)",
       .setup = [](CLI::App& c, Args& a) { JsonFlag(c, a, "SetProfiles"); },
       .run = [](const Args& a,
                 ControlTarget& t) { return ProfileList(a, t); }},
      {.path = "profile store",
       .help = "stores a profile at the steering app (--controller) under "
               "MEMBER, the name replica sets know the device by, with the "
               "host and endpoint of the device (which then watches it)",
       .setup =
           [](CLI::App& c, Args& a) {
             c.add_option("MEMBER", a.name, "the member's name")->required();
             c.add_option("FILE", a.file, "a profile (protobuf text)")
                 ->required();
             c.add_option("--on", a.sswitch, "the sSwitch of the device's host")
                 ->required();
             c.add_option("--endpoint", a.spec,
                          "the device's endpoint there (default MEMBER)");
           },
       .run = [](const Args& a,
                 ControlTarget& t) { return ProfileStore(a, t); }},
      {.path = "steer", .help = "the steering app's plan (--controller)"},
      {.path = "steer status",
       .help = "each steered replica set: its policy, demand, and each "
               "member's share of the reads and expected latency",
       .run =
           [](const Args& a, ControlTarget& t) {
             return Show(t.CallApp("steering", "status", {}), a.json);
           }},
      {.path = "steer profiles",
       .help = "the profiles the steering app stores",
       .setup = [](CLI::App& c, Args& a) { JsonFlag(c, a, "SetProfiles"); },
       .run =
           [](const Args& a, ControlTarget& t) {
             return Show(t.CallApp("steering", "profiles", {}), a.json);
           }},
      {.path = "offload", .help = "the tail_latency app (--controller)"},
      {.path = "offload status",
       .help = "flows off-loaded or being reclaimed, the app's rules and "
               "its last decisions",
       .setup = [](CLI::App& c,
                   Args& a) { JsonFlag(c, a, "CtlOffloadStatus"); },
       .run = [](const Args& a,
                 ControlTarget& t) { return Show(t.OffloadStatus(), a.json); }},
      {.path = "controllers",
       .help = "the controllers sharing the store, the leader, and the "
               "store's health (--controller, any of them)",
       .setup = [](CLI::App& c,
                   Args& a) { JsonFlag(c, a, "ControllerMembers"); },
       .run = [](const Args& a,
                 ControlTarget& t) { return Show(t.Controllers(), a.json); }},
      {.path = "hosts",
       .help = "the hosts registered at the controller (--controller)",
       .setup = [](CLI::App& c, Args& a) { JsonFlag(c, a, "CtlHosts"); },
       .run = [](const Args& a,
                 ControlTarget& t) { return Show(t.Hosts(), a.json); }},
  };
  return commands;
}

}  // namespace sroute::ctl
