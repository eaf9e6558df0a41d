// SPDX-License-Identifier: Apache-2.0
// Whether this build runs under a sanitizer (SROUTE_SANITIZE): each request
// then costs 3-10x, so the heaviest scenarios run at sizes that still test
// the same guarantee (say which in the test), as the exerciser does
// (SROUTE_EXERCISE_OPS).
#ifndef SROUTE_TESTS_UTIL_SANITIZED_H_
#define SROUTE_TESTS_UTIL_SANITIZED_H_

namespace sroute::testing {

#ifdef SROUTE_SANITIZED
inline constexpr bool kSanitized = true;
#else
inline constexpr bool kSanitized = false;
#endif

// `full` in a normal build, `sanitized` under a sanitizer.
template <typename T>
constexpr T SizeFor(T full, T sanitized) {
  return kSanitized ? sanitized : full;
}

}  // namespace sroute::testing

#endif  // SROUTE_TESTS_UTIL_SANITIZED_H_
