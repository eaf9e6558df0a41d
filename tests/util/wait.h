// SPDX-License-Identifier: Apache-2.0
// Waiting in tests of real processes: for a condition, and for threads a
// failed ASSERT would otherwise leave running.
#ifndef SROUTE_TESTS_UTIL_WAIT_H_
#define SROUTE_TESTS_UTIL_WAIT_H_

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

namespace sroute::testing {

// Whether `pred` holds within `seconds` (asked every 50 ms, and once more
// at the end).
template <typename Pred>
bool Eventually(Pred pred, int seconds = 20) {
  const auto end =
      std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return pred();
}

// Whether `pred` holds throughout `seconds` (asked every 200 ms): the
// converse of Eventually, for what must not go away meanwhile.
template <typename Pred>
bool Throughout(Pred pred, int seconds) {
  const auto end =
      std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  while (std::chrono::steady_clock::now() < end) {
    if (!pred()) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  return pred();
}

// Sets `stop` and joins `threads` when it goes out of scope: a failed
// ASSERT returns early, and a joinable thread destroyed would abort the
// test and orphan its processes.
struct JoinAll {
  std::atomic<bool>& stop;
  std::vector<std::thread>& threads;
  ~JoinAll() {
    stop = true;
    for (auto& t : threads) {
      if (t.joinable()) t.join();
    }
  }
};

}  // namespace sroute::testing

#endif  // SROUTE_TESTS_UTIL_WAIT_H_
