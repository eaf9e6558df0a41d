// SPDX-License-Identifier: Apache-2.0
// Tracing in the data path (sswitch/trace.h): the trace(P) delegate samples
// IOs at their first sSwitch, every hop adds its segment, and the sSwitch
// keeps the sampled IOs' whole paths (SSwitch::Traces).
#include "sswitch/trace.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "embed/embedded_host.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rules/parser.h"
#include "sswitch/sswitch.h"
#include "tests/util/holding_endpoint.h"
#include "tests/util/temp_dir.h"
#include "tests/util/wait.h"
#include "util/clock.h"

namespace sroute {
namespace {

using ::sroute::testing::Eventually;
using ::sroute::testing::ReadWholeFile;
using ::sroute::testing::TempDir;
using ::sroute::testing::WriteWholeFile;
using ::testing::HasSubstr;

// Passes IOs on.
class ForwardingStage : public Stage {
 public:
  void Submit(Io* io, const Forward& forward) override { forward(io); }
};

class TraceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(host_.AddLocalEndpoint("A", dir_.path()).ok());
    ASSERT_TRUE(host_.AddStage("S", std::make_shared<ForwardingStage>()).ok());
  }
  absl::Status Write(const std::string& file, const std::string& data) {
    return host_
        .Write("t", file, 0, std::span<const char>(data.data(), data.size()))
        .status();
  }
  std::vector<SSwitch::KeptTrace> Traces() {
    return host_.sswitch().Traces(0, 100000);
  }

  TempDir dir_;
  EmbeddedHost host_{"h"};
};

// Every hop's segment lies inside the IO's and the hops end in order.
void ExpectNested(const SSwitch::KeptTrace& t) {
  uint64_t last_end = 0;
  for (const TraceHop& h : t.hops) {
    if (h.depth != 0) continue;  // another host's clock
    EXPECT_LE(h.start_ns, h.end_ns) << h.kind;
    EXPECT_GE(h.start_ns, t.start_ns) << h.kind;
    EXPECT_LE(h.end_ns, t.end_ns) << h.kind;
    EXPECT_GE(h.end_ns, last_end) << h.kind;
    last_end = h.end_ns;
  }
}

TEST_F(TraceTest, ASampledIoKeepsItsPathThroughAStage) {
  WriteWholeFile(dir_ / "f", "");
  ASSERT_TRUE(host_
                  .LoadRules("<*, w, //A/f> -> trace(); <IO, stage:S>\n"
                             "<stage:S, w, //A/f> -> <IO, //A/g>\n")
                  .ok());
  ASSERT_TRUE(Write("//A/f", "hello").ok());
  auto traces = Traces();
  ASSERT_EQ(traces.size(), 1u);
  const SSwitch::KeptTrace& t = traces[0];
  EXPECT_EQ(t.seq, 1u);
  EXPECT_EQ(t.header.file, "//A/f");
  EXPECT_EQ(t.rule_id, 1u);
  EXPECT_EQ(t.code, absl::StatusCode::kOk);
  // Innermost first: the rule after the stage, the stage, the first rule.
  ASSERT_EQ(t.hops.size(), 3u);
  EXPECT_EQ(t.hops[0].kind, "rule");
  EXPECT_EQ(t.hops[0].rule_id, 2u);
  EXPECT_EQ(t.hops[0].next, "//A/g");
  EXPECT_EQ(t.hops[1].kind, "stage");
  EXPECT_EQ(t.hops[1].next, "stage:S");
  EXPECT_EQ(t.hops[1].rule_id, 1u);
  EXPECT_EQ(t.hops[2].kind, "rule");
  EXPECT_EQ(t.hops[2].rule_id, 1u);
  EXPECT_EQ(t.hops[2].next, "stage:S");  // where the rule sent it
  for (const TraceHop& h : t.hops) EXPECT_EQ(h.host, "h");
  ExpectNested(t);
  EXPECT_EQ(host_.sswitch().traces_sampled(), 1u);
}

