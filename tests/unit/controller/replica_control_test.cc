// SPDX-License-Identifier: Apache-2.0
// The replica_control app's arguments (its behaviour is tested end to end
// in tests/integration/replica_set_test.cc).
#include "controller/apps/replica_control.h"

#include "gtest/gtest.h"

namespace sroute {
namespace {

TEST(ReplicaControlArgsTest, GoodArgumentsAndDefaults) {
  auto o = ParseReplicaControlArgs("flows=//home/rep/*+//home/db,idle=3");
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->flows, (std::vector<std::string>{"//home/rep/*", "//home/db"}));
  EXPECT_EQ(o->stage, "rs");
  EXPECT_EQ(o->spread, "least_loaded");
  EXPECT_EQ(o->idle, absl::Seconds(3));
  EXPECT_EQ(o->priority, 1000);
  o = ParseReplicaControlArgs(
      "flows=//h/x,stage=set1,spread=hedged,priority=5");
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->stage, "set1");
  EXPECT_EQ(o->spread, "hedged");
  EXPECT_EQ(o->priority, 5);
}

TEST(ReplicaControlArgsTest, BadArgumentsSayWhy) {
  struct Case {
    const char* args;
    const char* says;
  };
  for (const Case& c : {
           Case{"", "at least one file"},
           Case{"flows=home/x", "is not a file"},
           Case{"flows=//h/*x", "is not a file"},
           Case{"flows=//h/x,spread=primary", "spread"},
           Case{"flows=//h/x,idle=0", "idle"},
           Case{"flows=//h/x,idle=ten", "idle"},
           Case{"flows=//h/x,color=red", "unknown argument 'color'"},
           Case{"flows", "expected key=value"},
       }) {
    auto o = ParseReplicaControlArgs(c.args);
    ASSERT_FALSE(o.ok()) << c.args;
    EXPECT_NE(std::string(o.status().message()).find(c.says), std::string::npos)
        << c.args << ": " << o.status();
  }
}

}  // namespace
}  // namespace sroute
