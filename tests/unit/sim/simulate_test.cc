// SPDX-License-Identifier: Apache-2.0
#include "sim/simulate.h"

#include <filesystem>
#include <string>

#include "gtest/gtest.h"
#include "sim/scenario.h"

namespace sroute::sim {
namespace {

// A rack of 4 servers (2 devices each) and 4 hosts on 10 Gb/s links.
std::string Rack(const std::string& flows, double duration_s = 0.5) {
  return R"(
name: "t" seed: 3 duration_s: )" +
         std::to_string(duration_s) + R"(
network { rack { link_gbps: 10 link_latency_us: 1 } }
servers { prefix: "S" count: 4 devices: 2 preset: "healthy" }
hosts { prefix: "H" count: 4 }
)" + flows;
}

proto::SimReport RunText(const std::string& text) {
  auto layout = ParseScenario(text, "t");
  EXPECT_TRUE(layout.ok()) << layout.status();
  if (!layout.ok()) return {};
  auto report = Simulate(*layout);
  EXPECT_TRUE(report.ok()) << report.status();
  return report.ok() ? *report : proto::SimReport();
}

TEST(SimulateTest, SameSeedSameResult) {
  const std::string text = Rack(
      R"(flows { hosts: "H" servers: "S" open_loop_iops: 3000 read_percent: 80
                 io_bytes: 16384 file_bytes: 33554432 zipf: 0.8 })");
  proto::SimReport a = RunText(text), b = RunText(text);
  ASSERT_GT(a.requests(), 0u);
  for (proto::SimReport* r : {&a, &b}) {
    r->clear_wall_s();
    r->clear_peak_rss_bytes();
  }
  EXPECT_EQ(a.SerializeAsString(), b.SerializeAsString());
}

TEST(SimulateTest, AnIdleReadCostsTheDeviceAndTheWire) {
  // A read now and then: no queue anywhere. Its time is the device's read
  // plus a 64 KiB transfer (52 us at 10 Gb/s, SimGrid's TCP model adds a
  // little), and a write is acknowledged from the device's buffer once
  // its data has crossed.
  const proto::SimReport r = RunText(Rack(
      R"(flows { hosts: "H0" servers: "S0" open_loop_iops: 20 read_percent: 50
                 io_bytes: 65536 file_bytes: 1048576 })",
      5));
  ASSERT_EQ(r.flows_size(), 1);
  const proto::SimFlowReport& f = r.flows(0);
  ASSERT_GT(f.reads(), 20u);
  ASSERT_GT(f.writes(), 20u);
  EXPECT_GT(f.read_p50_us(), 52 + 80);
  EXPECT_LT(f.read_p50_us(), 52 + 80 + 300);
  EXPECT_GT(f.write_p50_us(), 52);
  EXPECT_GT(f.network_share(), 0.2);
  EXPECT_LT(f.network_share(), 0.9);
  EXPECT_TRUE(r.converged()) << r.stopped();
  // The first pass already sends writes to storage after their transfer's
  // time on idle links: on an idle network the second pass agrees.
  EXPECT_EQ(r.iterations_size(), 2);

  // A host's own cost per IO comes on top, reads and writes alike.
  std::string costly = Rack(
      R"(flows { hosts: "H0" servers: "S0" open_loop_iops: 20 read_percent: 50
                 io_bytes: 65536 file_bytes: 1048576 })",
      5);
  costly.replace(costly.find("count: 4 }"), 10, "count: 4 io_cost_us: 500 }");
  const proto::SimReport c = RunText(costly);
  ASSERT_EQ(c.flows_size(), 1);
  EXPECT_NEAR(c.flows(0).read_p50_us(), f.read_p50_us() + 500, 50);
  EXPECT_NEAR(c.flows(0).write_p50_us(), f.write_p50_us() + 500, 50);
}

TEST(SimulateTest, IncastQueuesOnTheTargetsLinkAndTheIterationConverges) {
  // Every host writes 256 KiB blocks to one server at once: its 1 Gb/s
  // link is the bottleneck (4 hosts x 100 x 256 KiB is 0.84 Gb/s, in
  // bursts), so writes wait in the network, while the same load spread
  // over four servers does not. The devices (8 fast ones a server) keep up.
  auto with = [&](const std::string& target) {
    return RunText(R"(
name: "incast" seed: 5 duration_s: 1
network { rack { link_gbps: 1 link_latency_us: 1 } }
servers { prefix: "S" count: 4 devices: 8 preset: "fast" }
hosts { prefix: "H" count: 4 }
flows { hosts: "H" servers: ")" +
                   target + R"(" open_loop_iops: 100
        read_percent: 0 io_bytes: 262144 file_bytes: 1073741824 })");
  };
  const proto::SimReport incast = with("S0"), spread = with("S");
  ASSERT_EQ(incast.flows_size(), 1);
  ASSERT_EQ(spread.flows_size(), 1);
  // 4 hosts x 1 000 x 256 KiB = 8.4 Gb/s into one 10 Gb/s link.
  EXPECT_GT(incast.flows(0).write_p99_us(), 2 * spread.flows(0).write_p99_us());
  EXPECT_GT(incast.flows(0).network_share(), spread.flows(0).network_share());
  EXPECT_GE(incast.iterations_size(), 2);
  EXPECT_TRUE(incast.converged()) << incast.stopped();
  // Each pass after the first has its distance from the one before.
  for (int i = 1; i < incast.iterations_size(); ++i) {
    const auto& it = incast.iterations(i);
    EXPECT_NEAR(it.criterion(),
                (it.rd_mean() + it.rd_median() + it.rd_p90()) / 3, 1e-12);
  }
  EXPECT_EQ(incast.devices_size(), 32);
}