TEST_F(TraceTest, ZeroSamplesNothingAndAShareSamplesAboutIt) {
  WriteWholeFile(dir_ / "none", "");
  WriteWholeFile(dir_ / "half", "");
  ASSERT_TRUE(host_
                  .LoadRules("<*, w, //A/none> -> trace(0); <IO, //A/none>\n"
                             "<*, w, //A/half> -> trace(sample=0.5); "
                             "<IO, //A/half>\n")
                  .ok());
  for (int i = 0; i < 1000; ++i) ASSERT_TRUE(Write("//A/none", "x").ok());
  EXPECT_TRUE(Traces().empty());
  for (int i = 0; i < 2000; ++i) ASSERT_TRUE(Write("//A/half", "x").ok());
  const size_t n = Traces().size();
  EXPECT_GT(n, 800u);
  EXPECT_LT(n, 1200u);
}

// A tap samples the IOs it matches and never routes them: the forwarding
// rule still does, and its hop is in the trace the sSwitch keeps under the
// tap's id.
TEST_F(TraceTest, ATapSamplesWithoutChangingTheRoute) {
  for (const char* name : {"f", "untraced", "other"}) {
    WriteWholeFile(dir_ / name, "");
  }
  ASSERT_TRUE(host_
                  .LoadRules("<*, w, //A/f> -> <IO, //A/g>\n"
                             "<*, w, //A/f> -> trace(1)\n"
                             "<*, w, //A/untraced> -> trace(0)\n")
                  .ok());
  uint64_t fwd = 0, tap = 0;
  for (const RuleInfo& r : host_.sswitch().ListRules()) {
    if (r.rule.pattern.file.text != "//A/f") continue;
    (r.rule.is_tap() ? tap : fwd) = r.id;
  }
  ASSERT_TRUE(Write("//A/f", "hello").ok());
  EXPECT_EQ(ReadWholeFile(dir_ / "g"), "hello");  // routed as before
  ASSERT_TRUE(Write("//A/untraced", "x").ok());
  ASSERT_TRUE(Write("//A/other", "x").ok());
  auto traces = Traces();
  ASSERT_EQ(traces.size(), 1u);
  EXPECT_EQ(traces[0].rule_id, tap);
  EXPECT_EQ(traces[0].header.file, "//A/f");
  ASSERT_EQ(traces[0].hops.size(), 1u);
  EXPECT_EQ(traces[0].hops[0].kind, "rule");
  EXPECT_EQ(traces[0].hops[0].rule_id, fwd);
  EXPECT_EQ(traces[0].hops[0].next, "//A/g");
  ExpectNested(traces[0]);
}

// A tap's owner holds a lease: renewed, the rules stay; not renewed, they go
// (and only that owner's); a zero lease deletes them at once.
TEST_F(TraceTest, RulesOfAnExpiredLeaseAreDeleted) {
  auto& sw = host_.sswitch();
  auto tap = ParseRule("<*, w, //A/f> -> trace(1)");
  ASSERT_TRUE(tap.ok());
  ASSERT_TRUE(sw.Insert(*tap, "tool-1").ok());
  ASSERT_TRUE(sw.Insert(*tap, "tool-2").ok());
  ASSERT_TRUE(sw.Insert(*tap, "someone").ok());
  ASSERT_TRUE(sw.HoldLease("tool-1", absl::Milliseconds(300)).ok());
  ASSERT_TRUE(sw.HoldLease("tool-2", absl::Milliseconds(300)).ok());
  EXPECT_EQ(sw.LeaseOwners().size(), 2u);
  auto owners = [&] {
    std::multiset<std::string> out;
    for (const RuleInfo& r : sw.ListRules()) out.insert(r.owner);
    return out;
  };
  // tool-2 renews (for 2 s each time: a stalled test thread keeps it);
  // tool-1 does not, and goes. Past twice their first 300 ms, tool-2 is
  // still there only by its renewals.
  const auto start = std::chrono::steady_clock::now();
  EXPECT_TRUE(Eventually([&] {
    EXPECT_TRUE(sw.HoldLease("tool-2", absl::Seconds(2)).ok());
    return owners().count("tool-1") == 0 &&
           std::chrono::steady_clock::now() - start >=
               std::chrono::milliseconds(600);
  }));
  EXPECT_EQ(owners(), (std::multiset<std::string>{"someone", "tool-2"}));
  EXPECT_EQ(sw.LeaseOwners(), std::vector<std::string>{"tool-2"});
  auto n = sw.HoldLease("tool-2", absl::ZeroDuration());
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 1);
  EXPECT_EQ(owners(), (std::multiset<std::string>{"someone"}));
  EXPECT_TRUE(sw.LeaseOwners().empty());
  EXPECT_FALSE(sw.HoldLease("", absl::Seconds(1)).ok());
}

