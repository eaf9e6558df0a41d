// SPDX-License-Identifier: Apache-2.0
// sroute-sim's kinds of flows beyond open loop (closed loop, YCSB mixes,
// trace files) and servers that die.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sim/scenario.h"
#include "sim/simulate.h"
#include "sim/workload.h"

namespace sroute::sim {
namespace {

using ::testing::HasSubstr;

// One server of one slow device (4 ms reads, 8 ms programs behind a
// 4-page buffer: bench/tail_latency.sh's) and one host.
std::string Slow(const std::string& flows, double duration_s = 2) {
  return "name: \"slow\" seed: 9 duration_s: " + std::to_string(duration_s) +
         R"(
network { rack { link_gbps: 10 link_latency_us: 1 } }
servers { prefix: "S" count: 2 devices: 1
          preset: "preset=small,channels=2,dies_per_channel=1,blocks_per_die=512,pages_per_block=64,read_us=4000,program_us=8000,buffer_pages=4" }
hosts { prefix: "H" count: 2 io_cost_us: 100 }
)" + flows;
}

proto::SimReport SimFlows(const std::string& text, bool curves = false) {
  auto layout = ParseScenario(text, "t.textproto");
  EXPECT_TRUE(layout.ok()) << layout.status();
  if (!layout.ok()) return {};
  auto report = Simulate(*layout, SimOptions{.curves = curves});
  EXPECT_TRUE(report.ok()) << report.status();
  return report.ok() ? *report : proto::SimReport();
}

std::string FlowsError(const std::string& text) {
  auto layout = ParseScenario(text, "t.textproto");
  return layout.ok() ? "ok" : std::string(layout.status().message());
}

// The mean latency from a report's CDFs (their 1 % steps), reads and
// writes weighed by their counts.
double MeanFromCdf(const proto::SimFlowReport& f) {
  auto mean = [](const auto& cdf) {
    double sum = 0;
    int n = 0;
    for (const proto::SimQuantile& q : cdf) {
      if (q.fraction() > 0.995) continue;  // the 1 % steps only
      sum += q.us();
      ++n;
    }
    return n == 0 ? 0.0 : sum / n;
  };
  const double reads = static_cast<double>(f.reads());
  const double writes = static_cast<double>(f.writes());
  return (reads * mean(f.read_cdf()) + writes * mean(f.write_cdf())) /
         (reads + writes);
}

TEST(ClosedLoopTest, ASlotIssuesItsNextIoWhenTheLastEndsAndItsThinkTime) {
  // One IO at a time, reads only: each takes the device's 4 ms read, the
  // host's 100 us and the wire; then the slot thinks 1 ms.
  const proto::SimReport r = SimFlows(Slow(
      R"(flows { name: "one" hosts: "H0" servers: "S0" closed_loop_depth: 1
                 think_us: 1000 read_percent: 100 file_bytes: 16777216 })"));
  ASSERT_EQ(r.flows_size(), 1);
  const proto::SimFlowReport& f = r.flows(0);
  EXPECT_EQ(f.writes(), 0u);
  ASSERT_GT(f.reads(), 100u);
  EXPECT_GE(f.read_p50_us(), 4100);
  EXPECT_LT(f.read_p99_us(), 4500);
  // IOs a second x (latency + think) = 1 slot.
  EXPECT_NEAR(f.iops() * (f.read_p50_us() + 1000) * 1e-6, 1.0, 0.03);
  EXPECT_TRUE(r.converged()) << r.stopped();
}

TEST(ClosedLoopTest, ADeepLoopSaturatesTheDeviceAndKeepsLittlesLaw) {
  const std::string text = Slow(
      R"(flows { name: "deep" hosts: "H0" servers: "S0" closed_loop_depth: 32
                 read_percent: 50 file_bytes: 16777216 })");
  const proto::SimReport r = SimFlows(text, /*curves=*/true);
  ASSERT_EQ(r.flows_size(), 1);
  const proto::SimFlowReport& f = r.flows(0);
  // The device takes ~250 writes and ~500 reads a second: half and half,
  // a few hundred IOs a second, and the 32 slots wait in its queue.
  EXPECT_GT(f.iops(), 250);
  EXPECT_LT(f.iops(), 600);
  EXPECT_GT(f.write_p50_us(), 20'000);
  // Little's law: IOs in flight = throughput x latency = the depth.
  EXPECT_NEAR(f.iops() * MeanFromCdf(f) * 1e-6, 32, 32 * 0.1);
  EXPECT_TRUE(r.converged()) << r.stopped();
  // A second host with a loop of its own halves this one's share.
  const proto::SimReport two = SimFlows(
      text +
      R"(flows { name: "other" hosts: "H1" servers: "S0" closed_loop_depth: 32
                 read_percent: 50 file_bytes: 16777216 })");
  ASSERT_EQ(two.flows_size(), 2);
  EXPECT_NEAR(two.flows(0).iops() / f.iops(), 0.5, 0.1);
  EXPECT_NEAR(two.flows(0).iops(), two.flows(1).iops(),
              0.1 * two.flows(1).iops());
  // Deterministic like every run.
  proto::SimReport again = SimFlows(text, true), first = r;
  for (proto::SimReport* x : {&again, &first}) {
    x->clear_wall_s();
    x->clear_peak_rss_bytes();
  }
  EXPECT_EQ(again.SerializeAsString(), first.SerializeAsString());
}

