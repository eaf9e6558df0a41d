// SPDX-License-Identifier: Apache-2.0
// libFuzzer target for the rule language: whatever the input, parsing must
// not crash, every parsed rule must print to text that parses back to the
// same rule, and the rule table must route each rule's own header by that
// rule or one ahead of it. See rule_parser_check.h.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

#include "tests/fuzz/rule_parser_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const std::string error = sroute::fuzz_check::CheckRuleParserInput(input);
  if (!error.empty()) {
    std::fprintf(stderr, "rule_parser_fuzz: %s\n", error.c_str());
    __builtin_trap();
  }
  return 0;
}
