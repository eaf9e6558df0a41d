// SPDX-License-Identifier: Apache-2.0
#include "sim/scenario.h"

#include <map>
#include <set>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sim/workload.h"

namespace sroute::sim {
namespace {

using ::testing::HasSubstr;

// A small rack: 4 servers of 2 devices, 2 hosts, one flow.
constexpr char kRack[] = R"(
name: "small"
seed: 7
duration_s: 1
network { rack { link_gbps: 25 link_latency_us: 1 } }
servers { prefix: "S" count: 4 devices: 2 preset: "healthy" }
hosts { prefix: "H" count: 2 }
flows {
  name: "oltp" hosts: "H" servers: "S" open_loop_iops: 2000
  read_percent: 70 file_bytes: 67108864 zipf: 0.9
}
)";

std::string Error(const std::string& text) {
  auto layout = ParseScenario(text, "t.textproto");
  return layout.ok() ? "ok" : std::string(layout.status().message());
}

std::string Replace(std::string text, const std::string& from,
                    const std::string& to) {
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return text.replace(at, from.size(), to);
}

TEST(ScenarioTest, GroupsExpandToNamedMachines) {
  auto layout = ParseScenario(kRack, "t.textproto");
  ASSERT_TRUE(layout.ok()) << layout.status();
  ASSERT_EQ(layout->servers.size(), 4u);
  EXPECT_EQ(layout->servers[3].name, "S3");
  EXPECT_EQ(layout->servers[3].devices, 2u);
  EXPECT_EQ(layout->hosts, (std::vector<std::string>{"H0", "H1"}));
  EXPECT_EQ(layout->flow_hosts[0], (std::vector<uint32_t>{0, 1}));
  EXPECT_EQ(layout->flow_servers[0], (std::vector<uint32_t>{0, 1, 2, 3}));
  // One machine by its name.
  auto one = ParseScenario(
      Replace(kRack, "servers: \"S\" open", "servers: \"S2\" open"), "t");
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(one->flow_servers[0], (std::vector<uint32_t>{2}));
  // A GC spell on one device, and on every device of a server.
  auto gc = ParseScenario(
      std::string(kRack) +
          R"(events { at_s: 0.5 gc { device: "S1" duration_s: 0.25 } }
                                 events { at_s: 0.1 gc { device: "S3/d1" duration_s: 1 } })",
      "t");
  ASSERT_TRUE(gc.ok()) << gc.status();
  ASSERT_EQ(gc->gc.size(), 3u);
  EXPECT_EQ(gc->gc[0].server, 3u);
  EXPECT_EQ(gc->gc[0].device, 1u);
  EXPECT_EQ(gc->gc[0].from_ns, 100'000'000u);
  EXPECT_EQ(gc->gc[0].until_ns, 1'100'000'000u);
  EXPECT_EQ(gc->gc[1].server, 1u);
  EXPECT_EQ(gc->gc[2].device, 1u);
  EXPECT_EQ(gc->gc[2].until_ns, 750'000'000u);
}

TEST(ScenarioTest, BadFilesSayWhereAndWhat) {
  EXPECT_THAT(Error(Replace(kRack, "open_loop_iops", "rate")),
              HasSubstr("t.textproto:9:"));
  EXPECT_THAT(Error(Replace(kRack, "open_loop_iops", "rate")),
              HasSubstr("no field named \"rate\""));
  EXPECT_THAT(
      Error(Replace(kRack, "servers: \"S\" open", "servers: \"S9\" open")),
      HasSubstr("flows[0].servers: no server or server group named \"S9\""));
  EXPECT_THAT(Error(Replace(kRack, "hosts: \"H\"", "hosts: \"S\"")),
              HasSubstr("flows[0].hosts: no host or host group named \"S\""));
  EXPECT_THAT(Error(Replace(kRack, "\"healthy\"", "\"shiny\"")),
              HasSubstr("servers[0].preset:"));
  // A device as a flash endpoint takes it: its keys are checked too.
  EXPECT_EQ(Error(Replace(kRack, "\"healthy\"",
                          "\"preset=small,channels=2,read_us=4000\"")),
            "ok");
  EXPECT_THAT(Error(Replace(kRack, "\"healthy\"", "\"preset=small,speed=9\"")),
              HasSubstr("servers[0].preset: "));
  EXPECT_THAT(Error(Replace(kRack, "\"healthy\"", "\"preset=small,speed=9\"")),
              HasSubstr("speed"));
  EXPECT_THAT(Error(Replace(kRack, "read_percent: 70", "read_percent: 170")),
              HasSubstr("flows[0].read_percent: must be within 0 to 100"));
  EXPECT_THAT(Error(Replace(kRack, "zipf: 0.9", "zipf: 1.5")),
              HasSubstr("flows[0].zipf"));
  EXPECT_THAT(
      Error(Replace(
          kRack, "network { rack { link_gbps: 25 link_latency_us: 1 } }", "")),
      HasSubstr("network: needs a rack { ... } or a clos { ... }"));
  EXPECT_THAT(Error(Replace(kRack, "link_gbps: 25", "link_gbps: 0")),
              HasSubstr("network.rack.link_gbps: must be above 0"));
  EXPECT_THAT(Error(Replace(kRack, "duration_s: 1", "duration_s: -1")),
              HasSubstr("duration_s: must be above 0"));
  EXPECT_THAT(Error(Replace(kRack, "prefix: \"H\"", "prefix: \"S\"")),
              HasSubstr("hosts[0].prefix: \"S\" names another group too"));
  EXPECT_THAT(
      Error(Replace(kRack,
                    "network { rack { link_gbps: 25 link_latency_us: 1 } }",
                    "network { clos { pods: 1 leaves_per_pod: 1 tors_per_pod: "
                    "1 machines_per_tor: 5 down_gbps: 10 up_gbps: 40 } }")),
      HasSubstr("6 servers and hosts do not fit in pods x tors_per_pod x "
                "machines_per_tor = 5 places"));
  EXPECT_THAT(Error(Replace(kRack, "count: 4", "count: 4000000")),
              HasSubstr("servers[0].count: more than 100000 machines"));
  EXPECT_THAT(
      Error(std::string(kRack) +
            "events { at_s: 1 gc { device: \"S7/d0\" duration_s: 1 } }"),
      HasSubstr("events[0].gc.device: no device \"S7/d0\""));
  EXPECT_THAT(
      Error(std::string(kRack) +
            "events { at_s: 1 gc { device: \"S1/d2\" duration_s: 1 } }"),
      HasSubstr("events[0].gc.device: no device \"S1/d2\""));
  EXPECT_THAT(Error(std::string(kRack) + "events { at_s: 1 }"),
              HasSubstr("events[0]: says nothing happens"));
  EXPECT_THAT(
      Error(std::string(kRack) + "events { at_s: 1 gc { device: \"S1\" } }"),
      HasSubstr("events[0].gc.duration_s: must be above 0"));
  auto missing = LoadScenario("/nonexistent/s.textproto");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
}

// Flows that name a file are routed by the scenario's rules, as a host's
// sSwitch routes them.
constexpr char kRouted[] = R"(
name: "routed" seed: 2 duration_s: 0.5
network { rack { link_gbps: 25 link_latency_us: 1 } }
servers { prefix: "S" count: 4 devices: 2 preset: "healthy" }
hosts { prefix: "H" count: 2 }
rules: "<*, *, //vol/a/*> -> <IO, //S1/a/*>"
rules: "<*, w, //vol/b> -> <IO, //S2/b>, <IO, //S3/b>"
rules: "<*, r, //vol/b> -> <IO, //S3/b>"
rules: "<*, *, //vol/c[0:1M]> -> <IO, //S0/c>"
rules: "<*, *, //vol/c> -> <IO, //S2/c>"
flows { name: "a" hosts: "H" file: "//vol/a/x" open_loop_iops: 400
        read_percent: 50 file_bytes: 67108864 }
flows { name: "b" hosts: "H" file: "//vol/b" open_loop_iops: 400
        read_percent: 50 file_bytes: 67108864 }
flows { name: "c" hosts: "H" file: "//vol/c" open_loop_iops: 400
        read_percent: 50 io_bytes: 262144 file_bytes: 2097152 }
)";

