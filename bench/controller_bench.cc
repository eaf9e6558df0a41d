// SPDX-License-Identifier: Apache-2.0
// Controller benchmarks (issue 5), with a real Controller and real hosts'
// agents over loopback RPC in one process (several sSwitches may share one
// process for this):
//
// BM_UpdateThroughput/S/K  two-phase updates on S sSwitches, each replacing
//                          K rules per sSwitch; rules installed per second.
// BM_UpdateBytesPerFlow    control bytes on the wire for one update of 1000
//                          flows (one rule each), per flow.
// BM_StatsBytesPerFlow     bytes of one statistics report with 1000 flows
//                          that saw IO, per flow.
// BM_RecoverDelegateRules/N  a restarted host gets back N delegate-made
//                          rules from a storage server's records (register,
//                          list, transfer, replay, install); wall time.
// BM_UpdateOnStore/E/S     one-rule updates on S sSwitches with the state
//                          in RocksDB (E=0) or in a three-member etcd
//                          cluster on this machine (E=1, issue 29).
#include <benchmark/benchmark.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "controller/controller.h"
#include "embed/embedded_host.h"
#include "endpoints/remote_endpoint.h"
#include "host/agent.h"
#include "rpc/io_threads.h"
#include "rules/parser.h"
#include "server/record_store.h"
#include "server/storage_server.h"
#include "tests/util/etcd_cluster.h"
#include "util/strings.h"

