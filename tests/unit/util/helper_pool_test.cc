// SPDX-License-Identifier: Apache-2.0
// HelperPool (util/helper_pool.h): a call stuck on a helper holds only that
// helper; past the bound, work waits and runs once a helper comes free; the
// destructor runs what was queued.
#include "util/helper_pool.h"

#include <atomic>
#include <future>
#include <latch>
#include <vector>

#include "gtest/gtest.h"

namespace sroute {
namespace {

TEST(HelperPoolTest, AStuckCallHoldsOnlyItsOwnHelper) {
  HelperPool pool({.lanes = 1, .max_threads = 8});
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::atomic<bool> stuck_started{false};
  // The future by value: the helper may still be in wait() when the test's
  // locals go (the pool, declared first, is destroyed last).
  pool.Post(0, [&stuck_started, released] {
    stuck_started = true;
    released.wait();
  });
  // Work posted to the same lane after it runs while it is stuck.
  for (int i = 0; i < 100; ++i) {
    std::promise<void> done;
    auto f = done.get_future();
    pool.Post(0, [&done] { done.set_value(); });
    f.wait();  // would hang if it queued behind the stuck call
  }
  EXPECT_TRUE(stuck_started.load());
  EXPECT_LE(pool.stats().threads, 8u);
  release.set_value();
}

TEST(HelperPoolTest, PastTheBoundWorkWaitsForAFreeHelperOfAnyLane) {
  HelperPool pool({.lanes = 2, .max_threads = 2});
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::latch both_stuck(2);
  for (int i = 0; i < 2; ++i) {
    pool.Post(0, [&both_stuck, released] {
      both_stuck.count_down();
      released.wait();
    });
  }
  both_stuck.wait();
  std::atomic<int> ran{0};
  for (int i = 0; i < 10; ++i) pool.Post(1, [&] { ++ran; });
  EXPECT_EQ(pool.stats().threads, 2u);
  EXPECT_EQ(pool.stats().queued, 10u);
  EXPECT_EQ(ran.load(), 0);
  release.set_value();  // lane 0's helpers take lane 1's work
  while (ran.load() != 10) std::this_thread::yield();
  EXPECT_EQ(pool.stats().peak_threads, 2u);
}

TEST(HelperPoolTest, TheDestructorRunsWhatWasQueued) {
  std::atomic<int> ran{0};
  {
    HelperPool pool({.lanes = 3, .max_threads = 1});
    for (int i = 0; i < 300; ++i) pool.Post(i, [&] { ++ran; });
  }
  EXPECT_EQ(ran.load(), 300);
}

TEST(HelperPoolTest, IdleHelpersLeaveButOnePerLaneStays) {
  HelperPool pool({.lanes = 1,
                   .max_threads = 8,
                   .idle_exit = std::chrono::milliseconds(20)});
  std::latch all(4);
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  for (int i = 0; i < 4; ++i) {
    pool.Post(0, [&all, released] {
      all.count_down();
      released.wait();
    });
  }
  all.wait();
  EXPECT_EQ(pool.stats().threads, 4u);
  release.set_value();
  while (pool.stats().threads > 1) std::this_thread::yield();
  std::promise<void> done;
  pool.Post(0, [&done] { done.set_value(); });
  done.get_future().wait();
  EXPECT_EQ(pool.stats().threads, 1u);
}

TEST(HelperPoolTest, TheTargetIsTheCallingThreads) {
  HelperPool pool({});
  EXPECT_EQ(BlockingCallsGoTo().pool, nullptr);
  {
    ScopedBlockingCallTarget target({&pool, 3});
    EXPECT_EQ(BlockingCallsGoTo().pool, &pool);
    EXPECT_EQ(BlockingCallsGoTo().lane, 3);
    std::thread([] { EXPECT_EQ(BlockingCallsGoTo().pool, nullptr); }).join();
  }
  EXPECT_EQ(BlockingCallsGoTo().pool, nullptr);
}

}  // namespace
}  // namespace sroute