TEST(WorkloadTest, RulesRouteFlowsThatNameAFile) {
  auto layout = ParseScenario(kRouted, "t");
  ASSERT_TRUE(layout.ok()) << layout.status();
  auto drawn = DrawRequests(*layout);
  ASSERT_TRUE(drawn.ok()) << drawn.status();
  std::map<uint64_t, std::vector<const Request*>> by_io;
  for (const Request& r : *drawn) by_io[r.io].push_back(&r);
  size_t scattered = 0, split = 0;
  for (const auto& [io, pieces] : by_io) {
    const Request& first = *pieces[0];
    switch (first.flow) {
      case 0:  // all of //vol/a/* on S1
        ASSERT_EQ(pieces.size(), 1u);
        EXPECT_EQ(first.server, 1u);
        break;
      case 1:  // writes on S2 and S3, reads on S3
        if (first.read) {
          ASSERT_EQ(pieces.size(), 1u);
          EXPECT_EQ(first.server, 3u);
        } else {
          ASSERT_EQ(pieces.size(), 2u);
          EXPECT_EQ(pieces[0]->server + pieces[1]->server, 5u);
          EXPECT_NE(pieces[0]->server, pieces[1]->server);
          ++scattered;
        }
        break;
      case 2: {  // the first MiB on S0, the rest on S2, in 256 KiB IOs
        uint32_t bytes = 0;
        for (const Request* p : pieces) {
          bytes += p->bytes;
          EXPECT_TRUE(p->server == 0 || p->server == 2);
        }
        EXPECT_EQ(bytes, 262144u);
        split += pieces.size() > 1 ? 1 : 0;
        break;
      }
    }
  }
  EXPECT_GT(scattered, 50u);
  // 256 KiB IOs at 256 KiB offsets never straddle the 1 MiB line: none split.
  EXPECT_EQ(split, 0u);
}

