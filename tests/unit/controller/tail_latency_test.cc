// SPDX-License-Identifier: Apache-2.0
// The tail_latency app's own logic against a recording controller: its
// arguments, when it off-loads and reclaims, where it sends the writes,
// and that a load hovering at its thresholds does not make it flap (its
// effects on real hosts: tests/integration/controller_test.cc).
#include "controller/apps/tail_latency.h"

#include <optional>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rules/parser.h"
#include "tests/unit/controller/fake_api.h"

namespace sroute {
namespace {

using ::sroute::testing::FakeApi;
using ::testing::HasSubstr;

TEST(TailLatencyArgsTest, GoodAndBadArguments) {
  auto o = ParseTailLatencyArgs("");
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->alpha, 2);
  EXPECT_EQ(o->hold, absl::Seconds(10));
  EXPECT_EQ(o->spread, 1);
  o = ParseTailLatencyArgs(
      "alpha=4,end=1.1,window=30,rate=8M,chunk=128K,spread=3,hosts=a+b");
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->alpha, 4);
  EXPECT_EQ(o->rate_bytes_per_s, 8u << 20);
  EXPECT_EQ(o->chunk_bytes, 128u << 10);
  EXPECT_EQ(o->spread, 3);
  EXPECT_EQ(o->hosts, (std::vector<std::string>{"a", "b"}));
  for (const char* bad :
       {"alpha=0.5", "end=3,alpha=2", "nope=1", "rate=x", "chunk=0", "spread=0",
        "window=0", "flows=0", "hold"}) {
    EXPECT_FALSE(ParseTailLatencyArgs(bad).ok()) << bad;
  }
  EXPECT_THAT(std::string(ParseTailLatencyArgs("end=3").status().message()),
              HasSubstr("below alpha"));
}

class TailLatencyAppTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TopologyHost h;
    h.info.set_sswitch("vol");
    h.connected = true;
    for (const char* s : {"S1", "S2", "S3"}) {
      proto::EndpointInfo* e = h.info.add_endpoints();
      e->set_name(s);
      e->set_kind("server");
    }
    api_.topology.push_back(h);
    api_.apply_updates = true;
  }
  void Start(const std::string& args) {
    auto o = ParseTailLatencyArgs(args);
    ASSERT_TRUE(o.ok()) << o.status();
    o->clock = [this] { return now_; };
    app_ = std::make_unique<TailLatency>(*std::move(o));
    ASSERT_TRUE(app_->Start(api_).ok());
  }
  // One second's report: the flow on S1 with `s1` IOs (half of them
  // writes; those of an off-load counted on its rule), S2's flow with `s2`.
  void Tick(double s1, double s2, int64_t s1_in_flight = 0,
            bool s2_writes = false) {
    now_ += absl::Seconds(1);
    StatsSnapshot snap;
    HostStats h;
    h.sswitch = "vol";
    h.connected = true;
    h.interval = absl::Seconds(1);
    auto add = [&](const std::string& text, const std::string& owner,
                   uint64_t reads, uint64_t writes, int64_t in_flight = 0) {
      RuleStats r;
      r.in_flight = in_flight;
      r.cid = h.rules.size() + 1;
      r.text = FormatRule(*ParseRule(text));
      r.owner = owner;
      r.reads = reads;
      r.writes = writes;
      h.rules.push_back(r);
    };
    const uint64_t half = static_cast<uint64_t>(s1 / 2);
    const std::optional<std::string> ours = OurRule();
    add(kFlow, "admin", half, ours ? 0 : half, s1_in_flight);
    if (ours) add(*ours, "tail_latency", 0, half);
    add("<*, *, //home/b/*> -> <IO, //S2/b/*>", "admin",
        static_cast<uint64_t>(s2_writes ? s2 / 2 : s2),
        static_cast<uint64_t>(s2_writes ? s2 / 2 : 0));
    snap.hosts.push_back(h);
    app_->OnStats(snap);
  }
  // The app's rule installed last, if it still stands.
  std::optional<std::string> OurRule() {
    if (api_.updates.empty()) return std::nullopt;
    const RuleChanges& c = api_.updates.back().changes[0];
    if (c.insert.empty()) return std::nullopt;
    return c.insert[0].Text();
  }
  int Offloads() {
    int n = 0;
    for (const UpdateSpec& u : api_.updates) {
      const RuleChanges& c = u.changes[0];
      if (!c.insert.empty() &&
          c.insert[0].Text().find("track_writes()") != std::string::npos) {
        ++n;
      }
    }
    return n;
  }

  static constexpr char kFlow[] = "<*, *, //home/a/*> -> <IO, //S1/a/*>";
  FakeApi api_;
  std::unique_ptr<TailLatency> app_;
  absl::Time now_ = absl::FromUnixSeconds(1'800'000'000);
};

