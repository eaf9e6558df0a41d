// SPDX-License-Identifier: Apache-2.0
// Rules that arrive parsed, in the ordinary test run: the checks of the
// rule_msg fuzz target (tests/fuzz/rule_msg_check.h) on every rule of the
// rule parser's corpus as a message, on each of those with one field made
// hostile, and on the rule_msg corpus (seeds and past crashes).
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/fuzz/rule_msg_check.h"

namespace sroute {
namespace {

namespace fs = std::filesystem;

std::string ReadAll(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// Every rule of the rule parser's corpus, as a message.
std::vector<proto::RuleMsg> CorpusRules() {
  std::vector<proto::RuleMsg> out;
  const fs::path dir =
      fs::path(SROUTE_SOURCE_DIR) / "tests/fuzz/corpus/rule_parser";
  for (const auto& entry : fs::directory_iterator(dir)) {
    for (const Rule& rule : ParseRules(ReadAll(entry.path())).rules) {
      RuleToMsg(rule, &out.emplace_back());
    }
  }
  return out;
}

// Values that break one part of the language or another.
const std::vector<std::string>& HostileTexts() {
  static const std::vector<std::string> texts = {
      "",         "*",        "a b",     "//",       "//S",    "//S/",
      "//S/a//b", "//S/../x", "//S/./x", "//S/a*b",  "//S/a*", "//S/x\n",
      "stage:x",  "re(",      "a,b",     "x>y",      "\"q\"",  "[1:2]",
      "a]",       "#",        "uid:7",   "//S/a\tb", "-",      "//h-1/p"};
  return texts;
}

// `msg` with one field changed, for every field and hostile value.
std::vector<proto::RuleMsg> Mutations(const proto::RuleMsg& msg) {
  std::vector<proto::RuleMsg> out;
  auto each = [&](const std::function<void(proto::RuleMsg&)>& change) {
    change(out.emplace_back(msg));
  };
  for (const std::string& t : HostileTexts()) {
    each([&](proto::RuleMsg& m) { m.set_source_name(t); });
    each([&](proto::RuleMsg& m) { m.set_file_text(t); });
    each([&](proto::RuleMsg& m) { m.set_delegate_name(t); });
    each([&](proto::RuleMsg& m) {
      if (m.delegate_name().empty()) m.set_delegate_name("d");
      proto::DelegateArgMsg* a = m.add_delegate_args();
      a->set_key(t);
      a->set_value(t);
    });
    for (int i = 0; i < msg.detours_size(); ++i) {
      each([&](proto::RuleMsg& m) { m.mutable_detours(i)->set_file(t); });
      each([&](proto::RuleMsg& m) { m.mutable_detours(i)->set_stage(t); });
      each([&](proto::RuleMsg& m) { m.mutable_detours(i)->set_stage_host(t); });
    }
  }
  for (uint32_t v : {0u, 1u, 2u, 3u, 4u, 15u, 16u}) {
    each([&](proto::RuleMsg& m) { m.set_source_kind(v); });
    each([&](proto::RuleMsg& m) { m.set_file_kind(v); });
    each([&](proto::RuleMsg& m) { m.set_ops(v); });
    for (int i = 0; i < msg.detours_size(); ++i) {
      each([&](proto::RuleMsg& m) { m.mutable_detours(i)->set_what(v); });
      each(
          [&](proto::RuleMsg& m) { m.mutable_detours(i)->set_target_kind(v); });
    }
  }
  for (uint32_t ack : {1u, 2u, 3u, 1024u, 1025u}) {
    each([&](proto::RuleMsg& m) { m.set_ack(ack); });
  }
  each([&](proto::RuleMsg& m) { m.clear_detours(); });
  each([&](proto::RuleMsg& m) {
    m.set_has_range(true);
    m.set_range_start(8);
    m.set_range_end(4);
  });
  return out;
}

TEST(RuleMsgFuzz, EveryCorpusRuleAndEachOfItsMutationsPassTheChecks) {
  const std::vector<proto::RuleMsg> rules = CorpusRules();
  ASSERT_GT(rules.size(), 9u);
  size_t refused = 0;
  size_t checked = 0;
  const char* seeds = std::getenv("SROUTE_RULE_MSG_SEEDS");
  // Every rule is checked; every eighth is mutated (each takes ~200 rules;
  // the fuzzer itself goes further).
  for (size_t i = 0; i < rules.size(); ++i) {
    const proto::RuleMsg& msg = rules[i];
    EXPECT_EQ(fuzz_check::CheckRuleMsg(msg), "") << msg.ShortDebugString();
    if (seeds != nullptr) {
      std::ofstream(fs::path(seeds) / StrCat("seed-", i), std::ios::binary)
          << msg.SerializeAsString();
    }
    if (i % 8 != 0) continue;
    for (const proto::RuleMsg& m : Mutations(msg)) {
      ++checked;
      EXPECT_EQ(fuzz_check::CheckRuleMsg(m), "") << m.ShortDebugString();
      auto rule = RuleFromMsg(m);
      if (!rule.ok() || !ValidateRule(*rule).ok()) ++refused;
    }
  }
  // The mutations reach both answers.
  EXPECT_GT(refused, checked / 4);
  EXPECT_LT(refused, checked);
}

TEST(RuleMsgFuzz, EveryInputOfItsCorpusPassesTheChecks) {
  const fs::path dir =
      fs::path(SROUTE_SOURCE_DIR) / "tests/fuzz/corpus/rule_msg";
  ASSERT_TRUE(fs::is_directory(dir)) << dir;
  int inputs = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    SCOPED_TRACE(entry.path().filename().string());
    EXPECT_EQ(fuzz_check::CheckRuleMsgInput(ReadAll(entry.path())), "");
    ++inputs;
  }
  EXPECT_GT(inputs, 9);
}

}  // namespace
}  // namespace sroute