// A timeline of changes routes each IO by the rules of its time:
// track_writes() takes the pages its writes cover to S2 and reads of
// exactly those pages follow them (by no managed rule), the rest stay on
// S0; once a reclaim of the files ends, every read is home again.
TEST(WorkloadTest, TrackedWritesTakeTheirPagesAwayUntilReclaimed) {
  auto layout = ParseScenario(R"(
name: "tracked" seed: 3 duration_s: 3
network { rack { link_gbps: 25 link_latency_us: 1 } }
servers { prefix: "S" count: 3 devices: 1 preset: "healthy" }
hosts { prefix: "H" count: 1 }
flows { name: "a" hosts: "H0" file: "//home/a/data" open_loop_iops: 3000
        read_percent: 50 file_bytes: 1048576 }
rules: "<*, *, //home/a/*> -> <IO, //S0/a/*>"
)",
                              "t");
  ASSERT_TRUE(layout.ok()) << layout.status();
  const std::vector<Io> ios = DrawIos(*layout);
  RuleChange away{1'000'000'000, 0, "test", {}, {}, ""};
  away.insert.push_back(
      {100, "@1 <*, w, //home/a/*> -> track_writes(); <IO, //S2/t/a/*>", "test",
       "test"});
  RuleChange home{2'000'000'000, 0, "test", {}, {100}, "//home/a/"};
  std::vector<AwayEvent> log;
  auto routed = RouteIos(*layout, ios, {away, home}, &log);
  ASSERT_TRUE(routed.ok()) << routed.status();
  std::set<uint64_t> taken;  // pages written away so far
  size_t followed = 0, stayed = 0;
  for (const Request& r : *routed) {
    const Io& io = ios[r.io];
    const uint64_t page = io.offset / kSimPageBytes;
    ASSERT_EQ(r.bytes, kSimPageBytes);
    if (r.arrival_ns < away.at_ns || r.arrival_ns >= home.at_ns) {
      EXPECT_EQ(r.server, 0u);
      EXPECT_EQ(r.rule, 1u);
      continue;
    }
    if (!r.read) {
      EXPECT_EQ(r.server, 2u);
      EXPECT_EQ(r.rule, 100u);
      taken.insert(page);
    } else if (taken.contains(page)) {
      EXPECT_EQ(r.server, 2u);
      EXPECT_EQ(r.rule, 0u);
      ++followed;
    } else {
      EXPECT_EQ(r.server, 0u);
      EXPECT_EQ(r.rule, 1u);
      ++stayed;
    }
  }
  EXPECT_GT(followed, 100u);
  EXPECT_GT(stayed, 100u);
  // The log has every page a write took away, in order of time.
  ASSERT_FALSE(log.empty());
  EXPECT_GE(log.front().at_ns, away.at_ns);
  std::set<uint64_t> logged;
  for (const AwayEvent& e : log) {
    EXPECT_TRUE(e.away);
    EXPECT_EQ(e.file, "//home/a/data");
    logged.insert(e.page);
  }
  EXPECT_EQ(logged, taken);
  // A change whose rule names no server is refused with who made it.
  RuleChange bad{500'000'000, 0, "test", {}, {}, ""};
  bad.insert.push_back(
      {101, "@2 <*, *, //home/a/*> -> <IO, //S9/a/*>", "test", "test"});
  auto refused = RouteIos(*layout, ios, {bad}, nullptr);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("S9"));
}