TEST(YcsbTest, EachWorkloadDrawsItsMix) {
  auto ios = [&](const std::string& mix) {
    auto layout = ParseScenario(
        Slow(R"(flows { name: "y" hosts: "H" servers: "S" open_loop_iops: 4000
                        ycsb: ")" +
             mix + R"(" file_bytes: 16777216 })"),
        "t");
    EXPECT_TRUE(layout.ok()) << layout.status();
    return DrawIos(*layout);
  };
  auto reads = [](const std::vector<Io>& v) {
    double n = 0;
    for (const Io& io : v) n += io.read;
    return n / static_cast<double>(v.size());
  };
  EXPECT_NEAR(reads(ios("A")), 0.50, 0.03);
  EXPECT_NEAR(reads(ios("B")), 0.95, 0.02);
  EXPECT_EQ(reads(ios("C")), 1.0);
  // D reads the latest records: above the initial ones' middle, mostly.
  const std::vector<Io> d = ios("D");
  EXPECT_NEAR(reads(d), 0.95, 0.02);
  double newest_half = 0, d_reads = 0;
  for (const Io& io : d) {
    if (!io.read) {
      EXPECT_GE(io.offset, 16777216u);  // an insert: after the records
      continue;
    }
    d_reads += 1;
    newest_half += io.offset >= 16777216 / 2;
  }
  EXPECT_GT(newest_half / d_reads, 0.8);
  // E scans 1 to 100 records.
  const std::vector<Io> e = ios("E");
  uint32_t longest = 0;
  for (const Io& io : e) {
    if (io.read) longest = std::max(longest, io.bytes);
    if (!io.read) {
      EXPECT_EQ(io.bytes, 4096u);
    }
  }
  EXPECT_GT(longest, 50u * 4096);
  EXPECT_LE(longest, 100u * 4096);
  // F: reads, half of them read-modify-writes.
  const std::vector<Io> f = ios("F");
  double rmw = 0;
  for (const Io& io : f) {
    EXPECT_TRUE(io.read);
    rmw += io.rmw;
  }
  EXPECT_NEAR(rmw / static_cast<double>(f.size()), 0.5, 0.03);
}

TEST(YcsbTest, AReadModifyWritesWriteFollowsItsRead) {
  auto layout = ParseScenario(
      Slow(R"(flows { name: "f" hosts: "H0" servers: "S" open_loop_iops: 50
                      ycsb: "F" file_bytes: 16777216 })"),
      "t");
  ASSERT_TRUE(layout.ok()) << layout.status();
  const Workload w(*layout);
  EXPECT_TRUE(w.dynamic());
  const Io* rmw = nullptr;
  for (const Io& io : w.fixed()) {
    if (io.rmw) rmw = &io;
  }
  ASSERT_NE(rmw, nullptr);
  const std::optional<Io> write = w.Next(*rmw, rmw->arrival_ns + 4'000'000);
  ASSERT_TRUE(write.has_value());
  EXPECT_FALSE(write->read);
  EXPECT_EQ(write->offset, rmw->offset);
  EXPECT_EQ(write->arrival_ns, rmw->arrival_ns + 4'000'000);
  EXPECT_NE(write->key, rmw->key);
  EXPECT_FALSE(w.Next(*write, write->arrival_ns + 1).has_value());
  // Run: a write for each read-modify-write, each after its read's 4 ms.
  const proto::SimReport r = SimFlows(
      Slow(R"(flows { name: "f" hosts: "H0" servers: "S" open_loop_iops: 50
                      ycsb: "F" file_bytes: 16777216 })",
           4));
  ASSERT_EQ(r.flows_size(), 1);
  EXPECT_NEAR(static_cast<double>(r.flows(0).writes()),
              static_cast<double>(r.flows(0).reads()) / 2,
              0.1 * static_cast<double>(r.flows(0).reads()));
}

class TraceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("sim-trace-" + std::to_string(getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name) << text;
    return (dir_ / name).string();
  }
  absl::StatusOr<Layout> Load(const std::string& trace_lines,
                              const std::string& flow_extra = "") {
    Write("t.trace", trace_lines);
    const std::string scenario =
        Write("s.textproto", Slow(R"(rules: "<*, *, //vol/a> -> <IO, //S1/a>"
flows { name: "replay" hosts: "H" trace: "t.trace" )" +
                                      flow_extra + " }",
                                  1));
    return LoadScenario(scenario);
  }
  std::filesystem::path dir_;
};

TEST_F(TraceTest, ItsLinesAreTheIosRoutedAndOnTheirHosts) {
  auto layout = Load(
      "# time source op file offset length\n"
      "0.10, H1, w, //vol/a, 0, 8192\n"
      "0.05 app r //vol/a 6000 4000  # two pages: 4096..12287\n"
      "0.20 H0 read - 0 4096\n"
      "2.0 H0 r //vol/a 0 4096  # after the run: left out\n",
      R"(servers: "S0")");
  ASSERT_TRUE(layout.ok()) << layout.status();
  const std::vector<Io> ios = DrawIos(*layout);
  ASSERT_EQ(ios.size(), 3u);
  EXPECT_EQ(ios[0].arrival_ns, 50'000'000u);  // in order of time
  EXPECT_TRUE(ios[0].read);
  EXPECT_EQ(ios[0].offset, 4096u);
  EXPECT_EQ(ios[0].bytes, 8192u);
  EXPECT_EQ(layout->hosts[ios[1].host], "H1");  // its source is a host
  EXPECT_FALSE(ios[1].read);
  auto routed = RouteIos(*layout, ios, {}, nullptr);
  ASSERT_TRUE(routed.ok()) << routed.status();
  ASSERT_EQ(routed->size(), 3u);
  EXPECT_EQ(layout->servers[(*routed)[0].server].name, "S1");  // the rule
  EXPECT_EQ(layout->servers[(*routed)[2].server].name, "S0");  // by hash
  auto report = Simulate(*layout);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->flows(0).reads(), 2u);
  EXPECT_EQ(report->flows(0).writes(), 1u);
}

TEST_F(TraceTest, ABadLineIsNamedByFileAndLine) {
  EXPECT_THAT(Load("0.1 H0 x //vol/a 0 4096\n").status().message(),
              HasSubstr("t.trace:1: OP \"x\" must be r or w"));
  EXPECT_THAT(Load("\n0.1 H0 r //vol/a 0\n").status().message(),
              HasSubstr("t.trace:2: needs TIME_S SOURCE OP FILE OFFSET "
                        "LENGTH, not 5 words"));
  EXPECT_THAT(Load("-1 H0 r //vol/a 0 4096\n").status().message(),
              HasSubstr("TIME_S \"-1\""));
  EXPECT_THAT(Load("0.1 H0 r vol/a 0 4096\n").status().message(),
              HasSubstr("FILE \"vol/a\" must be //VOLUME/PATH or -"));
  EXPECT_THAT(Load("0.1 H0 r //vol/a 0 0\n").status().message(),
              HasSubstr("LENGTH \"0\""));
  EXPECT_THAT(Load("0.1 H0 r - 0 4096\n").status().message(),
              HasSubstr("flows[0].servers: the trace has lines for -"));
  EXPECT_THAT(Load("0.1 H0 r //vol/b 0 4096\n").status().message(),
              HasSubstr("flows[0].trace: //vol/b"));
  Write("s2.textproto", Slow(R"(flows { hosts: "H" trace: "none.trace" })"));
  auto missing = LoadScenario((dir_ / "s2.textproto").string());
  EXPECT_THAT(missing.status().message(),
              HasSubstr("flows[0].trace: cannot read trace"));
}

