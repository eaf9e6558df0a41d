// SPDX-License-Identifier: Apache-2.0
// The steering app (controller/apps/steering.h) on a FakeApi: the shares it
// plans on Sandook's Figure 2a devices, the weights it pushes each epoch
// (only when a share moved), profiles stored, watched on their hosts and
// back after a restart, and a member without a profile leaving its stage
// alone.
#include "controller/apps/steering.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "tests/unit/controller/fake_api.h"

namespace sroute {
namespace {

// p90 rising linearly from 100 us to 1 ms at `capacity` and on to twice
// that, for reads only and for writes only.
proto::DeviceProfile LinearDevice(double capacity) {
  proto::DeviceProfile p;
  for (uint32_t percent : {0u, 100u}) {
    auto* mix = p.add_mix();
    mix->set_write_percent(percent);
    mix->set_peak_iops(1.2 * capacity);
    for (int step = 1; step <= 20; ++step) {
      const double iops = capacity * step / 10.0;
      auto* pt = mix->add_point();
      pt->set_iops(iops);
      const double p90 = 100 + 900 * iops / capacity;
      pt->set_p50_us(p90 / 2);
      pt->set_p90_us(p90);
      pt->set_p99_us(2 * p90);
    }
  }
  return p;
}

std::shared_ptr<const Profile> Made(const proto::DeviceProfile& p) {
  auto made = Profile::Make(p);
  EXPECT_TRUE(made.ok()) << made.status();
  return std::make_shared<const Profile>(*std::move(made));
}

TEST(SteeringAppTest, SandookLevelsLatencyReflexFollowsPeaks) {
  const std::vector<std::string> members = {"worn", "healthy", "fast"};
  const std::vector<std::shared_ptr<const Profile>> profiles = {
      Made(LinearDevice(280'000)), Made(LinearDevice(360'000)),
      Made(LinearDevice(990'000))};
  SteeringAppOptions o;
  bool fallback = true;
  auto plan =
      PlanReplicaSet("sandook", members, profiles, 1'300'000, 0, o, &fallback);
  EXPECT_FALSE(fallback);
  for (const MemberPlan& m : plan) {
    EXPECT_NEAR(m.expected_us, 817.8, 0.02 * 817.8) << m.member;
  }
  EXPECT_NEAR(plan[2].share, 0.99 / 1.63, 0.01);
  // Changes land on every member: 100 K of them take 10 % of the worn
  // device's capacity everywhere, and the reads level what is left.
  plan = PlanReplicaSet("sandook", members, profiles, 1'000'000, 100'000, o,
                        &fallback);
  EXPECT_NEAR(plan[0].expected_us, plan[2].expected_us, 25);
  // reflex: by peak, whatever the load.
  plan = PlanReplicaSet("reflex", members, profiles, 1'000, 0, o, &fallback);
  EXPECT_NEAR(plan[1].share, 0.36 / 1.63, 1e-9);
  // Past 95 % of the peaks: by peak too, said so.
  plan = PlanReplicaSet("sandook", members, profiles, 1.9e6, 0, o, &fallback);
  EXPECT_TRUE(fallback);
}

class SteeringAppFixture : public ::testing::Test {
 protected:
  // Host h runs replica set rs over members A and B, steered `steer`.
  void SetUp() override {
    proto::StageStats rs;
    rs.mutable_config()->set_name("rs");
    rs.mutable_config()->set_kind("replica_set");
    auto* o = rs.mutable_config()->mutable_replica_set();
    o->add_member("A");
    o->add_member("B");
    o->set_steer("sandook");
    api_.stages["h"] = {rs};
  }
  StatsSnapshot Snapshot() {
    StatsSnapshot s;
    HostStats h;
    h.sswitch = "h";
    h.connected = true;
    h.stages = api_.stages["h"];
    s.hosts.push_back(h);
    for (const char* server : {"sa", "sb"}) {
      HostStats x;
      x.sswitch = server;
      x.connected = true;
      s.hosts.push_back(x);
    }
    return s;
  }
  absl::StatusOr<proto::AppAnswer> Put(SteeringApp& app, const std::string& m,
                                       const std::string& on, double cap) {
    std::string text;
    google::protobuf::TextFormat::PrintToString(LinearDevice(cap), &text);
    proto::AppCall call;
    call.set_command("profile-put");
    for (const std::string& a : {m, on, std::string("ssd"), text}) {
      call.add_args(a);
    }
    return app.OnCall(call);
  }
  // One epoch after `reads` more reads (split evenly) and `changes` more
  // changes.
  void Epoch(int64_t reads, int64_t changes) {
    auto& c = *api_.stages["h"][0].mutable_counters();
    c["member.A.reads"] += reads / 2;
    c["member.B.reads"] += reads - reads / 2;
    c["changes"] += changes;
    ASSERT_EQ(api_.timers.size(), 1u);
    api_.timers[0]();
  }
  std::vector<uint32_t> Weights() {
    const auto& w = api_.stages["h"][0].config().replica_set().weight();
    return std::vector<uint32_t>(w.begin(), w.end());
  }

  testing::FakeApi api_;
};

TEST_F(SteeringAppFixture, WeightsFollowProfilesAndLoadEachEpoch) {
  SteeringApp app{SteeringAppOptions()};
  ASSERT_TRUE(app.Start(api_).ok());
  app.OnStats(Snapshot());
  // No profile for A yet: the stage is left alone.
  Epoch(0, 0);
  EXPECT_TRUE(api_.stage_sets.empty());
  ASSERT_TRUE(Put(app, "A", "sa", 10'000).ok());
  ASSERT_TRUE(Put(app, "B", "sb", 30'000).ok());
  // Each device's host watches it.
  EXPECT_EQ(api_.profiles["sa"].count("ssd"), 1u);
  EXPECT_EQ(api_.profiles["sb"].count("ssd"), 1u);
  // Idle: shares by what each serves within 1 ms (1:3).
  Epoch(0, 0);
  ASSERT_EQ(api_.stage_sets.size(), 1u);
  EXPECT_EQ(Weights(), (std::vector<uint32_t>{2500, 7500}));
  // Loaded (about 20 K reads/s over the epoch's real length): levelled,
  // still 1:3 for linear devices; unchanged weights are not pushed again.
  Epoch(0, 0);
  EXPECT_EQ(api_.stage_sets.size(), 1u);
  // Its status names the plan.
  proto::AppCall status;
  status.set_command("status");
  auto s = app.OnCall(status);
  ASSERT_TRUE(s.ok());
  EXPECT_NE(s->text().find("h rs: steer sandook"), std::string::npos)
      << s->text();
  EXPECT_NE(s->text().find("B  share 75%"), std::string::npos) << s->text();
  // B's host marks it congested (GC) and the stage's AIMD has it at 10 %:
  // the app plans B as a tenth of itself (A 10 K : B 3 K within 1 ms) and
  // sets B's weight to its share over the multiplier, which the stage
  // multiplies again (what B reads is the plan's 23 %).
  auto& c = *api_.stages["h"][0].mutable_counters();
  c["member.B.aimd_permille"] = 100;
  Epoch(0, 0);
  std::vector<uint32_t> w = Weights();
  ASSERT_EQ(w.size(), 2u);
  EXPECT_NEAR(w[0], 7692, 2);
  EXPECT_NEAR(w[1], 23077, 3);
  // Whole again: the plan of the whole pool.
  c["member.B.aimd_permille"] = 1000;
  Epoch(0, 0);
  EXPECT_EQ(Weights(), (std::vector<uint32_t>{2500, 7500}));
}

TEST_F(SteeringAppFixture, ProfilesOutliveARestartAndBadOnesAreRefused) {
  {
    SteeringApp app{SteeringAppOptions()};
    ASSERT_TRUE(app.Start(api_).ok());
    ASSERT_TRUE(Put(app, "A", "sa", 10'000).ok());
    proto::AppCall bad;
    bad.set_command("profile-put");
    for (const char* a : {"B", "sb", "ssd", "mix { write_percent: 200 }"}) {
      bad.add_args(a);
    }
    auto r = app.OnCall(bad);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("write shares must rise"),
              std::string::npos)
        << r.status();
  }
  api_.timers.clear();
  api_.profiles.clear();
  SteeringApp again{SteeringAppOptions()};
  ASSERT_TRUE(again.Start(api_).ok());
  proto::AppCall list;
  list.set_command("profiles");
  auto l = again.OnCall(list);
  ASSERT_TRUE(l.ok());
  EXPECT_NE(l->text().find("A  sa/ssd"), std::string::npos) << l->text();
  EXPECT_EQ(l->text().find("B  "), std::string::npos) << l->text();
  // A host without the watch (restarted) gets it at the next stats.
  again.OnStats(Snapshot());
  EXPECT_EQ(api_.profiles["sa"].count("ssd"), 1u);
  EXPECT_FALSE(ParseSteeringArgs("epoch_ms=5").ok());
  EXPECT_FALSE(ParseSteeringArgs("max_baseline_percent=50").ok());
  auto calm = ParseSteeringArgs("max_baseline_percent=100");
  ASSERT_TRUE(calm.ok());
  EXPECT_EQ(calm->max_baseline_percent, 100u);
  EXPECT_TRUE(
      ParseSteeringArgs("epoch_ms=100,target_us=500,percentile=p99").ok());
}

}  // namespace
}  // namespace sroute

namespace sroute {
namespace {

// placement anywhere: the app sets the write-mode window (copies members
// at low write demand), sliding one member every epoch, and the reads'
// weights over the others.
TEST(SteeringWindowTest, TheWindowSlidesEveryEpochAndReadsAvoidIt) {
  testing::FakeApi api;
  proto::StageStats rs;
  rs.mutable_config()->set_name("rs");
  rs.mutable_config()->set_kind("replica_set");
  auto* o = rs.mutable_config()->mutable_replica_set();
  for (const char* m : {"A", "B", "C", "D"}) {
    o->add_member(m);
    (*rs.mutable_counters())[std::string("member.") + m + ".in"] = 1;
  }
  o->set_steer("sandook");
  o->set_placement("anywhere");
  o->set_copies(2);
  api.stages["h"] = {rs};
  SteeringApp app{SteeringAppOptions()};
  ASSERT_TRUE(app.Start(api).ok());
  for (const char* m : {"A", "B", "C", "D"}) {
    std::string text;
    google::protobuf::TextFormat::PrintToString(LinearDevice(10'000), &text);
    proto::AppCall call;
    call.set_command("profile-put");
    for (const std::string& a :
         {std::string(m), std::string("s"), std::string("ssd") + m, text}) {
      call.add_args(a);
    }
    ASSERT_TRUE(app.OnCall(call).ok());
  }
  StatsSnapshot snap;
  HostStats h;
  h.sswitch = "h";
  h.connected = true;
  h.stages = api.stages["h"];
  snap.hosts.push_back(h);
  app.OnStats(snap);
  std::vector<std::vector<std::string>> windows;
  std::vector<std::vector<std::string>> switched;
  for (int epoch = 0; epoch < 3; ++epoch) {
    api.mode_switched.clear();
    api.timers[0]();
    switched.push_back(api.mode_switched);
    const auto& c = api.stages["h"][0].config().replica_set();
    windows.emplace_back(c.write_member().begin(), c.write_member().end());
    ASSERT_EQ(c.weight_size(), 4);
    // The window's members are not weighed for reads.
    for (int i = 0; i < 4; ++i) {
      const bool writes =
          std::find(windows.back().begin(), windows.back().end(),
                    c.member(i)) != windows.back().end();
      EXPECT_EQ(c.weight(i), writes ? 1u : 5000u) << c.member(i);
    }
  }
  EXPECT_EQ(windows[0], (std::vector<std::string>{"A", "B"}));
  EXPECT_EQ(windows[1], (std::vector<std::string>{"B", "C"}));
  EXPECT_EQ(windows[2], (std::vector<std::string>{"C", "D"}));
  // The hosts of the members that changed mode are told, so their
  // watches do not judge a queue left from the mode before: at first
  // every member took writes (C and D stop), then one leaves and one
  // joins each epoch.
  EXPECT_EQ(switched[0], (std::vector<std::string>{"s/ssdC", "s/ssdD"}));
  EXPECT_EQ(switched[1], (std::vector<std::string>{"s/ssdA", "s/ssdC"}));
  EXPECT_EQ(switched[2], (std::vector<std::string>{"s/ssdB", "s/ssdD"}));
}

}  // namespace
}  // namespace sroute
