// SPDX-License-Identifier: Apache-2.0
// Background (util/background.h): Wait() returns only once every job ran
// and what it captured is gone (an RPC call whose connection needs the io
// context its owner is about to destroy: an ASan use-after-free in CI).
#include "util/background.h"

#include <atomic>
#include <memory>

#include "gtest/gtest.h"

namespace sroute {
namespace {

TEST(BackgroundTest, AJobsCapturesAreGoneWhenWaitReturns) {
  for (int i = 0; i < 500; ++i) {
    auto held = std::make_shared<int>(i);
    std::weak_ptr<int> watch = held;
    std::atomic<bool> ran{false};
    {
      Background bg;
      bg.Run([held = std::move(held), &ran] { ran = true; });
    }  // waits
    ASSERT_TRUE(ran.load());
    ASSERT_TRUE(watch.expired()) << "iteration " << i;
  }
}

}  // namespace
}  // namespace sroute
