// SPDX-License-Identifier: Apache-2.0
// The project's control apps in sroute-sim: tail_latency, made by name as
// the controller makes it, off-loads a bursting flow and reclaims it on
// virtual time, and the iteration settles on its decisions.
#include <string>

#include "gtest/gtest.h"
#include "sim/scenario.h"
#include "sim/simulate.h"

namespace sroute::sim {
namespace {

// Flow a (H0, //home/a/data on S0) bursts 8x from 3 s to 6 s; flow b keeps
// S1 lightly busy; S2 idles. tail_latency watches every half second.
std::string Burst(const std::string& apps) {
  return R"(
name: "burst" seed: 11 duration_s: 10 stats_interval_s: 0.5
network { rack { link_gbps: 10 link_latency_us: 2 } }
servers { prefix: "S" count: 3 devices: 1 preset: "worn" }
hosts { prefix: "H" count: 1 }
flows { name: "a" hosts: "H0" file: "//home/a/data" open_loop_iops: 400
        read_percent: 30 file_bytes: 67108864
        bursts { start_s: 3 duration_s: 3 factor: 8 } }
flows { name: "b" hosts: "H0" file: "//home/b/data" open_loop_iops: 100
        read_percent: 50 file_bytes: 67108864 }
rules: "<*, *, //home/a/*> -> <IO, //S0/a/*>"
rules: "<*, *, //home/b/*> -> <IO, //S1/b/*>"
iteration { max_iterations: 12 }
)" + apps;
}

proto::SimReport RunScenario(const std::string& text) {
  auto layout = ParseScenario(text, "burst");
  EXPECT_TRUE(layout.ok()) << layout.status();
  if (!layout.ok()) return {};
  auto report = Simulate(*layout);
  EXPECT_TRUE(report.ok()) << report.status();
  return report.ok() ? *report : proto::SimReport();
}

std::string Decisions(const proto::SimReport& r) {
  std::string out;
  for (const proto::SimDecision& d : r.decisions()) {
    out += std::to_string(d.at_s()) + " " + d.app() + " " + d.host() + ":";
    for (const std::string& i : d.insert()) out += " +" + i;
    for (const std::string& x : d.remove()) out += " -" + x;
    if (!d.reclaimed().empty()) out += " reclaimed " + d.reclaimed();
    out += "\n";
  }
  for (const std::string& n : r.app_notes()) out += n + "\n";
  return out;
}

uint64_t DeviceRequests(const proto::SimReport& r, const std::string& name) {
  for (const proto::SimDeviceReport& d : r.devices()) {
    if (d.name() == name) return d.requests();
  }
  return 0;
}

TEST(SimAppsTest, TailLatencyOffLoadsTheBurstAndReclaimsIt) {
  const proto::SimReport r = RunScenario(Burst(
      R"(apps: "tail_latency:alpha=2,end=1.2,window=20,hold=1,cooldown=1,)"
      R"(queue=0,rate=64M")"));
  ASSERT_TRUE(r.converged()) << r.stopped() << "\n" << Decisions(r);
  const std::string all = Decisions(r);
  // Off-load: a's writes go to the idle S2 once its burst shows (the
  // interval after 3 s), tracked so that reads of them follow.
  ASSERT_GE(r.decisions_size(), 4) << all;
  const proto::SimDecision& away = r.decisions(0);
  EXPECT_EQ(away.app(), "tail_latency");
  EXPECT_EQ(away.host(), "H0");
  EXPECT_GE(away.at_s(), 3.0) << all;
  EXPECT_LE(away.at_s(), 4.0) << all;
  ASSERT_EQ(away.insert_size(), 1) << all;
  EXPECT_NE(away.insert(0).find("track_writes()"), std::string::npos) << all;
  EXPECT_NE(away.insert(0).find("//S2/"), std::string::npos) << all;
  // Reclaim once the burst is over: writes home, what went away follows,
  // then the home rule goes.
  const proto::SimDecision& home = r.decisions(1);
  EXPECT_GE(home.at_s(), 6.0) << all;
  ASSERT_EQ(home.insert_size(), 1) << all;
  EXPECT_NE(home.insert(0).find("track_writes(home)"), std::string::npos)
      << all;
  ASSERT_EQ(home.remove_size(), 1) << all;
  EXPECT_EQ(home.remove(0), away.insert(0)) << all;
  // The reclaim's copy begins with the home rule, runs as IO (reads where
  // the pages went, writes home), and ends after it.
  EXPECT_EQ(home.reclaiming(), "//home/a/") << all;
  EXPECT_EQ(r.decisions(2).reclaimed(), "//home/a/") << all;
  EXPECT_GT(r.decisions(2).at_s(), home.at_s()) << all;
  ASSERT_EQ(r.decisions(3).remove_size(), 1) << all;
  EXPECT_EQ(r.decisions(3).remove(0), home.insert(0)) << all;
  // The app's own account says the same.
  ASSERT_GE(r.app_notes_size(), 3) << all;
  EXPECT_NE(r.app_notes(0).find("off-load"), std::string::npos) << all;
  // The last pass was routed by exactly these decisions.
  const proto::SimIterationReport& last = r.iterations(r.iterations_size() - 1);
  EXPECT_TRUE(last.decisions_settled());
  // (The copy's start is a change of its own, shown with the update.)
  EXPECT_EQ(last.decisions(), static_cast<uint32_t>(r.decisions_size()) + 1);
  // S2 served the off-loaded writes and the reads that followed them.
  EXPECT_GT(DeviceRequests(r, "S2/d0"), 500u) << all;

  // Without the app, S2 serves nothing, and a's reads wait behind its burst.
  const proto::SimReport alone = RunScenario(Burst(""));
  EXPECT_EQ(DeviceRequests(alone, "S2/d0"), 0u);
  EXPECT_EQ(alone.decisions_size(), 0);
  ASSERT_EQ(alone.flows_size(), 2);
  ASSERT_EQ(r.flows_size(), 3);
  EXPECT_EQ(r.flows(2).name(), "(reclaim)");
  EXPECT_GT(r.flows(2).reads(), 0u);
  EXPECT_EQ(r.flows(2).writes(), r.flows(2).reads());
  // Reads of a no longer wait behind its burst of writes on S0.
  EXPECT_LT(r.flows(0).read_p50_us(), alone.flows(0).read_p50_us());
}

// A reclaim's copy is IO: no faster than its rate, and no faster than
// the devices move it (at 64 MB/s the worn devices are the limit).
TEST(SimAppsTest, AReclaimsCopyTakesItsRateOrTheDevicesTime) {
  auto reclaim_s = [](const proto::SimReport& r) {
    double began = -1, ended = -1;
    for (const proto::SimDecision& d : r.decisions()) {
      if (!d.reclaiming().empty()) began = d.at_s();
      if (!d.reclaimed().empty()) ended = d.at_s();
    }
    EXPECT_GE(began, 0) << Decisions(r);
    EXPECT_GT(ended, began) << Decisions(r);
    return ended - began;
  };
  const std::string app =
      R"(apps: "tail_latency:alpha=2,end=1.2,window=20,hold=1,cooldown=1,)"
      R"(queue=0,rate=)";
  const proto::SimReport fast = RunScenario(Burst(app + R"(64M")"));
  const proto::SimReport slow = RunScenario(Burst(app + R"(8M")"));
  ASSERT_TRUE(fast.converged()) << fast.stopped();
  ASSERT_TRUE(slow.converged()) << slow.stopped();
  ASSERT_EQ(fast.flows_size(), 3);
  ASSERT_EQ(slow.flows_size(), 3);
  // The same pages away, so the same bytes copied.
  EXPECT_EQ(fast.flows(2).writes(), slow.flows(2).writes());
  // 20 MB at 64 MB/s would take a third of a second; the worn devices
  // move it at about 10 MB/s. At 8 MB/s the rate is the limit.
  EXPECT_GE(reclaim_s(fast), 1.5);
  EXPECT_GT(reclaim_s(slow), reclaim_s(fast));
}

TEST(SimAppsTest, SameSeedSameDecisions) {
  const std::string text =
      Burst(R"(apps: "tail_latency:alpha=2,end=1.2,window=20,hold=1,)"
            R"(cooldown=1,queue=0")");
  proto::SimReport a = RunScenario(text), b = RunScenario(text);
  ASSERT_GT(a.decisions_size(), 0);
  for (proto::SimReport* r : {&a, &b}) {
    r->clear_wall_s();
    r->clear_peak_rss_bytes();
  }
  EXPECT_EQ(a.SerializeAsString(), b.SerializeAsString());
}

TEST(SimAppsTest, BadAppsAndDelegatesAreRefusedByName) {
  auto bad_app = ParseScenario(Burst(R"(apps: "nope:x=1")"), "s.textproto");
  ASSERT_FALSE(bad_app.ok());
  EXPECT_NE(bad_app.status().message().find("s.textproto: apps[0]: "),
            std::string::npos)
      << bad_app.status();
  auto bad_args =
      ParseScenario(Burst(R"(apps: "tail_latency:alpha=1,end=2")"), "s");
  ASSERT_FALSE(bad_args.ok());
  EXPECT_NE(bad_args.status().message().find("apps[0]: "), std::string::npos)
      << bad_args.status();
  std::string tiny = Burst("");
  tiny.replace(tiny.find("stats_interval_s: 0.5"), 21,
               "stats_interval_s: 0.0000001");
  auto bad_interval = ParseScenario(tiny, "s");
  ASSERT_FALSE(bad_interval.ok());
  EXPECT_NE(bad_interval.status().message().find("s: stats_interval_s: "),
            std::string::npos)
      << bad_interval.status();
  auto bad_delegate = ParseScenario(
      Burst("rules: \"<*, w, //home/c/*> -> replicate(2); <IO, //S0/c/*>\""),
      "s");
  ASSERT_FALSE(bad_delegate.ok());
  EXPECT_NE(bad_delegate.status().message().find("rules[2]: "),
            std::string::npos)
      << bad_delegate.status();
  EXPECT_NE(bad_delegate.status().message().find("not simulated"),
            std::string::npos)
      << bad_delegate.status();
}

}  // namespace
}  // namespace sroute::sim
