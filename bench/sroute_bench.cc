// SPDX-License-Identifier: Apache-2.0
// sroute_bench: micro-benchmarks of rule matching and routing.
//
//   build/bench/sroute_bench --benchmark_repetitions=3
//
// BM_Match/N           RuleTable::Route on a realistic mix of N rules
//                      (exact, prefix, byte-range and regex), headers that
//                      hit and miss.
// BM_RouteNullEndpoint full SSwitch::Route of a 4 KiB read to an endpoint
//                      that completes at once (with 0 or 1000 rules).
// BM_RouteTap         the same through a matching rule, with no tap, a tap
//                      sampling nothing, and one tracing every IO (with
//                      the heap a traced IO holds).
// BM_RouteBenchFile   4 KiB reads and writes of bench/fuse_fio.sh's file
//                      through its 1000 rules, with and without a match.
// BM_RouteUnderUpdates 2 routing threads while a third thread keeps
//                      inserting and deleting rules.
// BM_UpdateOne/N       one Insert+Delete on a table of N rules.
// BM_InsertAccumulating/N  inserts that pile up on a table of N rules.
#include <benchmark/benchmark.h>

#include <atomic>
#include <bit>
#include <random>
#include <thread>

#include "rules/parser.h"
#include "rules/rule_table.h"
#include "sswitch/sswitch.h"
#include "util/strings.h"