TEST_F(TraceTest, BadSharesAreRefusedClearly) {
  for (const char* bad :
       {"trace(2)", "trace(abc)", "trace(1.5)", "trace(sample=0x)"}) {
    absl::Status s = host_.LoadRules(std::string("<*, w, //A/f> -> ") + bad +
                                     "; <IO, //A/f>");
    EXPECT_FALSE(s.ok()) << bad;
    EXPECT_THAT(std::string(s.message()), HasSubstr("is not a share")) << bad;
  }
}

// An IO traced by the host before (as a server gets it, the trace flag in
// the RPC): a wait at a quiesce, and the default route, are segments.
TEST_F(TraceTest, AParkAndTheDefaultRouteAreSegments) {
  WriteWholeFile(dir_ / "p", "");
  auto& sw = host_.sswitch();
  auto flow = ParsePattern("<*, *, //A/p>");
  ASSERT_TRUE(flow.ok());
  ASSERT_TRUE(sw.Quiesce(*flow, true).ok());
  Io io;
  io.header = {"t", "", Op::kWrite, "//A/p", 0, 4};
  io.write_data = std::span<const char>("late", 4);
  io.trace = std::make_shared<Trace>();
  std::atomic<bool> done{false};
  io.set_completion([&](Io& d) {
    EXPECT_TRUE(d.status.ok()) << d.status;
    done = true;
  });
  sw.Route(&io);
  EXPECT_EQ(sw.parked(), 1u);
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_TRUE(sw.Quiesce(*flow, false).ok());
  ASSERT_TRUE(done.load());
  const std::vector<TraceHop> hops = io.trace->Hops();
  ASSERT_EQ(hops.size(), 2u);
  EXPECT_EQ(hops[0].kind, "park");
  EXPECT_GE(hops[0].end_ns - hops[0].start_ns, 5'000'000u);
  EXPECT_EQ(hops[1].kind, "default");
  EXPECT_EQ(hops[1].next, "//A/p");
  EXPECT_GE(hops[1].start_ns, hops[0].end_ns);
  // Not sampled here: this host keeps no trace of it.
  EXPECT_TRUE(Traces().empty());
}

// An IO that came over an RPC: its wait from the request's arrival until
// it is routed is its "queue" hop, before the others; an IO that came over
// none has no such hop.
TEST_F(TraceTest, AWaitSinceArrivalIsTheQueueHop) {
  WriteWholeFile(dir_ / "q", "");
  for (const bool over_rpc : {true, false}) {
    Io io;
    io.header = {"t", "", Op::kWrite, "//A/q", 0, 4};
    io.write_data = std::span<const char>("data", 4);
    io.trace = std::make_shared<Trace>();
    const uint64_t arrived = MonotonicNanos() - 3'000'000;
    if (over_rpc) io.arrived_ns = arrived;
    std::atomic<bool> done{false};
    io.set_completion([&](Io&) { done = true; });
    host_.sswitch().Route(&io);
    ASSERT_TRUE(done.load());
    const std::vector<TraceHop> hops = io.trace->Hops();
    ASSERT_EQ(hops.size(), over_rpc ? 2u : 1u);
    EXPECT_EQ(hops.back().kind, "default");
    if (!over_rpc) continue;
    EXPECT_EQ(hops[0].kind, "queue");
    EXPECT_EQ(hops[0].host, "h");
    EXPECT_EQ(hops[0].start_ns, arrived);
    EXPECT_GE(hops[0].end_ns - hops[0].start_ns, 3'000'000u);
    EXPECT_LE(hops[0].end_ns, hops[1].start_ns);
  }
}

