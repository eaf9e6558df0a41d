// BM_FlashModel/W: the cost of the emulated flash device's timing model
// (stages/flash/flash_model.h) per modelled IO, on the "rackblox" preset
// (32 dies, 1 M logical pages, GC on its own), half reads and half writes
// of random pages of a device W % full, model time moving 5 us per IO so
// the write buffer and GC work as under load. Issue 24 asks for at least
// 1 M modelled IOs per second per core: the model is never the bottleneck.
#include <benchmark/benchmark.h>

#include <random>

#include "stages/flash/flash_model.h"

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

}  // namespace
}  // namespace sroute