TEST(ServerDownTest, IosOnADeadServerFailUntilItIsBack) {
  // Reads spread over S0 and S1 for 1 s; S1 is down from 0.2 s for 0.3 s.
  const std::string flows =
      R"(flows { name: "r" hosts: "H" servers: "S" open_loop_iops: 200
                 read_percent: 100 file_bytes: 268435456 })";
  const proto::SimReport up = SimFlows(Slow(flows, 1));
  const proto::SimReport down = SimFlows(Slow(
      flows +
          R"(events { at_s: 0.2 server_down { server: "S1" duration_s: 0.3 } })",
      1));
  ASSERT_EQ(down.flows_size(), 1);
  EXPECT_EQ(up.flows(0).errors(), 0u);
  // Half the reads go to S1: those of its 0.3 s down (2 hosts x 200 x 0.3
  // / 2 = 60) fail, and they are not in the latencies.
  EXPECT_NEAR(static_cast<double>(down.flows(0).errors()), 60, 20);
  EXPECT_EQ(down.flows(0).reads() + down.flows(0).errors(),
            up.flows(0).reads());
  EXPECT_GE(down.flows(0).read_p50_us(), 4000);
  // Never back: every read on S1 from 0.2 s fails.
  const proto::SimReport dead = SimFlows(
      Slow(flows + R"(events { at_s: 0.2 server_down { server: "S1" } })", 1));
  EXPECT_NEAR(static_cast<double>(dead.flows(0).errors()), 160, 35);
}

TEST(FlowErrorsTest, BadFlowsAndEventsAreRefusedByField) {
  auto flow = [](const std::string& words) {
    return FlowsError(Slow("flows { hosts: \"H\" servers: \"S\" " + words +
                           " file_bytes: 16777216 }"));
  };
  EXPECT_THAT(flow("read_percent: 50"),
              HasSubstr("flows[0]: needs one of open_loop_iops, "
                        "closed_loop_depth and trace"));
  EXPECT_THAT(flow("open_loop_iops: 10 closed_loop_depth: 4"),
              HasSubstr("flows[0]: needs one of"));
  EXPECT_THAT(flow("open_loop_iops: 10 think_us: 5"),
              HasSubstr("flows[0].think_us: is for closed_loop_depth flows"));
  EXPECT_THAT(flow("closed_loop_depth: 5000"),
              HasSubstr("flows[0].closed_loop_depth: must be within 1 to"));
  EXPECT_THAT(flow("closed_loop_depth: 4 bursts { start_s: 1 duration_s: 1 "
                   "factor: 2 }"),
              HasSubstr("flows[0].bursts: are for open_loop_iops flows"));
  EXPECT_THAT(flow("open_loop_iops: 10 ycsb: \"G\""),
              HasSubstr("flows[0].ycsb: \"G\" is no YCSB workload (A to F)"));
  EXPECT_THAT(flow("open_loop_iops: 10 ycsb: \"A\" read_percent: 10"),
              HasSubstr("flows[0].ycsb: sets the mix itself"));
  const std::string ok =
      R"(flows { hosts: "H" servers: "S" open_loop_iops: 10 file_bytes: 16777216 })";
  EXPECT_THAT(
      FlowsError(
          Slow(ok + R"(events { at_s: 1 server_down { server: "S7" } })")),
      HasSubstr("events[0].server_down.server: no server named \"S7\""));
  EXPECT_THAT(FlowsError(Slow(ok + R"(events { at_s: 1 })")),
              HasSubstr("events[0]: says nothing happens"));
}

TEST(HostBoundTest, AnIoWaitsForAFreeWorkerAndItsWaitCounts) {
  // 300 reads a second onto a device that serves two at a time in 4 ms
  // (500 a second): no queue. One worker on the host serves one at a time
  // (about 240 a second): the IOs wait on the host, not on the device.
  const std::string flows =
      R"(flows { name: "r" hosts: "H0" servers: "S0" open_loop_iops: 300
                 read_percent: 100 file_bytes: 16777216 })";
  const proto::SimReport free = SimFlows(Slow(flows, 2));
  std::string bounded_text = Slow(flows, 2);
  bounded_text.replace(bounded_text.find("io_cost_us: 100 }"), 17,
                       "io_cost_us: 100 max_in_flight: 1 }");
  const proto::SimReport bounded = SimFlows(bounded_text);
  ASSERT_EQ(bounded.flows_size(), 1);
  EXPECT_LT(free.flows(0).read_p99_us(), 20'000);
  EXPECT_GT(bounded.flows(0).read_p99_us(), 10 * free.flows(0).read_p99_us());
  EXPECT_EQ(bounded.flows(0).reads(), free.flows(0).reads());
  for (const proto::SimDeviceReport& d : bounded.devices()) {
    if (d.name() == "S0/d0") {
      EXPECT_LT(d.p99_us(), 4500);
    }
  }
  EXPECT_TRUE(bounded.converged()) << bounded.stopped();
}

}  // namespace
}  // namespace sroute::sim
