// SPDX-License-Identifier: Apache-2.0
#include "rpc/rule_codec.h"

#include <algorithm>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "rules/parser.h"

namespace sroute {
namespace {

Rule Parsed(const std::string& text) {
  absl::StatusOr<Rule> r = ParseRule(text);
  EXPECT_TRUE(r.ok()) << text << ": " << r.status();
  return r.ok() ? *r : Rule();
}

// Every part of the rule language: sources, ops, file kinds and ranges,
// priorities, delegates with positional and keyword arguments, IO, header
// and F detours to files, stages (here and on a host) and the controller,
// and acknowledgements.
TEST(RuleCodecTest, EveryRuleComesBackAsItWent) {
  const std::vector<std::string> texts = {
      "<*, *, *> -> <IO, //S/x>",
      "<alice, r|w, //S1/db/x> -> <IO, //S2/db/x>",
      "<stage:cache, w, //S1/vm/*> -> <IO, //S2/vm/*>",
      "<*, c|d, re://S1/[a-z]+\\.log> -> <IO, //L/*>",
      "<*, r, //S1/X[4K:8K]> -> <IO, //D/x>",
      "@7 <*, w, //S1/X> -> <IO, //S2/X>, <IO, //S3/X> ack=1",
      "<*, *, //S1/X> -> d(plain, key=v); <IO, //S2/X>, <IOHeader, stage:t>",
      "<*, *, //S1/X> -> trace(); <IO, stage://h/r>, <F, controller>",
      "<*, r, *> -> trace()",
  };
  for (const std::string& text : texts) {
    const Rule rule = Parsed(text);
    proto::RuleMsg msg;
    RuleToMsg(rule, &msg);
    absl::StatusOr<Rule> back = RuleFromMsg(msg);
    ASSERT_TRUE(back.ok()) << text << ": " << back.status();
    EXPECT_EQ(*back, rule) << text;
    EXPECT_EQ(FormatRule(*back), FormatRule(rule));
  }
}

TEST(RuleCodecTest, AMessageOutsideTheLanguageIsRefusedNamingWhat) {
  proto::RuleMsg good;
  RuleToMsg(Parsed("<*, r, //S1/X[0:4K]> -> <IO, //S2/X>"), &good);
  struct Case {
    const char* what;
    void (*spoil)(proto::RuleMsg*);
  };
  const Case cases[] = {
      {"source kind", [](proto::RuleMsg* m) { m->set_source_kind(9); }},
      {"op mask", [](proto::RuleMsg* m) { m->set_ops(0); }},
      {"op mask", [](proto::RuleMsg* m) { m->set_ops(0x30); }},
      {"file kind", [](proto::RuleMsg* m) { m->set_file_kind(4); }},
      {"empty byte range", [](proto::RuleMsg* m) { m->set_range_end(0); }},
      {"detour kind",
       [](proto::RuleMsg* m) { m->mutable_detours(0)->set_what(3); }},
      {"target kind",
       [](proto::RuleMsg* m) { m->mutable_detours(0)->set_target_kind(7); }},
  };
  for (const Case& c : cases) {
    proto::RuleMsg bad = good;
    c.spoil(&bad);
    absl::StatusOr<Rule> r = RuleFromMsg(bad);
    ASSERT_FALSE(r.ok()) << c.what;
    EXPECT_TRUE(absl::IsInvalidArgument(r.status())) << r.status();
    EXPECT_NE(r.status().message().find(c.what), std::string::npos)
        << r.status();
  }
}

// A managed rule is taken in its parsed form, not read from its text: the
// text is for people. A rule stored before rules travelled parsed has text
// only, which is parsed then.
TEST(RuleCodecTest, AManagedRuleIsTakenParsedAndOldOnesAreRead) {
  const Rule rule = Parsed("<*, w, //S1/logs/*> -> <IO, //S2/logs/*>");
  proto::ManagedRule m = ManagedRuleOf(rule, "sroutectl");
  EXPECT_EQ(m.text(), FormatRule(rule));
  EXPECT_EQ(m.owner(), "sroutectl");
  m.set_text("not a rule at all");  // never parsed: the parsed form wins
  absl::StatusOr<Rule> taken = RuleOf(m);
  ASSERT_TRUE(taken.ok()) << taken.status();
  EXPECT_EQ(*taken, rule);

  proto::ManagedRule old;
  old.set_text(FormatRule(rule));
  taken = RuleOf(old);
  ASSERT_TRUE(taken.ok()) << taken.status();
  EXPECT_EQ(*taken, rule);
  old.set_text("<*, q, //S1/x> -> <IO>");
  EXPECT_FALSE(RuleOf(old).ok());
}

// Flows are sorted and made unique on the parsed patterns (an agent parks
// each once), not on their text.
TEST(RuleCodecTest, PatternsSortAndDeduplicateParsed) {
  std::vector<HeaderPattern> p = {
      Parsed("<*, w, //S1/b> -> <IO, //S2/b>").pattern,
      Parsed("<*, w, //S1/a> -> <IO, //S2/a>").pattern,
      Parsed("<*, w, //S1/b> -> <IO, //S3/b>").pattern,
      Parsed("<*, w, //S1/a[0:4K]> -> <IO, //S2/a>").pattern,
  };
  std::sort(p.begin(), p.end());
  p.erase(std::unique(p.begin(), p.end()), p.end());
  ASSERT_EQ(p.size(), 3u);
  EXPECT_EQ(FormatPattern(p[0]), "<*, w, //S1/a>");
  EXPECT_EQ(FormatPattern(p[1]), "<*, w, //S1/a[0:4K]>");
  EXPECT_EQ(FormatPattern(p[2]), "<*, w, //S1/b>");
}

}  // namespace
}  // namespace sroute
