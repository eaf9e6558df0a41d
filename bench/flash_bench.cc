// SPDX-License-Identifier: Apache-2.0
// BM_FlashModel/W: the cost of the emulated flash device's timing model
// (endpoints/flash_model.h) per modelled IO, on the "rackblox" preset
// (32 dies, 1 M logical pages, GC on its own), half reads and half writes
// of random pages of a device W % full, model time moving 5 us per IO so
// the write buffer and GC work as under load. Issue 24 asks for at least
// 1 M modelled IOs per second per core: the model is never the bottleneck.
#include <benchmark/benchmark.h>

#include <chrono>
#include <random>
#include <thread>

#include "embed/embedded_host.h"
#include "endpoints/flash_endpoint.h"
#include "endpoints/flash_model.h"
#include "stages/stage.h"
#include "tests/util/temp_dir.h"

namespace sroute {
namespace {

void BM_FlashModel(benchmark::State& state) {
  auto o = FlashModel::Preset("rackblox");
  if (!o.ok()) {
    state.SkipWithError("no preset");
    return;
  }
  FlashModel m(*o);
  const uint64_t pages = m.logical_pages() * state.range(0) / 100;
  uint64_t now = 1'000'000;
  for (uint64_t lpn = 0; lpn < pages; ++lpn) {  // pre-filled: GC has work
    m.Write(lpn, now);
    now += 5'000;
  }
  std::mt19937_64 rng(1);
  uint64_t sink = 0;
  for (auto _ : state) {
    const uint64_t r = rng();
    const uint64_t lpn = (r >> 1) % pages;
    sink += (r & 1) ? m.Write(lpn, now).done_ns : m.Read(lpn, now).done_ns;
    now += 5'000;
  }
  benchmark::DoNotOptimize(sink);
  const FlashState s = m.State(now);
  state.counters["gc_passes"] = static_cast<double>(s.gc_passes);
  state.counters["free_ratio"] = s.free_ratio;
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_FlashModel)->Arg(50)->Arg(80)->ArgName("full");

// A device that answers at once, and tells a replica set's GC coordination
// that it collects (for ever) or not.
class InstantDevice : public Endpoint {
 public:
  explicit InstantDevice(bool collecting) : collecting_(collecting) {}
  void Submit(Io* io, std::string_view) override {
    if (io->header.op == Op::kGetxattr &&
        io->args.xattr_name == kFlashStateXattr) {
      io->data = collecting_ ? "free_permille=200 need=regular gc=1 "
                               "gc_left_us=1000000000"
                             : "free_permille=600 need=none gc=0";
    }
    io->bytes = io->header.length;
    io->Complete();
  }

 private:
  const bool collecting_;
};

// BM_GcRedirect/M: a 4 KiB read through a replica_set stage of two members
// on devices that answer at once, read policy random: M=0 GC coordination
// off; 1 redirect, no member collecting; 2 redirect, the first member
// collecting (every read it would take goes to the other). The difference
// from M=0 is the redirect decision's cost per IO in the data path.
void BM_GcRedirect(benchmark::State& state) {
  const int mode = static_cast<int>(state.range(0));
  testing::TempDir dir;
  EmbeddedHost host("bench");
  (void)host.AddEndpoint("V1", std::make_shared<InstantDevice>(mode == 2));
  (void)host.AddEndpoint("V2", std::make_shared<InstantDevice>(false));
  proto::StageConfig config;
  config.set_name("rs");
  config.set_kind("replica_set");
  config.mutable_replica_set()->add_member("V1");
  config.mutable_replica_set()->add_member("V2");
  config.mutable_replica_set()->set_read("random");
  if (mode > 0) {
    config.mutable_replica_set()->set_gc("redirect");
    config.mutable_replica_set()->set_gc_poll_us(100);
  }
  StageEnv env;
  env.sswitch = &host.sswitch();
  env.state_dir = dir.path();
  auto stage = StageRegistry::Global().Create(config, env);
  if (!stage.ok()) {
    state.SkipWithError(std::string(stage.status().message()).c_str());
    return;
  }
  (void)host.AddStage("rs", *stage);
  (void)host.LoadRules("<*, *, //home/*> -> <IO, stage:rs>\n");
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // asked once
  std::vector<char> buf(4096);
  for (auto _ : state) {
    auto n = host.Read("t", "//home/f", 0, std::span<char>(buf));
    benchmark::DoNotOptimize(n);
  }
  proto::StageStats stats;
  (*stage)->Report(&stats);
  const auto it = stats.counters().find("gc_redirects");
  state.counters["redirected"] =
      it == stats.counters().end()
          ? 0.0
          : static_cast<double>(it->second) /
                static_cast<double>(state.iterations());
  (void)(*stage)->Stop();
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_GcRedirect)->Arg(0)->Arg(1)->Arg(2)->ArgName("mode");

}  // namespace
}  // namespace sroute