namespace sroute {
namespace {

constexpr int kRegexRules = 10;

// Rule i of a mix of n: a fixed handful of regexes, the rest split among
// exact files (45%), directory prefixes (30%) and byte ranges (25%).
Rule MixRule(int i, int n) {
  std::string text;
  if (i < std::min(kRegexRules, n / 10 + 1)) {
    text = StrCat("<*, r, re://S", i, "/logs/.*\\.log> -> <IO, //B/logs>");
  } else {
    switch (i % 20) {
      case 0:
      case 1:
      case 2:
      case 3:
      case 4:
      case 5:
      case 6:
      case 7:
      case 8:
        text = StrCat("<*, *, //S", i % 7, "/vol", i, "/file", i,
                      "> -> <IO, //B/f", i, ">");
        break;
      case 9:
      case 10:
      case 11:
      case 12:
      case 13:
      case 14:
        text = StrCat("<tenant", i % 50, ", w|c, //S", i % 7, "/dir", i,
                      "/*> -> <IO, //B/d", i, "/*>");
        break;
      default:
        text = StrCat("<*, r, //S", i % 7, "/vol", i - 9, "/file", i - 9, "[",
                      (i % 8) * 4, "K:", (i % 8) * 4 + 4, "K]> -> <IO, //B/r",
                      i, ">");
        break;
    }
  }
  auto r = ParseRule(text);
  if (!r.ok()) std::abort();
  return *r;
}

std::vector<IoHeader> MixHeaders(int n) {
  std::mt19937 rng(7);
  std::vector<IoHeader> out;
  for (int k = 0; k < 1024; ++k) {
    const int i = static_cast<int>(rng() % std::max(n, 1));
    IoHeader h;
    h.source = StrCat("tenant", rng() % 50);
    h.op = (rng() % 2) ? Op::kRead : Op::kWrite;
    h.offset = (rng() % 16) * 4096;
    h.length = 4096;
    switch (k % 4) {
      case 0:  // an exact or ranged file (hit when that rule exists)
        h.file = StrCat("//S", i % 7, "/vol", i, "/file", i);
        break;
      case 1:  // under a prefix
        h.file = StrCat("//S", i % 7, "/dir", i, "/sub/x", k);
        break;
      case 2:  // a regex candidate
        h.file = StrCat("//S", k % 12, "/logs/app", k, ".log");
        break;
      default:  // a miss
        h.file = StrCat("//S", i % 7, "/home/user", k, "/notes.txt");
        break;
    }
    out.push_back(std::move(h));
  }
  return out;
}

RuleTablePtr MixTable(int n) {
  std::vector<RuleEntryPtr> entries;
  for (int i = 0; i < n; ++i) {
    entries.push_back(std::make_shared<RuleEntry>(
        i + 1, OrderKey{0, static_cast<uint64_t>(i + 1)}, MixRule(i, n), ""));
  }
  return RuleTable::Build(std::move(entries));
}

void BM_Match(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  RuleTablePtr table = MixTable(n);
  std::vector<IoHeader> headers = MixHeaders(n);
  RuleTable::Pieces pieces;
  size_t i = 0, hits = 0;
  for (auto _ : state) {
    table->Route(headers[i++ & 1023], &pieces);
    hits += pieces[0].rule != nullptr;
    benchmark::DoNotOptimize(pieces.data());
  }
  state.SetItemsProcessed(state.iterations());
  state.counters["hit_ratio"] =
      static_cast<double>(hits) / static_cast<double>(state.iterations());
}
BENCHMARK(BM_Match)->Arg(10)->Arg(1000)->Arg(100000);

class NullEndpoint : public Endpoint {
 public:
  void Submit(Io* io, std::string_view) override {
    io->bytes = io->header.length;
    io->Complete();
  }
};

// A switch with `rules` rules that miss the benchmarks' files, after
// `first` if not empty, all in one table (as a rules file installs them).
std::unique_ptr<SSwitch> MakeSwitch(int rules, std::string_view first = "") {
  auto sw = std::make_unique<SSwitch>("bench");
  (void)sw->AddEndpoint("A", std::make_shared<NullEndpoint>());
  (void)sw->AddEndpoint("B", std::make_shared<NullEndpoint>());
  std::vector<Rule> batch;
  if (!first.empty()) batch.push_back(*ParseRule(first));
  for (int i = 0; i < rules; ++i) {
    batch.push_back(
        *ParseRule(StrCat("<*, *, //A/other/f", i, "> -> <IO, //B/f", i, ">")));
  }
  if (!batch.empty()) (void)sw->Update(std::move(batch), {});
  return sw;
}

void RouteOne(SSwitch& sw, const IoHeader& h, char* buf) {
  Io io;
  io.header = h;
  io.read_buffer = std::span<char>(buf, 4096);
  io.set_completion([](Io&) {});
  sw.Route(&io);
}

void BM_RouteNullEndpoint(benchmark::State& state) {
  auto sw = MakeSwitch(static_cast<int>(state.range(0)));
  IoHeader h{"tenant1", "", Op::kRead, "//A/data/file.bin", 0, 4096};
  std::vector<char> buf(4096);
  for (auto _ : state) RouteOne(*sw, h, buf.data());
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_RouteNullEndpoint)->Arg(0)->Arg(1000);

// An IO through a matching rule with a tap that samples none (0), every
// one (1), or no tap at all (-1): the tap's cost on the IO path and, as the
// counters trace_bytes and trace_hops, what a traced IO's trace holds at
// its completion.
void BM_RouteTap(benchmark::State& state) {
  const int64_t mode = state.range(0);
  auto sw = MakeSwitch(1000, "<*, r, //A/data/*> -> <IO, //B/data/*>");
  if (mode >= 0) {
    (void)sw->Insert(
        *ParseRule(StrCat("<*, r, //A/data/*> -> trace(", mode, ")")));
  }
  IoHeader h{"tenant1", "", Op::kRead, "//A/data/file.bin", 0, 4096};
  std::vector<char> buf(4096);
  // The kept-trace ring full first, so that what it keeps is freed as fast
  // as it is kept.
  for (size_t i = 0; i < SSwitch::kKeptTraces + 100; ++i) {
    RouteOne(*sw, h, buf.data());
  }
  for (auto _ : state) RouteOne(*sw, h, buf.data());
  state.SetItemsProcessed(state.iterations());
  // What a traced IO holds until it completes: the Trace (made with
  // make_shared: its control block too), its hops' vector and the hops'
  // strings that do not fit in place (measured on the last one kept).
  double bytes = 0, hops = 0;
  if (mode == 1) {
    const auto kept = sw->Traces(sw->traces_sampled() - 1, 1);
    if (!kept.empty()) {
      hops = static_cast<double>(kept[0].hops.size());
      bytes = sizeof(Trace) + 2 * sizeof(long) +
              static_cast<double>(std::bit_ceil(kept[0].hops.size()) *
                                  sizeof(TraceHop));
      for (const TraceHop& hop : kept[0].hops) {
        for (const std::string* str : {&hop.host, &hop.kind, &hop.next}) {
          if (str->size() > 15) bytes += static_cast<double>(str->size() + 1);
        }
      }
    }
  }
  state.counters["trace_bytes"] = bytes;
  state.counters["trace_hops"] = hops;
  state.counters["hop_bytes"] = sizeof(TraceHop);
}
BENCHMARK(BM_RouteTap)->Arg(-1)->Arg(0)->Arg(1)->ArgName("tap");

// Matching through a matching rule (endpoint routing) as well.
void BM_RouteNullEndpointMatched(benchmark::State& state) {
  auto sw = MakeSwitch(1000);
  (void)sw->Insert(*ParseRule("<*, r, //A/data/*> -> <IO, //B/data/*>"));
  IoHeader h{"tenant1", "", Op::kRead, "//A/data/file.bin", 0, 4096};
  std::vector<char> buf(4096);
  for (auto _ : state) RouteOne(*sw, h, buf.data());
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_RouteNullEndpointMatched);

// 4 KiB reads (range(0) == 0) and writes (1) through the FUSE benchmark's
// rules (bench/fuse_fio.sh): none matching the file (range(1) == 0), or one
// more routing it to itself, ahead of them in the same table (1). A matched
// write also makes the sSwitch ask where the file's home is (a write
// detoured away from it must grow it). On 1 thread, and on 2 as the 4-job
// FUSE runs use 2 cores. Thread 0 builds the switch before the loop's start
// barrier.
void BM_RouteBenchFile(benchmark::State& state) {
  static std::unique_ptr<SSwitch> sw;
  if (state.thread_index() == 0) {
    sw =
        MakeSwitch(1000, state.range(1) == 1 ? "<*, r|w, //A/data/file.bin> -> "
                                               "<IO, //A/data/file.bin>"
                                             : "");
  }
  const bool write = state.range(0) == 1;
  IoHeader h{"tenant1", "", Op::kRead, "//A/data/file.bin", 0, 4096};
  if (write) h.op = Op::kWrite;
  std::vector<char> buf(4096);
  for (auto _ : state) {
    Io io;
    io.header = h;
    if (write) {
      io.write_data = std::span<const char>(buf.data(), buf.size());
    } else {
      io.read_buffer = std::span<char>(buf.data(), buf.size());
    }
    io.set_completion([](Io&) {});
    sw->Route(&io);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_RouteBenchFile)
    ->ArgsProduct({{0, 1}, {0, 1}})
    ->ArgNames({"write", "match"})
    ->Threads(1)
    ->Threads(2)
    ->UseRealTime();

// Two routing threads; thread 0 also runs an updater thread that inserts
// and deletes a rule as fast as it can for the whole measurement.
SSwitch* shared_switch = nullptr;
std::atomic<bool> stop_updates{false};
std::atomic<uint64_t> updates_done{0};
std::thread updater;

void BM_RouteUnderUpdates(benchmark::State& state) {
  if (state.thread_index() == 0) {
    shared_switch = MakeSwitch(1000).release();
    stop_updates = false;
    updates_done = 0;
    updater = std::thread([] {
      Rule r = *ParseRule("<*, w, //A/hot/*> -> <IO, //B/hot/*>");
      while (!stop_updates.load(std::memory_order_relaxed)) {
        auto id = shared_switch->Insert(r);
        if (id.ok()) (void)shared_switch->Delete(*id);
        updates_done.fetch_add(2, std::memory_order_relaxed);
      }
    });
  }
  IoHeader h{"tenant1", "", Op::kRead, "//A/hot/file.bin", 0, 4096};
  std::vector<char> buf(4096);
  // Benchmark's threads start together only after setup; spin until ready.
  while (shared_switch == nullptr) std::this_thread::yield();
  for (auto _ : state) RouteOne(*shared_switch, h, buf.data());
  state.SetItemsProcessed(state.iterations());
  if (state.thread_index() == 0) {
    stop_updates = true;
    updater.join();
    state.counters["updates_per_s"] = benchmark::Counter(
        static_cast<double>(updates_done.load()), benchmark::Counter::kIsRate);
    delete shared_switch;
    shared_switch = nullptr;
  }
}
BENCHMARK(BM_RouteUnderUpdates)->Threads(2)->UseRealTime();

void BM_UpdateOne(benchmark::State& state) {
  auto sw = MakeSwitch(static_cast<int>(state.range(0)));
  Rule r = *ParseRule("<*, r, //A/x[0:4K]> -> <IO, //B/x>");
  for (auto _ : state) {
    auto id = sw->Insert(r);
    (void)sw->Delete(*id);
  }
  state.SetItemsProcessed(state.iterations() * 2);
}
BENCHMARK(BM_UpdateOne)->Arg(1000)->Arg(100000);

// Rules accumulate, as when track_writes records scattered writes: each
// iteration inserts one more ranged rule into a table that starts with N,
// so the amortized cost includes folding the delta into a new base.
void BM_InsertAccumulating(benchmark::State& state) {
  auto sw = MakeSwitch(static_cast<int>(state.range(0)));
  uint64_t i = 0;
  for (auto _ : state) {
    Rule r = *ParseRule(StrCat("<*, r, //A/vhd[", i * 4, "K:", i * 4 + 4,
                               "K]> -> <IO, //B/tmp>"));
    benchmark::DoNotOptimize(sw->Insert(std::move(r)));
    ++i;
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_InsertAccumulating)->Arg(0)->Arg(100000)->Iterations(20000);

}  // namespace
}  // namespace sroute