TEST(ScenarioTest, RulesAndRoutedFilesAreChecked) {
  auto error = [](const std::string& text) {
    auto layout = ParseScenario(text, "t");
    return layout.ok() ? "ok" : std::string(layout.status().message());
  };
  EXPECT_EQ(error(kRouted), "ok");
  EXPECT_THAT(error(Replace(kRouted, "-> <IO, //S1/a/*>", "-> <IO //S1/a/*>")),
              HasSubstr("t: rules[0]: "));
  EXPECT_THAT(error(Replace(kRouted, "//vol/a/x", "//vol/z")),
              HasSubstr("flows[0].file: //vol/z goes to //vol/z: \"vol\" is "
                        "no server of the scenario (no rule matches it)"));
  EXPECT_THAT(error(Replace(kRouted, "<IO, //S3/b>\"", "<IO, //S9/b>\"")),
              HasSubstr("flows[1].file: //vol/b goes to //S9/b: \"S9\" is no "
                        "server of the scenario (by \"<*, w, //vol/b> -> "
                        "<IO, //S2/b>, <IO, //S9/b>\")"));
  EXPECT_THAT(error(Replace(kRouted, "file: \"//vol/a/x\"", "file: \"vol\"")),
              HasSubstr("flows[0].file: must be //VOLUME/PATH"));
}

TEST(WorkloadTest, TheSeedDecidesEveryRequest) {
  auto layout = ParseScenario(kRack, "t");
  ASSERT_TRUE(layout.ok()) << layout.status();
  const std::vector<Request> a = *DrawRequests(*layout);
  const std::vector<Request> b = *DrawRequests(*layout);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].arrival_ns, b[i].arrival_ns);
    ASSERT_EQ(a[i].page, b[i].page);
    ASSERT_EQ(a[i].server, b[i].server);
    ASSERT_EQ(a[i].read, b[i].read);
  }
  layout->scenario.set_seed(8);
  const std::vector<Request> c = *DrawRequests(*layout);
  size_t same = 0;
  for (size_t i = 0; i < std::min(a.size(), c.size()); ++i) {
    same += a[i].arrival_ns == c[i].arrival_ns ? 1 : 0;
  }
  EXPECT_LT(same, a.size() / 10);
}

TEST(WorkloadTest, RatesMixAndBurstsAsWritten) {
  auto layout = ParseScenario(
      Replace(kRack, "zipf: 0.9",
              "zipf: 0.9 bursts { start_s: 0.5 duration_s: 0.25 factor: 4 }"),
      "t");
  ASSERT_TRUE(layout.ok()) << layout.status();
  const std::vector<Request> r = *DrawRequests(*layout);
  // Two hosts at 2 000 IOPS for 1 s, a quarter of it at 4x: 2 x 2 000 x
  // (0.75 + 0.25 x 4) = 7 000.
  EXPECT_NEAR(static_cast<double>(r.size()), 7000, 350);
  size_t reads = 0, in_burst = 0;
  std::vector<size_t> per_server(4);
  const uint64_t pages = DevicePages("healthy");
  for (const Request& q : r) {
    reads += q.read ? 1 : 0;
    in_burst += q.arrival_ns >= 500'000'000 && q.arrival_ns < 750'000'000;
    ++per_server[q.server];
    EXPECT_LT(q.device, 2u);
    EXPECT_LT(q.page, pages);
    EXPECT_LT(q.arrival_ns, 1'000'000'000u);
  }
  EXPECT_NEAR(static_cast<double>(reads) / static_cast<double>(r.size()), 0.7,
              0.03);
  EXPECT_NEAR(static_cast<double>(in_burst), 4000, 250);
  for (size_t n : per_server) EXPECT_GT(n, r.size() / 8);  // spread by hash
  for (size_t i = 1; i < r.size(); ++i) {
    ASSERT_LE(r[i - 1].arrival_ns, r[i].arrival_ns);
  }
}

}  // namespace
}  // namespace sroute::sim
