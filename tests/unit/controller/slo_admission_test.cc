// SPDX-License-Identifier: Apache-2.0
// The slo_admission app's logic (controller/apps/slo_admission.h): the plan
// (admission, shortfalls, the split of a reservation over servers), its
// state, and the app against a FakeApi. tests/integration/
// qos_admission_test.cc runs it with real servers and a volume.
#include "controller/apps/slo_admission.h"

#include <map>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/unit/controller/fake_api.h"

namespace sroute {
namespace {

using ::sroute::testing::FakeApi;

// A device serving 1 000 tokens/s within 2 ms, 4 000 within 20 ms.
proto::QosOptions Curved() {
  proto::QosOptions o;
  o.set_write_cost(10);
  for (auto [us, t] : {std::pair{2000u, 1000u}, std::pair{20000u, 4000u}}) {
    auto* p = o.add_curve();
    p->set_p95_us(us);
    p->set_tokens_per_s(t);
  }
  return o;
}

SloTenant Lc(std::string name, uint32_t iops, uint32_t reads, uint32_t p95,
             std::vector<std::string> on) {
  SloTenant t;
  t.name = std::move(name);
  t.latency_critical = true;
  t.iops = iops;
  t.read_percent = reads;
  t.p95_us = p95;
  t.stage = "q";
  t.on = std::move(on);
  return t;
}

const SloDevice kS1{"S1", "q"}, kS2{"S2", "q"};

std::map<SloDevice, proto::QosOptions> TwoDevices() {
  return {{kS1, Curved()}, {kS2, Curved()}};
}

TEST(SloPlanTest, AdmitsWhatFitsAtTheStrictestTarget) {
  auto plan = PlanSlo(
      {Lc("alice", 600, 100, 20000, {"S1"}), Lc("bob", 300, 50, 20000, {"S1"})},
      TwoDevices(), {}, 0.05);
  ASSERT_TRUE(plan.ok()) << plan.status();
  const SloPlan::Device& d = plan->devices.at(kS1);
  EXPECT_EQ(d.strictest_us, 20000u);
  EXPECT_DOUBLE_EQ(d.capacity, 4000);
  EXPECT_DOUBLE_EQ(d.reserved, 600 + 300 * 5.5);
  ASSERT_EQ(d.options.tenant_size(), 2);
  EXPECT_EQ(d.options.tenant(1).name(), "bob");
  EXPECT_EQ(d.options.tenant(1).qos_class(), "lc");
  EXPECT_EQ(d.options.tenant(1).iops(), 300u);
  EXPECT_EQ(d.options.tenant(1).read_percent(), 50u);
  EXPECT_EQ(d.options.tenant(1).p95_us(), 20000u);
  // The device's own settings stay.
  EXPECT_EQ(d.options.curve_size(), 2);
  EXPECT_EQ(plan->devices.count(kS2), 0u);
}

TEST(SloPlanTest, RefusesWithTheShortfall) {
  // carol's 2 ms target leaves the device 1 000 tokens/s for all three.
  auto plan = PlanSlo(
      {Lc("alice", 600, 100, 20000, {"S1"}), Lc("bob", 300, 50, 20000, {"S1"}),
       Lc("carol", 200, 100, 2000, {"S1"})},
      TwoDevices(), {}, 0.05);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(plan.status().message(),
            "S1/q cannot hold its reservations: they need 2450 tokens/s "
            "(alice 600, bob 1650, carol 200) and it serves 1000 within 2000 "
            "us: 1450 tokens/s short");
}

TEST(SloPlanTest, NeedsARateAndATargetTheCurveCovers) {
  std::map<SloDevice, proto::QosOptions> devices = TwoDevices();
  devices[kS1] = proto::QosOptions();
  auto plan = PlanSlo({Lc("a", 10, 100, 20000, {"S1"})}, devices, {}, 0.05);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(plan.status().message().find("S1/q has no rate"),
            std::string::npos);
  // A fixed rate needs no curve.
  devices[kS1].set_tokens_per_s(50);
  EXPECT_TRUE(
      PlanSlo({Lc("a", 50, 100, 20000, {"S1"})}, devices, {}, 0.05).ok());
  EXPECT_FALSE(
      PlanSlo({Lc("a", 51, 100, 20000, {"S1"})}, devices, {}, 0.05).ok());
  plan = PlanSlo({Lc("a", 10, 100, 500, {"S2"})}, devices, {}, 0.05);
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.status().message().find(
                "S2/q cannot be held to a p95 of 500 us: its curve begins "
                "at 2000 us"),
            std::string::npos)
      << plan.status();
  // A device nobody lists.
  plan = PlanSlo({Lc("a", 10, 100, 20000, {"S3"})}, devices, {}, 0.05);
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kNotFound);
}

