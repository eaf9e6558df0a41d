// SPDX-License-Identifier: Apache-2.0
// The rule checker on large tables (issue 27): a full check of N rules, and
// the check of one inserted rule against N installed ones.
//
//   build/bench/check_bench --benchmark_filter=Check
//
// The table is what a busy cluster's server holds: per-tenant rules on
// single files (some byte-ranged, some with track_writes), prefix rules on
// directories, a few regexes, and per-tenant cache rules on every file at a
// higher priority; a second server that forwards some directories back
// (each check follows witnesses across both).
#include <benchmark/benchmark.h>

#include <map>
#include <random>

#include "check/checker.h"
#include "rules/parser.h"
#include "util/strings.h"

namespace sroute::check {
namespace {

Rule Parse(const std::string& text) {
  absl::StatusOr<Rule> r = ParseRule(text);
  if (!r.ok()) {
    fprintf(stderr, "%s: %s\n", text.c_str(), r.status().ToString().c_str());
    abort();
  }
  return *r;
}

std::vector<SwitchView> Cluster(int n) {
  std::mt19937 rng(27);
  SwitchView s1, s2;
  s1.name = "S1";
  s1.address = "10.0.0.1:7000";
  s2.name = "S2";
  s2.address = "10.0.0.2:7000";
  for (SwitchView* s : {&s1, &s2}) {
    s->topology_known = true;
    s->endpoints = {{"S1", "server", "10.0.0.1:7000"},
                    {"S2", "server", "10.0.0.2:7000"},
                    {"S3", "dir", ""}};
    s->stages = {"cache0", "cache1", "cache2", "cache3"};
  }
  s1.endpoints[0].kind = "dir";
  s2.endpoints[1].kind = "dir";
  auto add = [](SwitchView* s, std::string text) {
    TableRule t;
    t.rule = Parse(text);
    t.order.priority = t.rule.priority;
    t.order.seq = s->rules.size() + 1;
    t.id = t.order.seq;
    t.origin = StrCat(s->name, ".rules:", t.order.seq);
    s->rules.push_back(std::move(t));
  };
  for (int t = 0; t < 4; ++t) {
    add(&s1, StrCat("@10 <tenant", t, ", r, //S1/cached/*> -> <IO, stage:cache",
                    t, ">"));
  }
  for (int i = 0; static_cast<int>(s1.rules.size()) < n; ++i) {
    const int dir = i / 100;
    const std::string file = StrCat("//S1/d", dir, "/f", i);
    switch (rng() % 10) {
      case 0:
        add(&s1, StrCat("<*, *, //S1/d", dir, "/sub", i, "/*> -> <IO, //S3/d",
                        dir, "/sub", i, "/*>"));
        break;
      case 1:
        add(&s1, StrCat("<*, r, ", file, "[0:64K]> -> <IO, //S3/f", i, ">"));
        add(&s1, StrCat("<*, w, ", file, "[0:64K]> -> <IO, //S3/f", i, ">"));
        break;
      case 2:
        add(&s1, StrCat("<*, w, ", file, "> -> track_writes(); <IO, //S2/off",
                        i, ">"));
        break;
      case 3:
        if (i % 1000 == 3) {
          add(&s1, StrCat("<*, *, re://S1/logs", i, "/[0-9]+\\.log> -> ",
                          "<IO, //S3/logs", i, "/*>"));
          break;
        }
        [[fallthrough]];
      default:
        add(&s1, StrCat("<tenant", rng() % 4, ", *, ", file, "> -> <IO, //S2/",
                        "f", i, ">"));
        add(&s1, StrCat("<*, *, ", file, "> -> <IO, //S2/f", i, ">"));
        break;
    }
  }
  for (int i = 0; i < 1000; ++i) {
    add(&s2, StrCat("<*, *, //S2/back", i, "/*> -> <IO, //S1/back", i, "/*>"));
  }
  // Findings to report: shadowed rules, and loops (S1 sending back to S2
  // some of what S2 sends it).
  for (int i = 0; i < 100; ++i) {
    add(&s1, StrCat("<*, r, //S1/d", i, "/f", i * 100, "> -> <IO, //S3/dup>"));
  }
  for (int i = 0; i < 10; ++i) {
    add(&s1, StrCat("<*, *, //S1/back", i, "/*> -> <IO, //S2/back", i, "/*>"));
  }
  return {s1, s2};
}

void BM_CheckFull(benchmark::State& state) {
  const std::vector<SwitchView> cluster = Cluster(state.range(0));
  size_t findings = 0;
  for (auto _ : state) {
    state.PauseTiming();
    std::vector<SwitchView> copy = cluster;  // the caller's tables, given
    state.ResumeTiming();
    Report r = CheckTables(std::move(copy));
    findings = r.findings.size();
  }
  state.counters["rules"] = state.range(0);
  state.counters["findings"] = findings;
  // By kind, as a check that the table has what it should.
  std::map<std::string, int> kinds;
  for (const Finding& f : CheckTables(cluster).findings) {
    ++kinds[std::string(KindName(f.kind))];
  }
  for (const auto& [kind, n] : kinds) state.counters[kind] = n;
}
BENCHMARK(BM_CheckFull)
    ->Arg(10000)
    ->Arg(100000)
    ->Unit(benchmark::kMillisecond)
    ->Iterations(3);

void BM_CheckOneInsert(benchmark::State& state) {
  Checker checker(Cluster(state.range(0)));
  std::mt19937 rng(1);
  size_t findings = 0;
  uint64_t id = 1u << 30;
  for (auto _ : state) {
    const int i = rng() % state.range(0);
    TableRule t;
    t.rule = Parse(StrCat("<tenant", i % 4, ", w, //S1/d", i / 100, "/f", i,
                          "[4K:8K]> -> <IO, //S2/new", i, ">"));
    t.order.seq = ++id;
    t.id = id;
    t.origin = "update";
    Report r = checker.CheckChange("S1", {t}, {});
    findings += r.findings.size();
  }
  state.counters["findings/op"] =
      benchmark::Counter(findings, benchmark::Counter::kAvgIterations);
}
BENCHMARK(BM_CheckOneInsert)->Arg(100000)->Unit(benchmark::kMicrosecond);

void BM_CheckOneDelete(benchmark::State& state) {
  Checker checker(Cluster(state.range(0)));
  std::mt19937 rng(2);
  for (auto _ : state) {
    const uint64_t id = 5 + rng() % (state.range(0) - 5);
    benchmark::DoNotOptimize(checker.CheckChange("S1", {}, {id}));
  }
}
BENCHMARK(BM_CheckOneDelete)->Arg(100000)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace sroute::check

BENCHMARK_MAIN();