TEST(SimulateTest, ACollectingDeviceSlowsItsReads) {
  // Reads over four servers; S0's devices collect for 0.2 s of the 0.5:
  // reads there wait for erases (milliseconds), the other servers' do not.
  const std::string flows =
      R"(flows { hosts: "H" servers: "S" open_loop_iops: 2000 read_percent: 100
                 file_bytes: 268435456 })";
  const proto::SimReport quiet = RunText(Rack(flows));
  const proto::SimReport gc = RunText(Rack(
      flows + R"(events { at_s: 0.2 gc { device: "S0" duration_s: 0.2 } })"));
  auto device = [](const proto::SimReport& r, const std::string& name) {
    for (const auto& d : r.devices()) {
      if (d.name() == name) return d;
    }
    ADD_FAILURE() << "no device " << name;
    return proto::SimDeviceReport();
  };
  for (const char* d : {"S0/d0", "S0/d1"}) {
    EXPECT_GT(device(gc, d).p99_us(), 1000) << d;
    EXPECT_LT(device(quiet, d).p99_us(), 1000) << d;
  }
  EXPECT_LT(device(gc, "S1/d0").p99_us(), 1000);
  ASSERT_EQ(gc.flows_size(), 1);
  EXPECT_GT(gc.flows(0).read_p99_us(), 5 * quiet.flows(0).read_p99_us());
}

TEST(SimulateTest, ADeviceAsAFlashEndpointTakesIt) {
  // The words of a flash endpoint (bench/tail_latency.sh's slow device):
  // an idle read costs its 4 ms read, a write its buffer, not a program.
  const proto::SimReport r = RunText(R"(
name: "slow" seed: 2 duration_s: 5
network { rack { link_gbps: 10 link_latency_us: 1 } }
servers { prefix: "S" count: 1 devices: 1
          preset: "preset=small,channels=2,dies_per_channel=1,blocks_per_die=512,pages_per_block=64,read_us=4000,program_us=8000,buffer_pages=4" }
hosts { prefix: "H" count: 1 }
flows { hosts: "H0" servers: "S0" open_loop_iops: 10 read_percent: 50
        file_bytes: 16777216 })");
  ASSERT_EQ(r.flows_size(), 1);
  ASSERT_GT(r.flows(0).reads(), 10u);
  EXPECT_GE(r.flows(0).read_p50_us(), 4000);
  EXPECT_LT(r.flows(0).read_p50_us(), 4500);
  EXPECT_LT(r.flows(0).write_p50_us(), 4000);
}

TEST(SimulateTest, AScatteredWriteEndsWithItsSlowerCopy) {
  // 1 MiB writes (a device's whole write buffer: they wait for programs)
  // to a fast server alone, then scattered to it and a worn one. Every
  // write is one IO however many copies, and it ends with the slower copy.
  auto run = [&](const std::string& targets) {
    return RunText(R"(
name: "scatter" seed: 4 duration_s: 1
network { rack { link_gbps: 25 link_latency_us: 1 } }
servers { prefix: "F" count: 1 devices: 1 preset: "fast" }
servers { prefix: "W" count: 1 devices: 1 preset: "worn" }
hosts { prefix: "H" count: 2 }
rules: "<*, *, //vol/log> -> )" +
                   targets + R"("
flows { name: "log" hosts: "H" file: "//vol/log" open_loop_iops: 20
        read_percent: 0 io_bytes: 1048576 file_bytes: 67108864 }
)");
  };
  const proto::SimReport fast = run("<IO, //F0/log>");
  const proto::SimReport both = run("<IO, //F0/log>, <IO, //W0/log>");
  ASSERT_EQ(fast.flows_size(), 1);
  ASSERT_EQ(both.flows_size(), 1);
  EXPECT_EQ(fast.flows(0).writes(), both.flows(0).writes());
  EXPECT_NEAR(static_cast<double>(both.flows(0).writes()), 40, 15);
  EXPECT_EQ(both.requests(), 2 * both.flows(0).writes());
  EXPECT_GT(both.flows(0).write_p50_us(), 2 * fast.flows(0).write_p50_us());
}

TEST(SimulateTest, EveryCommittedExampleRuns) {
  int examples = 0;
  for (const auto& e : std::filesystem::directory_iterator(
           std::filesystem::path(SROUTE_SOURCE_DIR) / "examples/sim")) {
    if (e.path().extension() != ".textproto") continue;
    ++examples;
    auto layout = LoadScenario(e.path().string());
    ASSERT_TRUE(layout.ok()) << layout.status();
    auto report = Simulate(*layout);
    ASSERT_TRUE(report.ok()) << e.path() << ": " << report.status();
    EXPECT_GT(report->requests(), 0u) << e.path();
    EXPECT_GE(report->iterations_size(), 2) << e.path();
  }
  EXPECT_GE(examples, 2);
}

}  // namespace
}  // namespace sroute::sim
