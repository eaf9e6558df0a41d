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

TEST(SimReplicaSetTest, BadSetsAreRefusedByField) {
  EXPECT_THAT(SetsError(Replicated(R"(member: "S9")", "")),
              HasSubstr("replica_sets[0].member: no server named \"S9\""));
  EXPECT_THAT(SetsError(Replicated(R"(member: "S1")", "")),
              HasSubstr("replica_sets[0].member: \"S1\" twice"));
  EXPECT_THAT(SetsError(Replicated(R"(read: "hedged")", "")),
              HasSubstr("replica_sets[0].read: \"hedged\""));
  EXPECT_THAT(SetsError(Replicated(R"(ack: "4")", "")),
              HasSubstr("replica_sets[0].ack: \"4\""));
  EXPECT_THAT(SetsError(Replicated(R"(gc: "delay")", "")),
              HasSubstr("replica_sets[0].gc: \"delay\""));
  std::string other = Replicated("", "");
  other.replace(other.find("stage:rs"), 8, "stage:c");
  EXPECT_THAT(SetsError(other), HasSubstr("stage c, which is no replica set"));
}

}  // namespace
}  // namespace sroute::sim