TEST_F(TailLatencyAppTest, OffLoadsABurstToTheLeastLoadedAndReclaims) {
  Start("alpha=3,end=1.5,window=5,min_ops=50,hold=3,cooldown=5");
  for (int i = 0; i < 10; ++i) Tick(100, 40);
  EXPECT_TRUE(api_.updates.empty());
  Tick(1000, 40);  // the burst: S3 serves nothing, S2 40 ops/s
  ASSERT_EQ(api_.updates.size(), 1u);
  EXPECT_EQ(*OurRule(),
            "@1 <*, w, //home/a/*> -> track_writes(); "
            "<IO, //S3/.sroute-tl-1/a/*>");
  EXPECT_EQ(api_.updates[0].owner, "tail_latency");
  EXPECT_THAT(api_.state["decisions"], HasSubstr("S1 demand 1000 ops/s > 3"));
  EXPECT_THAT(api_.state["flows"], HasSubstr("away\tvol\t"));
  Tick(1000, 40);
  Tick(100, 40);  // quiet again, but not away long enough
  EXPECT_EQ(api_.updates.size(), 1u);
  Tick(100, 40);
  Tick(100, 40);
  // Reclaim: the home rule replaces the off-load, the bytes come home, the
  // home rule goes, the folder is removed.
  ASSERT_EQ(api_.updates.size(), 3u);
  EXPECT_EQ(api_.updates[1].changes[0].insert[0].Text(),
            "@1 <*, w, //home/a/*> -> track_writes(home); <IO, //S1/a/*>");
  EXPECT_TRUE(api_.updates[2].changes[0].insert.empty());
  EXPECT_THAT(api_.log, ::testing::Contains("copy RECLAIM //home/a/"));
  EXPECT_THAT(api_.log, ::testing::Contains("copy REMOVE //S3/.sroute-tl-1"));
  EXPECT_EQ(api_.state["flows"], "");
  EXPECT_THAT(api_.state["decisions"], HasSubstr("reclaimed"));
}

// Flows start on servers the app has seen idle (the controller runs before
// the applications): their first seconds are no burst over a long-run 0,
// however many IOs they bring; a burst after them is.
TEST_F(TailLatencyAppTest, AFlowStartingOnAnIdleServerIsNoBurst) {
  Start("alpha=3,end=1.5,window=20,min_ops=50,hold=3,cooldown=5");
  for (int i = 0; i < 5; ++i) Tick(0, 0);
  Tick(60, 0);  // the flow starts part way through the second
  Tick(120, 0);
  for (int i = 0; i < 5; ++i) Tick(120, 0);
  EXPECT_TRUE(api_.updates.empty()) << api_.state["decisions"];
  Tick(1200, 0);
  EXPECT_EQ(Offloads(), 1);
  EXPECT_THAT(api_.state["decisions"], HasSubstr("long-run 120 ops/s"));
}

// Two servers burst in one report: the first goes to the idle S3; the
// second may not pile onto S3 too (S3 now takes the first's writes) nor
// onto S1 (it bursts itself), so it waits for headroom.
TEST_F(TailLatencyAppTest, BurstsOfOneReportDoNotPileOntoOneServer) {
  Start("alpha=3,end=1.5,window=5,min_ops=50,hold=3,cooldown=5");
  for (int i = 0; i < 10; ++i) Tick(100, 100, 0, /*s2_writes=*/true);
  Tick(1000, 1000, 0, /*s2_writes=*/true);
  EXPECT_EQ(Offloads(), 1) << api_.state["decisions"];
  EXPECT_THAT(*OurRule(), HasSubstr("//S3/.sroute-tl-1/a/*"));
  EXPECT_THAT(api_.state["decisions"],
              HasSubstr("S2 bursts (1000 ops/s, long-run 100) but no other "
                        "server has headroom"));
}

