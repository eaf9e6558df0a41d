// SPDX-License-Identifier: Apache-2.0
// Runs every POSIX-parity scenario on plain directories: two fresh
// directories must give the same transcript, a rerun on a reused (emptied)
// directory too, and the transcript must be non-trivial, free of
// "UNEXPECTED" and of the directory's path.
#include <stdlib.h>

#include <cctype>
#include <filesystem>
#include <iostream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/integration/posix_scenarios.h"

namespace sroute::testing {
namespace {

class ScratchDir {
 public:
  ScratchDir() {
    std::string tmpl = "/tmp/sroute-posix-XXXXXX";
    if (mkdtemp(tmpl.data()) != nullptr) path_ = tmpl;
  }
  ~ScratchDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  const std::string& path() const { return path_; }
  // Removes everything beneath the directory, keeping it.
  void Empty() const {
    for (const auto& e : std::filesystem::directory_iterator(path_)) {
      std::filesystem::remove_all(e.path());
    }
  }

 private:
  std::string path_;
};

std::vector<std::string> Lines(const std::string& transcript) {
  std::vector<std::string> lines;
  std::istringstream in(transcript);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

void CheckTranscript(const std::string& transcript, const std::string& root) {
  const std::vector<std::string> lines = Lines(transcript);
  EXPECT_GE(lines.size(), 5u) << transcript;
  EXPECT_EQ(transcript.find(root), std::string::npos)
      << "transcript mentions the root path " << root;
  for (const std::string& line : lines) {
    EXPECT_EQ(line.find("UNEXPECTED"), std::string::npos) << line;
  }
  EXPECT_TRUE(transcript.empty() || transcript.back() == '\n');
}

class PosixScenarioTest : public ::testing::TestWithParam<Scenario> {};

TEST_P(PosixScenarioTest, SameTranscriptOnTwoPlainDirs) {
  const Scenario& s = GetParam();
  ScratchDir a, b;
  ASSERT_FALSE(a.path().empty());
  ASSERT_FALSE(b.path().empty());
  const std::string ta = s.run(a.path());
  const std::string tb = s.run(b.path());
  CheckTranscript(ta, a.path());
  EXPECT_EQ(ta, tb);
  // Again on a reused directory.
  a.Empty();
  const std::string again = s.run(a.path());
  EXPECT_EQ(ta, again);
  if (HasFailure()) std::cerr << s.name << " transcript:\n" << ta;
}

std::string ParamName(const ::testing::TestParamInfo<Scenario>& info) {
  return info.param.name;
}

INSTANTIATE_TEST_SUITE_P(All, PosixScenarioTest,
                         ::testing::ValuesIn(PosixScenarios()), ParamName);

TEST(PosixScenariosTest, NamesAreUniqueIdentifiers) {
  const std::vector<Scenario> all = PosixScenarios();
  EXPECT_GE(all.size(), 18u);
  std::set<std::string> names;
  for (const Scenario& s : all) {
    EXPECT_TRUE(names.insert(s.name).second) << s.name;
    ASSERT_FALSE(s.name.empty());
    for (char c : s.name) {
      EXPECT_TRUE(std::isalnum(static_cast<unsigned char>(c)) || c == '_')
          << s.name;
    }
    EXPECT_TRUE(static_cast<bool>(s.run)) << s.name;
  }
}

TEST(PosixScenariosTest, ErrnoNames) {
  EXPECT_EQ(ErrnoName(EEXIST), "EEXIST");
  EXPECT_EQ(ErrnoName(ENOENT), "ENOENT");
  EXPECT_EQ(ErrnoName(ENOTSUP), "EOPNOTSUPP");
  EXPECT_EQ(ErrnoName(ENODATA), "ENODATA");
  EXPECT_EQ(ErrnoName(4000), "E4000");
}

}  // namespace
}  // namespace sroute::testing
