// SPDX-License-Identifier: Apache-2.0
// cache_bench: the cache stage's hit path, and cache sizing with SHARDS
// measured on a real cache stage.
//
//   build/bench/cache_bench                       # both parts
//   build/bench/cache_bench --benchmark_filter=BM_Read4k   # hit path only
//   build/bench/cache_bench --sizing-only
//   build/bench/cache_bench --admission-only      # hit ratios by policy
//
// BM_Read4k/stage:0  4 KiB random reads of a 64 MiB file on a local
//                    endpoint (in the page cache), no stage: a pread each.
// BM_Read4k/stage:1  the same reads through a DRAM cache partition that
//                    holds the file (every read a hit).
//
// Sizing: two tenants with different working sets (alice Zipf(0.9) over
// 60 000 blocks, bob uniform over 16 000) share a 24 000-block budget. The
// cache_sizing app's logic (controller/apps/cache_sizing.h) splits it from
// SHARDS samples at 1 % and 0.1 %; the best split is found offline by brute
// force on the exact curves; both and the equal split are then replayed
// through a real cache stage (S3-FIFO off: LRU, the policy the curves
// model) and their measured hit ratios compared. Also the curves' mean
// absolute error against the exact ones.
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "controller/apps/cache_sizing.h"
#include "embed/embedded_host.h"
#include "stages/cache/block_cache.h"
#include "stages/stage.h"
#include "stages/stage_spec.h"
#include "tests/util/zipf.h"
#include "util/strings.h"

