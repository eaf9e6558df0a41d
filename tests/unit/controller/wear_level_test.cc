// The wear_level app's arguments and the pieces of its decisions: the wear
// a host's gauges tell, its variance, the data folders of a rule's targets
// and a rule moved to new folders (its behaviour end to end is in
// tests/integration/replica_set_test.cc).
#include "controller/apps/wear_level.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rules/parser.h"

namespace sroute {
namespace {

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

}  // namespace
}  // namespace sroute
