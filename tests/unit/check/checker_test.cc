// SPDX-License-Identifier: Apache-2.0
// The rule checker: one test per finding kind, each finding's witness
// header routed through real sSwitches (with endpoints that record where
// IOs land) to show that it does what the finding says.
#include "check/checker.h"

#include <atomic>
#include <map>
#include <mutex>
#include <set>

#include "embed/embedded_host.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rules/parser.h"
#include "util/strings.h"

namespace sroute::check {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;

// "NAME.rules" parsed: rules in file order, origin NAME.rules:LINE.
std::vector<TableRule> Rules(const std::string& name, std::string_view text) {
  ParsedRules parsed = ParseRules(text);
  EXPECT_TRUE(parsed.ok()) << parsed.errors[0].reason;
  return TableRulesOf(parsed, name + ".rules");
}

SwitchView View(const std::string& name, std::string_view rules) {
  SwitchView v;
  v.name = name;
  v.rules = Rules(name, rules);
  return v;
}

std::vector<Finding> Of(const Report& r, FindingKind kind) {
  std::vector<Finding> out;
  for (const Finding& f : r.findings) {
    if (f.kind == kind) out.push_back(f);
  }
  return out;
}

// Records where IOs land and completes them at once.
class RecordingEndpoint : public Endpoint {
 public:
  struct Landing {
    std::string path, stage;
    Op op;
  };
  void Submit(Io* io, std::string_view path) override { Record(io, path, ""); }
  void SubmitToStage(Io* io, std::string_view path,
                     std::string_view stage) override {
    Record(io, path, stage);
  }
  std::vector<Landing> Take() {
    std::lock_guard<std::mutex> l(mu_);
    return std::exchange(landed_, {});
  }

 private:
  void Record(Io* io, std::string_view path, std::string_view stage) {
    {
      std::lock_guard<std::mutex> l(mu_);
      landed_.push_back({std::string(path), std::string(stage), io->header.op});
    }
    io->bytes = io->header.length;
    io->Complete();
  }
  std::mutex mu_;
  std::vector<Landing> landed_;
};

class PassStage : public Stage {
 public:
  void Submit(Io* io, const Forward& forward) override { forward(io); }
};

// A real sSwitch with recording endpoints and pass-through stages, the
// rules of `view` installed in their order, owned by their origins.
class RealSwitch {
 public:
  RealSwitch(const SwitchView& view, const std::vector<std::string>& endpoints,
             const std::vector<std::string>& stages)
      : host_(view.name) {
    for (const std::string& e : endpoints) {
      auto ep = std::make_shared<RecordingEndpoint>();
      EXPECT_TRUE(host_.AddEndpoint(e, ep).ok());
      endpoints_[e] = ep;
    }
    for (const std::string& s : stages) {
      EXPECT_TRUE(host_.AddStage(s, std::make_shared<PassStage>()).ok());
    }
    for (const TableRule& t : view.rules) {
      absl::StatusOr<uint64_t> id = host_.sswitch().Insert(t.rule, t.origin);
      EXPECT_TRUE(id.ok()) << t.origin << ": " << id.status();
    }
  }

  struct Routed {
    absl::Status status;
    std::string rule;  // the origin of the rule that routed it ("" none)
    std::map<std::string, std::vector<RecordingEndpoint::Landing>> landed;
  };
  Routed Route(const IoHeader& h) {
    std::map<std::string, uint64_t> before = Counts();
    Io io;
    io.header = h;
    std::string buf(h.length, 'x');
    if (h.op == Op::kRead) io.read_buffer = std::span<char>(buf);
    if (h.op == Op::kWrite) io.write_data = std::span<const char>(buf);
    std::atomic<bool> done{false};
    io.set_completion([&](Io&) {
      done.store(true);
      done.notify_one();
    });
    host_.sswitch().Route(&io);
    done.wait(false);
    Routed r;
    r.status = io.status;
    for (const auto& [origin, ops] : Counts()) {
      if (ops > before[origin]) r.rule = origin;
    }
    for (auto& [name, ep] : endpoints_) {
      auto l = ep->Take();
      if (!l.empty()) r.landed[name] = std::move(l);
    }
    return r;
  }
  SSwitch& sswitch() { return host_.sswitch(); }

