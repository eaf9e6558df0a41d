// SPDX-License-Identifier: Apache-2.0
#include "fuse/caller_groups.h"

#include <unistd.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace sroute {
namespace {

using ::testing::ElementsAre;

constexpr const char* kStatus =
    "Name:\tbash\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t42\n"
    "Uid:\t1000\t1000\t1000\t1001\nGid:\t100\t100\t100\t101\n"
    "FDSize:\t256\nGroups:\t4 24 27 1000 \nNStgid:\t42\n";

TEST(CallerGroupsTest, ParsesTheGroupsOfTheFileSystemIds) {
  auto g = ParseStatusGroups(kStatus, 1001, 101);
  ASSERT_TRUE(g.has_value());
  EXPECT_THAT(*g, ElementsAre(4, 24, 27, 1000));
}

TEST(CallerGroupsTest, RefusesAThreadThatIsNotTheCaller) {
  // The effective ids match, the file-system ids do not: another thread.
  EXPECT_FALSE(ParseStatusGroups(kStatus, 1000, 100).has_value());
  EXPECT_FALSE(ParseStatusGroups("Name:\tx\n", 0, 0).has_value());
}

TEST(CallerGroupsTest, ReadsThisThreadsGroups) {
  auto g = CallerGroups(gettid(), geteuid(), getegid());
  std::vector<gid_t> mine(static_cast<size_t>(getgroups(0, nullptr)));
  getgroups(static_cast<int>(mine.size()), mine.data());
  if (mine.empty()) {
    EXPECT_EQ(g, nullptr);
  } else {
    ASSERT_NE(g, nullptr);
    EXPECT_EQ(std::vector<uint32_t>(mine.begin(), mine.end()), *g);
  }
  EXPECT_EQ(CallerGroups(gettid(), geteuid() + 1, getegid()), nullptr);
}

}  // namespace
}  // namespace sroute
