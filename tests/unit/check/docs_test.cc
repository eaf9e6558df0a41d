// SPDX-License-Identifier: Apache-2.0
// The check report docs/reference/rules.md shows is what the checker says of
// the demo rules.
#include <sstream>

#include "check/checker.h"
#include "gtest/gtest.h"
#include "rules/parser.h"
#include "tests/util/temp_dir.h"
#include "util/strings.h"

namespace sroute::check {
namespace {

TEST(CheckDocsTest, ReadmeShowsTheDemoRulesReport) {
  const std::string path = "examples/rules/demo.rules";
  ParsedRules parsed =
      ParseRules(testing::ReadWholeFile(SROUTE_SOURCE_DIR "/" + path));
  ASSERT_TRUE(parsed.ok());
  SwitchView view;
  view.name = "demo";  // as sroutectl names a file's table
  view.rules = TableRulesOf(parsed, path);
  const Report report = CheckTables({view});
  const std::string doc =
      testing::ReadWholeFile(SROUTE_SOURCE_DIR "/docs/reference/rules.md");
  std::istringstream lines(report.Text(/*summary=*/false));
  std::string line;
  int n = 0;
  while (std::getline(lines, line)) {
    EXPECT_NE(doc.find(line + "\n"), std::string::npos) << line;
    ++n;
  }
  EXPECT_EQ(n, 9);
  EXPECT_NE(doc.find(StrCat(path, ": 5 rules, ", report.errors(), " errors, ",
                            report.warnings(), " warnings")),
            std::string::npos);
}

}  // namespace
}  // namespace sroute::check
