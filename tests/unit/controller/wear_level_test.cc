// SPDX-License-Identifier: Apache-2.0
// The wear_level app's arguments and the pieces of its decisions: the wear
// a host's gauges tell, its variance, the data folders of a rule's targets
// and a rule moved to new folders (its behaviour end to end is in
// tests/integration/replica_set_test.cc).
#include "controller/apps/wear_level.h"

#include <map>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rules/parser.h"
#include "tests/unit/controller/fake_api.h"

namespace sroute {
namespace {

using ::sroute::testing::FakeApi;

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(WearLevelArgsTest, GoodArgumentsAndDefaults) {
  auto o = ParseWearLevelArgs("");
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->variance, 4);
  EXPECT_EQ(o->rate_bytes_per_s, 16u << 20);
  EXPECT_EQ(o->cooldown, absl::Seconds(60));
  o = ParseWearLevelArgs("variance=0.5,rate=512K,cooldown=0,hosts=S1+S2");
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->variance, 0.5);
  EXPECT_EQ(o->rate_bytes_per_s, 512u << 10);
  EXPECT_EQ(o->cooldown, absl::ZeroDuration());
  EXPECT_EQ(o->hosts, (std::vector<std::string>{"S1", "S2"}));
}

TEST(WearLevelArgsTest, BadArgumentsSayWhy) {
  for (const auto& [args, says] :
       std::vector<std::pair<std::string, std::string>>{
           {"variance=0", "variance"},
           {"variance=x", "variance"},
           {"rate=fast", "rate"},
           {"rate=0", "rate"},
           {"rate=5Q", "rate"},
           {"cooldown=-1", "cooldown"},
           {"speed=2", "unknown argument 'speed'"},
           {"variance", "expected key=value"},
       }) {
    auto o = ParseWearLevelArgs(args);
    ASSERT_FALSE(o.ok()) << args;
    EXPECT_THAT(o.status().message(), HasSubstr(says)) << args;
  }
}

TEST(WearTest, FromGaugesAndItsVariance) {
  const std::vector<EndpointWear> wear =
      WearOf({{"flash.ssd.v0.erase_mean_milli", 6500},
              {"flash.ssd.v0.erases", 208},
              {"flash.ssd.v1.erase_mean_milli", 500},
              {"flash.ssd.v1.erases", 16},
              {"flash.ssd.v1.reads", 99},
              {"route_errors", 0}});
  ASSERT_EQ(wear.size(), 2u);
  EXPECT_EQ(wear[0].name, "ssd.v0");
  EXPECT_EQ(wear[0].erase_mean, 6.5);
  EXPECT_EQ(wear[0].erases, 208u);
  EXPECT_EQ(wear[1].name, "ssd.v1");
  EXPECT_EQ(wear[1].erase_mean, 0.5);
  EXPECT_DOUBLE_EQ(WearVariance(wear), 9.0);  // means 6.5 and 0.5
  EXPECT_EQ(WearVariance({wear[0]}), 0);
}

TEST(WearTest, RulesMoveToTheNewFoldersKeepingTheRest) {
  auto rule = ParseRule("@5 <*, *, //S1/hot/*> -> <IO, //ssd.v0/hot/*>");
  ASSERT_TRUE(rule.ok()) << rule.status();
  EXPECT_THAT(DataFoldersOn(*rule, "ssd.v0"), ElementsAre("//ssd.v0/"));
  EXPECT_TRUE(DataFoldersOn(*rule, "ssd.v1").empty());
  Rule moved = RetargetRule(*rule, {{"//ssd.v0/", "//ssd.v1/.sroute-wl-3/"}});
  EXPECT_EQ(FormatRule(moved),
            FormatRule(*ParseRule("@5 <*, *, //S1/hot/*> -> "
                                  "<IO, //ssd.v1/.sroute-wl-3/hot/*>")));
  // Moved again: the folder is replaced, not nested.
  EXPECT_THAT(DataFoldersOn(moved, "ssd.v1"),
              ElementsAre("//ssd.v1/.sroute-wl-3/"));
  Rule back = RetargetRule(
      moved, {{"//ssd.v1/.sroute-wl-3/", "//ssd.v0/.sroute-wl-4/"}});
  EXPECT_EQ(FormatRule(back),
            FormatRule(*ParseRule("@5 <*, *, //S1/hot/*> -> "
                                  "<IO, //ssd.v0/.sroute-wl-4/hot/*>")));
  // Scatter: each target on its own; a target elsewhere stays.
  auto scatter = ParseRule(
      "<*, w, //S1/r/*> -> <IO, //ssd.v0/r/*>, <IO, "
      "//ssd.v1/.sroute-wl-9/r/*>, "
      "<IO, //disk/r/*>");
  ASSERT_TRUE(scatter.ok()) << scatter.status();
  EXPECT_THAT(DataFoldersOn(*scatter, "ssd.v1"),
              ElementsAre("//ssd.v1/.sroute-wl-9/"));
  Rule swapped = RetargetRule(
      *scatter, {{"//ssd.v0/", "//ssd.v1/.sroute-wl-10/"},
                 {"//ssd.v1/.sroute-wl-9/", "//ssd.v0/.sroute-wl-11/"}});
  ASSERT_EQ(swapped.detours.size(), 3u);
  EXPECT_EQ(swapped.detours[0].target.file, "//ssd.v1/.sroute-wl-10/r/*");
  EXPECT_EQ(swapped.detours[1].target.file, "//ssd.v0/.sroute-wl-11/r/*");
  EXPECT_EQ(swapped.detours[2].target.file, "//disk/r/*");
}

