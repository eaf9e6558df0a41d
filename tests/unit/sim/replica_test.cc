// SPDX-License-Identifier: Apache-2.0
// sroute-sim's replica sets: writes to every member, reads to one by the
// set's policy, failing over when a member dies, avoiding a collecting
// device with GC redirection.
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sim/scenario.h"
#include "sim/simulate.h"

namespace sroute::sim {
namespace {

using ::testing::HasSubstr;

// Three servers of one healthy device, two hosts, a flow of 4 KiB IOs on
// //vol/db through replica set rs (S0, S1, S2), and whatever `more` adds.
std::string Replicated(const std::string& set_words, const std::string& more,
                       double read_percent = 70, double iops = 500) {
  return R"(
name: "rs" seed: 4 duration_s: 1
network { rack { link_gbps: 10 link_latency_us: 1 } }
servers { prefix: "S" count: 3 devices: 1 preset: "healthy" }
hosts { prefix: "H" count: 2 }
replica_sets { name: "rs" member: "S0" member: "S1" member: "S2" )" +
         set_words + R"( }
rules: "<*, *, //vol/db> -> <IO, stage:rs>"
flows { name: "db" hosts: "H" file: "//vol/db" open_loop_iops: )" +
         std::to_string(iops) +
         " read_percent: " + std::to_string(read_percent) + R"(
        file_bytes: 268435456 }
)" + more;
}

proto::SimReport SimSets(const std::string& text) {
  auto layout = ParseScenario(text, "t");
  EXPECT_TRUE(layout.ok()) << layout.status();
  if (!layout.ok()) return {};
  auto report = Simulate(*layout);
  EXPECT_TRUE(report.ok()) << report.status();
  return report.ok() ? *report : proto::SimReport();
}

std::string SetsError(const std::string& text) {
  auto layout = ParseScenario(text, "t");
  return layout.ok() ? "ok" : std::string(layout.status().message());
}

uint64_t On(const proto::SimReport& r, const std::string& device) {
  for (const auto& d : r.devices()) {
    if (d.name() == device) return d.requests();
  }
  ADD_FAILURE() << "no device " << device;
  return 0;
}

TEST(SimReplicaSetTest, WritesGoToEveryMemberReadsToThePrimary) {
  const proto::SimReport r = SimSets(Replicated("", ""));
  ASSERT_EQ(r.flows_size(), 1);
  const proto::SimFlowReport& f = r.flows(0);
  ASSERT_GT(f.reads(), 500u);
  ASSERT_GT(f.writes(), 200u);
  EXPECT_EQ(f.errors(), 0u);
  EXPECT_EQ(On(r, "S0/d0"), f.reads() + f.writes());
  EXPECT_EQ(On(r, "S1/d0"), f.writes());
  EXPECT_EQ(On(r, "S2/d0"), f.writes());
  EXPECT_EQ(r.requests(), f.reads() + 3 * f.writes());
  EXPECT_TRUE(r.converged()) << r.stopped();
}

TEST(SimReplicaSetTest, ReadsSpreadByTheSetsPolicy) {
  for (const char* policy : {"random", "least_loaded"}) {
    const proto::SimReport r = SimSets(Replicated(
        std::string("read: \"") + policy + "\"", "", /*read_percent=*/100,
        /*iops=*/20000));
    ASSERT_EQ(r.flows_size(), 1);
    const double reads = static_cast<double>(r.flows(0).reads());
    for (const char* d : {"S0/d0", "S1/d0", "S2/d0"}) {
      EXPECT_GT(static_cast<double>(On(r, d)), reads / 6) << policy << " " << d;
    }
  }
}

