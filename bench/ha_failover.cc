// SPDX-License-Identifier: Apache-2.0
// Failover of the controller on etcd (issue 29): a three-member etcd
// cluster, two sroute-controller processes and one sroute-server, all on
// 127.0.0.1. Each trial SIGKILLs the leader and times how long until an
// update (one rule replaced on the server) commits through the other, as a
// client given both addresses sees it; the killed controller is then
// started again (it follows) for the next trial.
//
//   ha_failover [TRIALS (10)] [LEADER_TTL_S (3)]
//
// Prints each trial, then p50 and max.
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "controller/client.h"
#include "tests/util/etcd_cluster.h"
#include "tests/util/server_process.h"
#include "tests/util/temp_dir.h"

namespace sroute {
namespace {

using Clock = std::chrono::steady_clock;

const std::string kSecret = "bench-cluster-secret-0123456789";

int Run(int trials, int ttl_s) {
  testing::EtcdCluster etcd(3);
  if (!etcd.ok()) {
    std::fprintf(stderr, "etcd did not start\n");
    return 1;
  }
  testing::TempDir keys, root;
  const std::string secret = testing::WriteSecretFile(keys / "secret", kSecret);
  const int ports[2] = {testing::FreeLoopbackPort(),
                        testing::FreeLoopbackPort()};
  auto address = [&](int i) { return "127.0.0.1:" + std::to_string(ports[i]); };
  const std::string all = address(0) + "," + address(1);
  std::unique_ptr<testing::ServerProcess> controllers[2];
  auto start = [&](int i) {
    controllers[i] = std::make_unique<testing::ServerProcess>(
        SROUTE_CONTROLLER_BINARY,
        std::vector<std::string>{
            "--store", "etcd://" + etcd.endpoints() + "/bench/",
            "--secret-file", secret, "--listen", address(i), "--id",
            "c" + std::to_string(i), "--leader-ttl-s", std::to_string(ttl_s)});
    return controllers[i]->ok();
  };
  if (!start(0) || !start(1)) {
    std::fprintf(stderr, "a controller did not start\n");
    return 1;
  }
  testing::ServerProcess server(
      SROUTE_SERVER_BINARY,
      {"--root", root.path(), "--name", "S1", "--secret-file", secret,
       "--listen", "127.0.0.1:0", "--controller", all});
  if (!server.ok()) {
    std::fprintf(stderr, "sroute-server did not start\n");
    return 1;
  }
  ControllerClient::Options o;
  o.address = all;
  o.secret = kSecret;
  o.name = "bench";
  o.timeout = absl::Seconds(2);
  uint64_t round = 0;
  std::vector<uint64_t> live;
  // One update on S1 through `client`; true when it committed.
  auto update = [&](ControllerClient& client) {
    UpdateSpec spec;
    RuleChanges c;
    c.sswitch = "S1";
    c.insert.push_back("<*, w, //S1/f> -> <IO, //S1/r" + std::to_string(round) +
                       "/f>");
    c.remove = live;
    spec.changes.push_back(std::move(c));
    auto r = client.Update(spec);
    if (!r.ok()) return false;
    live = r->cids;
    ++round;
    return true;
  };
  auto leader = [&]() -> int {
    auto client = ControllerClient::Connect(o);
    if (!client.ok()) return -1;
    auto m = (*client)->ListControllers();
    if (!m.ok()) return -1;
    for (const auto& member : m->members()) {
      for (int i = 0; i < 2; ++i) {
        if (member.leader() && member.address() == address(i)) return i;
      }
    }
    return -1;
  };
  std::vector<double> seconds;
  for (int t = 0; t < trials; ++t) {
    // Steady state: a leader, the server registered, an update going through.
    int lead = -1;
    for (int i = 0; i < 300 && lead < 0; ++i) {
      lead = leader();
      if (lead < 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    if (lead < 0) {
      std::fprintf(stderr, "no leader\n");
      return 1;
    }
    {
      auto client = ControllerClient::Connect(o);
      bool ok = false;
      for (int i = 0; i < 300 && !ok; ++i) {
        ok = client.ok() && update(**client);
        if (!ok) std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
      if (!ok) {
        std::fprintf(stderr, "no update before the kill\n");
        return 1;
      }
    }
    const auto killed = Clock::now();
    controllers[lead]->Kill();
    // The first update committed after the kill, by whoever leads.
    bool ok = false;
    while (!ok) {
      auto client = ControllerClient::Connect(o);
      ok = client.ok() && update(**client);
      if (!ok) std::this_thread::sleep_for(std::chrono::milliseconds(20));
      if (Clock::now() - killed > std::chrono::seconds(60)) {
        std::fprintf(stderr, "no update within 60 s of the kill\n");
        return 1;
      }
    }
    const double s =
        std::chrono::duration<double>(Clock::now() - killed).count();
    seconds.push_back(s);
    std::printf(
        "trial %d: leader c%d killed, first update committed after "
        "%.3f s\n",
        t + 1, lead, s);
    std::fflush(stdout);
    if (!start(lead)) {
      std::fprintf(stderr, "the killed controller did not start again\n");
      return 1;
    }
  }
  std::sort(seconds.begin(), seconds.end());
  std::printf(
      "failover (leader TTL %d s) over %d trials: p50 %.3f s, max "
      "%.3f s\n",
      ttl_s, trials, seconds[seconds.size() / 2], seconds.back());
  return 0;
}

}  // namespace
}  // namespace sroute

int main(int argc, char** argv) {
  signal(SIGPIPE, SIG_IGN);
  const int trials = argc > 1 ? std::atoi(argv[1]) : 10;
  const int ttl = argc > 2 ? std::atoi(argv[2]) : 3;
  return sroute::Run(std::max(1, trials), std::max(1, ttl));
}
