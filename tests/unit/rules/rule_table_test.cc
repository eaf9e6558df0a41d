// SPDX-License-Identifier: Apache-2.0
#include "rules/rule_table.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "re2/re2.h"
#include "rules/io_header.h"
#include "rules/parser.h"
#include "rules/rule.h"
#include "util/strings.h"

namespace sroute {
namespace {

using ::testing::ElementsAre;

// An entry for rule `text`, ordered by the rule's '@' priority and `seq`.
// `label` (the entry's owner) names it in Describe() output.
RuleEntryPtr Entry(uint64_t id, std::string_view text, uint64_t seq,
                   std::string label) {
  absl::StatusOr<Rule> rule = ParseRule(text);
  EXPECT_TRUE(rule.ok()) << text << ": " << rule.status();
  const int32_t priority = rule.ok() ? rule->priority : 0;
  return std::make_shared<RuleEntry>(id, OrderKey{priority, seq},
                                     rule.ok() ? *rule : Rule{},
                                     std::move(label));
}

IoHeader Io(std::string source, Op op, std::string file, uint64_t offset = 0,
            uint64_t length = 4096, std::string stage = "") {
  IoHeader h;
  h.source = std::move(source);
  h.stage = std::move(stage);
  h.op = op;
  h.file = std::move(file);
  h.offset = offset;
  h.length = length;
  return h;
}

// "[start,end)label ..." for the pieces Route() gives `h`; '-' for the
// default route.
std::string Describe(const RuleTable& table, const IoHeader& h) {
  RuleTable::Pieces pieces;
  table.Route(h, &pieces);
  std::string out;
  for (const RuleTable::Piece& p : pieces) {
    if (!out.empty()) out += " ";
    StrAppend(&out, "[", p.offset, ",", p.offset + p.length, ")",
              p.rule == nullptr ? std::string("-") : p.rule->owner());
  }
  return out;
}

// The label of the rule that routes all of `h` (which must be one piece).
std::string Winner(const RuleTable& table, const IoHeader& h) {
  RuleTable::Pieces pieces;
  table.Route(h, &pieces);
  EXPECT_EQ(pieces.size(), 1u) << Describe(table, h);
  if (pieces.size() != 1) return "<split>";
  return pieces[0].rule == nullptr ? "-" : pieces[0].rule->owner();
}

// ---------------------------------------------------------------------------

TEST(RuleTable, EmptyTableTakesTheDefaultRoute) {
  for (const RuleTablePtr& t : {RuleTable::Empty(), RuleTable::Build({}, 7)}) {
    EXPECT_EQ(t->size(), 0u);
    EXPECT_TRUE(t->Rules().empty());
    EXPECT_EQ(t->Find(1), nullptr);
    IoHeader h = Io("t", Op::kRead, "//S1/X", 100, 200);
    RuleTable::Pieces pieces;
    t->Match(h, &pieces);
    ASSERT_EQ(pieces.size(), 1u);
    EXPECT_EQ(pieces[0].offset, 100u);
    EXPECT_EQ(pieces[0].length, 200u);
    EXPECT_EQ(pieces[0].rule, nullptr);
    EXPECT_EQ(t->MatchWhole(h), nullptr);
    t->Route(Io("t", Op::kGetattr, "//S1/X", 0, 0), &pieces);
    ASSERT_EQ(pieces.size(), 1u);
    EXPECT_EQ(pieces[0].rule, nullptr);
  }
  EXPECT_EQ(RuleTable::Build({}, 7)->version(), 7u);
}

TEST(RuleTable, PriorityThenInsertionOrder) {
  RuleTablePtr t = RuleTable::Build({
      Entry(1, "<*, *, //S1/X> -> <IO, //A/x>", 1, "first"),
      Entry(2, "<*, *, //S1/X> -> <IO, //B/x>", 2, "second"),
      Entry(3, "@5 <*, *, //S1/X> -> <IO, //C/x>", 3, "high"),
      Entry(4, "@-1 <*, *, *> -> <IO, //D/x>", 0, "low"),
      Entry(5, "<*, *, //S1/Y> -> <IO, //B/x>", 5, "y-late"),
      Entry(6, "<*, *, *> -> <IO, //E/x>", 4, "any-early"),
  });
  EXPECT_EQ(Winner(*t, Io("t", Op::kRead, "//S1/X")), "high");
  // Same priority: the earlier seq wins, whichever index holds it.
  EXPECT_EQ(Winner(*t, Io("t", Op::kRead, "//S1/Y")), "any-early");
  // Negative priority goes after every priority-0 rule.
  EXPECT_EQ(Winner(*t, Io("t", Op::kRead, "//S1/Z")), "any-early");

  // Without the priority-5 rule, insertion order decides.
  RuleTablePtr t2 = t->Apply({}, {3}, 1);
  EXPECT_EQ(Winner(*t2, Io("t", Op::kRead, "//S1/X")), "first");
  RuleTablePtr t3 = t2->Apply({}, {1, 6}, 2);
  EXPECT_EQ(Winner(*t3, Io("t", Op::kRead, "//S1/X")), "second");
  EXPECT_EQ(Winner(*t3, Io("t", Op::kRead, "//S1/Y")), "y-late");
  EXPECT_EQ(Winner(*t3, Io("t", Op::kRead, "//S1/Z")), "low");
  // The older tables are unchanged.
  EXPECT_EQ(Winner(*t, Io("t", Op::kRead, "//S1/X")), "high");
  EXPECT_EQ(Winner(*t2, Io("t", Op::kRead, "//S1/Y")), "any-early");
}

TEST(RuleTable, AnchoredRulesGoJustAheadOfTheirAnchor) {
  absl::StatusOr<Rule> rule = ParseRule("<*, *, //S1/X> -> <IO, //A/x>");
  ASSERT_TRUE(rule.ok());
  auto make = [&](uint64_t id, OrderKey key, std::string label) {
    return std::make_shared<RuleEntry>(id, key, *rule, std::move(label));
  };
  RuleTablePtr t = RuleTable::Build({
      make(1, OrderKey{0, 10}, "before"),
      make(2, OrderKey{0, 20}, "anchor"),
      make(3, OrderKey{0, 30}, "after"),
  });
  EXPECT_EQ(Winner(*t, Io("t", Op::kRead, "//S1/X")), "before");
  // A rule the anchor's delegate inserts goes after "before", ahead of the
  // anchor; later insertions of the same delegate come after earlier ones.
  t = t->Apply({make(4, OrderKey{0, 20, true, 2}, "sub2"),
                make(5, OrderKey{0, 20, true, 1}, "sub1")},
               {}, 1);
  std::vector<std::string> order;
  for (const RuleEntryPtr& e : t->Rules()) order.push_back(e->owner());
  EXPECT_THAT(order, ElementsAre("before", "sub1", "sub2", "anchor", "after"));
  t = t->Apply({}, {1}, 2);
  EXPECT_EQ(Winner(*t, Io("t", Op::kRead, "//S1/X")), "sub1");
  t = t->Apply({}, {5}, 3);
  EXPECT_EQ(Winner(*t, Io("t", Op::kRead, "//S1/X")), "sub2");
  t = t->Apply({}, {4}, 4);
  EXPECT_EQ(Winner(*t, Io("t", Op::kRead, "//S1/X")), "anchor");

  EXPECT_TRUE((OrderKey{0, 20, true, 9} < OrderKey{0, 20, false, 0}));
  EXPECT_FALSE((OrderKey{0, 20, false, 0} < OrderKey{0, 20, true, 9}));
  EXPECT_TRUE((OrderKey{0, 19, false, 0} < OrderKey{0, 20, true, 0}));
  EXPECT_TRUE((OrderKey{1, 99, false, 0} < OrderKey{0, 1, false, 0}));
  EXPECT_TRUE((OrderKey{0, 20, true, 1} < OrderKey{0, 20, true, 2}));
}

TEST(RuleTable, MayRouteAsksWhetherAnyTenantsRuleMatchesTheFile) {
  RuleTablePtr t = RuleTable::Build({
      Entry(1, "<*, w, //S1/exact> -> <IO, //S2/X>", 1, "exact"),
      Entry(2, "<alice, r, //S1/dir/*> -> <IO, //S2/X>", 2, "prefix"),
      Entry(3, "<*, r, //S1/big[0:4096]> -> <IO, //S2/X>", 3, "ranged"),
      Entry(4, "<*, *, re:.*[.]tmp> -> <IO, //S2/X>", 4, "regex"),
      Entry(5, "<stage:C, *, //S1/staged> -> <IO, //S1/staged>", 5, "stage"),
  });
  EXPECT_TRUE(t->MayRoute("//S1/exact"));
  EXPECT_TRUE(t->MayRoute("//S1/dir/a/b"));  // for alice only: still may
  EXPECT_TRUE(t->MayRoute("//S1/big"));
  EXPECT_TRUE(t->MayRoute("//S1/x.tmp"));
  EXPECT_FALSE(t->MayRoute("//S1/staged"));  // only IOs stages hand back
  EXPECT_FALSE(t->MayRoute("//S1/other"));
  EXPECT_FALSE(t->MayRoute("//S1/dirx"));
  // Removed rules no longer count; delta rules do.
  RuleTablePtr t2 = t->Apply(
      {Entry(6, "<*, r, //S1/new> -> <IO, //S2/X>", 6, "new")}, {1}, 1);
  EXPECT_FALSE(t2->MayRoute("//S1/exact"));
  EXPECT_TRUE(t2->MayRoute("//S1/new"));
  // A tenant's rule for every file may route every file.
  RuleTablePtr t3 =
      t2->Apply({Entry(7, "<bob, *, *> -> <IO, //S2/X>", 7, "bob")}, {}, 2);
  EXPECT_TRUE(t3->MayRoute("//S1/other"));
  EXPECT_FALSE(RuleTable::Empty()->MayRoute("//S1/other"));
}

TEST(RuleTable, RulesOfFileListsEveryRuleThatMayRouteIt) {
  RuleTablePtr t = RuleTable::Build({
      Entry(1, "<*, w, //S1/f> -> <IO, //S2/X>", 1, "exact"),
      Entry(2, "<alice, r, //S1/*> -> <IO, //S2/X>", 2, "prefix"),
      Entry(3, "<*, r, //S1/f[0:4096]> -> <IO, //S2/X>", 3, "ranged"),
      Entry(4, "@5 <*, *, re://S1/[f]> -> <IO, //S2/X>", 4, "regex"),
      Entry(5, "<stage:C, *, //S1/f> -> <IO, //S1/f>", 5, "stage"),
      Entry(6, "<bob, *, *> -> <IO, //S2/X>", 6, "bob"),
      Entry(7, "<*, *, //S1/g> -> <IO, //S2/X>", 7, "other file"),
  });
  auto owners = [](const std::vector<const RuleEntry*>& rules) {
    std::vector<std::string> out;
    for (const RuleEntry* e : rules) out.push_back(e->owner());
    return out;
  };
  // In precedence order, whatever the source, op classes and range; not
  // the stage's rule, nor another file's.
  EXPECT_THAT(owners(t->RulesOfFile("//S1/f")),
              ElementsAre("regex", "exact", "prefix", "ranged", "bob"));
  RuleTablePtr t2 = t->Apply({}, {1, 6}, 1);
  EXPECT_THAT(owners(t2->RulesOfFile("//S1/f")),
              ElementsAre("regex", "prefix", "ranged"));
  EXPECT_TRUE(RuleTable::Empty()->RulesOfFile("//S1/f").empty());
}

TEST(RuleTable, ExactFiles) {
  RuleTablePtr t = RuleTable::Build({
      Entry(1, "<*, *, //S1/X> -> <IO, //S2/X>", 1, "X"),
      Entry(2, "<*, *, //S1/a/b> -> <IO, //S2/X>", 2, "ab"),
  });
  EXPECT_EQ(Winner(*t, Io("t", Op::kRead, "//S1/X")), "X");
  EXPECT_EQ(Winner(*t, Io("t", Op::kRead, "//S1/a/b")), "ab");
  EXPECT_EQ(Winner(*t, Io("t", Op::kRead, "//S1/XY")), "-");
  EXPECT_EQ(Winner(*t, Io("t", Op::kRead, "//S1/X/a")), "-");
  EXPECT_EQ(Winner(*t, Io("t", Op::kRead, "//S1/a")), "-");
  EXPECT_EQ(Winner(*t, Io("t", Op::kRead, "//S2/X")), "-");
  EXPECT_EQ(Winner(*t, Io("t", Op::kRead, "//S1/x")), "-");
}

TEST(RuleTable, PrefixesRespectComponents) {
  RuleTablePtr t = RuleTable::Build({
      Entry(1, "<*, *, //S1/vm/*> -> <IO, //S2/vm/*>", 1, "vm"),
      Entry(2, "<*, *, //S1/v*> -> <IO, //S3/*>", 2, "v"),
      Entry(3, "<*, *, //S2/*> -> <IO, //S4/*>", 3, "S2"),
      Entry(4, "<*, *, //S1/deep/a/b/*> -> <IO, //S4/*>", 4, "deep"),
  });
  EXPECT_EQ(Winner(*t, Io("t", Op::kRead, "//S1/vm/a")), "vm");
  EXPECT_EQ(Winner(*t, Io("t", Op::kRead, "//S1/vm/a/b")), "vm");
  EXPECT_EQ(Winner(*t, Io("t", Op::kRead, "//S1/vm/")), "vm");
  // Not under "vm/", but under the partial component "v".
  EXPECT_EQ(Winner(*t, Io("t", Op::kRead, "//S1/vmx/a")), "v");
  EXPECT_EQ(Winner(*t, Io("t", Op::kRead, "//S1/vm")), "v");
  EXPECT_EQ(Winner(*t, Io("t", Op::kRead, "//S1/v")), "v");
  EXPECT_EQ(Winner(*t, Io("t", Op::kRead, "//S1/w/v")), "-");
  EXPECT_EQ(Winner(*t, Io("t", Op::kRead, "//S1/a/vm/x")), "-");
  EXPECT_EQ(Winner(*t, Io("t", Op::kRead, "//S2/anything/at/all")), "S2");
  EXPECT_EQ(Winner(*t, Io("t", Op::kRead, "//S2x/a")), "-");
  EXPECT_EQ(Winner(*t, Io("t", Op::kRead, "//S1/deep/a/b/c/d/e")), "deep");
  EXPECT_EQ(Winner(*t, Io("t", Op::kRead, "//S1/deep/a/bc")), "-");

  // Without "vm", the partial prefix catches everything under v.
  t = t->Apply({}, {1}, 1);
  EXPECT_EQ(Winner(*t, Io("t", Op::kRead, "//S1/vm/a/b")), "v");
}

TEST(RuleTable, PrefixSuffixSubstitution) {
  absl::StatusOr<Rule> vm = ParseRule("<*, w|c, //S1/vm/*> -> <IO, //S2/vm/*>");
  ASSERT_TRUE(vm.ok());
  EXPECT_EQ(MatchedSuffix(vm->pattern.file, "//S1/vm/a/b"), "a/b");
  EXPECT_EQ(
      ResolveTargetFile(vm->detours[0].target, vm->pattern.file, "//S1/vm/a/b"),
      "//S2/vm/a/b");
  EXPECT_EQ(
      ResolveTargetFile(vm->detours[0].target, vm->pattern.file, "//S1/vm/x"),
      "//S2/vm/x");

  absl::StatusOr<Rule> partial = ParseRule("<*, *, //S1/v*> -> <IO, //S2/w*>");
  ASSERT_TRUE(partial.ok());
  EXPECT_EQ(ResolveTargetFile(partial->detours[0].target, partial->pattern.file,
                              "//S1/vm/a"),
            "//S2/wm/a");

  absl::StatusOr<Rule> any = ParseRule("<*, *, *> -> <IO, //S2/*>");
  ASSERT_TRUE(any.ok());
  EXPECT_EQ(MatchedSuffix(any->pattern.file, "//S1/x/y"), "x/y");
  EXPECT_EQ(
      ResolveTargetFile(any->detours[0].target, any->pattern.file, "//S1/x/y"),
      "//S2/x/y");

  absl::StatusOr<Rule> regex =
      ParseRule("<*, *, re://S1/.*\\.log> -> <IO, //S9/logs/*>");
  ASSERT_TRUE(regex.ok());
  EXPECT_EQ(ResolveTargetFile(regex->detours[0].target, regex->pattern.file,
                              "//S1/a/b.log"),
            "//S9/logs/a/b.log");

  absl::StatusOr<Rule> exact = ParseRule("<*, *, //S1/X> -> <IO, //S2/Y>");
  ASSERT_TRUE(exact.ok());
  EXPECT_EQ(MatchedSuffix(exact->pattern.file, "//S1/X"), "");
  EXPECT_EQ(ResolveTargetFile(exact->detours[0].target, exact->pattern.file,
                              "//S1/X"),
            "//S2/Y");
  // A target without '*' ignores the suffix even for a prefix pattern.
  absl::StatusOr<Rule> fixed = ParseRule("<*, *, //S1/vm/*> -> <IO, //S2/one>");
  ASSERT_TRUE(fixed.ok());
  EXPECT_EQ(ResolveTargetFile(fixed->detours[0].target, fixed->pattern.file,
                              "//S1/vm/a/b"),
            "//S2/one");
}

TEST(RuleTable, RegexesAreAnchoredAtBothEnds) {
  RuleTablePtr t = RuleTable::Build({
      Entry(1, "<*, *, re://S1/[a-z]+\\.log> -> <IO, //L/*>", 1, "log"),
      Entry(2, "<*, *, re:S1/x> -> <IO, //L/*>", 2, "unanchored"),
      Entry(3, "<*, *, re:\"//S2/(a|b)\"> -> <IO, //L/*>", 3, "ab"),
      Entry(4, "<*, *, re://S[0-9]/.*> -> <IO, //L/*>", 6, "any-digit"),
      // Same regex text as rule 1, later in order: never wins over it.
      Entry(5, "<*, r, re://S1/[a-z]+\\.log> -> <IO, //M/*>", 5, "log2"),
  });
  EXPECT_EQ(Winner(*t, Io("t", Op::kRead, "//S1/abc.log")), "log");
  // No match of a substring, at either end.
  EXPECT_EQ(Winner(*t, Io("t", Op::kRead, "//S1/abc.logx")), "any-digit");
  EXPECT_EQ(Winner(*t, Io("t", Op::kRead, "//S1/ABC.log")), "any-digit");
  EXPECT_EQ(Winner(*t, Io("t", Op::kRead, "//S1/x")), "any-digit");
  EXPECT_EQ(Winner(*t, Io("t", Op::kRead, "x//S1/abc.log")), "-");
  // The alternation is anchored as a whole.
  EXPECT_EQ(Winner(*t, Io("t", Op::kRead, "//S2/a")), "ab");
  EXPECT_EQ(Winner(*t, Io("t", Op::kRead, "//S2/b")), "ab");
  EXPECT_EQ(Winner(*t, Io("t", Op::kRead, "//S2/ab")), "any-digit");
  EXPECT_EQ(Winner(*t, Io("t", Op::kRead, "//Sx/ab")), "-");

  // Removing the first rule lets the same regex's later rule win.
  t = t->Apply({}, {1}, 1);
  EXPECT_EQ(Winner(*t, Io("t", Op::kRead, "//S1/abc.log")), "log2");
  EXPECT_EQ(Winner(*t, Io("t", Op::kWrite, "//S1/abc.log")), "any-digit");
}

TEST(RuleTable, RegexSetTooLargeToCompileStillMatches) {
  // Each regex compiles on its own, but together (already two of them)
  // they exceed the memory budget of one RE2::Set; matching must still work
  // (RE2::Set::Match crashed on the uncompiled set before).
  std::vector<RuleEntryPtr> rules;
  for (int i = 0; i < 3; ++i) {
    rules.push_back(
        Entry(i + 1,
              StrCat("<*, *, re:\"//S", i, "/\\pL{100}\"> -> <IO, controller>"),
              i + 1, StrCat("re", i)));
  }
  const std::string name(100, 'a');
  for (const RuleTablePtr& t :
       {RuleTable::Build(rules), RuleTable::Empty()->Apply(rules, {}, 1)}) {
    for (int i : {0, 1, 2}) {
      EXPECT_EQ(Winner(*t, Io("t", Op::kRead, StrCat("//S", i, "/", name))),
                StrCat("re", i));
    }
    EXPECT_EQ(Winner(*t, Io("t", Op::kRead, StrCat("//S2/", name, "a"))), "-");
    EXPECT_EQ(Winner(*t, Io("t", Op::kRead, "//S2/a")), "-");
  }
}

TEST(RuleTable, InvalidRegexDoesNotShiftOtherRegexes) {
  // RuleEntry accepts any Rule, not only parsed ones. A regex that does not
  // compile must match nothing and must not make other regex rules match
  // the wrong files.
  Rule bad;
  bad.pattern.file.kind = FilePattern::Kind::kRegex;
  bad.pattern.file.text = "(unbalanced";
  bad.detours.push_back(Detour{Detour::What::kIo, Target{}});
  RuleTablePtr t = RuleTable::Build({
      std::make_shared<RuleEntry>(1, OrderKey{0, 1}, bad, "bad"),
      Entry(2, "<*, *, re://S1/a> -> <IO, //S2/*>", 2, "good"),
  });
  EXPECT_EQ(Winner(*t, Io("t", Op::kRead, "//S1/a")), "good");
  EXPECT_EQ(Winner(*t, Io("t", Op::kRead, "(unbalanced")), "-");
  EXPECT_EQ(Winner(*t, Io("t", Op::kRead, "//S1/b")), "-");
}

TEST(RuleTable, SourcesAndStages) {
  RuleTablePtr t = RuleTable::Build({
      Entry(1, "<stage:C, *, //S1/X> -> <IO, //S1/X>", 1, "from-C"),
      Entry(2, "<tenantA, *, //S1/X> -> <IO, //S2/X>", 2, "A"),
      Entry(3, "<*, *, //S1/X> -> <IO, stage:C>", 3, "any"),
      Entry(4, "<stage:D, *, *> -> <IO, //S9/*>", 4, "from-D-any-file"),
      Entry(5, "<tenantB, *, *> -> <IO, //S8/*>", 5, "B-any-file"),
  });
  // A tenant IO matches the tenant rule, then '*'.
  EXPECT_EQ(Winner(*t, Io("tenantA", Op::kRead, "//S1/X")), "A");
  EXPECT_EQ(Winner(*t, Io("tenantZ", Op::kRead, "//S1/X")), "any");
  // An IO handed back by stage C matches only stage:C rules, never '*' or
  // its tenant's rules.
  EXPECT_EQ(Winner(*t, Io("tenantA", Op::kRead, "//S1/X", 0, 4096, "C")),
            "from-C");
  EXPECT_EQ(Winner(*t, Io("tenantZ", Op::kRead, "//S1/X", 0, 4096, "E")), "-");
  EXPECT_EQ(Winner(*t, Io("tenantB", Op::kRead, "//S1/Y", 0, 4096, "E")), "-");
  EXPECT_EQ(Winner(*t, Io("tenantA", Op::kRead, "//S1/Y", 0, 4096, "D")),
            "from-D-any-file");
  EXPECT_EQ(Winner(*t, Io("tenantB", Op::kRead, "//S1/Y")), "B-any-file");
  EXPECT_EQ(Winner(*t, Io("tenantB", Op::kRead, "//S1/X")), "any");
  EXPECT_EQ(Winner(*t, Io("tenantC", Op::kRead, "//S1/Y")), "-");
  // A stage name is not a tenant name.
  EXPECT_EQ(Winner(*t, Io("C", Op::kRead, "//S1/Y", 0, 4096, "D")),
            "from-D-any-file");
  EXPECT_EQ(Winner(*t, Io("D", Op::kRead, "//S1/Y")), "-");
}

TEST(RuleTable, OpClasses) {
  EXPECT_EQ(ClassOf(Op::kRead), kOpClassRead);
  EXPECT_EQ(ClassOf(Op::kGetattr), kOpClassRead);
  EXPECT_EQ(ClassOf(Op::kReaddir), kOpClassRead);
  EXPECT_EQ(ClassOf(Op::kStatfs), kOpClassRead);
  EXPECT_EQ(ClassOf(Op::kWrite), kOpClassWrite);
  EXPECT_EQ(ClassOf(Op::kTruncate), kOpClassWrite);
  EXPECT_EQ(ClassOf(Op::kSetattr), kOpClassWrite);
  EXPECT_EQ(ClassOf(Op::kFsync), kOpClassWrite);
  EXPECT_EQ(ClassOf(Op::kFallocate), kOpClassWrite);
  EXPECT_EQ(ClassOf(Op::kCreate), kOpClassCreate);
  EXPECT_EQ(ClassOf(Op::kMkdir), kOpClassCreate);
  EXPECT_EQ(ClassOf(Op::kSymlink), kOpClassCreate);
  EXPECT_EQ(ClassOf(Op::kLink), kOpClassCreate);
  EXPECT_EQ(ClassOf(Op::kUnlink), kOpClassDelete);
  EXPECT_EQ(ClassOf(Op::kRmdir), kOpClassDelete);
  EXPECT_EQ(ClassOf(Op::kRenameFrom), kOpClassDelete);
  EXPECT_EQ(ClassOf(Op::kRenameTo), kOpClassCreate);

  RuleTablePtr t = RuleTable::Build({
      Entry(1, "<*, r, //S1/X> -> <IO, //R/x>", 1, "r"),
      Entry(2, "<*, w, //S1/X> -> <IO, //W/x>", 2, "w"),
      Entry(3, "<*, c, //S1/X> -> <IO, //C/x>", 3, "c"),
      Entry(4, "<*, d, //S1/X> -> <IO, //D/x>", 4, "d"),
      Entry(5, "<*, r|d, //S1/Y> -> <IO, //D/x>", 5, "rd"),
  });
  EXPECT_EQ(Winner(*t, Io("t", Op::kRead, "//S1/X")), "r");
  EXPECT_EQ(Winner(*t, Io("t", Op::kGetattr, "//S1/X")), "r");
  EXPECT_EQ(Winner(*t, Io("t", Op::kWrite, "//S1/X")), "w");
  EXPECT_EQ(Winner(*t, Io("t", Op::kTruncate, "//S1/X")), "w");
  EXPECT_EQ(Winner(*t, Io("t", Op::kMkdir, "//S1/X")), "c");
  EXPECT_EQ(Winner(*t, Io("t", Op::kUnlink, "//S1/X")), "d");
  EXPECT_EQ(Winner(*t, Io("t", Op::kRenameFrom, "//S1/X")), "d");
  EXPECT_EQ(Winner(*t, Io("t", Op::kRenameTo, "//S1/X")), "c");
  EXPECT_EQ(Winner(*t, Io("t", Op::kRead, "//S1/Y")), "rd");
  EXPECT_EQ(Winner(*t, Io("t", Op::kRmdir, "//S1/Y")), "rd");
  EXPECT_EQ(Winner(*t, Io("t", Op::kWrite, "//S1/Y")), "-");
  EXPECT_EQ(Winner(*t, Io("t", Op::kCreate, "//S1/Y")), "-");
}

TEST(RuleTable, RangesSplitAnIoAtEveryBoundary) {
  RuleTablePtr t = RuleTable::Build({
      Entry(1, "<*, *, //S1/X[0:4K]> -> <IO, //A/x>", 1, "A"),
      Entry(2, "<*, *, //S1/X[8K:12K]> -> <IO, //B/x>", 2, "B"),
      Entry(3, "<*, *, //S1/X> -> <IO, //C/x>", 3, "C"),
      // After the whole-file rule: never applies.
      Entry(4, "<*, *, //S1/X[4K:8K]> -> <IO, //D/x>", 4, "D"),
  });
  EXPECT_EQ(Describe(*t, Io("t", Op::kRead, "//S1/X", 2048, 8192)),
            "[2048,4096)A [4096,8192)C [8192,10240)B");
  EXPECT_EQ(Describe(*t, Io("t", Op::kWrite, "//S1/X", 0, 16384)),
            "[0,4096)A [4096,8192)C [8192,12288)B [12288,16384)C");
  EXPECT_EQ(Describe(*t, Io("t", Op::kRead, "//S1/X", 4096, 4096)),
            "[4096,8192)C");
  EXPECT_EQ(Describe(*t, Io("t", Op::kRead, "//S1/X", 100, 10)), "[100,110)A");
  EXPECT_EQ(Describe(*t, Io("t", Op::kRead, "//S1/X", 4095, 2)),
            "[4095,4096)A [4096,4097)C");
  EXPECT_EQ(Describe(*t, Io("t", Op::kRead, "//S1/X", 12288, 1)),
            "[12288,12289)C");

  // Zero-length IOs are one piece, routed like the byte at their offset.
  EXPECT_EQ(Describe(*t, Io("t", Op::kWrite, "//S1/X", 4095, 0)),
            "[4095,4095)A");
  EXPECT_EQ(Describe(*t, Io("t", Op::kWrite, "//S1/X", 4096, 0)),
            "[4096,4096)C");
  EXPECT_EQ(Describe(*t, Io("t", Op::kWrite, "//S1/X", 8192, 0)),
            "[8192,8192)B");

  // Ops without a byte extent ignore ranged rules.
  EXPECT_EQ(Describe(*t, Io("t", Op::kGetattr, "//S1/X", 0, 4096)),
            "[0,4096)C");
  EXPECT_EQ(Describe(*t, Io("t", Op::kTruncate, "//S1/X", 2048, 0)),
            "[2048,2048)C");
  EXPECT_EQ(t->MatchWhole(Io("t", Op::kRead, "//S1/X", 0, 10))->owner(), "C");
  // Taken as another op: a write's header asks where a getattr would go.
  RuleTablePtr by_op = RuleTable::Build({
      Entry(1, "<*, w, //S1/X> -> <IO, //A/x>", 1, "writes"),
      Entry(2, "<*, r, //S1/X> -> <IO, //B/x>", 2, "reads"),
  });
  const IoHeader write = Io("t", Op::kWrite, "//S1/X", 0, 10);
  EXPECT_EQ(by_op->MatchWhole(write)->owner(), "writes");
  EXPECT_EQ(by_op->MatchWholeAs(write, Op::kGetattr)->owner(), "reads");
  EXPECT_EQ(by_op->MatchWholeAs(write, Op::kUnlink), nullptr);
  EXPECT_TRUE(HasByteExtent(Op::kRead));
  EXPECT_TRUE(HasByteExtent(Op::kWrite));
  EXPECT_TRUE(HasByteExtent(Op::kFallocate));
  EXPECT_FALSE(HasByteExtent(Op::kGetattr));
  EXPECT_FALSE(HasByteExtent(Op::kTruncate));

  // Without the whole-file rule, uncovered bytes take the default route and
  // D (no longer behind a whole-file rule) applies.
  RuleTablePtr t2 = t->Apply({}, {3}, 1);
  EXPECT_EQ(Describe(*t2, Io("t", Op::kRead, "//S1/X", 2048, 16384)),
            "[2048,4096)A [4096,8192)D [8192,12288)B [12288,18432)-");
  EXPECT_EQ(Describe(*t2, Io("t", Op::kGetattr, "//S1/X", 0, 0)), "[0,0)-");
  EXPECT_EQ(Describe(*t2, Io("t", Op::kRead, "//S1/X", 20000, 0)),
            "[20000,20000)-");
}

TEST(RuleTable, OverlappingRangesResolvedByOrder) {
  RuleTablePtr t = RuleTable::Build({
      Entry(1, "<*, *, //S1/X[4K:6K]> -> <IO, //A/x>", 2, "A"),
      Entry(2, "<*, *, //S1/X[0:8K]> -> <IO, //B/x>", 3, "B"),
      Entry(3, "@1 <*, w, //S1/X[5K:12K]> -> <IO, //C/x>", 4, "C"),
      Entry(4, "<*, *, //S1/*[7K:9K]> -> <IO, //D/x>", 1, "D"),
      Entry(5, "<*, r, re://S1/.*[0:1K]> -> <IO, //E/x>", 0, "E"),
  });
  // Reads: C does not apply (w only); D (earliest seq, prefix index) beats A
  // and B on [7K,9K); E (regex index) is first on [0,1K).
  EXPECT_EQ(Describe(*t, Io("t", Op::kRead, "//S1/X", 0, 12288)),
            "[0,1024)E [1024,4096)B [4096,6144)A [6144,7168)B "
            "[7168,9216)D [9216,12288)-");
  // Writes: C has the highest priority.
  EXPECT_EQ(Describe(*t, Io("t", Op::kWrite, "//S1/X", 0, 12288)),
            "[0,4096)B [4096,5120)A [5120,12288)C");
  // Other files under //S1/ see only D and E.
  EXPECT_EQ(Describe(*t, Io("t", Op::kRead, "//S1/Y", 0, 12288)),
            "[0,1024)E [1024,7168)- [7168,9216)D [9216,12288)-");
}

TEST(RuleTable, FindRulesAndSize) {
  RuleTablePtr t = RuleTable::Build(
      {
          Entry(10, "<*, *, //S1/X> -> <IO, //A/x>", 3, "c"),
          Entry(11, "@2 <*, *, //S1/Y> -> <IO, //A/x>", 4, "a"),
          Entry(12, "<*, *, *> -> <IO, //A/x>", 1, "b"),
      },
      5);
  EXPECT_EQ(t->size(), 3u);
  EXPECT_EQ(t->version(), 5u);
  ASSERT_NE(t->Find(10), nullptr);
  EXPECT_EQ(t->Find(10)->owner(), "c");
  EXPECT_EQ(t->Find(11)->id(), 11u);
  EXPECT_EQ(t->Find(13), nullptr);
  auto labels = [](const RuleTable& table) {
    std::vector<std::string> out;
    for (const RuleEntryPtr& e : table.Rules()) out.push_back(e->owner());
    return out;
  };
  EXPECT_THAT(labels(*t), ElementsAre("a", "b", "c"));

  RuleTablePtr t2 = t->Apply({Entry(13, "@3 <*, *, *> -> <IO, //A/x>", 5, "d"),
                              Entry(14, "<*, *, *> -> <IO, //A/x>", 2, "e")},
                             {12, 99}, 6);
  EXPECT_EQ(t2->size(), 4u);
  EXPECT_EQ(t2->version(), 6u);
  EXPECT_EQ(t2->Find(12), nullptr);
  EXPECT_NE(t2->Find(13), nullptr);
  EXPECT_NE(t2->Find(10), nullptr);
  EXPECT_THAT(labels(*t2), ElementsAre("d", "a", "e", "c"));
  // Deleting a rule added by a previous Apply (in the delta).
  RuleTablePtr t3 = t2->Apply({}, {13, 10}, 7);
  EXPECT_EQ(t3->size(), 2u);
  EXPECT_EQ(t3->Find(13), nullptr);
  EXPECT_EQ(t3->Find(10), nullptr);
  EXPECT_THAT(labels(*t3), ElementsAre("a", "e"));
  // Earlier snapshots are untouched.
  EXPECT_EQ(t->size(), 3u);
  EXPECT_NE(t->Find(12), nullptr);
  EXPECT_THAT(labels(*t2), ElementsAre("d", "a", "e", "c"));
}

// ---------------------------------------------------------------------------
// Randomized differential test against a brute-force matcher.

struct RefPiece {
  uint64_t offset;
  uint64_t length;
  const RuleEntry* rule;
};

bool RefMatches(const RuleEntry& e, const IoHeader& h) {
  const Rule& r = e.rule();
  if (r.pattern.file.kind != FilePattern::Kind::kRegex) {
    return r.MatchesIgnoringRange(h);
  }
  return r.pattern.source.Matches(h) && (r.pattern.ops & h.op_class()) != 0 &&
         RE2::FullMatch(h.file, RE2(r.pattern.file.text));
}

// Every rule in precedence order; ranged rules carve what is still
// uncovered, the first whole-file rule takes the rest.
std::vector<RefPiece> RefRoute(std::vector<RuleEntryPtr> rules,
                               const IoHeader& h) {
  std::sort(rules.begin(), rules.end(),
            [](const RuleEntryPtr& a, const RuleEntryPtr& b) {
              return a->order() < b->order();
            });
  const bool extent = HasByteExtent(h.op);
  const uint64_t a = h.offset;
  const uint64_t b = h.length == 0 ? a + 1 : h.end();
  std::vector<std::pair<uint64_t, uint64_t>> uncovered = {{a, b}};
  std::vector<RefPiece> out;
  for (const RuleEntryPtr& e : rules) {
    if (!RefMatches(*e, h)) continue;
    const std::optional<ByteRange>& range = e->rule().pattern.file.range;
    if (!range) {
      for (auto [x, y] : uncovered) out.push_back({x, y - x, e.get()});
      uncovered.clear();
      break;
    }
    if (!extent) continue;
    std::vector<std::pair<uint64_t, uint64_t>> next;
    for (auto [x, y] : uncovered) {
      const uint64_t s = std::max(x, range->start);
      const uint64_t t = std::min(y, range->end);
      if (s >= t) {
        next.push_back({x, y});
        continue;
      }
      out.push_back({s, t - s, e.get()});
      if (x < s) next.push_back({x, s});
      if (t < y) next.push_back({t, y});
    }
    uncovered = std::move(next);
  }
  for (auto [x, y] : uncovered) out.push_back({x, y - x, nullptr});
  std::sort(out.begin(), out.end(), [](const RefPiece& p, const RefPiece& q) {
    return p.offset < q.offset;
  });
  if (!extent) return {{h.offset, h.length, out[0].rule}};
  if (h.length == 0) return {{h.offset, 0, out[0].rule}};
  return out;
}

std::string DescribeRef(const std::vector<RefPiece>& pieces) {
  std::string out;
  for (const RefPiece& p : pieces) {
    if (!out.empty()) out += " ";
    StrAppend(&out, "[", p.offset, ",", p.offset + p.length, ")",
              p.rule == nullptr ? std::string("-") : p.rule->owner());
  }
  return out;
}

class RandomRules {
 public:
  explicit RandomRules(uint32_t seed) : rng_(seed) {}