TEST(SloPlanTest, SplitsAReservationAcrossServersByDemand) {
  const SloTenant a = Lc("alice", 2000, 100, 20000, {"S1", "S2"});
  auto split = [&](std::map<SloDevice, double> demand) {
    auto plan = PlanSlo({a}, TwoDevices(), {{"alice", demand}}, 0.05);
    EXPECT_TRUE(plan.ok()) << plan.status();
    return plan.ok() ? plan->shares["alice"] : std::map<SloDevice, double>{};
  };
  // No demand seen: evenly.
  EXPECT_DOUBLE_EQ(split({})[kS1], 1000);
  // 90/10: exactly that.
  auto s = split({{kS1, 900}, {kS2, 100}});
  EXPECT_DOUBLE_EQ(s[kS1], 1800);
  EXPECT_DOUBLE_EQ(s[kS2], 200);
  // All on S1: S2 keeps its 5 %.
  s = split({{kS1, 700}});
  EXPECT_DOUBLE_EQ(s[kS1], 1900);
  EXPECT_DOUBLE_EQ(s[kS2], 100);
  // The stage is told whole IOPS that add up to at least the reservation.
  auto plan =
      PlanSlo({a}, TwoDevices(), {{"alice", {{kS1, 2}, {kS2, 1}}}}, 0.05);
  ASSERT_TRUE(plan.ok());
  EXPECT_GE(plan->devices[kS1].options.tenant(0).iops() +
                plan->devices[kS2].options.tenant(0).iops(),
            2000u);
}

TEST(SloPlanTest, ASplitMovesToWhereThereIsRoomAndSaysWhenThereIsNone) {
  // bob holds 3 500 of S1's 4 000 tokens: alice's demand there cannot all
  // be reserved there, the rest goes to S2.
  const SloTenant bob = Lc("bob", 3500, 100, 20000, {"S1"});
  auto plan = PlanSlo({bob, Lc("alice", 2000, 100, 20000, {"S1", "S2"})},
                      TwoDevices(), {{"alice", {{kS1, 1}}}}, 0.05);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_NEAR(plan->shares["alice"][kS1], 500, 1e-6);
  EXPECT_NEAR(plan->shares["alice"][kS2], 1500, 1e-6);
  plan = PlanSlo({bob, Lc("alice", 5000, 100, 20000, {"S1", "S2"})},
                 TwoDevices(), {}, 0.05);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(std::string(plan.status().message()),
            "alice's reservation does not fit on its servers: 500 tokens/s "
            "short (S1/q has 500 of 4000 left within 20000 us; S2/q has 4000 "
            "of 4000 left within 20000 us)");
}

TEST(SloPlanTest, BestEffortTenantsAreListedNotHeld) {
  SloTenant be;
  be.name = "batch";
  be.stage = "q";
  be.on = {"S1"};
  std::map<SloDevice, proto::QosOptions> devices = {{kS1, proto::QosOptions()}};
  // No rate needed: nothing is reserved.
  auto plan = PlanSlo({be}, devices, {}, 0.05);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->devices[kS1].options.tenant_size(), 1);
  EXPECT_EQ(plan->devices[kS1].options.tenant(0).qos_class(), "be");
}

TEST(SloStateTest, RoundTrips) {
  SloTenant be;
  be.name = "batch";
  be.stage = "q";
  be.on = {"S1", "S2"};
  const std::vector<SloTenant> in = {Lc("alice", 600, 80, 5000, {"S1"}), be};
  auto out = ParseSloTenants(FormatSloTenants(in));
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->size(), 2u);
  EXPECT_EQ((*out)[0].iops, 600u);
  EXPECT_EQ((*out)[0].read_percent, 80u);
  EXPECT_TRUE((*out)[0].latency_critical);
  EXPECT_FALSE((*out)[1].latency_critical);
  EXPECT_EQ((*out)[1].on, (std::vector<std::string>{"S1", "S2"}));
  EXPECT_EQ(ParseSloTenants("alice lc x\n").status().code(),
            absl::StatusCode::kDataLoss);
}

TEST(SloArgsTest, ParsesAndRefuses) {
  auto o = ParseSloAdmissionArgs("report_after=5,min_share=0.1,move=0.2");
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->report_after, 5);
  EXPECT_DOUBLE_EQ(o->min_share, 0.1);
  EXPECT_FALSE(ParseSloAdmissionArgs("min_share=0.9").ok());
  EXPECT_FALSE(ParseSloAdmissionArgs("rate=3").ok());
}

class SloAppTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* s : {"S1", "S2"}) {
      proto::StageStats st;
      st.mutable_config()->set_name("q");
      st.mutable_config()->set_kind("qos");
      *st.mutable_config()->mutable_qos() = Curved();
      api_.stages[s].push_back(st);
    }
    ASSERT_TRUE(app_.Start(api_).ok());
  }
  absl::StatusOr<proto::AppAnswer> Call(const std::string& command,
                                        std::vector<std::string> args = {}) {
    proto::AppCall c;
    c.set_app("slo_admission");
    c.set_command(command);
    for (std::string& a : args) c.add_args(std::move(a));
    return app_.OnCall(c);
  }
  // A stats report in which each device's stage reports `counters`.
  StatsSnapshot Stats(const std::map<std::string, int64_t>& counters) {
    StatsSnapshot s;
    for (const char* name : {"S1", "S2"}) {
      HostStats h;
      h.sswitch = name;
      h.interval = absl::Seconds(1);
      h.stages = api_.stages[name];
      for (const auto& [k, v] : counters) {
        (*h.stages[0].mutable_counters())[k] = v;
      }
      s.hosts.push_back(h);
    }
    return s;
  }
  const proto::QosOptions& StageOf(const std::string& sswitch) {
    return api_.stages[sswitch][0].config().qos();
  }

  FakeApi api_;
  SloAdmission app_{SloAdmissionOptions{}};
};

TEST_F(SloAppTest, RegistrationsReachTheStagesAndOutliveTheApp) {
  auto a = Call("register", {"alice", "class=lc", "iops=600", "p95_us=20000",
                             "stage=q", "on=S1"});
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->text(), "admitted alice: S1/q 600 IOPS");
  ASSERT_EQ(StageOf("S1").tenant_size(), 1);
  EXPECT_EQ(StageOf("S1").tenant(0).iops(), 600u);
  EXPECT_EQ(StageOf("S1").curve_size(), 2);  // the device's own, kept
  EXPECT_EQ(StageOf("S2").tenant_size(), 0);

  // Refused: nothing pushed, nothing kept.
  const size_t sets = api_.stage_sets.size();
  auto r = Call("register",
                {"carol", "iops=900", "p95_us=2000", "stage=q", "on=S1"});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("carol is refused: S1/q cannot hold"),
            std::string::npos)
      << r.status();
  EXPECT_EQ(api_.stage_sets.size(), sets);
  EXPECT_EQ(api_.state["tenants"].find("carol"), std::string::npos);

  // A second app over the same store has the registrations, and brings a
  // stage that lost them (a server restarted) back in line at the stats.
  api_.stages["S1"][0].mutable_config()->mutable_qos()->clear_tenant();
  SloAdmission again{SloAdmissionOptions{}};
  ASSERT_TRUE(again.Start(api_).ok());
  proto::AppCall ls;
  ls.set_command("ls");
  auto listed = again.OnCall(ls);
  ASSERT_TRUE(listed.ok());
  EXPECT_NE(listed->text().find("\nalice  lc  600  100  20000  q  S1\n"),
            std::string::npos)
      << listed->text();
  again.OnStats(Stats({}));
  ASSERT_EQ(StageOf("S1").tenant_size(), 1);
  EXPECT_EQ(StageOf("S1").tenant(0).name(), "alice");

  // Unregistered, the stage forgets it.
  ASSERT_TRUE(again
                  .OnCall([] {
                    proto::AppCall c;
                    c.set_command("unregister");
                    c.add_args("alice");
                    return c;
                  }())
                  .ok());
  EXPECT_EQ(StageOf("S1").tenant_size(), 0);
  EXPECT_EQ(api_.state["tenants"], "");
}