// spread=2: the burst's writes go to both servers with headroom, each
// chunk to one (track_writes(spread)); a server without headroom is left
// out; the reclaim, also after a restart, removes every folder.
TEST_F(TailLatencyAppTest, SpreadsABurstOverTheServersWithHeadroom) {
  Start("alpha=3,end=1.5,window=5,min_ops=50,hold=0,cooldown=5,spread=2");
  for (int i = 0; i < 10; ++i) Tick(100, 40);
  Tick(1000, 40);
  ASSERT_EQ(api_.updates.size(), 1u);
  EXPECT_EQ(*OurRule(),
            "@1 <*, w, //home/a/*> -> track_writes(spread); "
            "<IO, //S3/.sroute-tl-1/a/*>, <IO, //S2/.sroute-tl-1/a/*>");
  EXPECT_THAT(api_.state["decisions"],
              HasSubstr("S3 serves 0 ops/s, S2 serves 40 ops/s"));
  EXPECT_THAT(api_.state["flows"],
              HasSubstr("\tS3,S2\t//S3/.sroute-tl-1,//S2/.sroute-tl-1\t"));
  Start("alpha=3,end=1.5,window=5,min_ops=50,hold=0,cooldown=5,spread=2");
  Tick(100, 40);
  ASSERT_EQ(api_.updates.size(), 3u);
  EXPECT_THAT(api_.log, ::testing::Contains("copy REMOVE //S3/.sroute-tl-1"));
  EXPECT_THAT(api_.log, ::testing::Contains("copy REMOVE //S2/.sroute-tl-1"));
  // S2 busy (600 x alpha above the burst): only S3 takes the next one.
  for (int i = 0; i < 10; ++i) Tick(100, 600);
  Tick(1500, 600);
  ASSERT_EQ(api_.updates.size(), 4u);
  EXPECT_EQ(*OurRule(),
            "@1 <*, w, //home/a/*> -> track_writes(); "
            "<IO, //S3/.sroute-tl-2/a/*>");
}

TEST_F(TailLatencyAppTest, ResumesAReclaimAfterARestart) {
  Start("alpha=3,end=1.5,window=5,min_ops=50,hold=0,cooldown=5");
  for (int i = 0; i < 5; ++i) Tick(100, 0);
  Tick(1000, 0);
  ASSERT_EQ(Offloads(), 1);
  // The controller stops here, its state kept; the next life goes on.
  Start("alpha=3,end=1.5,window=5,min_ops=50,hold=0,cooldown=5");
  Tick(100, 0);
  EXPECT_THAT(api_.log, ::testing::Contains("copy REMOVE //S2/.sroute-tl-1"));
  // Generations are never used twice.
  for (int i = 0; i < 10; ++i) Tick(100, 0);
  Tick(2000, 0);
  ASSERT_EQ(Offloads(), 2);
  EXPECT_THAT(*OurRule(), HasSubstr(".sroute-tl-2/"));
}

// A choked server completes few IOs: its queue tells the burst, and the
// burst is not over while IOs still wait.
TEST_F(TailLatencyAppTest, AQueueOfIosInFlightIsABurstToo) {
  Start("alpha=3,end=1.5,window=5,min_ops=50,hold=0,cooldown=5,queue=32");
  for (int i = 0; i < 5; ++i) Tick(100, 0);
  Tick(120, 0, 10);  // a short queue: nothing
  EXPECT_TRUE(api_.updates.empty());
  Tick(120, 0, 40);
  ASSERT_EQ(Offloads(), 1);
  EXPECT_THAT(api_.state["decisions"], HasSubstr("40 IOs in flight"));
  Tick(60, 0, 20);  // rate down, queue still long: stays away
  EXPECT_EQ(api_.updates.size(), 1u);
  Tick(60, 0, 2);
  EXPECT_EQ(api_.updates.size(), 3u);  // reclaimed
}

TEST_F(TailLatencyAppTest, NoServerWithHeadroomNoOffLoad) {
  Start("alpha=3,end=1.5,window=5,min_ops=50");
  api_.topology[0].info.mutable_endpoints()->DeleteSubrange(2, 1);  // no S3
  for (int i = 0; i < 5; ++i) Tick(100, 600);
  Tick(1000, 600);  // S2 serves 600 > 1000 / 3
  EXPECT_TRUE(api_.updates.empty());
  EXPECT_THAT(api_.state["decisions"], HasSubstr("no other server"));
}

// A load that swings across both thresholds every second: the app moves
// at most once per hold + cooldown, not every second.
TEST_F(TailLatencyAppTest, ALoadHoveringAtTheThresholdsDoesNotFlap) {
  Start("alpha=2,end=1.5,window=10,min_ops=50,hold=10,cooldown=10");
  for (int i = 0; i < 20; ++i) Tick(100, 0);
  int transitions = 0;
  size_t seen = 0;
  for (int i = 0; i < 120; ++i) {  // two minutes
    Tick(i % 2 == 0 ? 260 : 120, 0);
    if (api_.updates.size() != seen) {
      transitions += static_cast<int>(api_.updates.size() - seen);
      seen = api_.updates.size();
    }
  }
  EXPECT_GE(Offloads(), 1);
  // Each cycle is an off-load and a reclaim of two updates, at least 20 s.
  EXPECT_LE(Offloads(), 6);
  EXPECT_LE(transitions, 6 * 3);
}

}  // namespace
}  // namespace sroute