proto::ManagedRule Managed(uint64_t cid, const std::string& text) {
  proto::ManagedRule m;
  m.set_cid(cid);
  m.set_text(FormatRule(*ParseRule(text)));
  m.set_owner("admin");
  return m;
}

// Two reports: the first tells the erase counts, the second what grew.
void Report(WearLevel& app, int64_t v0_mean_milli, int64_t v0_erases,
            int64_t v1_erases) {
  for (int64_t step : {0, 1}) {
    StatsSnapshot snap;
    HostStats h;
    h.sswitch = "S1";
    h.connected = true;
    h.gauges = {{"flash.ssd.v0.erase_mean_milli", v0_mean_milli},
                {"flash.ssd.v0.erases", v0_erases * step},
                {"flash.ssd.v1.erase_mean_milli", 0},
                {"flash.ssd.v1.erases", v1_erases * step}};
    snap.hosts.push_back(h);
    app.OnStats(snap);
  }
}

class WearLevelAppTest : public ::testing::Test {
 protected:
  void SetUp() override {
    api_.rules = {Managed(1, "<*, *, //S1/hot/*> -> <IO, //ssd.v0/hot/*>"),
                  Managed(2, "<*, *, //S1/cold/*> -> <IO, //ssd.v1/cold/*>"),
                  Managed(3, "<*, *, //S1/disk/*> -> <IO, //disk/*>")};
    ASSERT_TRUE(app_.Start(api_).ok());
  }
  FakeApi api_;
  WearLevel app_{*ParseWearLevelArgs("variance=1,cooldown=0")};
};

TEST_F(WearLevelAppTest, SwapsCopiesParksSyncsMovesTheRulesAndRemovesTheOld) {
  Report(app_, 4000, 100, 0);  // means 4 and 0: variance 4
  EXPECT_EQ(api_.log, (std::vector<std::string>{
                          "copy COUNT //ssd.v0/",
                          "copy COUNT //ssd.v1/",
                          "copy COPY //ssd.v0/ //ssd.v1/.sroute-wl-1/",
                          "copy COPY //ssd.v1/ //ssd.v0/.sroute-wl-2/",
                          "quiesce <*, *, //S1/hot/*> on",
                          "drain <*, *, //S1/hot/*>",
                          "quiesce <*, *, //S1/cold/*> on",
                          "drain <*, *, //S1/cold/*>",
                          "copy SYNC //ssd.v0/ //ssd.v1/.sroute-wl-1/",
                          "copy SYNC //ssd.v1/ //ssd.v0/.sroute-wl-2/",
                          "update",
                          "quiesce <*, *, //S1/hot/*> off",
                          "quiesce <*, *, //S1/cold/*> off",
                          "copy REMOVE //ssd.v0/",
                          "copy REMOVE //ssd.v1/",
                      }));
  ASSERT_EQ(api_.updates.size(), 1u);
  const RuleChanges& c = api_.updates[0].changes.at(0);
  EXPECT_EQ(c.remove, (std::vector<uint64_t>{1, 2}));
  ASSERT_EQ(c.insert.size(), 2u);
  EXPECT_TRUE(c.insert[0].rule && c.insert[1].rule) << "sent parsed";
  EXPECT_EQ((std::vector<std::string>{c.insert[0].Text(), c.insert[1].Text()}),
            (std::vector<std::string>{
                FormatRule(*ParseRule(
                    "<*, *, //S1/hot/*> -> <IO, //ssd.v1/.sroute-wl-1/hot/*>")),
                FormatRule(*ParseRule("<*, *, //S1/cold/*> -> "
                                      "<IO, //ssd.v0/.sroute-wl-2/cold/*>"))}));
  EXPECT_EQ(api_.updates[0].owner, "admin") << "the rules keep their owner";
  EXPECT_EQ(api_.state["status"], "swapped S1 ssd.v0 <-> ssd.v1");
  EXPECT_EQ(api_.state["generation"], "2") << "folders never used twice";
}

TEST_F(WearLevelAppTest, AFailedUpdateRemovesOnlyTheNewCopies) {
  api_.update_fails = true;
  Report(app_, 4000, 100, 0);
  const std::vector<std::string> tail(api_.log.end() - 5, api_.log.end());
  EXPECT_EQ(tail, (std::vector<std::string>{
                      "update",
                      "quiesce <*, *, //S1/hot/*> off",
                      "quiesce <*, *, //S1/cold/*> off",
                      "copy REMOVE //ssd.v1/.sroute-wl-1/",
                      "copy REMOVE //ssd.v0/.sroute-wl-2/",
                  }));
  EXPECT_THAT(api_.state["status"], HasSubstr("failed S1 ssd.v0 <-> ssd.v1"));
  EXPECT_THAT(api_.state["status"], HasSubstr("a host said no"));
}

TEST_F(WearLevelAppTest, NoSwapBelowTheVarianceOrWhenTheWornOneCooled) {
  Report(app_, 1900, 100, 0);  // variance 0.9 < 1
  EXPECT_TRUE(api_.log.empty());
  // Worn, but the other endpoint takes the erases now: it levels itself.
  Report(app_, 4000, 10, 50);
  EXPECT_TRUE(api_.log.empty());
}

TEST_F(WearLevelAppTest, RulesWithADelegateAreNotMoved) {
  api_.rules.push_back(
      Managed(4, "<*, w, //S1/log/*> -> track_writes(); <IO, //ssd.v1/log/*>"));
  Report(app_, 4000, 100, 0);
  EXPECT_TRUE(api_.log.empty()) << "nothing copied";
  EXPECT_THAT(api_.state["status"], HasSubstr("has a delegate"));
}

}  // namespace
}  // namespace sroute