namespace sroute {
namespace {

constexpr uint64_t kBlock = 4096;

std::string TempDirectory() {
  char tmpl[] = "/tmp/sroute-cache-bench-XXXXXX";
  return mkdtemp(tmpl);
}

std::shared_ptr<HostStage> AddCache(EmbeddedHost& host,
                                    const std::string& spec) {
  auto config = ParseStageSpec(spec);
  auto stage =
      StageRegistry::Global().Create(*config, StageEnv{&host.sswitch(), {}});
  if (!stage.ok()) {
    std::fprintf(stderr, "%s\n", std::string(stage.status().message()).c_str());
    std::exit(1);
  }
  (void)host.AddStage(config->name(), *stage);
  return *stage;
}

void BM_Read4k(benchmark::State& state) {
  const bool stage = state.range(0) == 1;
  const std::string dir = TempDirectory();
  constexpr uint64_t kFile = 64ull << 20;
  {
    std::string data(kFile, '\0');
    std::mt19937_64 rng(1);
    for (size_t i = 0; i < data.size(); i += 8) {
      const uint64_t v = rng();
      std::memcpy(&data[i], &v, 8);
    }
    FILE* f = std::fopen((dir + "/file").c_str(), "w");
    std::fwrite(data.data(), 1, data.size(), f);
    std::fclose(f);
  }
  EmbeddedHost host("bench");
  (void)host.AddLocalEndpoint("home", dir);
  std::shared_ptr<HostStage> cache;
  if (stage) {
    cache = AddCache(host, "c=cache:partition_bytes=128M");
    (void)host.LoadRules("<*, r, //home/*> -> <IO, stage:c>");
  }
  std::vector<char> buf(kBlock);
  // Warm: every block read once (page cache; and the cache stage).
  for (uint64_t off = 0; off < kFile; off += kBlock) {
    (void)host.Read("t", "//home/file", off, std::span<char>(buf));
  }
  std::mt19937_64 rng(2);
  for (auto _ : state) {
    const uint64_t off = (rng() % (kFile / kBlock)) * kBlock;
    auto got = host.Read("t", "//home/file", off, std::span<char>(buf));
    benchmark::DoNotOptimize(got);
  }
  state.SetItemsProcessed(state.iterations());
  if (cache) (void)cache->Stop();
  std::filesystem::remove_all(dir);
}
BENCHMARK(BM_Read4k)->Arg(0)->Arg(1)->ArgName("stage");

// --- Sizing ---

using ::sroute::testing::Zipf;

struct Trace {
  std::vector<uint64_t> a, b;  // block numbers
};

Trace MakeTrace(size_t n) {
  Trace t;
  std::mt19937_64 rng(7);
  Zipf zipf(60000, 0.9);
  std::uniform_int_distribution<uint64_t> uniform(0, 15999);
  for (size_t i = 0; i < n; ++i) {
    t.a.push_back(zipf(rng));
    t.b.push_back(uniform(rng));
  }
  return t;
}

// Hit ratio of both tenants' reads through a real cache stage with these
// partition sizes (blocks), LRU.
double Replay(const Trace& t, uint64_t a_blocks, uint64_t b_blocks) {
  const std::string dir = TempDirectory();
  for (const char* f : {"/a", "/b"}) {
    FILE* file = std::fopen((dir + f).c_str(), "w");
    std::fclose(file);
    std::filesystem::resize_file(dir + f, 60000 * kBlock);
  }
  EmbeddedHost host("sizing");
  (void)host.AddLocalEndpoint("home", dir);
  auto cache =
      AddCache(host, "c=cache:policy=lru,partition_bytes=0,partition=alice/" +
                         std::to_string(a_blocks * kBlock) + ",partition=bob/" +
                         std::to_string(b_blocks * kBlock));
  (void)host.LoadRules("<*, r, //home/*> -> <IO, stage:c>");
  std::vector<char> buf(kBlock);
  for (size_t i = 0; i < t.a.size(); ++i) {
    (void)host.Read("alice", "//home/a", t.a[i] * kBlock, std::span<char>(buf));
    (void)host.Read("bob", "//home/b", t.b[i] * kBlock, std::span<char>(buf));
  }
  proto::StageStats stats;
  cache->Report(&stats);
  (void)cache->Stop();
  std::filesystem::remove_all(dir);
  auto c = [&](const std::string& k) {
    auto it = stats.counters().find(k);
    return it == stats.counters().end() ? 0.0 : static_cast<double>(it->second);
  };
  const double hits = c("alice.hits") + c("bob.hits");
  return hits / (2.0 * static_cast<double>(t.a.size()));
}

void Sizing() {
  constexpr uint64_t kBudget = 24000;
  const Trace t = MakeTrace(600000);
  CacheSizingOptions base;
  base.sswitch = "h";
  base.budget_bytes = kBudget * kBlock;
  base.tenants = {"alice", "bob"};
  base.block = kBlock;
  const uint64_t step = CacheSizer(base).step_blocks();
  MrcOptions mo{.bucket_blocks = step, .max_blocks = kBudget};
  std::vector<uint64_t> ka, kb;
  for (size_t i = 0; i < t.a.size(); ++i) {
    ka.push_back(BlockKey("//home/a", t.a[i]));
    kb.push_back(BlockKey("//home/b", t.b[i]));
  }
  const std::vector<TenantCurve> exact = {
      {ExactMrc(ka, mo), static_cast<double>(ka.size())},
      {ExactMrc(kb, mo), static_cast<double>(kb.size())}};
  const std::vector<uint64_t> best = BruteForceAllocate(exact, kBudget, step);
  const double best_ratio = Replay(t, best[0], best[1]);
  const double equal_ratio = Replay(t, kBudget / 2, kBudget / 2);
  std::printf("sizing: budget %lu blocks, step %lu\n",
              static_cast<unsigned long>(kBudget),
              static_cast<unsigned long>(step));
  std::printf(
      "  best split (exact curves, brute force) alice %lu bob %lu: "
      "hit ratio %.4f\n",
      static_cast<unsigned long>(best[0]), static_cast<unsigned long>(best[1]),
      best_ratio);
  std::printf("  equal split: hit ratio %.4f (%.4f of the best)\n", equal_ratio,
              equal_ratio / best_ratio);
  for (double rate : {0.01, 0.001}) {
    CacheSizer sizer(base);
    auto sampler = *ShardsSampler::Create({.rate = rate});
    for (size_t i = 0; i < ka.size(); ++i) {
      if (sampler->Sample(ka[i]))
        sizer.AddSample("alice", rate, i + 1, {ka[i]});
      if (sampler->Sample(kb[i])) sizer.AddSample("bob", rate, i + 1, {kb[i]});
    }
    const auto split = sizer.Split();
    const auto curves = sizer.Curves();
    const double mae_a =
        MeanAbsoluteError(curves.at("alice").mrc, exact[0].mrc);
    const double mae_b = MeanAbsoluteError(curves.at("bob").mrc, exact[1].mrc);
    const double ratio =
        Replay(t, split.at("alice") / kBlock, split.at("bob") / kBlock);
    std::printf(
        "  SHARDS %.1f%%: split alice %lu bob %lu: hit ratio %.4f "
        "(%.4f of the best, %.3fx the equal split); curve MAE alice "
        "%.4f bob %.4f\n",
        rate * 100, static_cast<unsigned long>(split.at("alice") / kBlock),
        static_cast<unsigned long>(split.at("bob") / kBlock), ratio,
        ratio / best_ratio, ratio / equal_ratio, mae_a, mae_b);
  }
}

// Admission: Zipf(0.99) reads over 65 536 blocks (bench/server_fio.sh's
// 256 MiB file) through a partition of a tenth of them, a miss filling, the
// keys scattered as a file's offsets are; the hit ratio over the last two
// thirds of 3 000 000 reads for LRU, S3-FIFO (admission=none) and
// frequency admission, beside the static oracle's (the most popular
// blocks held).
void AdmissionHitRatios() {
  constexpr uint64_t kKeys = 65536, kCapacity = kKeys / 10;
  constexpr int kReads = 3'000'000, kCounted = 2'000'000;
  const Zipf zipf(kKeys, 0.99);
  double top = 0, all = 0;
  for (uint64_t i = 0; i < kKeys; ++i) {
    const double w = 1 / std::pow(static_cast<double>(i + 1), 0.99);
    all += w;
    if (i < kCapacity) top += w;
  }
  std::printf("admission: Zipf(0.99) over %llu blocks, a partition of %llu\n",
              static_cast<unsigned long long>(kKeys),
              static_cast<unsigned long long>(kCapacity));
  std::printf("  oracle (the %llu most popular held): hit ratio %.4f\n",
              static_cast<unsigned long long>(kCapacity), top / all);
  const struct {
    const char* name;
    Policy policy;
    Admission admission;
  } kinds[] = {
      {"lru", Policy::kLru, Admission::kAll},
      {"s3fifo, admission=none (default)", Policy::kS3Fifo, Admission::kAll},
      {"s3fifo, admission=frequency", Policy::kS3Fifo, Admission::kFrequency}};
  for (const auto& kind : kinds) {
    Partition p(kind.policy, kCapacity, 64, kind.admission);
    std::mt19937_64 rng(7);
    uint64_t hits = 0;
    for (int i = 0; i < kReads; ++i) {
      const uint64_t key = zipf(rng) * 40503 % kKeys;
      const bool hit = p.Lookup(1, key) != nullptr;
      if (!hit) p.Insert(1, key);
      if (i >= kReads - kCounted) hits += hit;
    }
    const double ratio = static_cast<double>(hits) / kCounted;
    std::printf("  %-38s hit ratio %.4f (%.3f of the oracle's)\n", kind.name,
                ratio, ratio / (top / all));
  }
  // The hot set moving, as bench/server_fio.sh's workloads move it: one
  // stream (fio's one job), then four interleaved at other offsets of the
  // file (four jobs, each its own hot set), three rounds; the hit ratio of
  // each phase after its first sixth.
  for (const auto& kind : kinds) {
    if (kind.policy != Policy::kS3Fifo) continue;
    Partition p(kind.policy, kCapacity, 64, kind.admission);
    std::mt19937_64 rng(7);
    const uint64_t offsets[5] = {0, 12345, 33333, 47001, 59999};
    std::printf("  hot set moving, %-28s 1 job / 4 jobs:", kind.name);
    for (int round = 0; round < 3; ++round) {
      for (int jobs : {1, 4}) {
        const int reads = jobs == 1 ? 564'000 : 700'000;
        uint64_t hits = 0;
        for (int i = 0; i < reads; ++i) {
          const uint64_t at = jobs == 1 ? offsets[0] : offsets[1 + i % 4];
          const uint64_t key = (zipf(rng) * 40503 + at) % kKeys;
          const bool hit = p.Lookup(1, key) != nullptr;
          if (!hit) p.Insert(1, key);
          if (i >= reads / 6) hits += hit;
        }
        std::printf(" %.4f", static_cast<double>(hits) / (reads - reads / 6));
      }
    }
    std::printf("\n");
  }
  // The same reads through a real cache stage (its partition and counters)
  // on a local file, as bench/server_fio.sh's runs see them: three runs of
  // 564 000 reads back to back, the first 94 000 of each a warm-up.
  for (const char* admission : {"none", "frequency"}) {
    const std::string dir = TempDirectory();
    FILE* file = std::fopen((dir + "/z").c_str(), "w");
    std::fclose(file);
    std::filesystem::resize_file(dir + "/z", kKeys * kBlock);
    EmbeddedHost host("admission");
    (void)host.AddLocalEndpoint("home", dir);
    auto cache =
        AddCache(host, StrCat("c=cache:partition_bytes=", kCapacity * kBlock,
                              ",admission=", admission));
    (void)host.LoadRules("<*, r, //home/*> -> <IO, stage:c>");
    std::vector<char> buf(kBlock);
    std::mt19937_64 rng(7);
    auto hits_now = [&] {
      proto::StageStats stats;
      cache->Report(&stats);
      auto it = stats.counters().find("root.hits");
      return it == stats.counters().end() ? 0.0
                                          : static_cast<double>(it->second);
    };
    std::printf("  through a cache stage, admission=%s:", admission);
    for (int run = 0; run < 3; ++run) {
      double before = 0;
      for (int i = 0; i < 564'000; ++i) {
        if (i == 94'000) before = hits_now();
        const uint64_t key = zipf(rng) * 40503 % kKeys;
        (void)host.Read("root", "//home/z", key * kBlock, std::span<char>(buf));
      }
      std::printf(" %.4f", (hits_now() - before) / 470'000);
    }
    std::printf("\n");
    (void)cache->Stop();
    std::filesystem::remove_all(dir);
  }
}

}  // namespace
}  // namespace sroute

int main(int argc, char** argv) {
  bool sizing_only = false, admission_only = false;
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    if (std::string(argv[i]) == "--sizing-only") {
      sizing_only = true;
    } else if (std::string(argv[i]) == "--admission-only") {
      admission_only = true;
    } else {
      args.push_back(argv[i]);
    }
  }
  int n = static_cast<int>(args.size());
  if (!sizing_only && !admission_only) {
    benchmark::Initialize(&n, args.data());
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
  }
  if (!admission_only) sroute::Sizing();
  if (!sizing_only) sroute::AdmissionHitRatios();
  return 0;
}