TEST(SimReplicaSetTest, AMemberThatDiesCostsNoIo) {
  // The primary dies at 0.3 s: reads go to S1 from then on (those under
  // way on S0 ask S1 again), and writes are acknowledged by the quorum of
  // two that is left.
  const proto::SimReport r = SimSets(
      Replicated("", R"(events { at_s: 0.3 server_down { server: "S0" } })"));
  ASSERT_EQ(r.flows_size(), 1);
  EXPECT_EQ(r.flows(0).errors(), 0u);
  EXPECT_GT(On(r, "S1/d0"), r.flows(0).writes());
  // A set that needs all three for a write fails the writes from then on,
  // and only them.
  const proto::SimReport all = SimSets(Replicated(
      R"(ack: "3")", R"(events { at_s: 0.3 server_down { server: "S0" } })"));
  ASSERT_EQ(all.flows_size(), 1);
  EXPECT_GT(all.flows(0).errors(), 100u);
  EXPECT_GT(all.flows(0).writes(), 50u);  // those before 0.3 s
  EXPECT_EQ(all.flows(0).writes() + all.flows(0).errors(), r.flows(0).writes());
  EXPECT_EQ(all.flows(0).reads(), r.flows(0).reads());
  // A flow of writes alone meets the outage too (its writes under way lose
  // S0's part), and gets past it with no error and no read asked again.
  const proto::SimReport writes = SimSets(Replicated(
      "", R"(events { at_s: 0.3 server_down { server: "S0" } })", 0, 2000));
  ASSERT_EQ(writes.outages_size(), 1);
  ASSERT_EQ(writes.outages(0).flows_size(), 1);
  EXPECT_EQ(writes.outages(0).flows(0).errors(), 0u);
  EXPECT_EQ(writes.outages(0).flows(0).retried(), 0u);
  EXPECT_GT(writes.outages(0).flows(0).first_good_us(), 0);
  // "all" counts the members up when a write begins (degrade): no errors.
  const proto::SimReport degrade = SimSets(Replicated(
      R"(ack: "all")", R"(events { at_s: 0.3 server_down { server: "S0" } })"));
  EXPECT_EQ(degrade.flows(0).errors(), 0u);
  // Every member down: the reads fail too.
  const proto::SimReport none = SimSets(
      Replicated("", R"(events { at_s: 0.3 server_down { server: "S0" } }
events { at_s: 0.3 server_down { server: "S1" } }
events { at_s: 0.3 server_down { server: "S2" } })"));
  EXPECT_GT(none.flows(0).errors(), 500u);
}

// One reader, a read at a time from the primary S0 of rs, whose host
// gives up on a server after `timeout_ms`; S0 goes down at 0.3 s for 0.5 s
// (`how`: hang: true for a server that stops answering).
std::string Outage(const std::string& how, int timeout_ms = 200) {
  return R"(
name: "outage" seed: 2 duration_s: 2
network { rack { link_gbps: 10 link_latency_us: 1 } }
servers { prefix: "S" count: 3 devices: 1 preset: "healthy" }
hosts { prefix: "H" count: 1 io_cost_us: 30 remote_timeout_ms: )" +
         std::to_string(timeout_ms) + R"( }
replica_sets { name: "rs" member: "S0" member: "S1" member: "S2" }
rules: "<*, *, //vol/db> -> <IO, stage:rs>"
flows { name: "reader" hosts: "H0" file: "//vol/db" closed_loop_depth: 1
        read_percent: 100 file_bytes: 16777216 }
events { at_s: 0.3 server_down { server: "S0" duration_s: 0.5 )" +
         how + " } }\n";
}

TEST(SimReplicaSetTest, AHungMemberCostsAReadTheHostsRemoteTimeout) {
  // A crash closes the connections: the read under way asks S1 at once.
  const proto::SimReport crash = SimSets(Outage(""));
  ASSERT_EQ(crash.outages_size(), 1);
  const proto::SimOutageReport& c = crash.outages(0);
  EXPECT_EQ(c.server(), "S0");
  EXPECT_DOUBLE_EQ(c.at_s(), 0.3);
  EXPECT_FALSE(c.hang());
  ASSERT_EQ(c.flows_size(), 1);
  EXPECT_EQ(c.flows(0).flow(), "reader");
  EXPECT_EQ(c.flows(0).errors(), 0u);
  EXPECT_GT(c.flows(0).first_good_us(), 0);
  EXPECT_LT(c.flows(0).first_good_us(), 1000);
  // A hang answers nothing: the read under way waits out the host's
  // timeout, then S1 serves it; the host sends no other read to S0 (it
  // learned), and none fails.
  const proto::SimReport hang = SimSets(Outage("hang: true"));
  ASSERT_EQ(hang.outages_size(), 1);
  const proto::SimOutageReport& h = hang.outages(0);
  EXPECT_TRUE(h.hang());
  ASSERT_EQ(h.flows_size(), 1);
  EXPECT_EQ(h.flows(0).errors(), 0u);
  EXPECT_EQ(h.flows(0).retried(), 1u);
  EXPECT_GT(h.flows(0).first_good_us(), 200'000);
  EXPECT_LT(h.flows(0).first_good_us(), 201'000);
  EXPECT_EQ(hang.flows(0).errors(), 0u);
  // The timeout is the host's: twice as long, twice the wait.
  const proto::SimReport longer = SimSets(Outage("hang: true", 400));
  ASSERT_EQ(longer.outages_size(), 1);
  ASSERT_EQ(longer.outages(0).flows_size(), 1);
  EXPECT_GT(longer.outages(0).flows(0).first_good_us(), 400'000);
  EXPECT_LT(longer.outages(0).flows(0).first_good_us(), 401'000);
  // A timeout past sroute-fuse's bound is refused by field.
  EXPECT_THAT(SetsError(Outage("", 3'600'001)),
              HasSubstr("hosts[0].remote_timeout_ms: must be at most"));
}

TEST(SimReplicaSetTest, GcRedirectionKeepsReadsOffACollectingDevice) {
  // S0's device collects from 0.2 s for 0.5 s: reads that stay on it
  // wait for erases; with redirection they go to S1 or S2 meanwhile.
  const std::string gc =
      R"(events { at_s: 0.2 gc { device: "S0" duration_s: 0.5 } })";
  const proto::SimReport off = SimSets(Replicated("", gc, 90, 2000));
  const proto::SimReport redirect =
      SimSets(Replicated(R"(gc: "redirect")", gc, 90, 2000));
  ASSERT_EQ(off.flows_size(), 1);
  ASSERT_EQ(redirect.flows_size(), 1);
  EXPECT_LT(On(redirect, "S0/d0"), On(off, "S0/d0"));
  EXPECT_LT(redirect.flows(0).read_p99_us(), off.flows(0).read_p99_us() / 2);
}

// Two vSSDs with a history each (half their pages hold data, as many
// again over-written), a replica set over them granting GC by `gc`, and
// an update-heavy load with a pause every 250 ms.
std::string Coordinated(const std::string& mode, const std::string& gc) {
  std::string text = R"(
name: "gc" seed: 3 duration_s: 2
network { rack { link_gbps: 100 link_latency_us: 0.01 } }
servers { prefix: "V" count: 2 devices: 1
  preset: "preset=rackblox,channels=2,dies_per_channel=2,blocks_per_die=32,pages_per_block=64,buffer_pages=256,mode=)" +
                     mode + R"("
  warm_fill: 0.6 warm_overwrites: 1 }
hosts { prefix: "H" count: 1 io_cost_us: 10 }
replica_sets { name: "rs" member: "V0" member: "V1" read: "random" )" +
                     gc + R"( }
rules: "<*, *, //home/*> -> <IO, stage:rs>"
flows { name: "ycsb" hosts: "H0" file: "//home/y" open_loop_iops: 3000
        ycsb: "A" file_bytes: 10000000
)";
  for (int k = 0; k < 8; ++k) {
    text += "  bursts { start_s: " + std::to_string(0.25 * k + 0.19) +
            " duration_s: 0.06 factor: 0 }\n";
  }
  return text + "}\n";
}

const proto::SimReplicaSetReport& SetReport(const proto::SimReport& r) {
  static const proto::SimReplicaSetReport none;
  return r.replica_sets_size() == 1 ? r.replica_sets(0) : none;
}

uint64_t Of(const proto::SimReport& r,
            uint64_t (proto::SimDeviceReport::*f)() const) {
  uint64_t sum = 0;
  for (const auto& d : r.devices()) sum += (d.*f)();
  return sum;
}

TEST(SimReplicaSetTest, GrantsGcAsTheStageDoes) {
  // Devices collecting on their own (a whole vSSD at its threshold): reads
  // meet GC, nothing is granted.
  const proto::SimReport own = SimSets(Coordinated("self", R"(gc: "off")"));
  ASSERT_EQ(own.flows_size(), 1);
  EXPECT_GT(Of(own, &proto::SimDeviceReport::gc_passes), 0u);
  EXPECT_GT(Of(own, &proto::SimDeviceReport::reads_behind_gc), 0u);
  EXPECT_EQ(SetReport(own).gc_granted_soft(), 0u);
  // Devices that ask: the set grants soft GC only while the other member
  // does not collect, delays the rest, and sends reads around a collecting
  // member; reads no longer wait for GC.
  const proto::SimReport delay =
      SimSets(Coordinated("coordinated", R"(gc: "delay" gc_poll_us: 100)"));
  ASSERT_EQ(delay.flows_size(), 1);
  const proto::SimReplicaSetReport& d = SetReport(delay);
  EXPECT_GT(d.gc_granted_soft(), 0u);
  EXPECT_GT(d.gc_soft_delayed(), 0u);
  EXPECT_GT(d.gc_redirects(), 0u);
  EXPECT_EQ(d.gc_granted_bg(), 0u);
  EXPECT_GT(Of(delay, &proto::SimDeviceReport::gc_passes), 0u);
  EXPECT_LT(Of(delay, &proto::SimDeviceReport::reads_behind_gc),
            Of(own, &proto::SimDeviceReport::reads_behind_gc) / 10);
  EXPECT_LT(delay.flows(0).read_p99_us(), own.flows(0).read_p99_us() / 2);
  // Background mode also collects in the pauses.
  const proto::SimReport bg = SimSets(
      Coordinated("coordinated", R"(gc: "background" gc_poll_us: 100)"));
  EXPECT_GT(SetReport(bg).gc_granted_bg(), 0u);
}

TEST(SimReplicaSetTest, BadSetsAreRefusedByField) {
  EXPECT_THAT(SetsError(Replicated(R"(member: "S9")", "")),
              HasSubstr("replica_sets[0].member: no server named \"S9\""));
  EXPECT_THAT(SetsError(Replicated(R"(member: "S1")", "")),
              HasSubstr("replica_sets[0].member: \"S1\" twice"));
  EXPECT_THAT(SetsError(Replicated(R"(read: "hedged")", "")),
              HasSubstr("replica_sets[0].read: \"hedged\""));
  EXPECT_THAT(SetsError(Replicated(R"(ack: "4")", "")),
              HasSubstr("replica_sets[0].ack: \"4\""));
  EXPECT_THAT(SetsError(Replicated(R"(gc: "soon")", "")),
              HasSubstr("replica_sets[0].gc: \"soon\""));
  EXPECT_THAT(SetsError(Replicated(R"(gc: "delay" gc_poll_us: 10)", "")),
              HasSubstr("replica_sets[0].gc_poll_us: must be within"));
  std::string other = Replicated("", "");
  other.replace(other.find("stage:rs"), 8, "stage:c");
  EXPECT_THAT(SetsError(other), HasSubstr("stage c, which is no replica set"));
}

}  // namespace
}  // namespace sroute::sim