// A byte-range rule splits an IO: the pieces share its trace.
TEST_F(TraceTest, PiecesOfASplitIoShareItsTrace) {
  WriteWholeFile(dir_ / "r", "");
  ASSERT_TRUE(host_
                  .LoadRules("<*, w, //A/r> -> trace(); <IO, stage:S>\n"
                             "<stage:S, w, //A/r[0:4]> -> <IO, //A/r.lo>\n"
                             "<stage:S, w, //A/r[4:100]> -> <IO, //A/r.hi>\n")
                  .ok());
  ASSERT_TRUE(Write("//A/r", "01234567").ok());
  auto traces = Traces();
  ASSERT_EQ(traces.size(), 1u);
  std::vector<std::string> nexts;
  for (const TraceHop& h : traces[0].hops) nexts.push_back(h.next);
  EXPECT_THAT(nexts,
              ::testing::IsSupersetOf({"//A/r.lo", "//A/r.hi", "stage:S"}));
  ExpectNested(traces[0]);
}

// A scatter's copies show as copies 0 and 1, and a "scatter" hop names the
// copy whose answer completed the write (all-ack: the last one).
TEST_F(TraceTest, ScatterCopiesAreNumberedAndTheDecidingOneMarked) {
  WriteWholeFile(dir_ / "s", "");
  WriteWholeFile(dir_ / "s.b", "");
  ASSERT_TRUE(host_
                  .LoadRules("<*, w, //A/s> -> trace(); <IO, //A/s>, "
                             "<IO, //A/s.b>\n")
                  .ok());
  ASSERT_TRUE(Write("//A/s", "both").ok());
  auto traces = Traces();
  ASSERT_EQ(traces.size(), 1u);
  std::set<int32_t> copies;
  const TraceHop* join = nullptr;
  for (const TraceHop& h : traces[0].hops) {
    if (h.kind == "scatter") join = &h;
    if (h.kind == "default" || h.kind == "rule") copies.insert(h.copy);
  }
  ASSERT_NE(join, nullptr);
  EXPECT_EQ(join->next, "2 copies");
  EXPECT_TRUE(join->copy == 0 || join->copy == 1) << join->copy;
  EXPECT_TRUE(copies.contains(-1));  // the rule's own hop: the IO itself
  ExpectNested(traces[0]);
}

TEST_F(TraceTest, KeepsTheLastTracesAndNumbersThem) {
  WriteWholeFile(dir_ / "k", "");
  ASSERT_TRUE(host_.LoadRules("<*, w, //A/k> -> trace(); <IO, //A/k>\n").ok());
  const size_t n = SSwitch::kKeptTraces + 10;
  for (size_t i = 0; i < n; ++i) ASSERT_TRUE(Write("//A/k", "x").ok());
  auto all = Traces();
  ASSERT_EQ(all.size(), SSwitch::kKeptTraces);
  EXPECT_EQ(all.front().seq, 11u);
  EXPECT_EQ(all.back().seq, n);
  EXPECT_EQ(host_.sswitch().traces_sampled(), n);
  auto after = host_.sswitch().Traces(n - 3, 100);
  ASSERT_EQ(after.size(), 3u);
  EXPECT_EQ(after[0].seq, n - 2);
  EXPECT_EQ(host_.sswitch().Traces(0, 5).size(), 5u);
}

}  // namespace
}  // namespace sroute

namespace sroute {
namespace {

// Holds the IOs of files whose name ends in "slow" for a while.
class SlowEndpoint : public Endpoint {
 public:
  void Submit(Io* io, std::string_view path) override {
    if (path.ends_with("slow")) {
      std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    }
    io->bytes = io->header.length;
    io->Complete();
  }
  int delay_ms = 8;
};

class SlowOpsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(host_.AddEndpoint("E", endpoint_).ok());
    ASSERT_TRUE(host_.LoadRules("<*, *, //E/*> -> <IO, //E/*>\n").ok());
  }
  void Write(const std::string& file) {
    ASSERT_TRUE(host_.Write("t", file, 0, std::span<const char>("x", 1)).ok());
  }
  EmbeddedHost host_{"h"};
  std::shared_ptr<SlowEndpoint> endpoint_ = std::make_shared<SlowEndpoint>();
};

