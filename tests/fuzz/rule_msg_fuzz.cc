// SPDX-License-Identifier: Apache-2.0
// libFuzzer target for rules that arrive parsed (proto::RuleMsg): whatever
// the bytes, decoding must not crash, a rule ValidateRule accepts must print
// to text that parses back to it, and one it refuses must be one the parser
// would refuse too. See rule_msg_check.h.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

#include "tests/fuzz/rule_msg_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const std::string error = sroute::fuzz_check::CheckRuleMsgInput(input);
  if (!error.empty()) {
    std::fprintf(stderr, "rule_msg_fuzz: %s\n", error.c_str());
    __builtin_trap();
  }
  return 0;
}
