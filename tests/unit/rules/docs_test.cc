// SPDX-License-Identifier: Apache-2.0
// The rules shown in docs/reference/rules.md and shipped in examples/ must stay
// valid.
#include <fstream>
#include <sstream>
#include <string>

#include "gtest/gtest.h"
#include "rules/parser.h"

namespace sroute {
namespace {

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(DocsTest, ReadmeRuleTourParses) {
  const std::string doc = Slurp(SROUTE_SOURCE_DIR "/docs/reference/rules.md");
  const size_t start = doc.find("# pattern: <source, ops, file>");
  ASSERT_NE(start, std::string::npos);
  const size_t end = doc.find("```", start);
  ASSERT_NE(end, std::string::npos);
  ParsedRules parsed = ParseRules(doc.substr(start, end - start));
  for (const ParseError& e : parsed.errors) {
    ADD_FAILURE() << "docs/reference/rules.md rule tour line " << e.line << ":"
                  << e.column << ": " << e.reason;
  }
  EXPECT_EQ(parsed.rules.size(), 12u);
}

TEST(DocsTest, ExampleRuleFilesParse) {
  ParsedRules parsed =
      ParseRules(Slurp(SROUTE_SOURCE_DIR "/examples/rules/demo.rules"));
  EXPECT_TRUE(parsed.ok());
  EXPECT_EQ(parsed.rules.size(), 5u);
  parsed = ParseRules(Slurp(SROUTE_SOURCE_DIR "/examples/volume/demo.rules"));
  EXPECT_TRUE(parsed.ok());
  EXPECT_EQ(parsed.rules.size(), 3u);
}

}  // namespace
}  // namespace sroute