TEST_F(SloAppTest, ASpanningSplitFollowsDemandWithHysteresis) {
  ASSERT_TRUE(Call("register", {"alice", "iops=1000", "p95_us=20000", "stage=q",
                                "on=S1+S2"})
                  .ok());
  EXPECT_EQ(StageOf("S1").tenant(0).iops(), 500u);
  // The stats show alice's arrivals: first the baseline, then 900 a second
  // on S1 and 100 on S2.
  StatsSnapshot s = Stats({{"alice.arrived", 0}});
  app_.OnStats(s);
  s = Stats({});
  (*s.hosts[0].stages[0].mutable_counters())["alice.arrived"] = 900;
  (*s.hosts[1].stages[0].mutable_counters())["alice.arrived"] = 100;
  app_.OnStats(s);
  EXPECT_EQ(StageOf("S1").tenant(0).iops(), 900u);
  EXPECT_EQ(StageOf("S2").tenant(0).iops(), 100u);
  // A small move (880/120: 20 IOPS, under 5 % of 1 000) changes nothing.
  const size_t sets = api_.stage_sets.size();
  s = Stats({});
  (*s.hosts[0].stages[0].mutable_counters())["alice.arrived"] = 900 + 880;
  (*s.hosts[1].stages[0].mutable_counters())["alice.arrived"] = 100 + 120;
  app_.OnStats(s);
  EXPECT_EQ(api_.stage_sets.size(), sets);
  EXPECT_EQ(StageOf("S1").tenant(0).iops(), 900u);
}

TEST_F(SloAppTest, AShareCutWhileTheLoadWasElsewhereGrowsBackWhenItWaits) {
  ASSERT_TRUE(Call("register", {"alice", "iops=1000", "p95_us=20000", "stage=q",
                                "on=S1+S2"})
                  .ok());
  app_.OnStats(Stats({{"alice.arrived", 0}, {"alice.deficit_floor_hits", 0}}));
  // All of alice's load on S1: S2 keeps its 5 %.
  StatsSnapshot s = Stats({{"alice.deficit_floor_hits", 0}});
  (*s.hosts[0].stages[0].mutable_counters())["alice.arrived"] = 1000;
  (*s.hosts[1].stages[0].mutable_counters())["alice.arrived"] = 0;
  app_.OnStats(s);
  EXPECT_EQ(StageOf("S2").tenant(0).iops(), 50u);
  // Then it reads on S2 too, 32 requests in flight: only its 50 a second
  // arrive (the rest wait at the caller), but they wait for tokens there.
  s = Stats({});
  (*s.hosts[0].stages[0].mutable_counters())["alice.arrived"] = 1000 + 900;
  (*s.hosts[0].stages[0].mutable_counters())["alice.deficit_floor_hits"] = 0;
  (*s.hosts[1].stages[0].mutable_counters())["alice.arrived"] = 50;
  (*s.hosts[1].stages[0].mutable_counters())["alice.deficit_floor_hits"] = 40;
  app_.OnStats(s);
  // Twice its share there: 900 against 100.
  EXPECT_EQ(StageOf("S1").tenant(0).iops(), 900u);
  EXPECT_EQ(StageOf("S2").tenant(0).iops(), 100u);
}

TEST_F(SloAppTest, ATenantAtItsFloorIsToldToRenegotiate) {
  ASSERT_TRUE(Call("register",
                   {"alice", "iops=100", "p95_us=20000", "stage=q", "on=S1"})
                  .ok());
  for (int i = 0; i <= 3; ++i) {
    app_.OnStats(
        Stats({{"alice.deficit_floor_hits", 10 * i}, {"alice.p95_us", 30000}}));
  }
  auto status = Call("status");
  ASSERT_TRUE(status.ok());
  EXPECT_NE(status->text().find("alice  S1/q  100  0  0  30000  20000  10  "
                                "renegotiate"),
            std::string::npos)
      << status->text();
  EXPECT_NE(status->json().find("\"renegotiate\":true"), std::string::npos)
      << status->json();
  EXPECT_NE(api_.state["decisions"].find("renegotiate alice"),
            std::string::npos)
      << api_.state["decisions"];
  // A quiet interval ends it.
  app_.OnStats(Stats({{"alice.deficit_floor_hits", 30}}));
  status = Call("status");
  EXPECT_EQ(status->text().find("renegotiate"), std::string::npos);
}

TEST_F(SloAppTest, BadCallsAreRefusedClearly) {
  EXPECT_EQ(Call("launch").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Call("register", {"alice", "iops=10", "stage=q", "on=S1"})
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);  // no p95 target
  EXPECT_EQ(Call("register", {"alice", "speed=3"}).status().code(),
            absl::StatusCode::kInvalidArgument);
  api_.unreachable.insert("S9");
  EXPECT_EQ(
      Call("register", {"alice", "iops=10", "p95_us=20000", "stage=q", "on=S9"})
          .status()
          .code(),
      absl::StatusCode::kUnavailable);
  EXPECT_EQ(
      Call("register", {"alice", "iops=10", "p95_us=20000", "stage=x", "on=S1"})
          .status()
          .code(),
      absl::StatusCode::kNotFound);
  EXPECT_EQ(Call("unregister", {"nobody"}).status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace sroute
