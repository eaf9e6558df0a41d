// SPDX-License-Identifier: Apache-2.0
// Replays the rule parser fuzz corpus (tests/fuzz/corpus/rule_parser) with
// the same checks as the fuzz target, so every seed and every past crash is
// a regression test in the ordinary test run.
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/fuzz/rule_parser_check.h"

namespace sroute {
namespace {

TEST(RuleParserFuzzCorpus, EveryInputPassesTheFuzzChecks) {
  const std::filesystem::path dir = std::filesystem::path(SROUTE_SOURCE_DIR) /
                                    "tests/fuzz/corpus/rule_parser";
  ASSERT_TRUE(std::filesystem::is_directory(dir)) << dir;
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.is_regular_file()) files.push_back(entry.path());
  }
  ASSERT_FALSE(files.empty()) << "empty corpus " << dir;
  int rules = 0;
  for (const std::filesystem::path& file : files) {
    SCOPED_TRACE(file.filename().string());
    std::ifstream in(file, std::ios::binary);
    ASSERT_TRUE(in) << file;
    std::stringstream buffer;
    buffer << in.rdbuf();
    const std::string input = buffer.str();
    EXPECT_EQ(fuzz_check::CheckRuleParserInput(input), "");
    rules += static_cast<int>(ParseRules(input).rules.size());
  }
  // The seeds include the examples of docs/design.md §4, so some inputs are
  // rules.
  EXPECT_GT(rules, 9);
}

TEST(RuleParserFuzzCorpus, ChecksCatchBrokenInvariants) {
  // The check itself must accept good input and report nothing for bad
  // input (bad rules are errors, not invariant violations).
  EXPECT_EQ(fuzz_check::CheckRuleParserInput(
                "<*, r, //S1/X[0:512K]> -> <IO, //S2/X>\n<bad"),
            "");
  // A rule that prints to something else is reported.
  Rule rule;
  rule.pattern.file.kind = FilePattern::Kind::kExact;
  rule.pattern.file.text = "//S1/a//b";  // not parseable back
  Detour d;
  d.target.kind = Target::Kind::kController;
  rule.detours.push_back(d);
  EXPECT_NE(fuzz_check::CheckRoundTrip(rule), "");
}

}  // namespace
}  // namespace sroute
