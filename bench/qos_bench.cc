// SPDX-License-Identifier: Apache-2.0
// The qos stage's cost per IO (issue 48), in sroute_bench:
//
//   build/bench/sroute_bench --benchmark_filter=Qos --benchmark_repetitions=3
//
// BM_QosSchedule/N    one request through the TokenScheduler (Enqueue,
//                     Schedule, Complete) among N tenants, half of them
//                     latency-critical reserving half the device, on a
//                     scripted clock that keeps the device busy: the
//                     scheduler's own cost.
// BM_RouteQosStage/N  SSwitch::Route of a 4 KiB read through a qos stage
//                     (N tenants, half of them latency-critical, IOs from
//                     each in turn, with tokens to spare) to
//                     an endpoint that completes at once: compare with
//                     BM_RouteNullEndpointMatched for the stage's cost.
#include <benchmark/benchmark.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "rules/parser.h"
#include "sswitch/sswitch.h"
#include "stages/qos/token_scheduler.h"
#include "stages/stage.h"
#include "stages/stage_spec.h"
#include "util/strings.h"

namespace sroute {
namespace {

void BM_QosSchedule(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  const double rate = 1e6;  // tokens/s: one a microsecond
  TokenScheduler s;
  absl::Time now = absl::UnixEpoch();
  (void)s.SetDevice({.tokens_per_s = rate, .write_cost = 10}, now);
  std::vector<std::string> names;
  const int lc = (n + 1) / 2;
  for (int i = 0; i < n; ++i) {
    names.push_back(StrCat("t", i));
    QosTenantSpec t;
    t.name = names.back();
    if (i % 2 == 0) {
      t.cls = QosClass::kLatencyCritical;
      t.reserved_iops = rate / 2 / lc;
      t.p95_slo = absl::Milliseconds(5);
    }
    (void)s.SetTenant(t, now);
  }
  std::vector<QosRequest> go;
  uint64_t i = 0;
  for (auto _ : state) {
    const uint64_t t = i++ % n;
    s.Enqueue(names[t], {t, QosOp::kRead, 4096}, now);
    now += absl::Microseconds(1);
    go.clear();
    s.Schedule(now, &go);
    for (const QosRequest& r : go) {
      s.Complete(names[r.cookie], QosOp::kRead, 4096, absl::Microseconds(50),
                 now);
    }
  }
  state.SetItemsProcessed(state.iterations());
  state.counters["queued"] = static_cast<double>(s.queued());
}
BENCHMARK(BM_QosSchedule)->Arg(10)->Arg(1000);

class NullEndpoint : public Endpoint {
 public:
  void Submit(Io* io, std::string_view) override {
    io->bytes = io->header.length;
    io->Complete();
  }
};

void BM_RouteQosStage(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  SSwitch sw("bench");
  (void)sw.AddEndpoint("A", std::make_shared<NullEndpoint>());
  std::string spec = "q=qos:tokens_per_s=1000000000";
  std::vector<std::string> names;
  for (int i = 0; i < n; ++i) {
    names.push_back(StrCat("t", i));
    if (i % 2 == 0) StrAppend(&spec, ",tenant=t", i, "/lc/1000000/100/5000");
  }
  auto config = ParseStageSpec(spec);
  auto stage = StageRegistry::Global().Create(*config, StageEnv{});
  if (!stage.ok()) {
    state.SkipWithError(std::string(stage.status().message()).c_str());
    return;
  }
  (void)sw.AddStage("q", *stage);
  (void)sw.Insert(*ParseRule("<*, r, //A/data/*> -> <IO, stage:q>"));
  std::vector<char> buf(4096);
  uint64_t i = 0;
  for (auto _ : state) {
    Io io;
    io.header =
        IoHeader{names[i++ % n], "", Op::kRead, "//A/data/file.bin", 0, 4096};
    io.read_buffer = std::span<char>(buf.data(), 4096);
    std::atomic<bool> done{false};
    io.set_completion([&done](Io&) { done.store(true); });
    sw.Route(&io);
    // An IO that had to wait completes on the stage's thread.
    while (!done.load()) std::this_thread::yield();
  }
  state.SetItemsProcessed(state.iterations());
  (void)(*stage)->Stop();
}
BENCHMARK(BM_RouteQosStage)->Arg(10)->Arg(1000);

}  // namespace
}  // namespace sroute
