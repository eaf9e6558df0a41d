// SPDX-License-Identifier: Apache-2.0
// BM_RpcRoundTrip/W: 4 KiB reads from a real StorageServer on loopback
// (its sSwitch and a local directory endpoint) over one connection, with W
// requests outstanding (W = 1: one at a time, the round-trip latency);
// traced:1 has every request traced (the server keeps its hops and sends
// them back: sroute-trace at 100 %).
#include <benchmark/benchmark.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <semaphore>
#include <string>

#include "rpc/channel.h"
#include "rpc/io_threads.h"
#include "server/storage_server.h"

namespace sroute {
namespace {

constexpr char kSecret[] = "bench-cluster-secret-0123456789";
constexpr size_t kFileBytes = 1 << 20;

struct RpcFixture {
  RpcFixture() {
    char tmpl[] = "/tmp/sroute-rpc-bench-XXXXXX";
    dir = mkdtemp(tmpl);
    std::ofstream(dir + "/data", std::ios::binary)
        << std::string(kFileBytes, 'd');
    proto::HostConfig o;
    o.set_name("S1");
    o.set_root(dir);
    o.set_listen("127.0.0.1:0");
    o.set_io_threads(1);
    server = *StorageServer::Start(o, {.secret = kSecret, .limits = {}});
    RpcChannel::Options c;
    c.address = server->address();
    c.secret = kSecret;
    c.name = "bench";
    c.connections = 1;
    channel = *RpcChannel::Create(&client_threads, c);
    (void)channel->Connect(absl::Seconds(5));
  }
  ~RpcFixture() {
    channel.reset();
    server.reset();
    std::filesystem::remove_all(dir);
  }
  std::string dir;
  IoThreads client_threads{1};
  std::unique_ptr<StorageServer> server;
  std::unique_ptr<RpcChannel> channel;
};

void BM_RpcRoundTrip(benchmark::State& state) {
  static RpcFixture* fixture = new RpcFixture();  // one server for all runs
  const int window = static_cast<int>(state.range(0));
  std::counting_semaphore<1024> slots(window);
  std::atomic<int64_t> errors{0};
  proto::RpcRequest req;
  proto::IoRequest* io = req.mutable_io();
  io->mutable_header()->set_op(0);  // read
  io->mutable_header()->set_length(4096);
  io->mutable_header()->set_source("bench");
  io->set_path("data");
  io->set_trace(state.range(1) != 0);
  uint64_t i = 0;
  for (auto _ : state) {
    slots.acquire();
    io->mutable_header()->set_offset((i++ * 4096 * 7) % kFileBytes);
    fixture->channel->Call(
        req, {}, absl::Seconds(10),
        [&](const absl::Status& s, proto::RpcReply& reply,
            std::span<const char> payload) {
          if (!s.ok() || reply.code() != 0 || payload.size() != 4096) {
            errors.fetch_add(1);
          }
          slots.release();
        });
  }
  for (int k = 0; k < window; ++k) slots.acquire();
  state.SetItemsProcessed(state.iterations());
  state.counters["errors"] = static_cast<double>(errors.load());
}
BENCHMARK(BM_RpcRoundTrip)
    ->ArgsProduct({{1, 64}, {0, 1}})
    ->ArgNames({"window", "traced"})
    ->UseRealTime();

}  // namespace
}  // namespace sroute
BENCHMARK_MAIN();