namespace sroute {
namespace {

constexpr char kSecret[] = "bench-cluster-secret-0123456789";

std::string TempDir() {
  char tmpl[] = "/tmp/sroute-ctl-bench-XXXXXX";
  return mkdtemp(tmpl);
}

// A controller and `n` hosts (an sSwitch with a local endpoint "home" and
// an agent each).
struct Cluster {
  // `store`: "" for RocksDB in the cluster's directory, else etcd://...
  explicit Cluster(int n, absl::Duration stats_interval = absl::Seconds(1),
                   const std::string& store = "") {
    dir = TempDir();
    ControllerOptions o;
    o.listen = "127.0.0.1:0";
    o.secret = kSecret;
    o.db_dir = dir + "/db";
    o.store = store;
    o.stats_interval = stats_interval;
    controller = *Controller::Start(o);
    while (!controller->leading()) absl::SleepFor(absl::Milliseconds(10));
    for (int i = 0; i < n; ++i) {
      auto host = std::make_unique<EmbeddedHost>(StrCat("h", i));
      std::filesystem::create_directories(dir + "/home" + std::to_string(i));
      (void)host->AddLocalEndpoint("home", dir + "/home" + std::to_string(i));
      AgentOptions a;
      a.address = controller->address();
      a.secret = kSecret;
      a.host.set_role("fuse");
      agents.push_back(*ControllerAgent::Start(&host->sswitch(), &threads, a));
      hosts.push_back(std::move(host));
    }
  }
  ~Cluster() {
    agents.clear();
    controller.reset();
    hosts.clear();
    std::filesystem::remove_all(dir);
  }
  std::string dir;
  IoThreads threads{2};
  std::unique_ptr<Controller> controller;
  std::vector<std::unique_ptr<EmbeddedHost>> hosts;
  std::vector<std::unique_ptr<ControllerAgent>> agents;
};

// Runs the benchmark's loop: each iteration one update replacing
// `per_switch` rules on each of the cluster's `switches` sSwitches.
void RunUpdates(benchmark::State& state, Cluster& cluster, int switches,
                int per_switch) {
  ControllerApi& api = cluster.controller->api();
  std::vector<std::vector<uint64_t>> live(switches);
  uint64_t round = 0;
  for (auto _ : state) {
    UpdateSpec spec;
    for (int s = 0; s < switches; ++s) {
      RuleChanges c;
      c.sswitch = StrCat("h", s);
      for (int k = 0; k < per_switch; ++k) {
        c.insert.push_back(StrCat("<*, w, //home/f", k, "> -> <IO, //home/r",
                                  round, "/f", k, ">"));
      }
      c.remove = live[s];
      spec.changes.push_back(std::move(c));
    }
    auto r = api.Update(spec);
    if (!r.ok()) {
      state.SkipWithError(std::string(r.status().message()).c_str());
      break;
    }
    size_t at = 0;
    for (int s = 0; s < switches; ++s) {
      live[s].assign(r->cids.begin() + at, r->cids.begin() + at + per_switch);
      at += per_switch;
    }
    ++round;
  }
}

void BM_UpdateThroughput(benchmark::State& state) {
  const int switches = static_cast<int>(state.range(0));
  const int per_switch = static_cast<int>(state.range(1));
  Cluster cluster(switches);
  RunUpdates(state, cluster, switches, per_switch);
  state.SetItemsProcessed(state.iterations() * switches * per_switch);
  state.counters["rules_per_s"] = benchmark::Counter(
      static_cast<double>(state.iterations() * switches * per_switch),
      benchmark::Counter::kIsRate);
}
BENCHMARK(BM_UpdateThroughput)
    ->Args({1, 1})
    ->Args({1, 100})
    ->Args({10, 1})
    ->Args({10, 100})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

void BM_UpdateOnStore(benchmark::State& state) {
  const bool on_etcd = state.range(0) == 1;
  const int switches = static_cast<int>(state.range(1));
  std::unique_ptr<testing::EtcdCluster> etcd;
  std::string store;
  if (on_etcd) {
    etcd = std::make_unique<testing::EtcdCluster>(3);
    if (!etcd->ok()) {
      state.SkipWithError("etcd did not start");
      return;
    }
    store = "etcd://" + etcd->endpoints() + "/bench/";
  }
  Cluster cluster(switches, absl::Seconds(1), store);
  RunUpdates(state, cluster, switches, 1);
  state.counters["updates_per_s"] = benchmark::Counter(
      static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_UpdateOnStore)
    ->ArgNames({"etcd", "sswitches"})
    ->Args({0, 1})
    ->Args({1, 1})
    ->Args({0, 10})
    ->Args({1, 10})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

void BM_UpdateBytesPerFlow(benchmark::State& state) {
  constexpr int kFlows = 1000;
  Cluster cluster(1, absl::Seconds(3600));  // no stats traffic meanwhile
  ControllerApi& api = cluster.controller->api();
  double per_flow = 0;
  uint64_t round = 0;
  for (auto _ : state) {
    UpdateSpec spec;
    RuleChanges c;
    c.sswitch = "h0";
    for (int k = 0; k < kFlows; ++k) {
      c.insert.push_back(StrCat("<tenant", k % 10, ", w, //home/vm", round,
                                "/disk", k, "> -> <IO, //home/fast/disk", k,
                                ">"));
    }
    spec.changes.push_back(std::move(c));
    const uint64_t before =
        cluster.controller->bytes_in() + cluster.controller->bytes_out();
    auto r = api.Update(spec);
    const uint64_t after =
        cluster.controller->bytes_in() + cluster.controller->bytes_out();
    if (!r.ok()) {
      state.SkipWithError(std::string(r.status().message()).c_str());
      break;
    }
    per_flow = static_cast<double>(after - before) / kFlows;
    ++round;
  }
  state.counters["bytes_per_flow"] = per_flow;
}
BENCHMARK(BM_UpdateBytesPerFlow)->Iterations(3)->Unit(benchmark::kMillisecond);

void BM_StatsBytesPerFlow(benchmark::State& state) {
  constexpr int kFlows = 1000;
  Cluster cluster(1, absl::Milliseconds(200));
  ControllerApi& api = cluster.controller->api();
  UpdateSpec spec;
  RuleChanges c;
  c.sswitch = "h0";
  for (int k = 0; k < kFlows; ++k) {
    c.insert.push_back(
        StrCat("<*, r, //home/f", k, "> -> <IO, //home/f", k, ">"));
  }
  spec.changes.push_back(std::move(c));
  if (auto r = api.Update(spec); !r.ok()) {
    state.SkipWithError(std::string(r.status().message()).c_str());
    return;
  }
  EmbeddedHost& host = *cluster.hosts[0];
  double per_flow = 0;
  for (auto _ : state) {
    // IO on every flow, then one report interval with nothing else going on.
    for (int k = 0; k < kFlows; ++k) {
      (void)host.Call("bench", Op::kGetattr, StrCat("//home/f", k));
    }
    const uint64_t before = cluster.controller->bytes_in();
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    const uint64_t after = cluster.controller->bytes_in();
    per_flow = static_cast<double>(after - before) / kFlows;
  }
  state.counters["bytes_per_flow"] = per_flow;
}
BENCHMARK(BM_StatsBytesPerFlow)->Iterations(3)->Unit(benchmark::kMillisecond);

void BM_RecoverDelegateRules(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  const std::string dir = TempDir();
  std::filesystem::create_directories(dir + "/s2");
  std::filesystem::create_directories(dir + "/home");
  std::ofstream(dir + "/s2/vhd.tmp").put('x');
  IoThreads threads(2);
  proto::HostConfig so;
  so.set_name("S2");
  so.set_root(dir + "/s2");
  so.set_listen("127.0.0.1:0");
  auto server = *StorageServer::Start(so, {.secret = kSecret, .limits = {}});
  // The records that n writes through track_writes left on S2: separate
  // 4 KiB ranges, so n rules.
  const std::string anchor = "<*, w, //home/vhd>";
  std::vector<DelegateRuleRecord> records;
  for (int i = 0; i < n; ++i) {
    records.push_back(
        DelegateRuleRecord{"fuse-bench", static_cast<uint64_t>(i + 1),
                           StrCat("<*, r, //home/vhd[", i * 8, "K:", i * 8 + 4,
                                  "K]> -> <IO, //S2/vhd.tmp>"),
                           anchor});
    if (records.size() == 10000 || i == n - 1) {
      (void)server->records().Put(records);
      records.clear();
    }
  }
  ControllerOptions co;
  co.listen = "127.0.0.1:0";
  co.secret = kSecret;
  co.db_dir = dir + "/db";
  auto controller = *Controller::Start(co);
  size_t restored = 0, rules = 0;
  for (auto _ : state) {
    // A host restarts: register (fresh), recover, install.
    EmbeddedHost host("fuse-bench");
    (void)host.AddLocalEndpoint("home", dir + "/home");
    (void)host.AddLocalEndpoint("S2", dir + "/s2");
    (void)host.LoadRules(anchor + " -> track_writes(); <IO, //S2/vhd.tmp>");
    AgentOptions a;
    a.address = controller->address();
    a.secret = kSecret;
    a.host.set_role("fuse");
    proto::EndpointInfo* e = a.host.add_endpoints();
    e->set_name("S2");
    e->set_kind("server");
    e->set_address(server->address());
    const absl::Time start = absl::Now();
    auto agent = ControllerAgent::Start(&host.sswitch(), &threads, a);
    const absl::Duration took = absl::Now() - start;
    if (!agent.ok()) {
      state.SkipWithError(std::string(agent.status().message()).c_str());
      break;
    }
    restored = (*agent)->records_restored();
    rules = host.sswitch().ListRules().size();
    state.SetIterationTime(absl::ToDoubleSeconds(took));
    agent->reset();
  }
  state.counters["restored"] = static_cast<double>(restored);
  state.counters["rules"] = static_cast<double>(rules);
  controller.reset();
  server.reset();
  std::filesystem::remove_all(dir);
}
BENCHMARK(BM_RecoverDelegateRules)
    ->Arg(100000)
    ->Iterations(3)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

// Random 4 KiB writes over a 1 GiB file under track_writes, through a real
// server (in process, over loopback RPC): the records S2 keeps and its state
// directory's size, against the writes and the FUSE host's read rules.
// Issue 25's target: state below 10 MB after a million writes.
uint64_t DiskUse(const std::string& dir) {
  uint64_t n = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    if (e.is_regular_file()) n += e.file_size();
  }
  return n;
}

void BM_TrackedWritesState(benchmark::State& state) {
  const uint64_t writes = static_cast<uint64_t>(state.range(0));
  constexpr uint64_t kFile = 1ull << 30, kBlock = 4096;
  const std::string dir = TempDir();
  std::filesystem::create_directories(dir + "/s2");
  std::filesystem::create_directories(dir + "/home");
  std::ofstream(dir + "/s2/vhd.tmp").put('x');
  std::ofstream(dir + "/home/vhd").put('x');
  IoThreads threads(2);
  proto::HostConfig so;
  so.set_name("S2");
  so.set_root(dir + "/s2");
  so.set_state_dir(dir + "/s2-state");
  so.set_listen("127.0.0.1:0");
  auto server = *StorageServer::Start(so, {.secret = kSecret, .limits = {}});
  EmbeddedHost host("fuse-bench");
  (void)host.AddLocalEndpoint("home", dir + "/home");
  RemoteContext remote{&threads, kSecret, "fuse-bench", "fuse",
                       absl::Seconds(10)};
  if (absl::Status s =
          AddEndpoint(host.sswitch(), "S2", server->address(), remote);
      !s.ok()) {
    state.SkipWithError(std::string(s.message()).c_str());
    return;
  }
  (void)host.LoadRules(
      "<*, w, //home/vhd> -> track_writes(); <IO, //S2/vhd.tmp>");
  std::mt19937_64 rng(25);
  const std::string block(kBlock, 'w');
  uint64_t peak_state = 0;
  for (auto _ : state) {
    for (uint64_t i = 0; i < writes; ++i) {
      const uint64_t off = (rng() % (kFile / kBlock)) * kBlock;
      auto n = host.Write("", "//home/vhd", off, block);
      if (!n.ok()) {
        state.SkipWithError(std::string(n.status().message()).c_str());
        break;
      }
      if (i % 65536 == 0) {
        peak_state = std::max(peak_state, DiskUse(dir + "/s2-state"));
      }
    }
  }
  const uint64_t end_state = DiskUse(dir + "/s2-state");
  state.counters["writes"] = static_cast<double>(writes);
  state.counters["records"] =
      static_cast<double>(server->records().CountForTesting());
  state.counters["read_rules"] =
      static_cast<double>(host.sswitch().ListRules().size() - 1);
  state.counters["state_MB"] = static_cast<double>(end_state) / 1e6;
  state.counters["peak_state_MB"] =
      static_cast<double>(std::max(peak_state, end_state)) / 1e6;
  state.counters["writes_per_s"] = benchmark::Counter(
      static_cast<double>(writes), benchmark::Counter::kIsRate);
  server.reset();
  std::filesystem::remove_all(dir);
}
BENCHMARK(BM_TrackedWritesState)
    ->Arg(100000)
    ->Arg(1000000)
    ->Iterations(1)
    ->Unit(benchmark::kSecond);

}  // namespace
}  // namespace sroute
