// SPDX-License-Identifier: Apache-2.0
#include "fuse/tenant_map.h"

#include <unistd.h>

#include "gtest/gtest.h"

namespace sroute {
namespace {

TEST(TenantMapTest, UidThenGidThenUnmapped) {
  TenantMap m;
  ASSERT_TRUE(m.Add("alice=uid:1001").ok());
  ASSERT_TRUE(m.Add("staff=gid:50").ok());
  EXPECT_EQ(m.TenantOf(1001, 50, 0), "alice");
  EXPECT_EQ(m.TenantOf(1002, 50, 0), "staff");
  EXPECT_EQ(m.TenantOf(1002, 51, 0), "uid:1002");
}

TEST(TenantMapTest, BadSpecsAreRefusedWithTheReason) {
  TenantMap m;
  EXPECT_FALSE(m.Add("nobody").ok());
  EXPECT_FALSE(m.Add("x y=uid:1").ok());
  EXPECT_FALSE(m.Add("a=uid:one").ok());
  EXPECT_FALSE(m.Add("a=pid:1").ok());
  EXPECT_FALSE(m.Add("a=cgroup:relative").ok());
  ASSERT_TRUE(m.Add("a=uid:1").ok());
  absl::Status dup = m.Add("b=uid:1");
  EXPECT_FALSE(dup.ok());
  EXPECT_NE(dup.message().find("mapped already"), std::string_view::npos);
}

TEST(TenantMapTest, TheDeepestCgroupHoldingTheCallerWins) {
  auto mine = TenantMap::ReadCgroup(getpid());
  if (!mine.has_value()) GTEST_SKIP() << "no cgroup v2 here";
  TenantMap m;
  ASSERT_TRUE(m.Add("everyone=cgroup:/").ok());
  EXPECT_EQ(m.TenantOf(12345, 12345, getpid()), "everyone");
  if (!mine->empty()) {
    ASSERT_TRUE(m.Add("mine=cgroup:" + *mine).ok());
    EXPECT_EQ(m.TenantOf(12345, 12345, getpid()), "mine");
  }
  // A uid mapping comes first.
  ASSERT_TRUE(m.Add("u=uid:12345").ok());
  EXPECT_EQ(m.TenantOf(12345, 12345, getpid()), "u");
}

}  // namespace
}  // namespace sroute