  int Uniform(int n) {
    return std::uniform_int_distribution<int>(0, n - 1)(rng_);
  }

  Rule MakeRule() {
    Rule r;
    static const int32_t kPriorities[] = {-1, 0, 0, 0, 0, 1, 2};
    r.priority = kPriorities[Uniform(7)];
    switch (Uniform(6)) {
      case 0:
        r.pattern.source.kind = SourcePattern::Kind::kTenant;
        r.pattern.source.name = Uniform(2) ? "t1" : "t2";
        break;
      case 1:
        r.pattern.source.kind = SourcePattern::Kind::kStage;
        r.pattern.source.name = Uniform(2) ? "C" : "D";
        break;
      default:
        break;  // '*'
    }
    r.pattern.ops = Uniform(3) == 0 ? kAllOpClasses
                                    : static_cast<OpClassMask>(1 + Uniform(15));
    FilePattern& f = r.pattern.file;
    static const char* kExact[] = {"//S1/a",  "//S1/a/b", "//S1/a/b/c",
                                   "//S1/ab", "//S2/a/b", "//S1/"};
    static const char* kPrefix[] = {"//S1/",     "//S1/a/", "//S1/a",
                                    "//S1/a/b/", "//S2/",   "//S1/ab",
                                    "//S1/a/b/c"};
    static const char* kRegex[] = {"//S1/a.*", "//S[12]/a/b", "//S1/(a|ab)",
                                   ".*/c", "//S2/.*"};
    switch (Uniform(8)) {
      case 0:
      case 1:
      case 2:
        f.kind = FilePattern::Kind::kExact;
        f.text = kExact[Uniform(6)];
        break;
      case 3:
      case 4:
        f.kind = FilePattern::Kind::kPrefix;
        f.text = kPrefix[Uniform(7)];
        break;
      case 5:
        f.kind = FilePattern::Kind::kRegex;
        f.text = kRegex[Uniform(5)];
        break;
      default:
        f.kind = FilePattern::Kind::kAny;
        break;
    }
    if (f.kind != FilePattern::Kind::kAny && Uniform(2) == 0) {
      const uint64_t start = 1024 * static_cast<uint64_t>(Uniform(16));
      const uint64_t end = start + 1024 * static_cast<uint64_t>(1 + Uniform(8));
      f.range = ByteRange{start, end};
    }
    Detour d;
    d.target.kind = Target::Kind::kController;
    r.detours.push_back(d);
    return r;
  }

