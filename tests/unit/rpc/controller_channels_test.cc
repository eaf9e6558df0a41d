// SPDX-License-Identifier: Apache-2.0
// ControllerChannels and the redirects of rpc/leader.h: which controller a
// host or client calls next after each kind of failure. No connection is
// made: the channels are only chosen.
#include "rpc/controller_channels.h"

#include "gtest/gtest.h"
#include "rpc/io_threads.h"
#include "rpc/leader.h"

namespace sroute {
namespace {

RpcChannel::Options Base() {
  RpcChannel::Options o;
  o.secret = "0123456789abcdef-test-secret";
  o.name = "t";
  return o;
}

TEST(LeaderTest, NotLeaderErrorsCarryTheLeader) {
  const absl::Status named = NotLeaderError("a:1", "b:2", "read only");
  EXPECT_TRUE(absl::IsUnavailable(named));
  EXPECT_TRUE(IsNotLeader(named));
  EXPECT_EQ(LeaderOf(named), "b:2");
  EXPECT_NE(named.message().find("b:2"), std::string_view::npos);
  EXPECT_NE(named.message().find("read only"), std::string_view::npos);
  const absl::Status election = NotLeaderError("a:1", "");
  EXPECT_TRUE(IsNotLeader(election));
  EXPECT_EQ(LeaderOf(election), "");
  const absl::Status plain = absl::UnavailableError("gone");
  EXPECT_FALSE(IsNotLeader(plain));
  EXPECT_EQ(LeaderOf(plain), "");
  const absl::Status marked = WithLeader(plain, "c:3");
  EXPECT_TRUE(IsNotLeader(marked));
  EXPECT_EQ(LeaderOf(marked), "c:3");
}

TEST(ControllerChannelsTest, FollowsLeadersAndAbsencesNotAnswers) {
  IoThreads threads(1);
  auto c =
      ControllerChannels::Create(&threads, "127.0.0.1:1,,127.0.0.1:2", Base());
  ASSERT_TRUE(c.ok()) << c.status();
  ControllerChannels& ch = **c;
  ASSERT_EQ(ch.size(), 2u);
  EXPECT_EQ(ch.current_address(), "127.0.0.1:1");
  // An answer stays; so does a follower that knows no leader yet.
  EXPECT_EQ(ch.Follow(0, absl::InvalidArgumentError("bad rule")), std::nullopt);
  EXPECT_EQ(ch.Follow(0, NotLeaderError("127.0.0.1:1", "")), std::nullopt);
  EXPECT_EQ(ch.current_index(), 0u);
  // An absence moves to the next; a second caller that saw the same
  // failure finds the move made.
  EXPECT_EQ(ch.Follow(0, absl::UnavailableError("refused")), 1u);
  EXPECT_EQ(ch.Follow(0, absl::DeadlineExceededError("slow")), 1u);
  EXPECT_EQ(ch.current_index(), 1u);
  // A leader not in the list is added and followed; one in it is followed.
  EXPECT_EQ(ch.Follow(1, NotLeaderError("127.0.0.1:2", "127.0.0.1:3")), 2u);
  EXPECT_EQ(ch.size(), 3u);
  EXPECT_EQ(ch.current_address(), "127.0.0.1:3");
  EXPECT_EQ(ch.Follow(2, NotLeaderError("127.0.0.1:3", "127.0.0.1:1")), 0u);
  EXPECT_EQ(ch.size(), 3u);
  // Past the end, the next is the first.
  ch.Select(2);
  EXPECT_EQ(ch.Follow(2, absl::UnavailableError("gone")), 0u);
  // A named leader whose address makes no channel: stay.
  EXPECT_EQ(ch.Follow(0, NotLeaderError("127.0.0.1:1", "no-port")),
            std::nullopt);
  EXPECT_EQ(ch.size(), 3u);
  EXPECT_EQ(ch.All().size(), 3u);
}

TEST(ControllerChannelsTest, OneAddressStaysAndBadListsAreClearErrors) {
  IoThreads threads(1);
  auto one = ControllerChannels::Create(&threads, "127.0.0.1:1", Base());
  ASSERT_TRUE(one.ok());
  EXPECT_EQ((*one)->Follow(0, absl::UnavailableError("gone")), std::nullopt);
  auto none = ControllerChannels::Create(&threads, ",", Base());
  EXPECT_TRUE(absl::IsInvalidArgument(none.status())) << none.status();
  auto bad = ControllerChannels::Create(&threads, "127.0.0.1:1,nope", Base());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("controller nope"),
            std::string_view::npos)
      << bad.status();
}

}  // namespace
}  // namespace sroute