// Ten slow IOs among a million fast ones are all caught, whatever the
// sampling (1/1024 here: the sampled ones never push them out). A fast IO
// the machine stalled past the threshold (sanitizers, a loaded CI) may be
// caught too; every slow one must be, and each catch is counted.
TEST_F(SlowOpsTest, EverySlowIoAmongAMillionIsCaught) {
  ASSERT_TRUE(host_.LoadRules("<*, w, //E/*> -> trace(0.0009765625)\n").ok());
  endpoint_->delay_ms = 40;
  host_.sswitch().slow_ops().set_threshold_ns(20'000'000);
  for (int i = 0; i < 1'000'000; ++i) {
    Write(i % 100'000 == 7 ? "//E/slow" : "//E/fast");
  }
  const uint64_t sampled = host_.sswitch().traces_sampled();
  EXPECT_GT(sampled, 800u);  // 977 expected
  EXPECT_LT(sampled, 1200u);
  const SlowOpLog::View v = host_.sswitch().slow_ops().Get(0);
  ASSERT_LT(v.total, SlowOpLog::kRecent);  // all still in the recent ring
  EXPECT_EQ(v.recent.size(), v.total);
  size_t slow = 0;
  for (const SlowIo& s : v.recent) {
    if (s.header.file != "//E/slow") continue;
    ++slow;
    EXPECT_EQ(s.rule_id, 1u);
    EXPECT_GE(s.end_ns - s.start_ns, 20'000'000u);
  }
  EXPECT_EQ(slow, 10u);
  EXPECT_EQ(v.overwritten, 0u);
}

// The recent ring is bounded; the longest stay in the top list after the
// ring let them go, and the counters say how many went.
TEST_F(SlowOpsTest, TheLongestOutliveTheRecentRing) {
  auto& log = host_.sswitch().slow_ops();
  log.set_threshold_ns(1);  // every IO
  endpoint_->delay_ms = 30;
  Write("//E/slow");
  for (size_t i = 0; i < SlowOpLog::kRecent + 44; ++i) Write("//E/fast");
  const SlowOpLog::View v = log.Get(0);
  EXPECT_EQ(v.total, SlowOpLog::kRecent + 45);
  EXPECT_EQ(v.recent.size(), SlowOpLog::kRecent);
  EXPECT_EQ(v.overwritten, 45u);
  ASSERT_EQ(v.top.size(), SlowOpLog::kTop);
  EXPECT_EQ(v.top[0].header.file, "//E/slow");  // longest first
  for (size_t i = 1; i < v.top.size(); ++i) {
    EXPECT_GE(v.top[i - 1].end_ns - v.top[i - 1].start_ns,
              v.top[i].end_ns - v.top[i].start_ns);
  }
  // 0 turns capture off.
  log.set_threshold_ns(0);
  Write("//E/slow");
  EXPECT_EQ(log.Get(0).total, SlowOpLog::kRecent + 45);
}

}  // namespace
}  // namespace sroute

namespace sroute {
namespace {

// Keeps the IOs it is given until Release() forwards them.
class HoldingStage : public Stage {
 public:
  void Submit(Io* io, const Forward& forward) override {
    MutexLock l(&mu_);
    held_.emplace_back(io, &forward);
  }
  size_t held() {
    MutexLock l(&mu_);
    return held_.size();
  }
  void Release() {
    std::vector<std::pair<Io*, const Forward*>> held;
    {
      MutexLock l(&mu_);
      held.swap(held_);
    }
    for (auto& [io, forward] : held) (*forward)(io);
  }