  IoHeader MakeHeader() {
    static const char* kFiles[] = {
        "//S1/a", "//S1/a/b",     "//S1/a/b/c", "//S1/ab", "//S2/a/b",
        "//S1/",  "//S1/a/b/c/d", "//S1/abc",   "//S2/x",  "//S3/a/b/c"};
    static const Op kOps[] = {Op::kRead,    Op::kWrite,    Op::kFallocate,
                              Op::kGetattr, Op::kTruncate, Op::kMkdir,
                              Op::kUnlink,  Op::kRenameTo, Op::kRead};
    IoHeader h;
    h.source = std::string("t") + std::to_string(1 + Uniform(3));
    if (Uniform(4) == 0) h.stage = Uniform(2) ? "C" : "D";
    h.op = kOps[Uniform(9)];
    h.file = kFiles[Uniform(10)];
    h.offset = 512 * static_cast<uint64_t>(Uniform(40));
    switch (Uniform(4)) {
      case 0:
        h.length = 0;
        break;
      case 1:
        h.length = 1 + Uniform(100);
        break;
      default:
        h.length = 512 * static_cast<uint64_t>(1 + Uniform(40));
        break;
    }
    return h;
  }

 private:
  std::mt19937 rng_;
};

void ExpectSameRouting(const RuleTable& table,
                       const std::vector<RuleEntryPtr>& live,
                       RandomRules& random, int headers) {
  RuleTablePtr fresh = RuleTable::Build(live);
  RuleTable::Pieces pieces;
  for (int i = 0; i < headers; ++i) {
    const IoHeader h = random.MakeHeader();
    const std::string want = DescribeRef(RefRoute(live, h));
    SCOPED_TRACE(ToString(h));
    ASSERT_EQ(Describe(table, h), want);
    ASSERT_EQ(Describe(*fresh, h), want);
    // MatchWhole agrees with the reference with every ranged rule ignored.
    std::vector<RuleEntryPtr> whole_only;
    for (const RuleEntryPtr& e : live) {
      if (!e->rule().pattern.file.range) whole_only.push_back(e);
    }
    ASSERT_EQ(table.MatchWhole(h), RefRoute(whole_only, h)[0].rule);
  }
}

void ExpectSameRules(const RuleTable& table,
                     const std::vector<RuleEntryPtr>& live) {
  ASSERT_EQ(table.size(), live.size());
  std::vector<RuleEntryPtr> sorted = live;
  std::sort(sorted.begin(), sorted.end(),
            [](const RuleEntryPtr& a, const RuleEntryPtr& b) {
              return a->order() < b->order();
            });
  std::vector<RuleEntryPtr> rules = table.Rules();
  ASSERT_EQ(rules.size(), sorted.size());
  for (size_t i = 0; i < rules.size(); ++i) {
    ASSERT_EQ(rules[i].get(), sorted[i].get()) << i;
  }
  for (const RuleEntryPtr& e : live) ASSERT_EQ(table.Find(e->id()), e.get());
}

TEST(RuleTableRandomized, ApplyMatchesBruteForce) {
  for (uint32_t seed : {1u, 2u, 3u}) {
    SCOPED_TRACE(seed);
    RandomRules random(seed);
    std::vector<RuleEntryPtr> live;
    std::vector<uint64_t> dead;
    uint64_t next_id = 1, next_seq = 1, next_sub = 1;
    RuleTablePtr table = RuleTable::Empty();
    auto make_entry = [&]() {
      Rule rule = random.MakeRule();
      OrderKey key{rule.priority, next_seq++};
      // Sometimes a delegate-style rule anchored to a live rule.
      if (!live.empty() && random.Uniform(5) == 0) {
        const OrderKey& anchor = live[random.Uniform(live.size())]->order();
        key = OrderKey{anchor.priority, anchor.seq, true, next_sub++};
      }
      const uint64_t id = next_id++;
      return std::make_shared<RuleEntry>(id, key, std::move(rule),
                                         StrCat("r", id));
    };
    // Start from a built base, then 600 small Applys: single inserts, single
    // deletes, and mixed batches (enough to fold the delta several times).
    for (int i = 0; i < 40; ++i) live.push_back(make_entry());
    table = RuleTable::Build(live, 0);
    ExpectSameRouting(*table, live, random, 100);
    for (int step = 1; step <= 600; ++step) {
      std::vector<RuleEntryPtr> add;
      std::vector<uint64_t> remove;
      const int kind = random.Uniform(10);
      if (kind < 5 || live.size() < 10) {
        add.push_back(make_entry());
      } else if (kind < 8) {
        const size_t victim = random.Uniform(live.size());
        remove.push_back(live[victim]->id());
      } else {
        for (int k = random.Uniform(4); k > 0; --k) add.push_back(make_entry());
        for (int k = random.Uniform(4); k > 0 && !live.empty(); --k) {
          remove.push_back(live[random.Uniform(live.size())]->id());
        }
        // Ids that are gone already are ignored.
        if (!dead.empty()) remove.push_back(dead[random.Uniform(dead.size())]);
        remove.push_back(999999);
      }
      for (uint64_t id : remove) {
        auto it =
            std::find_if(live.begin(), live.end(),
                         [&](const RuleEntryPtr& e) { return e->id() == id; });
        if (it != live.end()) {
          live.erase(it);
          dead.push_back(id);
        }
      }
      for (const RuleEntryPtr& e : add) live.push_back(e);
      RuleTablePtr previous = table;
      const size_t previous_size = previous->size();
      table = table->Apply(add, remove, step);
      ASSERT_EQ(table->version(), static_cast<uint64_t>(step));
      ASSERT_EQ(previous->size(), previous_size);
      ExpectSameRules(*table, live);
      for (uint64_t id : dead) ASSERT_EQ(table->Find(id), nullptr) << id;
      ExpectSameRouting(*table, live, random, step % 25 == 0 ? 200 : 10);
      if (HasFatalFailure()) return;
    }
    // Drain it completely.
    std::vector<uint64_t> all;
    for (const RuleEntryPtr& e : live) all.push_back(e->id());
    table = table->Apply({}, all, 1000);
    EXPECT_EQ(table->size(), 0u);
    EXPECT_TRUE(table->Rules().empty());
    ExpectSameRouting(*table, {}, random, 20);
  }
}

TEST(RuleTableRandomized, ManySingleRuleInserts) {
  // 500 single-rule Applys, as a delegate inserting a rule per write would
  // do; the table must keep matching like one built from scratch.
  RandomRules random(42);
  std::vector<RuleEntryPtr> live;
  RuleTablePtr table = RuleTable::Empty();
  for (uint64_t i = 1; i <= 500; ++i) {
    Rule rule = random.MakeRule();
    auto e = std::make_shared<RuleEntry>(i, OrderKey{rule.priority, i},
                                         std::move(rule), StrCat("r", i));
    live.push_back(e);
    table = table->Apply({e}, {}, i);
    ASSERT_EQ(table->size(), i);
    if (i % 50 == 0) {
      ExpectSameRules(*table, live);
      ExpectSameRouting(*table, live, random, 200);
      if (HasFatalFailure()) return;
    }
  }
  // And 250 single deletes.
  for (int i = 0; i < 250; ++i) {
    const size_t victim = random.Uniform(live.size());
    const uint64_t id = live[victim]->id();
    live.erase(live.begin() + victim);
    table = table->Apply({}, {id}, 1000 + i);
    ASSERT_EQ(table->Find(id), nullptr);
    if (i % 50 == 49) {
      ExpectSameRules(*table, live);
      ExpectSameRouting(*table, live, random, 200);
      if (HasFatalFailure()) return;
    }
  }
}

// Taps never route: Route() goes by the forwarding rules as if they were
// not there; MatchTaps finds them by source, op, file and byte range.
TEST(RuleTable, TapsAreMatchedApartAndNeverRoute) {
  auto table = RuleTable::Build(
      {Entry(1, "@9 <*, r, //h/f> -> trace(1)", 1, "tap-f"),
       Entry(2, "<*, *, //h/f> -> <IO, //s/f>", 2, "fwd"),
       Entry(3, "<bob, w, re://h/d[0-9]> -> trace(0.5)", 3, "tap-re"),
       Entry(4, "<*, r, //h/f[4K:8K]> -> trace(1)", 4, "tap-range")},
      1);
  EXPECT_TRUE(table->has_taps());
  EXPECT_EQ(Winner(*table, Io("t", Op::kRead, "//h/f")), "fwd");
  EXPECT_EQ(Winner(*table, Io("t", Op::kRead, "//h/d1")), "-");
  auto taps = [&](const IoHeader& h) {
    absl::InlinedVector<const RuleEntry*, 2> out;
    table->MatchTaps(h, &out);
    std::string labels;
    for (const RuleEntry* e : out) labels += e->owner() + " ";
    return labels;
  };
  EXPECT_EQ(taps(Io("t", Op::kRead, "//h/f", 0, 4096)), "tap-f ");
  EXPECT_EQ(taps(Io("t", Op::kRead, "//h/f", 4000, 200)), "tap-f tap-range ");
  EXPECT_EQ(taps(Io("t", Op::kWrite, "//h/f")), "");
  EXPECT_EQ(taps(Io("bob", Op::kWrite, "//h/d7")), "tap-re ");
  EXPECT_EQ(taps(Io("ann", Op::kWrite, "//h/d7")), "");
  EXPECT_EQ(taps(Io("bob", Op::kWrite, "//h/dx")), "");
  EXPECT_EQ(table->Rules().size(), 4u);  // listed with the others

  // Added and removed like any rule, in the delta as in the base.
  auto next = table->Apply({Entry(5, "<*, w, //h/f> -> trace(1)", 5, "tap-w")},
                           {1, 4}, 2);
  EXPECT_EQ(taps(Io("t", Op::kRead, "//h/f")), "tap-f ");  // the old table
  absl::InlinedVector<const RuleEntry*, 2> out;
  next->MatchTaps(Io("t", Op::kWrite, "//h/f"), &out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0]->owner(), "tap-w");
  out.clear();
  next->MatchTaps(Io("t", Op::kRead, "//h/f"), &out);
  EXPECT_TRUE(out.empty());
  auto none = next->Apply({}, {3, 5}, 3);
  EXPECT_FALSE(none->has_taps());
  EXPECT_EQ(Winner(*none, Io("t", Op::kRead, "//h/f")), "fwd");
}

}  // namespace
}  // namespace sroute
