// SPDX-License-Identifier: Apache-2.0
#include "check/file_set.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace sroute::check {
namespace {

using ::testing::HasSubstr;

FileSet Re(const char* re) {
  absl::StatusOr<FileSet> s = FileSet::Regex(re);
  EXPECT_TRUE(s.ok()) << re << ": " << s.status();
  return s.ok() ? *s : FileSet::Any();
}

TEST(FileSetTest, RegexesMatchAsRe2Does) {
  EXPECT_TRUE(Re("//S1/log/[0-9]+\\.txt").Contains("//S1/log/12.txt"));
  EXPECT_FALSE(Re("//S1/log/[0-9]+\\.txt").Contains("//S1/log/.txt"));
  EXPECT_TRUE(Re("^//S/(?:a|bc){2,3}$").Contains("//S/abca"));
  EXPECT_FALSE(Re("//S/(?:a|bc){2,3}").Contains("//S/a"));
  EXPECT_TRUE(Re("//S/[^/]*\\.d").Contains("//S/x.d"));
  EXPECT_FALSE(Re("//S/[^/]*\\.d").Contains("//S/x/y.d"));
  EXPECT_TRUE(Re("//S/\\w+\\s?\\d").Contains("//S/ab_ 7"));
  EXPECT_FALSE(Re("//S/.").Contains("//S/\n"));  // '.' stops at newline
  EXPECT_TRUE(Re("//S/caf\\x{e9}").Contains("//S/caf\xc3\xa9"));
  EXPECT_TRUE(Re("//S/é.").Contains("//S/éé"));
}

TEST(FileSetTest, SyntaxItDoesNotModelIsNamed) {
  EXPECT_THAT(FileSet::Regex("(?i)//S/a").status().message(),
              HasSubstr("flags"));
  EXPECT_THAT(FileSet::Regex("//S/\\bx").status().message(), HasSubstr("\\b"));
  EXPECT_THAT(FileSet::Regex("//S/[[:alpha:]]").status().message(),
              HasSubstr("POSIX"));
}

TEST(FileSetTest, FindNameGivesAReadableWitnessOrProvesNone) {
  const FileSet logs = Re("//S1/log/[0-9]+\\.(txt|gz)");
  const FileSet txt = Re("//S1/log/[0-9]+\\.txt");
  std::optional<std::string> name =
      FindName({&logs, &FileSet::Valid()}, {&txt});
  ASSERT_TRUE(name.has_value());
  EXPECT_EQ(*name, "//S1/log/0.gz");
  EXPECT_FALSE(FindName({&txt}, {&logs}).has_value());
  // A prefix is covered by the exact name and every one-longer prefix?
  // Not over a real alphabet: a name is always left.
  const FileSet p = FileSet::Prefix("//S/a");
  const FileSet e = FileSet::Exact("//S/a");
  const FileSet pa = FileSet::Prefix("//S/aa");
  std::optional<std::string> left = FindName({&p}, {&e, &pa});
  ASSERT_TRUE(left.has_value());
  EXPECT_TRUE(p.Contains(*left));
  EXPECT_FALSE(e.Contains(*left) || pa.Contains(*left));
  // Valid names only.
  EXPECT_FALSE(FileSet::Valid().Contains("/S/a"));
  EXPECT_FALSE(FileSet::Valid().Contains("///a"));
  EXPECT_TRUE(FileSet::Valid().Contains("//S/"));
}

}  // namespace
}  // namespace sroute::check
