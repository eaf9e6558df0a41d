// SPDX-License-Identifier: Apache-2.0
#include "rules/parser.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rules/rule.h"
#include "util/strings.h"

namespace sroute {
namespace {

using ::testing::HasSubstr;

// The example block of docs/design.md §4, verbatim.
constexpr std::string_view kDesignExample =
    R"(# comments start with '#'; a file's rules are ordered top to bottom
<VM1, *, //S1/X>            -> <IO, //S2/Y>
<VM2, w, *>                 -> <IOHeader, controller>
<*, r, //S1/X[0:512K]>      -> <IO, //S2/X>
<*, w|c, //S1/vm/*>         -> <IO, //S2/vm/*>          # '*' in a target keeps the matched suffix
<*, w, //Smax/vhd>          -> track_writes(); <IO, //Smin/T>
<*, *, //S1/X>              -> trace(); <IO, stage:B>, <F, controller>
<stage:C, *, //S1/X>        -> <IO, //S1/X>
<*, r, //S1/X>              -> pick(random); <IO, //S1/X>, <IO, //S2/X>
@100 <tenantA, *, *>        -> <IO, stage:cacheA>        # @N: explicit priority (higher first)
)";

const std::vector<std::string>& CanonicalDesignRules() {
  static const std::vector<std::string> kRules = {
      "<VM1, *, //S1/X> -> <IO, //S2/Y>",
      "<VM2, w, *> -> <IOHeader, controller>",
      "<*, r, //S1/X[0:512K]> -> <IO, //S2/X>",
      "<*, w|c, //S1/vm/*> -> <IO, //S2/vm/*>",
      "<*, w, //Smax/vhd> -> track_writes(); <IO, //Smin/T>",
      "<*, *, //S1/X> -> trace(); <IO, stage:B>, <F, controller>",
      "<stage:C, *, //S1/X> -> <IO, //S1/X>",
      "<*, r, //S1/X> -> pick(random); <IO, //S1/X>, <IO, //S2/X>",
      "@100 <tenantA, *, *> -> <IO, stage:cacheA>",
  };
  return kRules;
}

// Parses `text` as one rule, failing the test if it does not parse.
Rule MustParse(std::string_view text) {
  absl::StatusOr<Rule> r = ParseRule(text);
  EXPECT_TRUE(r.ok()) << text << ": " << r.status();
  return r.ok() ? *r : Rule{};
}

// ParseRule(FormatRule(r)) == r, and printing is a fixpoint.
void ExpectRoundTrip(const Rule& rule) {
  const std::string text = FormatRule(rule);
  absl::StatusOr<Rule> again = ParseRule(text);
  ASSERT_TRUE(again.ok()) << text << ": " << again.status();
  EXPECT_EQ(*again, rule) << text;
  EXPECT_EQ(FormatRule(*again), text);
}

Target FileTarget(std::string file) {
  Target t;
  t.kind = Target::Kind::kFile;
  t.file = std::move(file);
  return t;
}

// ---------------------------------------------------------------------------
// The examples of docs/design.md §4.

TEST(ParserDesignExamples, WholeFileParses) {
  ParsedRules parsed = ParseRules(kDesignExample);
  EXPECT_TRUE(parsed.ok());
  for (const ParseError& e : parsed.errors) {
    ADD_FAILURE() << "line " << e.line << " col " << e.column << ": "
                  << e.reason;
  }
  ASSERT_EQ(parsed.rules.size(), 9u);
  EXPECT_THAT(parsed.lines, ::testing::ElementsAre(2, 3, 4, 5, 6, 7, 8, 9, 10));
  for (size_t i = 0; i < parsed.rules.size(); ++i) {
    EXPECT_EQ(FormatRule(parsed.rules[i]), CanonicalDesignRules()[i]);
    ExpectRoundTrip(parsed.rules[i]);
  }
}

TEST(ParserDesignExamples, EachLineParsesAlone) {
  std::vector<std::string_view> lines;
  size_t start = 0;
  while (start < kDesignExample.size()) {
    size_t nl = kDesignExample.find('\n', start);
    lines.push_back(kDesignExample.substr(start, nl - start));
    start = nl + 1;
  }
  ASSERT_EQ(lines.size(), 10u);
  ParsedRules whole = ParseRules(kDesignExample);
  ASSERT_EQ(whole.rules.size(), 9u);
  for (size_t i = 1; i < lines.size(); ++i) {
    SCOPED_TRACE(lines[i]);
    absl::StatusOr<Rule> r = ParseRule(lines[i]);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(*r, whole.rules[i - 1]);
    EXPECT_EQ(FormatRule(*r), CanonicalDesignRules()[i - 1]);
    // The canonical form parses to the same rule.
    EXPECT_EQ(MustParse(CanonicalDesignRules()[i - 1]), *r);
    ExpectRoundTrip(*r);
  }
  // The comment line is not a rule.
  EXPECT_FALSE(ParseRule(lines[0]).ok());
}

TEST(ParserDesignExamples, Fields) {
  ParsedRules parsed = ParseRules(kDesignExample);
  ASSERT_EQ(parsed.rules.size(), 9u);
  const std::vector<Rule>& r = parsed.rules;

  // <VM1, *, //S1/X> -> <IO, //S2/Y>
  EXPECT_EQ(r[0].priority, 0);
  EXPECT_EQ(r[0].pattern.source.kind, SourcePattern::Kind::kTenant);
  EXPECT_EQ(r[0].pattern.source.name, "VM1");
  EXPECT_EQ(r[0].pattern.ops, kAllOpClasses);
  EXPECT_EQ(r[0].pattern.file.kind, FilePattern::Kind::kExact);
  EXPECT_EQ(r[0].pattern.file.text, "//S1/X");
  EXPECT_FALSE(r[0].pattern.file.range.has_value());
  EXPECT_FALSE(r[0].delegate.has_value());
  ASSERT_EQ(r[0].detours.size(), 1u);
  EXPECT_EQ(r[0].detours[0].what, Detour::What::kIo);
  EXPECT_EQ(r[0].detours[0].target, FileTarget("//S2/Y"));
  EXPECT_EQ(r[0].ack, 0u);

  // <VM2, w, *> -> <IOHeader, controller>
  EXPECT_EQ(r[1].pattern.ops, kOpClassWrite);
  EXPECT_EQ(r[1].pattern.file.kind, FilePattern::Kind::kAny);
  ASSERT_EQ(r[1].detours.size(), 1u);
  EXPECT_EQ(r[1].detours[0].what, Detour::What::kHeader);
  EXPECT_EQ(r[1].detours[0].target.kind, Target::Kind::kController);

  // <*, r, //S1/X[0:512K]> -> <IO, //S2/X>
  EXPECT_EQ(r[2].pattern.source.kind, SourcePattern::Kind::kAny);
  EXPECT_EQ(r[2].pattern.ops, kOpClassRead);
  ASSERT_TRUE(r[2].pattern.file.range.has_value());
  EXPECT_EQ(*r[2].pattern.file.range, (ByteRange{0, 512 * 1024}));

  // <*, w|c, //S1/vm/*> -> <IO, //S2/vm/*>
  EXPECT_EQ(r[3].pattern.ops, kOpClassWrite | kOpClassCreate);
  EXPECT_EQ(r[3].pattern.file.kind, FilePattern::Kind::kPrefix);
  EXPECT_EQ(r[3].pattern.file.text, "//S1/vm/");
  EXPECT_EQ(r[3].detours[0].target.file, "//S2/vm/*");
  EXPECT_TRUE(r[3].detours[0].target.keeps_suffix());

  // <*, w, //Smax/vhd> -> track_writes(); <IO, //Smin/T>
  ASSERT_TRUE(r[4].delegate.has_value());
  EXPECT_EQ(r[4].delegate->name, "track_writes");
  EXPECT_TRUE(r[4].delegate->args.empty());

  // <*, *, //S1/X> -> trace(); <IO, stage:B>, <F, controller>
  ASSERT_TRUE(r[5].delegate.has_value());
  EXPECT_EQ(r[5].delegate->name, "trace");
  ASSERT_EQ(r[5].detours.size(), 2u);
  EXPECT_EQ(r[5].detours[0].target.kind, Target::Kind::kStage);
  EXPECT_EQ(r[5].detours[0].target.stage, "B");
  EXPECT_EQ(r[5].detours[0].target.stage_host, "");
  EXPECT_EQ(r[5].detours[1].what, Detour::What::kF);
  EXPECT_EQ(r[5].detours[1].target.kind, Target::Kind::kController);

  // <stage:C, *, //S1/X> -> <IO, //S1/X>
  EXPECT_EQ(r[6].pattern.source.kind, SourcePattern::Kind::kStage);
  EXPECT_EQ(r[6].pattern.source.name, "C");

  // <*, r, //S1/X> -> pick(random); <IO, //S1/X>, <IO, //S2/X>
  ASSERT_TRUE(r[7].delegate.has_value());
  EXPECT_EQ(r[7].delegate->name, "pick");
  ASSERT_EQ(r[7].delegate->args.size(), 1u);
  EXPECT_EQ(r[7].delegate->args[0], (DelegateArg{"", "random"}));
  EXPECT_EQ(r[7].delegate->Arg("", 0), "random");
  EXPECT_EQ(r[7].detours.size(), 2u);

  // @100 <tenantA, *, *> -> <IO, stage:cacheA>
  EXPECT_EQ(r[8].priority, 100);
  EXPECT_EQ(r[8].pattern.source.name, "tenantA");
  EXPECT_EQ(r[8].pattern.file.kind, FilePattern::Kind::kAny);
  EXPECT_EQ(r[8].detours[0].target.stage, "cacheA");
}

// ---------------------------------------------------------------------------
// Field by field.

TEST(ParserFields, Priority) {
  EXPECT_EQ(MustParse("@100 <*, *, *> -> <IO, //S/x>").priority, 100);
  EXPECT_EQ(MustParse("@-7 <*, *, *> -> <IO, //S/x>").priority, -7);
  EXPECT_EQ(MustParse("@+5 <*, *, *> -> <IO, //S/x>").priority, 5);
  EXPECT_EQ(MustParse("@0 <*, *, *> -> <IO, //S/x>").priority, 0);
  EXPECT_EQ(MustParse("@2147483647 <*, *, *> -> <IO, //S/x>").priority,
            2147483647);
  EXPECT_EQ(MustParse("@-2147483648 <*, *, *> -> <IO, //S/x>").priority,
            INT32_MIN);
  EXPECT_EQ(MustParse("<*, *, *> -> <IO, //S/x>").priority, 0);
  EXPECT_EQ(FormatRule(MustParse("@+5 <*, *, *> -> <IO, //S/x>")),
            "@5 <*, *, *> -> <IO, //S/x>");
  EXPECT_EQ(FormatRule(MustParse("@0 <*, *, *> -> <IO, //S/x>")),
            "<*, *, *> -> <IO, //S/x>");
  EXPECT_EQ(FormatRule(MustParse("@-7 <*, *, *> -> <IO, //S/x>")),
            "@-7 <*, *, *> -> <IO, //S/x>");
}

TEST(ParserFields, Sources) {
  Rule any = MustParse("<*, *, *> -> <IO, //S/x>");
  EXPECT_EQ(any.pattern.source.kind, SourcePattern::Kind::kAny);
  EXPECT_EQ(any.pattern.source.name, "");
  Rule tenant = MustParse("<tenant-1.a_b, *, *> -> <IO, //S/x>");
  EXPECT_EQ(tenant.pattern.source.kind, SourcePattern::Kind::kTenant);
  EXPECT_EQ(tenant.pattern.source.name, "tenant-1.a_b");
  Rule stage = MustParse("<stage:cache1, *, *> -> <IO, //S/x>");
  EXPECT_EQ(stage.pattern.source.kind, SourcePattern::Kind::kStage);
  EXPECT_EQ(stage.pattern.source.name, "cache1");
  // A tenant name may contain ':' (e.g. "uid:1000") but is not a stage.
  Rule uid = MustParse("<uid:1000, *, *> -> <IO, //S/x>");
  EXPECT_EQ(uid.pattern.source.kind, SourcePattern::Kind::kTenant);
  EXPECT_EQ(uid.pattern.source.name, "uid:1000");
  for (const Rule& r : {any, tenant, stage, uid}) ExpectRoundTrip(r);
  EXPECT_EQ(FormatRule(uid), "<uid:1000, *, *> -> <IO, //S/x>");
}

TEST(ParserFields, OpMasks) {
  struct Case {
    std::string_view ops;
    OpClassMask mask;
    std::string_view canonical;
  };
  const Case cases[] = {
      {"*", kAllOpClasses, "*"},
      {"r", kOpClassRead, "r"},
      {"w", kOpClassWrite, "w"},
      {"c", kOpClassCreate, "c"},
      {"d", kOpClassDelete, "d"},
      {"read", kOpClassRead, "r"},
      {"write", kOpClassWrite, "w"},
      {"create", kOpClassCreate, "c"},
      {"delete", kOpClassDelete, "d"},
      {"d|r", kOpClassRead | kOpClassDelete, "r|d"},
      {"write | create", kOpClassWrite | kOpClassCreate, "w|c"},
      {"r|r", kOpClassRead, "r"},
      {"c|d|w", kOpClassWrite | kOpClassCreate | kOpClassDelete, "w|c|d"},
      {"read|write|create|delete", kAllOpClasses, "*"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.ops);
    Rule r = MustParse(StrCat("<*, ", c.ops, ", //S/x> -> <IO, //S/y>"));
    EXPECT_EQ(r.pattern.ops, c.mask);
    EXPECT_EQ(FormatRule(r),
              StrCat("<*, ", c.canonical, ", //S/x> -> <IO, //S/y>"));
    ExpectRoundTrip(r);
  }
}

TEST(ParserFields, FileKinds) {
  Rule exact = MustParse("<*, *, //S1/a/b.c> -> <IO, //S2/x>");
  EXPECT_EQ(exact.pattern.file.kind, FilePattern::Kind::kExact);
  EXPECT_EQ(exact.pattern.file.text, "//S1/a/b.c");

  Rule prefix = MustParse("<*, *, //S1/a/*> -> <IO, //S2/x>");
  EXPECT_EQ(prefix.pattern.file.kind, FilePattern::Kind::kPrefix);
  EXPECT_EQ(prefix.pattern.file.text, "//S1/a/");

  Rule partial = MustParse("<*, *, //S1/a/v*> -> <IO, //S2/x>");
  EXPECT_EQ(partial.pattern.file.kind, FilePattern::Kind::kPrefix);
  EXPECT_EQ(partial.pattern.file.text, "//S1/a/v");

  Rule host_root = MustParse("<*, *, //S1/*> -> <IO, //S2/*>");
  EXPECT_EQ(host_root.pattern.file.kind, FilePattern::Kind::kPrefix);
  EXPECT_EQ(host_root.pattern.file.text, "//S1/");

  Rule regex = MustParse("<*, *, re://S1/[a-z]+\\.txt> -> <IO, //S2/x>");
  EXPECT_EQ(regex.pattern.file.kind, FilePattern::Kind::kRegex);
  EXPECT_EQ(regex.pattern.file.text, "//S1/[a-z]+\\.txt");

  Rule any = MustParse("<*, *, *> -> <IO, //S2/x>");
  EXPECT_EQ(any.pattern.file.kind, FilePattern::Kind::kAny);
  EXPECT_EQ(any.pattern.file.text, "");

  for (const Rule& r : {exact, prefix, partial, host_root, regex, any}) {
    ExpectRoundTrip(r);
  }
  EXPECT_EQ(FormatRule(partial), "<*, *, //S1/a/v*> -> <IO, //S2/x>");
  EXPECT_EQ(FormatRule(regex), "<*, *, re://S1/[a-z]+\\.txt> -> <IO, //S2/x>");
}

TEST(ParserFields, RangesWithUnits) {
  struct Case {
    std::string_view range;
    uint64_t start, end;
    std::string_view canonical;
  };
  constexpr uint64_t K = 1024, M = K * K, G = M * K, T = G * K;
  const Case cases[] = {
      {"[0:1]", 0, 1, "[0:1]"},
      {"[0:512K]", 0, 512 * K, "[0:512K]"},
      {"[4K:8K]", 4 * K, 8 * K, "[4K:8K]"},
      {"[1k:1m]", K, M, "[1K:1M]"},
      {"[1M:2G]", M, 2 * G, "[1M:2G]"},
      {"[3g:1T]", 3 * G, T, "[3G:1T]"},
      {"[1024:2048]", K, 2 * K, "[1K:2K]"},
      {"[1536:4097]", 1536, 4097, "[1536:4097]"},
      {"[0:16777215T]", 0, 16777215 * T, "[0:16777215T]"},
      {"[0:18446744073709551615]", 0, UINT64_MAX, "[0:18446744073709551615]"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.range);
    Rule r = MustParse(StrCat("<*, r, //S1/X", c.range, "> -> <IO, //S2/X>"));
    ASSERT_TRUE(r.pattern.file.range.has_value());
    EXPECT_EQ(r.pattern.file.range->start, c.start);
    EXPECT_EQ(r.pattern.file.range->end, c.end);
    EXPECT_EQ(FormatRule(r),
              StrCat("<*, r, //S1/X", c.canonical, "> -> <IO, //S2/X>"));
    ExpectRoundTrip(r);
  }
  // Ranges on prefix and regex patterns.
  Rule prefix = MustParse("<*, r, //S1/v*[4K:1T]> -> <IO, //S2/w*>");
  EXPECT_EQ(prefix.pattern.file.kind, FilePattern::Kind::kPrefix);
  EXPECT_EQ(*prefix.pattern.file.range, (ByteRange{4 * K, T}));
  ExpectRoundTrip(prefix);
}

TEST(ParserFields, DelegateArgs) {
  Rule r = MustParse(
      "<*, w, //S1/db/*> -> repl(3, mode=sync, path=\"a b,c\", \"\", "
      "k=\"x\\\"y\", weird=a:b/c+d) ; <IO, //S2/db/*>, <IO, stage://h/r>");
  ASSERT_TRUE(r.delegate.has_value());
  const DelegateSpec& d = *r.delegate;
  EXPECT_EQ(d.name, "repl");
  ASSERT_EQ(d.args.size(), 6u);
  EXPECT_EQ(d.args[0], (DelegateArg{"", "3"}));
  EXPECT_EQ(d.args[1], (DelegateArg{"mode", "sync"}));
  EXPECT_EQ(d.args[2], (DelegateArg{"path", "a b,c"}));
  EXPECT_EQ(d.args[3], (DelegateArg{"", ""}));
  EXPECT_EQ(d.args[4], (DelegateArg{"k", "x\"y"}));
  EXPECT_EQ(d.args[5], (DelegateArg{"weird", "a:b/c+d"}));
  // Arg(): by key, or by position among the positional arguments.
  EXPECT_EQ(d.Arg("mode"), "sync");
  EXPECT_EQ(d.Arg("path"), "a b,c");
  EXPECT_EQ(d.Arg("k"), "x\"y");
  EXPECT_EQ(d.Arg("", 0), "3");
  EXPECT_EQ(d.Arg("", 1), "");
  EXPECT_EQ(d.Arg("", 2), std::nullopt);
  EXPECT_EQ(d.Arg("missing"), std::nullopt);
  EXPECT_EQ(d.Arg("missing", 0), "3");
  EXPECT_EQ(FormatRule(r),
            "<*, w, //S1/db/*> -> repl(3, mode=sync, path=\"a b,c\", \"\", "
            "k=\"x\\\"y\", weird=a:b/c+d); <IO, //S2/db/*>, <IO, stage://h/r>");
  ExpectRoundTrip(r);

  // Quoted values that need no quotes print bare; backslashes survive.
  Rule q = MustParse(
      "<*, *, *> -> f(\"plain\", key = \"v\", b=\"a\\\\b\"); <IO, //S/x>");
  ASSERT_TRUE(q.delegate.has_value());
  EXPECT_EQ(q.delegate->args[0], (DelegateArg{"", "plain"}));
  EXPECT_EQ(q.delegate->args[1], (DelegateArg{"key", "v"}));
  EXPECT_EQ(q.delegate->args[2], (DelegateArg{"b", "a\\b"}));
  EXPECT_EQ(FormatRule(q),
            "<*, *, *> -> f(plain, key=v, b=\"a\\\\b\"); <IO, //S/x>");
  ExpectRoundTrip(q);

  Rule empty = MustParse("<*, *, *> -> f( ) ; <IO, //S/x>");
  ASSERT_TRUE(empty.delegate.has_value());
  EXPECT_TRUE(empty.delegate->args.empty());
  EXPECT_EQ(FormatRule(empty), "<*, *, *> -> f(); <IO, //S/x>");
}

TEST(ParserFields, DetourKinds) {
  Rule r = MustParse(
      "<*, *, //S1/X> -> d(); <IO, //S2/X>, <IOHeader, stage:t>, "
      "<F, controller>, <IOHeader, controller>, <F, stage://H/s>");
  ASSERT_EQ(r.detours.size(), 5u);
  EXPECT_EQ(r.detours[0].what, Detour::What::kIo);
  EXPECT_EQ(r.detours[1].what, Detour::What::kHeader);
  EXPECT_EQ(r.detours[2].what, Detour::What::kF);
  EXPECT_EQ(r.detours[3].what, Detour::What::kHeader);
  EXPECT_EQ(r.detours[4].what, Detour::What::kF);
  EXPECT_EQ(FormatRule(r),
            "<*, *, //S1/X> -> d(); <IO, //S2/X>, <IOHeader, stage:t>, "
            "<F, controller>, <IOHeader, controller>, <F, stage://H/s>");
  ExpectRoundTrip(r);
}

TEST(ParserFields, Targets) {
  Rule r = MustParse(
      "<*, *, //S1/a/*> -> <IO, //S2/b/c>, <IO, //S3/x/*>, <IO, //S4/*>, "
      "<IO, stage:cache>, <IO, stage://H2/repl>, <IOHeader, controller>");
  ASSERT_EQ(r.detours.size(), 6u);
  const Target& file = r.detours[0].target;
  EXPECT_EQ(file.kind, Target::Kind::kFile);
  EXPECT_EQ(file.file, "//S2/b/c");
  EXPECT_FALSE(file.keeps_suffix());
  const Target& prefix = r.detours[1].target;
  EXPECT_EQ(prefix.kind, Target::Kind::kFile);
  EXPECT_EQ(prefix.file, "//S3/x/*");
  EXPECT_TRUE(prefix.keeps_suffix());
  EXPECT_EQ(r.detours[2].target.file, "//S4/*");
  EXPECT_TRUE(r.detours[2].target.keeps_suffix());
  const Target& stage = r.detours[3].target;
  EXPECT_EQ(stage.kind, Target::Kind::kStage);
  EXPECT_EQ(stage.stage, "cache");
  EXPECT_EQ(stage.stage_host, "");
  const Target& remote = r.detours[4].target;
  EXPECT_EQ(remote.kind, Target::Kind::kStage);
  EXPECT_EQ(remote.stage, "repl");
  EXPECT_EQ(remote.stage_host, "H2");
  EXPECT_EQ(r.detours[5].target.kind, Target::Kind::kController);

  EXPECT_EQ(FormatTarget(file), "//S2/b/c");
  EXPECT_EQ(FormatTarget(prefix), "//S3/x/*");
  EXPECT_EQ(FormatTarget(stage), "stage:cache");
  EXPECT_EQ(FormatTarget(remote), "stage://H2/repl");
  EXPECT_EQ(FormatTarget(r.detours[5].target), "controller");
  ExpectRoundTrip(r);
}

TEST(ParserFields, AckOption) {
  Rule r = MustParse("<*, w, //S1/X> -> <IO, //S2/X>, <IO, //S3/X> ack=1");
  EXPECT_EQ(r.ack, 1u);
  EXPECT_EQ(FormatRule(r),
            "<*, w, //S1/X> -> <IO, //S2/X>, <IO, //S3/X> ack=1");
  ExpectRoundTrip(r);
  Rule two = MustParse("<*, w, //S1/X> -> <IO, //S2/X>, <IO, //S3/X> ack=2");
  EXPECT_EQ(two.ack, 2u);
  Rule all = MustParse("<*, w, //S1/X> -> <IO, //S2/X>, <IO, //S3/X> ack=all");
  EXPECT_EQ(all.ack, 0u);
  EXPECT_EQ(FormatRule(all), "<*, w, //S1/X> -> <IO, //S2/X>, <IO, //S3/X>");
  // Header detours do not count towards ack.
  EXPECT_FALSE(
      ParseRule("<*, w, //S1/X> -> <IO, //S2/X>, <IOHeader, controller> ack=2")
          .ok());
}

TEST(ParserFields, QuotedRegex) {
  Rule r = MustParse(R"(<*, r, re:"//S1/(a|b)>,c x"> -> <IO, //S2/X>)");
  EXPECT_EQ(r.pattern.file.kind, FilePattern::Kind::kRegex);
  EXPECT_EQ(r.pattern.file.text, "//S1/(a|b)>,c x");
  EXPECT_FALSE(r.pattern.file.range.has_value());
  EXPECT_EQ(FormatRule(r), R"(<*, r, re:"//S1/(a|b)>,c x"> -> <IO, //S2/X>)");
  ExpectRoundTrip(r);

  // A quoted regex may carry a range after the closing quote; a regex that
  // ends in what looks like a range stays quoted.
  Rule ranged = MustParse(R"(<*, r, re:"//S1/a[0:4K]"[0:8K]> -> <IO, //S2/X>)");
  EXPECT_EQ(ranged.pattern.file.text, "//S1/a[0:4K]");
  EXPECT_EQ(*ranged.pattern.file.range, (ByteRange{0, 8192}));
  EXPECT_EQ(FormatRule(ranged),
            R"(<*, r, re:"//S1/a[0:4K]"[0:8K]> -> <IO, //S2/X>)");
  ExpectRoundTrip(ranged);

  // Escaped quotes and backslashes.
  Rule esc = MustParse(R"(<*, r, re:"a\"b\\.c"> -> <IO, //S2/X>)");
  EXPECT_EQ(esc.pattern.file.text, R"(a"b\.c)");
  ExpectRoundTrip(esc);
  // Quoting is only used when needed.
  Rule plain = MustParse(R"(<*, r, re:"//S1/.*"> -> <IO, //S2/X>)");
  EXPECT_EQ(FormatRule(plain), R"(<*, r, re://S1/.*> -> <IO, //S2/X>)");
}

TEST(ParserFields, UnquotedRegexWithTrailingRange) {
  Rule r = MustParse(R"(<*, w, re://S1/.*\.log[0:4K]> -> <IO, //S2/logs/*>)");
  EXPECT_EQ(r.pattern.file.kind, FilePattern::Kind::kRegex);
  EXPECT_EQ(r.pattern.file.text, R"(//S1/.*\.log)");
  ASSERT_TRUE(r.pattern.file.range.has_value());
  EXPECT_EQ(*r.pattern.file.range, (ByteRange{0, 4096}));
  EXPECT_EQ(FormatRule(r),
            R"(<*, w, re://S1/.*\.log[0:4K]> -> <IO, //S2/logs/*>)");
  ExpectRoundTrip(r);

  // A character class that is not a SIZE:SIZE pair stays in the regex.
  Rule cls = MustParse(R"(<*, w, re://S1/[a:z]> -> <IO, //S2/x>)");
  EXPECT_EQ(cls.pattern.file.text, "//S1/[a:z]");
  EXPECT_FALSE(cls.pattern.file.range.has_value());
  EXPECT_EQ(FormatRule(cls), R"(<*, w, re:"//S1/[a:z]"> -> <IO, //S2/x>)");
  ExpectRoundTrip(cls);
}

// ---------------------------------------------------------------------------
// Malformed rules.

struct BadCase {
  std::string_view text;
  int column;
  std::string_view reason;
};

const std::vector<BadCase>& BadCases() {
  static const std::vector<BadCase> kCases = {
      // missing '<'
      {"*, r, //S1/X> -> <IO, //S2/X>", 1, "expected '<' to start the header"},
      // bad op letter
      {"<*, x, //S1/X> -> <IO, //S2/X>", 5, "unknown op 'x'"},
      {"<*, r|q, //S1/X> -> <IO, //S2/X>", 7, "unknown op 'q'"},
      {"<*, , //S1/X> -> <IO, //S2/X>", 5, "expected an op"},
      // missing ','
      {"<* r, //S1/X> -> <IO, //S2/X>", 4, "expected ',' after the source"},
      {"<*, r //S1/X> -> <IO, //S2/X>", 7, "expected ',' after the ops"},
      {"<*, r, //S1/X> -> <IO //S2/X>", 23,
       "expected ',' after the detour kind"},
      // missing source
      {"<, r, //S1/X> -> <IO, //S2/X>", 2, "expected a source"},
      // missing '>'
      {"<*, r, //S1/X -> <IO, //S2/X>", 15, "expected '>' to close the header"},
      {"<*, r, //S1/X> -> <IO, //S2/X", 30, "expected '>' to close the detour"},
      // missing '->'
      {"<*, r, //S1/X> <IO, //S2/X>", 16, "expected '->' after the header"},
      {"<*, r, //S1/X>", 15, "expected '->' after the header"},
      // nothing after '->'
      {"<*, r, //S1/X> ->", 18, "expected a delegate call or a detour"},
      // trailing ',' after the last detour
      {"<*, r, //S1/X> -> <IO, //S2/X>,", 32, "expected a detour"},
      // unknown detour kind
      {"<*, r, //S1/X> -> <IOX, //S2/X>", 20, "unknown detour kind 'IOX'"},
      {"<*, r, //S1/X> -> <, //S2/X>", 20, "expected IO, IOHeader or F"},
      // bad target
      {"<*, r, //S1/X> -> <IO, S2/X>", 24, "expected a target"},
      {"<*, r, //S1/X> -> <IO, controllerx>", 34, "unknown target"},
      {"<*, r, //S1/X> -> <IO, //S2/a/../b>", 31,
       "path component '..' is not allowed"},
      // empty / inverted ranges
      {"<*, r, //S1/X[4K:4K]> -> <IO, //S2/X>", 14, "empty byte range"},
      {"<*, r, //S1/X[8K:4K]> -> <IO, //S2/X>", 14, "empty byte range"},
      // size overflow
      {"<*, r, //S1/X[0:99999999999999999999]> -> <IO, //S2/X>", 17,
       "size out of range"},
      {"<*, r, //S1/X[0:17179869184G]> -> <IO, //S2/X>", 17,
       "size out of range"},
      // malformed ranges
      {"<*, r, //S1/X[0:4K> -> <IO, //S2/X>", 19, "expected ']'"},
      {"<*, r, //S1/X[0:4Q]> -> <IO, //S2/X>", 18, "expected ']'"},
      {"<*, r, //S1/X[0-4K]> -> <IO, //S2/X>", 16,
       "expected ':' in a byte range"},
      {"<*, r, //S1/X[:4K]> -> <IO, //S2/X>", 15, "expected a size"},
      // range on '*'
      {"<*, r, *[0:4K]> -> <IO, //S2/X>", 9, "a byte range needs a file"},
      // '..', '.' and empty components in a path
      {"<*, r, //S1/a/../b> -> <IO, //S2/X>", 15,
       "path component '..' is not allowed"},
      {"<*, r, //S1/./X> -> <IO, //S2/X>", 13,
       "path component '.' is not allowed"},
      {"<*, r, //S1/a//b> -> <IO, //S2/X>", 15, "empty path component"},
      // not a file
      {"<*, r, S1/X> -> <IO, //S2/X>", 8, "expected a file '//HOST/PATH'"},
      // bad regexes
      {"<*, r, re:(ab> -> <IO, //S2/X>", 11, "bad regular expression"},
      {"<*, r, re:\"a(b\"> -> <IO, //S2/X>", 11, "bad regular expression"},
      {"<*, r, re:> -> <IO, //S2/X>", 11, "empty regular expression"},
      // unterminated quotes
      {"<*, r, re:\"ab> -> <IO, //S2/X>", 11, "unterminated quoted string"},
      {"<*, r, //S1/X> -> f(\"a); <IO, //S2/X>", 21,
       "unterminated quoted string"},
      // delegate without ')' / without ';'
      {"<*, r, //S1/X> -> f(a, b <IO, //S2/X>", 26, "expected ',' or ')'"},
      {"<*, r, //S1/X> -> f(a b); <IO, //S2/X>", 23, "expected ',' or ')'"},
      {"<*, r, //S1/X> -> f(a) <IO, //S2/X>", 24,
       "expected ';' after the delegate"},
      {"<*, r, //S1/X> -> f (a); <IO, //S2/X>", 20,
       "expected '(' after the delegate name"},
      {"<*, r, //S1/X> -> f(k=) ; <IO, //S2/X>", 23,
       "expected a value for 'k'"},
      // '*' target with an exact pattern
      {"<*, r, //S1/X> -> <IO, //S2/*>", 24,
       "a target ending in '*' needs a pattern that matches many files"},
      // IOHeader / F to a file target
      {"<*, r, //S1/X> -> <IOHeader, //S2/X>", 30,
       "IOHeader and F detours go to the controller or a stage"},
      {"<*, r, //S1/X> -> f(); <F, //S2/X>", 28,
       "IOHeader and F detours go to the controller or a stage"},
      // F detour without a delegate
      {"<*, r, //S1/X> -> <F, controller>", 23, "an F detour needs a delegate"},
      // ack larger than the IO detours, or not a count
      {"<*, r, //S1/X> -> <IO, //S2/X>, <IO, //S3/X> ack=3", 19,
       "ack=3 but the rule has only 2 IO detour(s)"},
      {"<*, r, //S1/X> -> <IO, //S2/X> ack=0", 36,
       "ack must be 'all' or a count"},
      {"<*, r, //S1/X> -> <IO, //S2/X> ack=x", 36,
       "ack must be 'all' or a count"},
      // unknown option
      {"<*, r, //S1/X> -> <IO, //S2/X> foo=1", 32, "unknown option 'foo'"},
      // trailing junk
      {"<*, r, //S1/X> -> <IO, //S2/X> )", 32,
       "unexpected text after the rule"},
      {"<*, r, //S1/X> -> <IO, //S2/X> junk", 36,
       "expected '=' after an option name"},
      // priority overflow / missing
      {"@3000000000 <*, r, //S1/X> -> <IO, //S2/X>", 2,
       "priority out of range"},
      {"@99999999999999999999 <*, r, //S1/X> -> <IO, //S2/X>", 2,
       "number out of range"},
      {"@ <*, r, //S1/X> -> <IO, //S2/X>", 2, "expected a priority after '@'"},
      {"@", 2, "expected a priority after '@'"},
      // host without '/' after it, or missing
      {"<*, r, //S1> -> <IO, //S2/X>", 12, "expected '/' after the host name"},
      {"<*, r, //S1/X> -> <IO, //S2>", 28, "expected '/' after the host name"},
      {"<*, r, ///X> -> <IO, //S2/X>", 10, "expected a host name after '//'"},
      // empty stage names
      {"<stage:, r, //S1/X> -> <IO, //S2/X>", 8,
       "expected a stage name after 'stage:'"},
      {"<*, r, //S1/X> -> <IO, stage:>", 30,
       "expected a stage name after 'stage:'"},
      {"<*, r, //S1/X> -> <IO, stage://h>", 33,
       "expected '/' after the stage's host"},
      {"<*, r, //S1/X> -> <IO, stage://h/>", 34, "expected a stage name"},
  };
  return kCases;
}

TEST(ParserErrors, ParseRuleReportsColumnAndReason) {
  ASSERT_GE(BadCases().size(), 25u);
  for (const BadCase& c : BadCases()) {
    SCOPED_TRACE(c.text);
    absl::StatusOr<Rule> r = ParseRule(c.text);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    const std::string message(r.status().message());
    EXPECT_TRUE(message.starts_with(StrCat(c.column, ": "))) << message;
    EXPECT_THAT(message, HasSubstr(std::string(c.reason)));
  }
}

TEST(ParserErrors, ParseRulesReportsLineColumnAndReason) {
  // Bad lines interleaved with comments, blank lines and one good rule, with
  // leading indentation that shifts the column.
  std::string text = "# header comment\n\n";
  std::vector<int> lines;
  int line = 2;
  for (const BadCase& c : BadCases()) {
    text += StrCat("  ", c.text, "\n");
    lines.push_back(++line);
    text += "<*, *, *> -> <IO, //S/x>   # good\n   \n";
    line += 2;
  }
  ParsedRules parsed = ParseRules(text);
  ASSERT_EQ(parsed.errors.size(), BadCases().size());
  ASSERT_EQ(parsed.rules.size(), BadCases().size());
  for (size_t i = 0; i < BadCases().size(); ++i) {
    const BadCase& c = BadCases()[i];
    SCOPED_TRACE(c.text);
    EXPECT_EQ(parsed.errors[i].line, lines[i]);
    EXPECT_EQ(parsed.errors[i].column, c.column + 2);
    EXPECT_THAT(parsed.errors[i].reason, HasSubstr(std::string(c.reason)));
    EXPECT_EQ(parsed.lines[i], lines[i] + 1);
    EXPECT_EQ(FormatRule(parsed.rules[i]), "<*, *, *> -> <IO, //S/x>");
  }
}

TEST(ParserErrors, MixedFileKeepsGoodRules) {
  constexpr std::string_view kText =
      "# mixed file\n"                                // 1
      "<*, r, //S1/X> -> <IO, //S2/X>\n"              // 2 good
      "<*, q, //S1/X> -> <IO, //S2/X>\n"              // 3 bad op
      "\n"                                            // 4
      "   # indented comment\n"                       // 5
      "@3 <*, *, re:.*> -> <IO, //S2/*>\n"            // 6 good
      "<*, r, *[0:4K]> -> <IO, //S2/X>\n"             // 7 range on '*'
      "\t<t, w, //S1/a/*> -> <IO, //S2/b/*> # c\r\n"  // 8 good, CRLF
      "<*, r, //S1/X> -> <IO, //S2/X> junk=1\n"       // 9 unknown option
      "<stage:C, d, //S1/X> -> <IO, controller>";     // 10 good, no newline
  ParsedRules parsed = ParseRules(kText);
  EXPECT_FALSE(parsed.ok());
  ASSERT_EQ(parsed.rules.size(), 4u);
  EXPECT_THAT(parsed.lines, ::testing::ElementsAre(2, 6, 8, 10));
  EXPECT_EQ(FormatRule(parsed.rules[0]), "<*, r, //S1/X> -> <IO, //S2/X>");
  EXPECT_EQ(FormatRule(parsed.rules[1]), "@3 <*, *, re:.*> -> <IO, //S2/*>");
  EXPECT_EQ(FormatRule(parsed.rules[2]), "<t, w, //S1/a/*> -> <IO, //S2/b/*>");
  EXPECT_EQ(FormatRule(parsed.rules[3]),
            "<stage:C, d, //S1/X> -> <IO, controller>");
  ASSERT_EQ(parsed.errors.size(), 3u);
  EXPECT_EQ(parsed.errors[0].line, 3);
  EXPECT_EQ(parsed.errors[0].column, 5);
  EXPECT_THAT(parsed.errors[0].reason, HasSubstr("unknown op 'q'"));
  EXPECT_EQ(parsed.errors[1].line, 7);
  EXPECT_EQ(parsed.errors[1].column, 9);
  EXPECT_THAT(parsed.errors[1].reason, HasSubstr("a byte range needs a file"));
  EXPECT_EQ(parsed.errors[2].line, 9);
  EXPECT_EQ(parsed.errors[2].column, 32);
  EXPECT_THAT(parsed.errors[2].reason, HasSubstr("unknown option 'junk'"));
}

TEST(ParserErrors, EmptyAndCommentOnlyInput) {
  EXPECT_TRUE(ParseRules("").ok());
  EXPECT_TRUE(ParseRules("").rules.empty());
  ParsedRules comments = ParseRules("# a\n\n   \t\n  # b\n");
  EXPECT_TRUE(comments.ok());
  EXPECT_TRUE(comments.rules.empty());
  EXPECT_FALSE(ParseRule("").ok());
  EXPECT_FALSE(ParseRule("# only a comment").ok());
  // ParseRule takes exactly one line.
  EXPECT_FALSE(
      ParseRule("<*, *, *> -> <IO, //S/x>\n<*, *, *> -> <IO, //S/y>").ok());
  // A trailing comment is allowed after a rule.
  EXPECT_TRUE(ParseRule("<*, *, *> -> <IO, //S/x>  # why").ok());
}

// ---------------------------------------------------------------------------
// FormatSize and ParsePattern.

TEST(FormatSize, Units) {
  EXPECT_EQ(FormatSize(0), "0");
  EXPECT_EQ(FormatSize(1), "1");
  EXPECT_EQ(FormatSize(1023), "1023");
  EXPECT_EQ(FormatSize(1024), "1K");
  EXPECT_EQ(FormatSize(1536), "1536");
  EXPECT_EQ(FormatSize(3072), "3K");
  EXPECT_EQ(FormatSize(524288), "512K");
  EXPECT_EQ(FormatSize(1025 * 1024), "1025K");
  EXPECT_EQ(FormatSize(uint64_t{1} << 20), "1M");
  EXPECT_EQ(FormatSize(uint64_t{1536} << 20), "1536M");
  EXPECT_EQ(FormatSize(uint64_t{3} << 30), "3G");
  EXPECT_EQ(FormatSize(uint64_t{1} << 40), "1T");
  EXPECT_EQ(FormatSize(uint64_t{2048} << 40), "2048T");
  EXPECT_EQ(FormatSize(UINT64_MAX), "18446744073709551615");
}

TEST(ParsePattern, Basics) {
  absl::StatusOr<HeaderPattern> p = ParsePattern("<*, w, //S1/X[0:4K]>");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->source.kind, SourcePattern::Kind::kAny);
  EXPECT_EQ(p->ops, kOpClassWrite);
  EXPECT_EQ(p->file.kind, FilePattern::Kind::kExact);
  EXPECT_EQ(p->file.text, "//S1/X");
  EXPECT_EQ(*p->file.range, (ByteRange{0, 4096}));
  EXPECT_EQ(FormatPattern(*p), "<*, w, //S1/X[0:4K]>");

  absl::StatusOr<HeaderPattern> stage =
      ParsePattern("  <stage:C,read|create,//S1/vm/*>  # comment");
  ASSERT_TRUE(stage.ok()) << stage.status();
  EXPECT_EQ(stage->source.kind, SourcePattern::Kind::kStage);
  EXPECT_EQ(stage->source.name, "C");
  EXPECT_EQ(stage->ops, kOpClassRead | kOpClassCreate);
  EXPECT_EQ(stage->file.kind, FilePattern::Kind::kPrefix);
  EXPECT_EQ(FormatPattern(*stage), "<stage:C, r|c, //S1/vm/*>");

  for (std::string_view text :
       {"<VM1, *, *>", "<*, r|w|c|d, re:\"a b\"[1M:2M]>", "<t, d, //h/p*>"}) {
    SCOPED_TRACE(text);
    absl::StatusOr<HeaderPattern> a = ParsePattern(text);
    ASSERT_TRUE(a.ok()) << a.status();
    absl::StatusOr<HeaderPattern> b = ParsePattern(FormatPattern(*a));
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ(*a, *b);
  }

  // Errors carry "COL: reason".
  absl::StatusOr<HeaderPattern> bad = ParsePattern("<*, w, //S1/X");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "14: expected '>' to close the header");
  absl::StatusOr<HeaderPattern> trailing =
      ParsePattern("<*, w, //S1/X> -> <IO, //S2/X>");
  ASSERT_FALSE(trailing.ok());
  EXPECT_EQ(trailing.status().message(),
            "16: unexpected text after the pattern");
  EXPECT_FALSE(ParsePattern("").ok());
  EXPECT_FALSE(ParsePattern("<*, z, *>").ok());
}

}  // namespace
}  // namespace sroute

namespace sroute {
namespace {

TEST(ParserFields, PrefixMayStartAHiddenName) {
  // Before '*' the last component is a name's beginning: '.' and '..' are
  // fine there ("//S1/.*" matches hidden files), and nowhere else.
  for (const char* text : {"<*, r, //S1/.*> -> <IO, //S2/hidden/*>",
                           "<*, r, //S1/a/..*> -> <IO, //S2/.*>"}) {
    auto r = ParseRule(text);
    ASSERT_TRUE(r.ok()) << text << ": " << r.status();
    EXPECT_EQ(FormatRule(*r), text);
  }
  auto r = ParseRule("<*, r, //S1/../x*> -> <IO, //S2/*>");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(std::string(r.status().message()),
            "13: path component '..' is not allowed");
}

TEST(ParserTaps, ATraceWithoutDetoursIsATap) {
  auto r = ParseRule("<bob, r, //h/f> -> trace(0.01)");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->is_tap());
  ASSERT_TRUE(r->delegate.has_value());
  EXPECT_EQ(r->delegate->name, "trace");
  EXPECT_EQ(FormatRule(*r), "<bob, r, //h/f> -> trace(0.01)");
  ExpectRoundTrip(*r);
  auto with_comment = ParseRule("<*, *, *> -> trace()  # every IO");
  ASSERT_TRUE(with_comment.ok()) << with_comment.status();
  EXPECT_TRUE(with_comment->is_tap());
}

TEST(ParserTaps, OtherDelegatesNeedDetours) {
  auto r = ParseRule("<*, w, //h/f> -> track_writes()");
  ASSERT_FALSE(r.ok());
  const std::string message(r.status().message());
  EXPECT_TRUE(message.starts_with("18: ")) << message;  // the delegate
  EXPECT_THAT(message, HasSubstr("only trace(...) can be one"));
}

}  // namespace
}  // namespace sroute
