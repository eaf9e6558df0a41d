// SPDX-License-Identifier: Apache-2.0
// Files open past the sSwitch (sswitch/bypass.h): what leaves a file alone,
// and which changes wait for such files and fail, changing nothing.
#include "sswitch/bypass.h"

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rules/parser.h"
#include "sswitch/sswitch.h"
#include "tests/util/rule_text.h"
#include "util/mutex.h"

namespace sroute {
namespace {

using ::testing::HasSubstr;

using ::sroute::testing::P;
using ::sroute::testing::R;

class NullEndpoint : public Endpoint {
 public:
  void Submit(Io* io, std::string_view) override { io->Complete({}); }
};

class NullWatch : public EndpointWatch {
 public:
  void Sending(Io*) override {}
  void Gauges(
      std::string_view,
      const absl::FunctionRef<void(std::string, int64_t)>&) const override {}
};

// Files "open past the sSwitch" as the test says; counts the holds.
class FakeGuard : public BypassGuard {
 public:
  uint64_t Hold(Names names) override {
    MutexLock l(&mu_);
    holds_.push_back(std::move(names));
    ++held;
    return holds_.size() - 1;
  }
  std::vector<std::string> WaitClosed(uint64_t ticket, absl::Time) override {
    MutexLock l(&mu_);
    std::vector<std::string> open;
    for (const std::string& f : open_files) {
      if (holds_[ticket](f)) open.push_back(f);
    }
    return open;
  }
  void Unhold(uint64_t) override { ++unheld; }

  std::set<std::string> open_files;
  int held = 0, unheld = 0;

 private:
  Mutex mu_;
  std::vector<Names> holds_;
};

class BypassTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(sw_.AddEndpoint("A", std::make_shared<NullEndpoint>()).ok());
    ASSERT_TRUE(sw_.AddEndpoint("B", std::make_shared<NullEndpoint>()).ok());
    sw_.SetBypassGuard(guard_, absl::Milliseconds(10));
  }
  void TearDown() override { sw_.SetBypassGuard(nullptr, absl::Seconds(0)); }

  SSwitch sw_{"t"};
  std::shared_ptr<FakeGuard> guard_ = std::make_shared<FakeGuard>();
};

TEST_F(BypassTest, AFileIsLeftAloneUntilSomethingWouldSeeItsIo) {
  EXPECT_TRUE(sw_.LeavesAlone("//A/f"));
  EXPECT_FALSE(sw_.LeavesAlone("//C/f")) << "no such endpoint";
  EXPECT_FALSE(sw_.LeavesAlone("not a file name"));
  // A rule of any source, op or range routes it.
  auto id = sw_.Insert(R("<alice, r, //A/f[0:4K]> -> <IO, //B/f>"));
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_FALSE(sw_.LeavesAlone("//A/f"));
  EXPECT_TRUE(sw_.LeavesAlone("//A/g"));
  ASSERT_TRUE(sw_.Delete(*id).ok());
  EXPECT_TRUE(sw_.LeavesAlone("//A/f"));
  // A tap samples it.
  id = sw_.Insert(R("<*, w, //A/*> -> trace(0.5)"));
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_FALSE(sw_.LeavesAlone("//A/f"));
  ASSERT_TRUE(sw_.Delete(*id).ok());
  // A quiesce parks it.
  ASSERT_TRUE(sw_.Quiesce(P("<*, *, //A/f>"), true).ok());
  EXPECT_FALSE(sw_.LeavesAlone("//A/f"));
  ASSERT_TRUE(sw_.Quiesce(P("<*, *, //A/f>"), false).ok());
  // A watch on its endpoint sees it.
  ASSERT_TRUE(sw_.WatchEndpoint("A", std::make_shared<NullWatch>()).ok());
  EXPECT_FALSE(sw_.LeavesAlone("//A/f"));
  EXPECT_TRUE(sw_.LeavesAlone("//B/f"));
  ASSERT_TRUE(sw_.WatchEndpoint("A", nullptr).ok());
  EXPECT_TRUE(sw_.LeavesAlone("//A/f"));
}

TEST_F(BypassTest, ChangesNamingAFileOpenPastTheSwitchFailChangingNothing) {
  guard_->open_files = {"//A/f"};
  const uint64_t version = sw_.version();
  auto ids = sw_.Insert(R("<*, *, //A/*> -> <IO, //B/*>"));
  ASSERT_FALSE(ids.ok());
  EXPECT_EQ(ids.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(ids.status().message(), HasSubstr("//A/f"));
  EXPECT_THAT(ids.status().message(), HasSubstr("nothing changed"));
  EXPECT_FALSE(sw_.Insert(R("<*, w, //A/f> -> trace(1)")).ok()) << "a tap";
  EXPECT_FALSE(sw_.Quiesce(P("<*, *, //A/f>"), true).ok());
  EXPECT_FALSE(sw_.WatchEndpoint("A", std::make_shared<NullWatch>()).ok());
  EXPECT_EQ(sw_.version(), version);
  EXPECT_TRUE(sw_.ListRules().empty());
  EXPECT_TRUE(sw_.LeavesAlone("//A/f"));
  EXPECT_EQ(guard_->held, guard_->unheld) << "every hold ends";
  // Changes that name other files, or take routes away, go ahead.
  auto other = sw_.Insert(R("<*, *, //A/g> -> <IO, //B/g>"));
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_TRUE(sw_.Quiesce(P("<*, *, //A/g>"), true).ok());
  EXPECT_TRUE(sw_.Quiesce(P("<*, *, //A/g>"), false).ok());
  EXPECT_TRUE(sw_.WatchEndpoint("B", std::make_shared<NullWatch>()).ok());
  EXPECT_TRUE(sw_.Delete(*other).ok());
  // Once it is closed, the change is made.
  guard_->open_files.clear();
  EXPECT_TRUE(sw_.Insert(R("<*, *, //A/*> -> <IO, //B/*>")).ok());
  EXPECT_FALSE(sw_.LeavesAlone("//A/f"));
  EXPECT_EQ(guard_->held, guard_->unheld);
}

}  // namespace
}  // namespace sroute