 private:
  Mutex mu_;
  std::vector<std::pair<Io*, const Forward*>> held_ ABSL_GUARDED_BY(mu_);
};

// IOs stuck in flight or parked at a quiesce show once a scan saw them
// before, with where they wait; fast IOs never do.
TEST(StaleIosTest, StuckAndParkedIosShowFromTheSecondLook) {
  TempDir dir;
  EmbeddedHost host("h");
  auto held = std::make_shared<testing::HoldingEndpoint>(/*hold=*/true);
  ASSERT_TRUE(host.AddEndpoint("H", held).ok());
  ASSERT_TRUE(host.AddLocalEndpoint("A", dir.path()).ok());
  auto stage = std::make_shared<HoldingStage>();
  ASSERT_TRUE(host.AddStage("S", stage).ok());
  WriteWholeFile(dir / "q", "");
  WriteWholeFile(dir / "s", "");
  auto& sw = host.sswitch();
  auto rule = ParseRule("<*, *, //A/s> -> <IO, stage:S>");
  ASSERT_TRUE(rule.ok());
  ASSERT_TRUE(sw.Insert(*rule).ok());
  // One IO stuck at an endpoint, one in a stage...
  std::thread stuck([&] {
    std::string buf(4, '\0');
    (void)host.Read("alice", "//H/x", 8, std::span<char>(buf));
  });
  held->WaitHeld();
  std::thread staged([&] {
    std::string buf(4, '\0');
    (void)host.Read("carol", "//A/s", 0, std::span<char>(buf));
  });
  while (stage->held() == 0) std::this_thread::yield();
  // ...and one parked at a quiesce.
  auto flow = ParsePattern("<*, *, //A/q>");
  ASSERT_TRUE(flow.ok());
  ASSERT_TRUE(sw.Quiesce(*flow, true).ok());
  std::thread parked([&] {
    ASSERT_TRUE(
        host.Write("bob", "//A/q", 0, std::span<const char>("late", 4)).ok());
  });
  while (sw.parked() == 0) std::this_thread::yield();
  EXPECT_TRUE(sw.StaleIos(absl::ZeroDuration()).empty());  // first look
  std::this_thread::sleep_for(std::chrono::milliseconds(3));
  auto stale = sw.StaleIos(absl::Milliseconds(2));
  ASSERT_EQ(stale.size(), 3u);
  std::sort(stale.begin(), stale.end(),
            [](const auto& a, const auto& b) { return a.file < b.file; });
  EXPECT_EQ(stale[0].file, "//A/q");
  EXPECT_TRUE(stale[0].parked);
  EXPECT_EQ(stale[0].source, "bob");
  EXPECT_EQ(stale[0].op, Op::kWrite);
  EXPECT_EQ(stale[0].waiting_at, "");  // parked before any hop
  EXPECT_EQ(stale[1].file, "//A/s");
  EXPECT_FALSE(stale[1].parked);
  EXPECT_EQ(stale[1].waiting_at, "stage:S");
  EXPECT_EQ(stale[2].file, "//H/x");
  EXPECT_FALSE(stale[2].parked);
  EXPECT_EQ(stale[2].offset, 8u);
  EXPECT_EQ(stale[2].length, 4u);
  EXPECT_GE(stale[2].age_ns, 2'000'000u);
  EXPECT_EQ(stale[2].waiting_at, "endpoint H");
  EXPECT_TRUE(sw.StaleIos(absl::Seconds(10)).empty());  // not that old
  // Let the staged IO go on to its file.
  stage->Release();
  staged.join();
  ASSERT_TRUE(sw.Quiesce(*flow, false).ok());
  held->Release();
  stuck.join();
  parked.join();
  EXPECT_TRUE(sw.StaleIos(absl::ZeroDuration()).empty());
}

// A scatter write whose copy to a stuck endpoint holds it: the IO waits for
// its copies (each copy keeps its own place: one may outlive the IO).
TEST(StaleIosTest, AScatterWaitsForItsCopies) {
  TempDir dir;
  EmbeddedHost host("h");
  auto held = std::make_shared<testing::HoldingEndpoint>(/*hold=*/true);
  ASSERT_TRUE(host.AddEndpoint("H", held).ok());
  ASSERT_TRUE(host.AddLocalEndpoint("A", dir.path()).ok());
  WriteWholeFile(dir / "m", "");
  ASSERT_TRUE(
      host.LoadRules("<*, w, //A/m> -> <IO, //A/m>, <IO, //H/m>\n").ok());
  auto& sw = host.sswitch();
  std::thread writer([&] {
    EXPECT_TRUE(
        host.Write("dan", "//A/m", 0, std::span<const char>("both", 4)).ok());
  });
  held->WaitHeld();
  EXPECT_TRUE(sw.StaleIos(absl::ZeroDuration()).empty());  // first look
  auto stale = sw.StaleIos(absl::ZeroDuration());
  ASSERT_EQ(stale.size(), 1u);
  EXPECT_EQ(stale[0].file, "//A/m");
  EXPECT_EQ(stale[0].waiting_at, "its scatter copies");
  held->Release();
  writer.join();
}

}  // namespace
}  // namespace sroute
