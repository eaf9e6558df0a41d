// SPDX-License-Identifier: Apache-2.0
// Rules and patterns from their text, for tests: a text that does not parse
// fails the test and gives an empty one.
#ifndef SROUTE_TESTS_UTIL_RULE_TEXT_H_
#define SROUTE_TESTS_UTIL_RULE_TEXT_H_

#include <string_view>

#include "gtest/gtest.h"
#include "rules/parser.h"

namespace sroute::testing {

inline Rule R(std::string_view text) {
  auto r = ParseRule(text);
  EXPECT_TRUE(r.ok()) << text << ": " << r.status();
  return r.ok() ? *r : Rule();
}

inline HeaderPattern P(std::string_view text) {
  auto p = ParsePattern(text);
  EXPECT_TRUE(p.ok()) << text << ": " << p.status();
  return p.ok() ? *p : HeaderPattern();
}

}  // namespace sroute::testing

#endif  // SROUTE_TESTS_UTIL_RULE_TEXT_H_
