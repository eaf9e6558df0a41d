// SPDX-License-Identifier: Apache-2.0
#include "util/log.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gtest/gtest.h"
#include "tests/util/temp_dir.h"

namespace sroute {
namespace {

TEST(LogTest, TimestampedLinesByDefault) {
  const std::string line = FormatLogLines("W", "disk full", "sroute-server",
                                          /*journal=*/false);
  ASSERT_EQ(line.rfind("W 20", 0), 0u) << line;
  EXPECT_NE(line.find("Z sroute-server: disk full\n"), std::string::npos);
}

TEST(LogTest, JournalLinesCarryTheirPriorityOnEveryLine) {
  EXPECT_EQ(FormatLogLines("E", "refused:\nline two", "sroute-controller",
                           /*journal=*/true),
            "<3>sroute-controller: refused:\n<3>sroute-controller: line two\n");
  EXPECT_EQ(FormatLogLines("W", "w", "t", true), "<4>t: w\n");
  EXPECT_EQ(FormatLogLines("I", "i", "t", true), "<6>t: i\n");
}

TEST(LogTest, JournalStreamIsRecognisedByDeviceAndInode) {
  testing::TempDir dir;
  const int fd = open((dir / "f").c_str(), O_CREAT | O_WRONLY, 0600);
  ASSERT_GE(fd, 0);
  struct stat st {};
  ASSERT_EQ(fstat(fd, &st), 0);
  const std::string mine =
      std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino);
  const std::string other =
      std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino + 1);
  EXPECT_TRUE(IsJournalStream(mine.c_str(), fd));
  EXPECT_FALSE(IsJournalStream(other.c_str(), fd));
  EXPECT_FALSE(IsJournalStream(nullptr, fd));
  EXPECT_FALSE(IsJournalStream("garbage", fd));
  close(fd);
}

}  // namespace
}  // namespace sroute
