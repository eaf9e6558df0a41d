// SPDX-License-Identifier: Apache-2.0
// Leader election on a real etcd (controller/leadership.h): one of two
// members leads and the other knows where; a leader that stops hands over
// at once; a leader whose key is taken from it hears so and never leads
// again, while the other takes over.
#include "controller/leadership.h"

#include <atomic>
#include <chrono>
#include <thread>

#include "gtest/gtest.h"
#include "tests/util/etcd_cluster.h"
#include "tests/util/wait.h"

namespace sroute {
namespace {

using ::sroute::testing::EtcdCluster;
using ::sroute::testing::Eventually;

class LeadershipTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(etcd_.ok()); }

  struct Events {
    std::atomic<int> elected{0};
    std::atomic<int> lost{0};
    std::atomic<int64_t> revision{0};
  };

  std::unique_ptr<Leadership> Member(const std::string& id, Events* events) {
    Leadership::Options o;
    o.prefix = "/lead-test/";
    o.id = id;
    o.address = "127.0.0.1:" + id;
    o.ttl = absl::Seconds(1);
    o.elected = [events](int64_t revision) {
      events->revision = revision;
      ++events->elected;
      return true;
    };
    o.lost = [events](const std::string&) { ++events->lost; };
    EtcdClient::Options eo;
    eo.endpoints = etcd_.member_endpoints();
    auto m = Leadership::Start(eo, std::move(o));
    EXPECT_TRUE(m.ok()) << m.status();
    return m.ok() ? *std::move(m) : nullptr;
  }

  EtcdCluster etcd_{1};
};

TEST_F(LeadershipTest, OneLeadsTheOtherFollowsAndTakesOver) {
  Events a_events, b_events;
  auto a = Member("1001", &a_events);
  ASSERT_TRUE(Eventually([&] { return a->leading(); }));
  auto b = Member("1002", &b_events);
  ASSERT_TRUE(
      Eventually([&] { return b->leader_address() == "127.0.0.1:1001"; }));
  EXPECT_FALSE(b->leading());
  EXPECT_TRUE(Eventually([&] { return a_events.elected == 1; }));
  EXPECT_EQ(b_events.elected, 0);
  auto members = b->Members();
  ASSERT_TRUE(members.ok()) << members.status();
  ASSERT_EQ(members->size(), 2u);
  EXPECT_EQ((*members)[0].id, "1001");
  EXPECT_TRUE((*members)[0].leader);
  EXPECT_EQ((*members)[1].address, "127.0.0.1:1002");
  EXPECT_FALSE((*members)[1].leader);
  // A stops: its lease is revoked, B leads well within the TTL's rounds.
  const auto stopped = std::chrono::steady_clock::now();
  a.reset();
  ASSERT_TRUE(Eventually([&] { return b->leading(); }));
  EXPECT_LT(std::chrono::steady_clock::now() - stopped,
            std::chrono::seconds(2));
  // (`elected` runs just after leading() turns true.)
  EXPECT_TRUE(Eventually([&] { return b_events.elected == 1; }));
  EXPECT_GT(b_events.revision, a_events.revision);
  EXPECT_EQ(a_events.lost, 0);  // a clean stop is not a loss
  EXPECT_EQ(b->Members()->size(), 1u);
}

TEST_F(LeadershipTest, ALeaderWhoseKeyIsGoneStopsAndNeverLeadsAgain) {
  Events a_events, b_events;
  auto a = Member("2001", &a_events);
  ASSERT_TRUE(Eventually([&] { return a->leading(); }));
  auto b = Member("2002", &b_events);
  ASSERT_TRUE(Eventually([&] { return !b->leader_address().empty(); }));
  // As if A's lease had run out while it was paused: etcd drops its key.
  EtcdClient::Options eo;
  eo.endpoints = etcd_.member_endpoints();
  auto client = EtcdClient::Create(eo);
  etcd::DeleteRangeRequest del;
  del.set_key(a->leader_key());
  ASSERT_TRUE((*client)->DeleteRange(del).ok());
  ASSERT_TRUE(Eventually([&] { return a_events.lost == 1; }));
  EXPECT_FALSE(a->leading());
  ASSERT_TRUE(Eventually([&] { return b->leading(); }));
  // A stays a follower, pointing to B.
  ASSERT_TRUE(Eventually([&] {
    return a->leader_address() == "127.0.0.1:2002";
  })) << a->leader_address();
  std::this_thread::sleep_for(std::chrono::milliseconds(600));
  EXPECT_FALSE(a->leading());
  EXPECT_EQ(a_events.elected, 1);
  EXPECT_EQ(a_events.lost, 1);
}

// etcd away for longer than the TTL: the leader loses its leadership. When
// etcd is back, the lost member gives its lease back at once, so the other
// leads without waiting for the lost one to go away (before, it kept a lease
// alive: the old one held the leader key as long as its process lived, or,
// if etcd had let it run out, a new one listed it as a member).
TEST_F(LeadershipTest, ALeaderLostInAnEtcdOutageLetsTheOtherLeadWhenItIsBack) {
  Events a_events, b_events;
  auto a = Member("3001", &a_events);
  ASSERT_TRUE(Eventually([&] { return a->leading(); }));
  auto b = Member("3002", &b_events);
  ASSERT_TRUE(
      Eventually([&] { return b->leader_address() == "127.0.0.1:3001"; }));
  etcd_.Kill(0);
  ASSERT_TRUE(Eventually([&] { return a_events.lost == 1; }));
  EXPECT_FALSE(a->leading());
  etcd_.Restart(0);
  ASSERT_TRUE(etcd_.WaitWritable(std::chrono::seconds(30)));
  // A is still there (as a deposed daemon is until it exits).
  ASSERT_TRUE(Eventually([&] { return b->leading(); }));
  // (`elected` runs just after leading() turns true: CI once read 0.)
  EXPECT_TRUE(Eventually([&] { return b_events.elected == 1; }));
  ASSERT_TRUE(Eventually([&] {
    return a->leader_address() == "127.0.0.1:3002";
  })) << a->leader_address();
  EXPECT_FALSE(a->leading());
  EXPECT_EQ(a_events.elected, 1);
  // And it holds no lease: it is no longer listed as a member.
  EXPECT_TRUE(Eventually([&] {
    auto m = b->Members();
    return m.ok() && m->size() == 1 && (*m)[0].id == "3002";
  }));
}

TEST_F(LeadershipTest, BadOptionsAreRefused) {
  EtcdClient::Options eo;
  eo.endpoints = etcd_.member_endpoints();
  Leadership::Options o;
  o.prefix = "/x/";
  o.id = "a\nb";
  o.address = "127.0.0.1:1";
  EXPECT_TRUE(absl::IsInvalidArgument(Leadership::Start(eo, o).status()));
  o.id = "a";
  o.ttl = absl::Milliseconds(500);
  EXPECT_TRUE(absl::IsInvalidArgument(Leadership::Start(eo, o).status()));
}

}  // namespace
}  // namespace sroute
