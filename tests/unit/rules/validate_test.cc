// SPDX-License-Identifier: Apache-2.0
#include "rules/validate.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rules/parser.h"

namespace sroute {
namespace {

using ::testing::HasSubstr;

Rule Parsed(const std::string& text) {
  absl::StatusOr<Rule> r = ParseRule(text);
  EXPECT_TRUE(r.ok()) << text << ": " << r.status();
  return r.ok() ? *r : Rule();
}

TEST(ValidateRuleTest, EveryRuleTheParserGivesIsValid) {
  for (const char* text : {
           "<*, *, *> -> <IO, //S/x>",
           "<uid:7, r|w, //S1/db/x> -> <IO, //S2/db/x>",
           "<stage:cache, w, //S1/.*> -> <IO, //S2/vm/*>",
           "<*, c|d, re:\"a b,c\"> -> <IO, //L/*>",
           "<*, r, //S1/X[4K:8K]> -> <IO, //D/x>",
           "@-3 <*, w, //S1/X> -> <IO, //S2/X>, <IO, //S3/X> ack=2",
           "<*, *, //S1/X> -> d(plain, k:+/=\"v w\"); <IOHeader, stage:t>",
           "<*, *, *> -> trace(); <IO, stage://h/r>, <F, controller>",
           "<*, r, *> -> trace()",
       }) {
    EXPECT_TRUE(ValidateRule(Parsed(text)).ok()) << text;
  }
}

// Each case breaks one part of a valid rule as no text could: the error
// names the part and says what is wrong.
TEST(ValidateRuleTest, ABrokenPartIsNamedWithItsReason) {
  const Rule good =
      Parsed("<*, w, //S1/a/*> -> <IO, //S2/a/*>, <IO, //S3/a/*>");
  ASSERT_TRUE(ValidateRule(good).ok());
  struct Case {
    const char* what;
    void (*change)(Rule&);
    const char* error;
  };
  const std::vector<Case> cases = {
      {"a '*' source with a name", [](Rule& r) { r.pattern.source.name = "x"; },
       "source: '*' takes no"},
      {"a tenant with a space",
       [](Rule& r) {
         r.pattern.source = {SourcePattern::Kind::kTenant, "a b"};
       },
       "source: 'a b' is not a name"},
      {"a tenant named like a stage",
       [](Rule& r) {
         r.pattern.source = {SourcePattern::Kind::kTenant, "stage:x"};
       },
       "source: a tenant cannot"},
      {"no ops", [](Rule& r) { r.pattern.ops = 0; }, "ops:"},
      {"a path with '..'", [](Rule& r) { r.pattern.file.text = "//S1/../a/"; },
       "file: path component '..'"},
      {"a path with '//'", [](Rule& r) { r.pattern.file.text = "//S1/a//"; },
       "file: empty path component"},
      {"no host", [](Rule& r) { r.pattern.file.text = "/S1/a/"; },
       "file: '/S1/a/' is not a file"},
      {"a '*' in a path", [](Rule& r) { r.pattern.file.text = "//S1/a*/"; },
       "file: '//S1/a*/' holds a character"},
      {"a bad regex",
       [](Rule& r) {
         r.pattern.file = {FilePattern::Kind::kRegex, "a(", std::nullopt};
       },
       "file: bad regular expression"},
      {"an empty range",
       [](Rule& r) {
         r.pattern.file.range = ByteRange{8, 8};
       },
       "file: empty byte range"},
      {"a range on '*'",
       [](Rule& r) {
         r.pattern.file = {FilePattern::Kind::kAny, "", ByteRange{0, 8}};
       },
       "file: a byte range needs a file"},
      {"a delegate with no name", [](Rule& r) { r.delegate = DelegateSpec{}; },
       "delegate: empty name"},
      {"an argument's name with a space",
       [](Rule& r) {
         r.delegate = DelegateSpec{"d", {{"a b", "v"}}};
       },
       "delegate: 'a b' is not an argument's name"},
      {"a file target escaping",
       [](Rule& r) { r.detours[1].target.file = "//S3/../*"; },
       "detour 2: path component '..'"},
      {"a stage target with a file",
       [](Rule& r) {
         r.detours[0].target.kind = Target::Kind::kStage;
         r.detours[0].target.stage = "c";
       },
       "detour 1: a stage takes no file"},
      {"a header to a file",
       [](Rule& r) { r.detours[0].what = Detour::What::kHeader; },
       "detour 1: IOHeader and F detours go to"},
      {"an F detour without a delegate",
       [](Rule& r) {
         r.detours[0].what = Detour::What::kF;
         r.detours[0].target = Target{Target::Kind::kController, "", "", ""};
       },
       "detour 1: an F detour needs a delegate"},
      {"more acks than IO detours", [](Rule& r) { r.ack = 3; },
       "ack=3 but the rule has only 2"},
      {"no delegate and no detours", [](Rule& r) { r.detours.clear(); },
       "a rule needs a delegate or detours"},
      {"a routing delegate as a tap",
       [](Rule& r) {
         r.detours.clear();
         r.delegate = DelegateSpec{"track_writes", {}};
       },
       "only trace(...) can be one"},
  };
  for (const Case& c : cases) {
    Rule rule = good;
    c.change(rule);
    const absl::Status s = ValidateRule(rule);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.what;
    EXPECT_THAT(std::string(s.message()), HasSubstr(c.error)) << c.what;
  }
}

// The parser reports the same reasons at the line's columns.
TEST(ValidateRuleTest, TheParserSaysTheSameAtItsColumn) {
  ParsedRules p = ParseRules(
      "<*, w, //S1/a/../b> -> <IO, //S2/b>\n"
      "<*, w, re:a(> -> <IO, //S2/b>\n"
      "<*, w, //S1/a> -> <IO, //S2/b>, <IO, //S3/b> ack=3\n"
      "<*, w, //S1/a> -> track_writes()\n");
  ASSERT_EQ(p.errors.size(), 4u);
  EXPECT_EQ(p.errors[0].column, 15);
  EXPECT_EQ(p.errors[0].reason, "path component '..' is not allowed");
  EXPECT_EQ(p.errors[1].column, 11);
  EXPECT_THAT(p.errors[1].reason, HasSubstr("bad regular expression"));
  EXPECT_EQ(p.errors[2].column, 19);
  EXPECT_EQ(p.errors[2].reason, "ack=3 but the rule has only 2 IO detour(s)");
  EXPECT_EQ(p.errors[3].column, 19);
  EXPECT_THAT(p.errors[3].reason, HasSubstr("only trace(...) can be one"));
}

}  // namespace
}  // namespace sroute
