// SPDX-License-Identifier: Apache-2.0
// The shadowing analysis against a brute-force oracle: random tables over a
// small universe (tenants, a stage, every op class, names over {a,b} with
// exact, prefix, '*' and regex patterns, small byte ranges), every header of
// the universe matched by hand in precedence order. The universe holds a
// name of every kind a table can tell apart (a third letter, a second host,
// paths one longer than any pattern), so a rule the oracle never sees win
// is shadowed over all headers too: the checker must say "shadowed" (or
// "never-matches") of exactly those rules.
#include <random>
#include <set>

#include "check/checker.h"
#include "gtest/gtest.h"
#include "re2/re2.h"
#include "rules/parser.h"
#include "util/strings.h"

namespace sroute::check {
namespace {

constexpr Op kOps[] = {Op::kRead,  Op::kGetattr, Op::kWrite,
                       Op::kFsync, Op::kCreate,  Op::kUnlink};

std::string RandomPath(std::mt19937& rng, int max_len) {
  std::string p;
  const int n = std::uniform_int_distribution<int>(0, max_len)(rng);
  for (int i = 0; i < n; ++i) p.push_back("ab"[rng() % 2]);
  return p;
}

std::string RandomRule(std::mt19937& rng) {
  std::string text;
  if (rng() % 4 == 0) text += "@1 ";
  static const char* kSources[] = {"*", "*", "A", "B", "stage:X"};
  text += StrCat("<", kSources[rng() % 5], ", ");
  static const char* kOpText[] = {"*", "r", "w", "r|w", "c|d"};
  text += StrCat(kOpText[rng() % 5], ", ");
  std::string file;
  switch (rng() % 6) {
    case 0:
      file = "*";
      break;
    case 1:
    case 2:
      file = "//H/" + RandomPath(rng, 2);
      if (file == "//H/") file += "a";
      break;
    case 3:
      file = "//H/" + RandomPath(rng, 2) + "*";
      break;
    case 4: {
      static const char* kRegexes[] = {"//H/a.*",    "//H/[ab]b", "//H/(a|b)a?",
                                       "//[GH]/b.*", "//H/.*b",   "//H/[^a].*",
                                       "//H/a{1,2}", "//G/.*",    "//H/(ab)*",
                                       ".*",         "//H/a+b?",  "//[^H]/.+"};
      file = StrCat("re:\"", kRegexes[rng() % std::size(kRegexes)], "\"");
      break;
    }
    default:
      file = "//H/" + RandomPath(rng, 1) + "*";
      break;
  }
  if (file != "*" && rng() % 3 == 0) {
    const int a = rng() % 6;
    const int b = a + 1 + rng() % 5;
    file += StrCat("[", a, ":", b, "]");
  }
  return text + file + "> -> <IO, //T/t>";
}

struct Compiled {
  Rule rule;
  std::unique_ptr<RE2> re;
  bool Matches(const IoHeader& h, uint64_t byte) const {
    if (!rule.pattern.source.Matches(h)) return false;
    if (!(rule.pattern.ops & ClassOf(h.op))) return false;
    const FilePattern& f = rule.pattern.file;
    const bool name = f.kind == FilePattern::Kind::kRegex
                          ? RE2::FullMatch(h.file, *re)
                          : f.MatchesName(h.file);
    if (!name) return false;
    if (!f.range) return true;
    return HasByteExtent(h.op) && f.range->start <= byte && byte < f.range->end;
  }
};

TEST(CheckerOracleTest, ShadowedIsExactlyWhatNoHeaderReaches) {
  std::vector<std::string> names;
  for (const char* host : {"//H/", "//G/"}) {
    std::vector<std::string> paths = {""};
    for (int len = 1; len <= 4; ++len) {
      std::vector<std::string> next;
      for (const std::string& p : paths) {
        if (static_cast<int>(p.size()) != len - 1) continue;
        for (char c : {'a', 'b', 'z'}) next.push_back(p + c);
      }
      paths.insert(paths.end(), next.begin(), next.end());
    }
    for (const std::string& p : paths) {
      names.push_back(host + p);
      if (p.size() < 4) names.push_back(host + p + "\n");
    }
  }
  // Hosts no pattern names (one with a longer name, one a newline: an
  // endpoint's name may hold anything but '/'), and names with a newline,
  // which '.' does not match.
  for (const char* name : {"//Q/", "//Q/a", "//Q/z", "//QQ/a", "//Q/\n",
                           "//\n/", "//\n/a", "//\n/\n"}) {
    names.push_back(name);
  }
  struct Src {
    const char* source;
    const char* stage;
  };
  const Src sources[] = {{"A", ""}, {"B", ""}, {"C", ""}, {"A", "X"}};

  std::mt19937 rng(20261128);
  int shadowed_seen = 0, tables = 0;
  for (int round = 0; round < 300; ++round) {
    const int n = 2 + rng() % 7;
    std::string text;
    for (int i = 0; i < n; ++i) text += RandomRule(rng) + "\n";
    ParsedRules parsed = ParseRules(text);
    ASSERT_TRUE(parsed.ok()) << text << parsed.errors[0].reason;
    std::vector<Compiled> rules;
    SwitchView view;
    view.name = "H";
    for (size_t i = 0; i < parsed.rules.size(); ++i) {
      Compiled c;
      c.rule = parsed.rules[i];
      if (c.rule.pattern.file.kind == FilePattern::Kind::kRegex) {
        c.re = std::make_unique<RE2>(c.rule.pattern.file.text);
      }
      rules.push_back(std::move(c));
      TableRule t;
      t.rule = parsed.rules[i];
      t.order.priority = t.rule.priority;
      t.order.seq = i + 1;
      t.id = i + 1;
      t.origin = StrCat("rule ", i + 1);
      view.rules.push_back(std::move(t));
    }
    // Precedence: priority first, then order.
    std::vector<size_t> order(rules.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) {
      return rules[x].rule.priority > rules[y].rule.priority;
    });
    std::set<size_t> reached;
    for (const Src& s : sources) {
      for (Op op : kOps) {
        for (const std::string& name : names) {
          IoHeader h;
          h.source = s.source;
          h.stage = s.stage;
          h.op = op;
          h.file = name;
          const int bytes = HasByteExtent(op) ? 12 : 1;
          for (int b = 0; b < bytes; ++b) {
            for (size_t i : order) {
              if (rules[i].Matches(h, b)) {
                reached.insert(i);
                break;
              }
            }
          }
        }
      }
    }
    Report report = CheckTables({view});
    std::set<size_t> said;
    for (const Finding& f : report.findings) {
      ASSERT_NE(f.kind, FindingKind::kNotAnalysed) << text << report.Text();
      if (f.kind == FindingKind::kShadowed ||
          f.kind == FindingKind::kNeverMatches) {
        said.insert(f.rule_id - 1);
      }
    }
    std::set<size_t> unreached;
    for (size_t i = 0; i < rules.size(); ++i) {
      if (!reached.contains(i)) unreached.insert(i);
    }
    EXPECT_EQ(said, unreached) << "table:\n" << text << report.Text();
    shadowed_seen += static_cast<int>(unreached.size());
    ++tables;
  }
  // The random tables do exercise shadowing.
  EXPECT_GT(shadowed_seen, tables / 2);
}

}  // namespace
}  // namespace sroute::check
