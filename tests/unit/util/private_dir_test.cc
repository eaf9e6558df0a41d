// SPDX-License-Identifier: Apache-2.0
#include "util/private_dir.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gtest/gtest.h"
#include "tests/util/temp_dir.h"

namespace sroute {
namespace {

mode_t ModeOf(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(stat(path.c_str(), &st), 0) << path;
  return st.st_mode & 07777;
}

// The directories it makes are the owner's alone, whatever the umask; one
// that was there keeps its mode.
TEST(PrivateDirTest, MakesMissingDirectoriesOwnerOnly) {
  testing::TempDir dir;
  const std::string there = dir / "there";
  ASSERT_EQ(mkdir(there.c_str(), 0755), 0);
  ASSERT_EQ(chmod(there.c_str(), 0755), 0);
  const mode_t umask_was = umask(0);
  const absl::Status made = MakePrivateDirectories(there + "/a/b/state");
  umask(umask_was);
  ASSERT_TRUE(made.ok()) << made;
  EXPECT_EQ(ModeOf(there), 0755u);
  EXPECT_EQ(ModeOf(there + "/a"), 0700u);
  EXPECT_EQ(ModeOf(there + "/a/b/state"), 0700u);
  EXPECT_TRUE(MakePrivateDirectories(there + "/a/b/state").ok()) << "again";
  // A file in the way is an error naming it.
  ASSERT_EQ(close(creat((there + "/f").c_str(), 0644)), 0);
  const absl::Status bad = MakePrivateDirectories(there + "/f/x");
  EXPECT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find(there + "/f/x"), std::string::npos) << bad;
}

}  // namespace
}  // namespace sroute
