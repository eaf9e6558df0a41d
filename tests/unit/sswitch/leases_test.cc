// SPDX-License-Identifier: Apache-2.0
// LeaseKeeper (sswitch/leases.h): a lease not renewed expires once; one
// released does not; a stopped keeper still takes holds and releases (its
// owner's users may still call while it goes away) but expires nothing.
#include "sswitch/leases.h"

#include <atomic>
#include <chrono>
#include <thread>

#include "gtest/gtest.h"
#include "tests/util/wait.h"
#include "util/mutex.h"

namespace sroute {
namespace {

using ::sroute::testing::Eventually;

class Expired {
 public:
  void Add(const std::string& owner) {
    MutexLock l(&mu_);
    owners_.push_back(owner);
  }
  std::vector<std::string> Get() const {
    MutexLock l(&mu_);
    return owners_;
  }

 private:
  mutable Mutex mu_;
  std::vector<std::string> owners_ ABSL_GUARDED_BY(mu_);
};

TEST(LeaseKeeperTest, ALeaseNotRenewedExpiresOnceAReleasedOneNever) {
  Expired expired;
  LeaseKeeper leases([&](const std::string& owner) { expired.Add(owner); });
  leases.Hold("tool-a", absl::Milliseconds(20));
  leases.Hold("tool-b", absl::Milliseconds(20));
  EXPECT_TRUE(leases.Release("tool-b"));
  EXPECT_FALSE(leases.Release("tool-b"));
  ASSERT_TRUE(Eventually([&] { return !expired.Get().empty(); }));
  EXPECT_EQ(expired.Get(), std::vector<std::string>{"tool-a"});
  EXPECT_TRUE(leases.Owners().empty());
}

TEST(LeaseKeeperTest, AStoppedKeeperTakesHoldsButExpiresNothing) {
  Expired expired;
  LeaseKeeper leases([&](const std::string& owner) { expired.Add(owner); });
  leases.Hold("before", absl::Hours(1));
  leases.Stop();
  leases.Hold("after", absl::Milliseconds(1));
  EXPECT_EQ(leases.Owners(), (std::vector<std::string>{"after", "before"}));
  // Due 100 times over: a running keeper would have called it.
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_TRUE(expired.Get().empty());
  EXPECT_TRUE(leases.Release("after"));
  leases.Stop();  // again: nothing to do
}

}  // namespace
}  // namespace sroute