 private:
  std::map<std::string, uint64_t> Counts() {
    std::map<std::string, uint64_t> out;
    for (const RuleInfo& info : host_.sswitch().ListRules()) {
      out[info.owner] += info.counters.ops;
    }
    return out;
  }
  EmbeddedHost host_;
  std::map<std::string, std::shared_ptr<RecordingEndpoint>> endpoints_;
};

TEST(CheckerTest, ACleanTableHasNoFindings) {
  Report r = CheckTables({View("S1",
                               "<*, *, //S1/a> -> <IO, //S2/a>\n"
                               "<*, *, //S1/vm/*> -> <IO, //S2/vm/*>\n"
                               "<*, *, //S1/x> -> <IO, //S2/x>\n")});
  EXPECT_THAT(r.findings, IsEmpty()) << r.Text();
  EXPECT_THAT(r.Text(), HasSubstr("0 errors, 0 warnings"));
}

TEST(CheckerTest, ShadowedByAPrefixIsFoundAndItsWitnessGoesElsewhere) {
  SwitchView v = View("S1",
                      "<*, *, //S1/vm/*> -> <IO, //S2/vm/*>\n"
                      "<alice, w, //S1/vm/disk> -> <IO, //S3/disk>\n");
  Report r = CheckTables({v}, {.deep = true});
  auto found = Of(r, FindingKind::kShadowed);
  ASSERT_THAT(found, SizeIs(1)) << r.Text();
  EXPECT_EQ(found[0].origin, "S1.rules:2");
  EXPECT_THAT(found[0].detail, HasSubstr("S1.rules:1"));
  ASSERT_TRUE(found[0].witness.has_value());
  EXPECT_EQ(found[0].witness->source, "alice");
  EXPECT_EQ(found[0].witness->file, "//S1/vm/disk");
  EXPECT_EQ(r.errors(), 0u);

  RealSwitch sw(v, {"S1", "S2", "S3"}, {});
  RealSwitch::Routed routed = sw.Route(*found[0].witness);
  ASSERT_TRUE(routed.status.ok()) << routed.status;
  EXPECT_EQ(routed.rule, "S1.rules:1");
  EXPECT_TRUE(routed.landed.contains("S2"));
  // S3 may see the sync of the shadowed rule's place (an fsync reaches
  // every place a rule may have put bytes of the file), never the IO.
  if (routed.landed.contains("S3")) {
    EXPECT_EQ(found[0].witness->op, Op::kFsync);
    for (const RecordingEndpoint::Landing& l : routed.landed.at("S3")) {
      EXPECT_EQ(l.op, Op::kFsync) << l.path;
    }
  }
}

TEST(CheckerTest, ARuleReachedByOneTenantIsNotShadowed) {
  // Tenant rules before a '*' rule leave other tenants to it; op classes
  // and ranges likewise.
  Report r = CheckTables({View("S1",
                               "<alice, *, //S1/a> -> <IO, //S2/a>\n"
                               "<bob, *, //S1/a> -> <IO, //S2/a>\n"
                               "<*, r, //S1/a> -> <IO, //S3/a>\n"
                               "<*, *, //S1/a[0:4K]> -> <IO, //S3/a>\n"
                               "<*, *, //S1/a> -> <IO, //S4/a>\n")});
  EXPECT_THAT(Of(r, FindingKind::kShadowed), IsEmpty()) << r.Text();
}

TEST(CheckerTest, RegexShadowingIsExact) {
  SwitchView v = View("S1",
                      "<*, *, re://S1/log/[0-9]+\\.txt> -> <IO, //S2/log>\n"
                      "<*, *, re://S1/log/(1|2)[0-9]*\\.txt> -> <IO, //S3/l>\n"
                      "<*, *, re://S1/log/[0-9]+\\.(txt|gz)> -> <IO, //S3/g>\n"
                      "<*, r, //S1/log/7.txt> -> <IO, //S4/x>\n");
  Report r = CheckTables({v}, {.deep = true});
  auto found = Of(r, FindingKind::kShadowed);
  // Rule 2 is inside rule 1; rule 3 is reached by .gz names; rule 4 by an
  // exact name rule 1's regex matches.
  ASSERT_THAT(found, SizeIs(2)) << r.Text();
  EXPECT_EQ(found[0].origin, "S1.rules:2");
  EXPECT_EQ(found[1].origin, "S1.rules:4");
  RealSwitch sw(v, {"S1", "S2", "S3", "S4"}, {});
  for (const Finding& f : found) {
    ASSERT_TRUE(f.witness.has_value());
    RealSwitch::Routed routed = sw.Route(*f.witness);
    EXPECT_EQ(routed.rule, "S1.rules:1") << f.witness->file;
  }
}

TEST(CheckerTest, ByteRangesShadowWholeAndInPart) {
  SwitchView v = View("S1",
                      "<*, r, //S1/x[0:64K]> -> <IO, //S2/x>\n"
                      "<*, r, //S1/x[64K:128K]> -> <IO, //S2/x>\n"
                      "<*, r, //S1/x[16K:96K]> -> <IO, //S3/x>\n"
                      "<*, r, //S1/x[100K:200K]> -> <IO, //S3/x>\n"
                      "<*, w, //S1/x[0:1M]> -> <IO, //S3/x>\n"
                      "<*, c, //S1/x[0:1M]> -> <IO, //S3/x>\n");
  Report r = CheckTables({v}, {.deep = true});
  auto shadowed = Of(r, FindingKind::kShadowed);
  ASSERT_THAT(shadowed, SizeIs(1)) << r.Text();
  EXPECT_EQ(shadowed[0].origin, "S1.rules:3");
  auto partly = Of(r, FindingKind::kPartlyShadowed);
  ASSERT_THAT(partly, SizeIs(1)) << r.Text();
  EXPECT_EQ(partly[0].origin, "S1.rules:4");
  EXPECT_THAT(partly[0].detail, HasSubstr("[100K:128K]"));
  auto never = Of(r, FindingKind::kNeverMatches);
  ASSERT_THAT(never, SizeIs(1)) << r.Text();
  EXPECT_EQ(never[0].origin, "S1.rules:6");

  RealSwitch sw(v, {"S1", "S2", "S3"}, {});
  RealSwitch::Routed a = sw.Route(*shadowed[0].witness);
  EXPECT_NE(a.rule, "S1.rules:3");
  EXPECT_TRUE(a.landed.contains("S2"));
  ASSERT_TRUE(partly[0].witness.has_value());
  EXPECT_GE(partly[0].witness->offset, 100u * 1024);
  EXPECT_LE(partly[0].witness->end(), 128u * 1024);
  RealSwitch::Routed b = sw.Route(*partly[0].witness);
  EXPECT_EQ(b.rule, "S1.rules:2");
}

SwitchView Server(const std::string& name, const std::string& rules,
                  std::vector<SwitchView::Endpoint> more,
                  std::vector<std::string> stages = {}) {
  SwitchView v = View(name, rules);
  v.address = "127.0.0.1:" + std::to_string(7000 + name.back());
  v.topology_known = true;
  v.endpoints.push_back({name, "dir", ""});
  for (auto& e : more) v.endpoints.push_back(e);
  v.stages = std::move(stages);
  return v;
}

SwitchView::Endpoint ServerEndpoint(const std::string& name) {
  return {name, "server", "127.0.0.1:" + std::to_string(7000 + name.back())};
}

TEST(CheckerTest, BlackHoles) {
  SwitchView s1 = Server("S1",
                         "<*, w, //S1/a> -> <IO, //S9/a>\n"
                         "<*, r, //S1/b> -> <IO, stage:nocache>\n"
                         "<*, r, //S2/c> -> <IO, stage://S2/cache>\n"
                         "<*, w, //S1/d> -> <IO, //S2/dir/x>\n"
                         "<*, r, //S1/e> -> <IO, stage:cache>\n"
                         "<*, r, //S1/f> -> <IO, stage://S2/cache>\n",
                         {ServerEndpoint("S2")}, {"cache"});
  // The parser refuses a '*' target under an exact pattern; a rule built
  // in code can still hold one.
  s1.rules[3].rule.detours[0].target.file = "//S2/dir/*";
  SwitchView s2 = Server("S2", "", {});
  Report r = CheckTables({s1, s2}, {.deep = true});
  auto holes = Of(r, FindingKind::kBlackHole);
  ASSERT_THAT(holes, SizeIs(5)) << r.Text();
  EXPECT_EQ(r.errors(), 5u);
  EXPECT_THAT(holes[0].detail, HasSubstr("no endpoint S9"));
  EXPECT_THAT(holes[1].detail, HasSubstr("no stage nocache"));
  EXPECT_THAT(holes[2].detail, HasSubstr("server S2 has no stage cache"));
  EXPECT_THAT(holes[3].detail, HasSubstr("directory //S2/dir/"));
  EXPECT_THAT(holes[4].detail, HasSubstr("files on S2 only"));
  EXPECT_EQ(holes[4].origin, "S1.rules:6");

  // A real sSwitch refuses the first two (it knows its own endpoints and
  // stages); the others route their witnesses into the hole.
  EmbeddedHost check("S1");
  ASSERT_TRUE(
      check.AddEndpoint("S1", std::make_shared<RecordingEndpoint>()).ok());
  EXPECT_FALSE(check.sswitch().Insert(s1.rules[0].rule).ok());
  EXPECT_FALSE(check.sswitch().Insert(s1.rules[1].rule).ok());
  SwitchView installable = s1;
  installable.rules.erase(installable.rules.begin(),
                          installable.rules.begin() + 2);
  RealSwitch sw1(installable, {"S1", "S2"}, {"cache"});
  RealSwitch sw2(s2, {"S2"}, {});
  RealSwitch::Routed c = sw1.Route(*holes[2].witness);
  EXPECT_EQ(c.rule, "S1.rules:3");
  ASSERT_TRUE(c.landed.contains("S2")) << c.status;
  EXPECT_EQ(c.landed["S2"][0].stage, "cache");
  // S2, given the IO for its stage, has none.
  Io io;
  io.header = *holes[2].witness;
  io.header.file = "//S2/" + c.landed["S2"][0].path;
  std::atomic<bool> done{false};
  io.set_completion([&](Io&) {
    done.store(true);
    done.notify_one();
  });
  sw2.sswitch().RouteToStage(&io, "cache");
  done.wait(false);
  EXPECT_FALSE(io.status.ok());
  RealSwitch::Routed f = sw1.Route(*holes[4].witness);
  EXPECT_EQ(f.rule, "S1.rules:6");
  EXPECT_THAT(f.status.message(), HasSubstr("takes IOs of files on S2"));
  // The sSwitch's matcher takes the last one's witness to //S2/dir/.
  Checker checker({s1, s2});
  IoHeader h = *holes[3].witness;
  RuleTable::Pieces pieces;
  checker.TableOf("S1")->Route(h, &pieces);
  ASSERT_FALSE(pieces.empty());
  ASSERT_NE(pieces[0].rule, nullptr);
  EXPECT_EQ(ResolveTargetFile(pieces[0].rule->rule().detours[0].target,
                              pieces[0].rule->rule().pattern.file, h.file),
            "//S2/dir/");
}

TEST(CheckerTest, ALoopAcrossTwoServersIsAnErrorWithItsPath) {
  SwitchView s1 = Server("S1", "<*, *, //S1/data/*> -> <IO, //S2/data/*>\n",
                         {ServerEndpoint("S2")});
  SwitchView s2 = Server("S2", "<*, *, //S2/data/hot> -> <IO, //S1/data/hot>\n",
                         {ServerEndpoint("S1")});
  Report r = CheckTables({s1, s2}, {.deep = true});
  auto loops = Of(r, FindingKind::kLoop);
  ASSERT_THAT(loops, SizeIs(1)) << r.Text();
  EXPECT_TRUE(loops[0].error());
  ASSERT_TRUE(loops[0].witness.has_value());
  EXPECT_EQ(loops[0].witness->file, "//S2/data/hot");
  EXPECT_THAT(loops[0].path, SizeIs(3));
  EXPECT_THAT(loops[0].path.back(), HasSubstr("(again)"));

  // Each hop through the real sSwitches: S2 sends it to S1, S1 back to S2.
  RealSwitch sw1(s1, {"S1", "S2"}, {});
  RealSwitch sw2(s2, {"S2", "S1"}, {});
  IoHeader h = *loops[0].witness;
  RealSwitch::Routed a = sw2.Route(h);
  ASSERT_TRUE(a.landed.contains("S1"));
  h.file = "//S1/" + a.landed["S1"][0].path;
  RealSwitch::Routed b = sw1.Route(h);
  ASSERT_TRUE(b.landed.contains("S2"));
  EXPECT_EQ("//S2/" + b.landed["S2"][0].path, loops[0].witness->file);
}

TEST(CheckerTest, AStageHandBackToTheSameStageIsALoop) {
  SwitchView v = Server("S1",
                        "<*, *, //S1/a> -> <IO, stage:A>\n"
                        "<stage:A, *, //S1/a> -> <IO, stage:B>\n"
                        "<stage:B, *, //S1/a> -> <IO, stage:A>\n"
                        "<*, *, //S1/b> -> <IO, stage:A>\n"
                        "<stage:A, *, //S1/b> -> <IO, stage:B>\n",
                        {}, {"A", "B"});
  Report r = CheckTables({v}, {.deep = true});
  auto loops = Of(r, FindingKind::kLoop);
  ASSERT_THAT(loops, SizeIs(1)) << r.Text();
  EXPECT_EQ(loops[0].witness->file, "//S1/a");
  // A chain A -> B that ends is fine: //S1/b has no finding.
  for (const Finding& f : r.findings) {
    EXPECT_EQ(f.rule.find("//S1/b"), std::string::npos) << r.Text();
  }
  RealSwitch sw(v, {"S1"}, {"A", "B"});
  RealSwitch::Routed routed = sw.Route(*loops[0].witness);
  // ELOOP after the sSwitch's hop limit.
  EXPECT_THAT(routed.status.message(), HasSubstr("routing loop"));
}

TEST(CheckerTest, ReadsOfOneTenantMissTheWritesOfAnother) {
  SwitchView v = View("S1",
                      "<alice, *, //S1/shared[0:1M]> -> <IO, //S2/shared>\n"
                      "<*, w, //S1/log> -> track_writes(); <IO, //S2/log>\n");
  Report r = CheckTables({v});
  auto hazards = Of(r, FindingKind::kReadWriteHazard);
  ASSERT_THAT(hazards, SizeIs(1)) << r.Text();
  EXPECT_THAT(hazards[0].detail, HasSubstr("//S1/shared[0:1M]"));
  // The witness is a read that goes one way; a write of the same bytes by
  // the other tenant goes the other.
  RealSwitch sw(v, {"S1", "S2"}, {});
  const IoHeader read = *hazards[0].witness;
  EXPECT_EQ(read.op, Op::kRead);
  IoHeader write = read;
  write.op = Op::kWrite;
  write.source = read.source == "alice" ? "tenant-x" : "alice";
  RealSwitch::Routed a = sw.Route(read);
  RealSwitch::Routed b = sw.Route(write);
  ASSERT_EQ(a.landed.size(), 1u);
  ASSERT_EQ(b.landed.size(), 1u);
  EXPECT_NE(a.landed.begin()->first, b.landed.begin()->first);
}

TEST(CheckerTest, ARangedDetourUnderAScatterRule) {
  SwitchView v = View("S1",
                      "<*, w, //S1/db[0:4K]> -> <IO, //S3/db-head>\n"
                      "<*, *, //S1/db> -> <IO, //S1/db>, <IO, //S2/db>\n");
  Report r = CheckTables({v});
  auto hazards = Of(r, FindingKind::kScatterHazard);
  ASSERT_THAT(hazards, SizeIs(1)) << r.Text();
  EXPECT_EQ(hazards[0].origin, "S1.rules:1");
  RealSwitch sw(v, {"S1", "S2", "S3"}, {});
  auto writes = [](const RealSwitch::Routed& r) {
    std::set<std::string> at;
    for (const auto& [endpoint, landings] : r.landed) {
      for (const auto& l : landings) {
        if (l.op == Op::kWrite) at.insert(endpoint);
      }
    }
    return at;
  };
  RealSwitch::Routed a = sw.Route(*hazards[0].witness);
  EXPECT_EQ(a.rule, "S1.rules:1");
  EXPECT_EQ(writes(a), std::set<std::string>{"S3"});  // not replicated
  IoHeader later = *hazards[0].witness;
  later.offset = 8192;
  EXPECT_EQ(writes(sw.Route(later)), (std::set<std::string>{"S1", "S2"}));
}

TEST(CheckerTest, TrackWritesWhoseReadRulesAreShadowed) {
  SwitchView v = View("S1",
                      "<*, r, //S1/vhd[0:64K]> -> <IO, //S1/vhd-cache>\n"
                      "<*, w, //S1/vhd> -> track_writes(); <IO, //S2/T>\n");
  Report r = CheckTables({v});
  auto found = Of(r, FindingKind::kTrackWritesShadowed);
  ASSERT_THAT(found, SizeIs(1)) << r.Text();
  EXPECT_EQ(found[0].origin, "S1.rules:2");

  // Through a real sSwitch: a write is tracked (reads of its range should
  // follow it to S2), yet a read of it goes to the rule before.
  RealSwitch sw(v, {"S1", "S2"}, {});
  IoHeader write = *found[0].witness;
  write.op = Op::kWrite;
  ASSERT_TRUE(sw.Route(write).landed.contains("S2"));
  RealSwitch::Routed read = sw.Route(*found[0].witness);
  EXPECT_EQ(read.rule, "S1.rules:1");
  EXPECT_FALSE(read.landed.contains("S2"));
}

TEST(CheckerTest, RegexesItCannotModelAreSaidSo) {
  Report r = CheckTables({View("S1",
                               "<*, *, //S1/a> -> <IO, //S2/a>\n"
                               "<*, *, re:(?i)//S1/A> -> <IO, //S2/b>\n")});
  auto found = Of(r, FindingKind::kNotAnalysed);
  ASSERT_THAT(found, SizeIs(1)) << r.Text();
  EXPECT_THAT(found[0].detail, HasSubstr("flags"));
  EXPECT_THAT(Of(r, FindingKind::kShadowed), IsEmpty());
}

TEST(CheckerTest, IncrementalChangesReportWhatTheyIntroduce) {
  SwitchView s1 = Server("S1", "<*, *, //S1/data/*> -> <IO, //S2/data/*>\n",
                         {ServerEndpoint("S2")});
  SwitchView s2 =
      Server("S2", "<*, r, //S2/x> -> <IO, //S2/y>\n", {ServerEndpoint("S1")});
  Checker checker({s1, s2});
  EXPECT_EQ(checker.CheckAll().errors(), 0u);
  // A rule on S2 that sends data back to S1 makes a loop.
  std::vector<TableRule> add =
      Rules("update", "<*, *, //S2/data/hot> -> <IO, //S1/data/hot>\n");
  add[0].order.seq = 10;
  add[0].id = 10;
  Report loop = checker.CheckChange("S2", add, {});
  ASSERT_THAT(Of(loop, FindingKind::kLoop), SizeIs(1)) << loop.Text();
  // A rule that a rule before it shadows; and one that shadows a later one.
  std::vector<TableRule> add2 =
      Rules("update", "@5 <*, r, *> -> <IO, //S2/z>\n");
  add2[0].id = 11;
  add2[0].order.priority = 5;
  add2[0].order.seq = 11;
  Report shadows = checker.CheckChange("S2", add2, {});
  auto found = Of(shadows, FindingKind::kShadowed);
  ASSERT_THAT(found, SizeIs(1)) << shadows.Text();
  EXPECT_EQ(found[0].origin, "S2.rules:1");
  // Removing the rule that shadowed one brings it back: nothing new.
  checker.Apply("S2", add2, {});
  // (It had a read/write hazard, which comes back with it.)
  Report removal = checker.CheckChange("S2", {}, {11});
  EXPECT_EQ(removal.errors(), 0u) << removal.Text();
  EXPECT_THAT(Of(removal, FindingKind::kShadowed), IsEmpty());
  EXPECT_THAT(Of(removal, FindingKind::kReadWriteHazard), SizeIs(1));
  // The checker's tables follow Apply.
  checker.Apply("S2", {}, {11});
  EXPECT_EQ(checker.TableOf("S2")->size(), 1u);
}

TEST(CheckerTest, OneUpdateOnTwoSSwitchesThatLoopsIsFound) {
  SwitchView s1 = Server("S1", "", {ServerEndpoint("S2")});
  SwitchView s2 = Server("S2", "", {ServerEndpoint("S1")});
  Checker checker({s1, s2});
  std::vector<TableRule> on_s1 =
      Rules("S1", "<*, w, //S1/db/*> -> <IO, //S2/db/*>\n");
  std::vector<TableRule> on_s2 =
      Rules("S2", "<*, *, //S2/db/*> -> <IO, //S1/db/*>\n");
  Report each = checker.CheckChange("S1", on_s1, {});
  EXPECT_EQ(each.errors(), 0u) << each.Text();
  Report both = checker.CheckChanges({{"S1", on_s1, {}}, {"S2", on_s2, {}}});
  auto loops = Of(both, FindingKind::kLoop);
  ASSERT_THAT(loops, SizeIs(1)) << both.Text();
  EXPECT_THAT(loops[0].path.back(), HasSubstr("(again)"));
  // Nothing was applied.
  EXPECT_EQ(checker.TableOf("S1")->size(), 0u);
}

}  // namespace
}  // namespace sroute::check
