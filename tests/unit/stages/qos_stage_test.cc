// SPDX-License-Identifier: Apache-2.0
// The qos stage in a host: its options on one line and their errors, a
// reserved tenant served ahead of a best-effort one queued before it, live
// changes with IOs queued, and nothing lost.
#include "stages/qos/qos_stage.h"

#include <atomic>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "embed/embedded_host.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "stages/host_stages.h"
#include "stages/stage_spec.h"
#include "tests/util/temp_dir.h"
#include "tests/util/wait.h"

namespace sroute {
namespace {

using ::sroute::testing::Eventually;
using ::sroute::testing::TempDir;
using ::sroute::testing::WriteWholeFile;
using ::testing::HasSubstr;

TEST(QosStageSpecTest, TenantsOnOneLine) {
  auto c = ParseStageSpec(
      "q=qos:tokens_per_s=8400,write_cost=12,tenant=a/lc/2400/80/5000,"
      "tenant=b/lc/100,tenant=c");
  ASSERT_TRUE(c.ok()) << c.status();
  const proto::QosOptions& o = c->qos();
  EXPECT_EQ(o.tokens_per_s(), 8400u);
  EXPECT_EQ(o.write_cost(), 12u);
  ASSERT_EQ(o.tenant_size(), 3);
  EXPECT_EQ(o.tenant(0).qos_class(), "lc");
  EXPECT_EQ(o.tenant(0).iops(), 2400u);
  EXPECT_EQ(o.tenant(0).read_percent(), 80u);
  EXPECT_EQ(o.tenant(0).p95_us(), 5000u);
  EXPECT_FALSE(o.tenant(1).has_read_percent()) << "left out: the default";
  EXPECT_EQ(o.tenant(2).qos_class(), "");
  // Setting a tenant again replaces it, the others stay.
  ASSERT_TRUE(ApplyStageOptions("tenant=b/lc/300", &*c).ok());
  EXPECT_EQ(c->qos().tenant(1).iops(), 300u);
  EXPECT_EQ(c->qos().tenant_size(), 3);
  // Written back the same way.
  EXPECT_THAT(FormatStageOptions(*c), HasSubstr("tenant=a/lc/2400/80/5000"));
  EXPECT_THAT(ParseStageSpec("q=qos:tenant=a/lc/1/2/3/4").status().message(),
              HasSubstr("expected name/qos_class/iops/read_percent/p95_us"));
}

TEST(QosStageSpecTest, BadOptionsAreRefusedNamingThem) {
  EmbeddedHost host("h");
  const struct {
    std::string spec, says;
  } cases[] = {
      {"q=qos:write_cost=0", "write_cost 0 is not in 1..1000"},
      {"q=qos:tenant=a/gold", "class 'gold' is not lc or be"},
      {"q=qos:tenant=a/lc", "a latency-critical tenant needs iops"},
      {"q=qos:tenant=a/lc/10/101", "read_percent 101 is above 100"},
      {"q=qos:by=uid", "by 'uid' is not tenant or rule"},
  };
  for (const auto& c : cases) {
    auto config = ParseStageSpec(c.spec);
    ASSERT_TRUE(config.ok()) << c.spec << ": " << config.status();
    const absl::Status s = AddConfiguredStage(host.sswitch(), *config);
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << c.spec << ": " << s;
    EXPECT_THAT(s.message(), HasSubstr(c.says)) << c.spec;
  }
  // A config file may name a tenant twice (one line replaces it).
  proto::StageConfig twice = *ParseStageSpec("q=qos:tenant=a");
  *twice.mutable_qos()->add_tenant() = twice.qos().tenant(0);
  const absl::Status s = AddConfiguredStage(host.sswitch(), twice);
  EXPECT_THAT(s.message(), HasSubstr("tenant a is given twice")) << s;
}

class QosStageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(host_.AddLocalEndpoint("A", dir_.path()).ok());
    for (int i = 0; i < kFiles; ++i) {
      WriteWholeFile(dir_ / ("f" + std::to_string(i)),
                     std::string(4096, static_cast<char>('a' + i % 26)));
    }
  }
  absl::Status Stages(proto::Stages::Action action, const std::string& name,
                      const std::string& spec) {
    proto::Stages req;
    req.set_action(action);
    req.mutable_stage()->set_name(name);
    req.set_spec(spec);
    proto::ControlResponse resp;
    return HandleStagesRequest(host_.sswitch(), req, &resp,
                               ControlOrigin::kLocal);
  }
  std::map<std::string, int64_t> Counters() {
    for (const SSwitch::StageInfo& info : host_.sswitch().Stages()) {
      proto::StageStats st;
      if (auto* hs = dynamic_cast<HostStage*>(info.stage.get())) {
        hs->Report(&st);
        return {st.counters().begin(), st.counters().end()};
      }
    }
    return {};
  }
  // Reads file i as `tenant`; true when it read the file's bytes.
  bool Read(const std::string& tenant, int i) {
    std::string buf(4096, '\0');
    auto n = host_.Read(tenant, "//A/f" + std::to_string(i), 0,
                        std::span<char>(buf));
    return n.ok() && *n == 4096 &&
           buf == std::string(4096, static_cast<char>('a' + i % 26));
  }

  static constexpr int kFiles = 40;
  TempDir dir_;
  EmbeddedHost host_{"h"};
};

// A device of 50 tokens/s with 40 reserved for "lc": 40 reads queued by a
// best-effort tenant first (its share: 10/s, 4 s for all) do not hold back
// lc's 10 reads (a quarter of a second); a live change of the rate lets
// the rest go at once; every read gets its bytes.
TEST_F(QosStageTest, AReservedTenantOvertakesABestEffortQueue) {
  ASSERT_TRUE(Stages(proto::Stages::ADD, "",
                     "q=qos:tokens_per_s=50,tenant=lc/lc/40/100/100000")
                  .ok());
  ASSERT_TRUE(host_.LoadRules("<*, *, //A/*> -> <IO, stage:q>").ok());

  std::atomic<int> be_done{0}, be_bad{0};
  std::vector<std::thread> be;
  for (int t = 0; t < 8; ++t) {
    be.emplace_back([&, t] {
      for (int i = t; i < kFiles; i += 8) {
        if (!Read("be", i)) ++be_bad;
        ++be_done;
      }
    });
  }
  ASSERT_TRUE(Eventually([&] { return Counters()["be.queued"] >= 4; }))
      << "the best-effort reads did not queue";
  for (int i = 0; i < 10; ++i) EXPECT_TRUE(Read("lc", i)) << i;
  EXPECT_LT(be_done.load(), kFiles)
      << "the reserved tenant waited behind the best-effort queue";
  EXPECT_EQ(Counters()["lc.completed"], 10);
  EXPECT_EQ(Counters()["lc.lc"], 1);
  EXPECT_EQ(Counters()["lc.token_rate"], 40);

  // Unlimited, live: the queue goes on without a drain of the stage.
  ASSERT_TRUE(Stages(proto::Stages::SET, "q", "tokens_per_s=0").ok());
  for (std::thread& t : be) t.join();
  EXPECT_EQ(be_done.load(), kFiles);
  EXPECT_EQ(be_bad.load(), 0) << "a read lost its bytes";
  EXPECT_EQ(Counters()["be.completed"], kFiles);
  EXPECT_EQ(Counters()["queued"], 0);
}

// Writes through the stage land whole while tenants' classes change under
// them.
// Without tokens_per_s the rate is the device curve's at the strictest LC
// target, and follows the targets as tenants change, live.
TEST_F(QosStageTest, ACurveGivesTheRateAtTheStrictestTarget) {
  ASSERT_TRUE(Stages(proto::Stages::ADD, "",
                     "q=qos:curve=20000/4000/8000,curve=2000/1000/4000,"
                     "tenant=a/lc/10/100/20000")
                  .ok());
  EXPECT_EQ(Counters()["tokens_per_s"], 4000);
  ASSERT_TRUE(Stages(proto::Stages::SET, "q", "tenant=b/lc/10/100/2000").ok());
  EXPECT_EQ(Counters()["tokens_per_s"], 1000);
  // Between points: linear (5 ms: a sixth of the way from 2 to 20 ms).
  ASSERT_TRUE(Stages(proto::Stages::SET, "q", "tenant=b/lc/10/100/5000").ok());
  EXPECT_EQ(Counters()["tokens_per_s"], 1500);
  // A curve whose rate falls as the target loosens is refused.
  const absl::Status s = Stages(proto::Stages::SET, "q", "curve=50000/100/0");
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_EQ(Counters()["tokens_per_s"], 1500);
}

TEST_F(QosStageTest, WritesLandWhileTheOptionsChange) {
  ASSERT_TRUE(Stages(proto::Stages::ADD, "",
                     "q=qos:tokens_per_s=2000,tenant=w/lc/100/0/50000")
                  .ok());
  ASSERT_TRUE(host_.LoadRules("<*, *, //A/*> -> <IO, stage:q>").ok());
  std::atomic<bool> stop{false};
  std::atomic<int> changes{0};
  std::thread changer([&] {
    for (int i = 0; !stop; ++i) {
      const std::string spec =
          i % 2 == 0 ? "tenant=w/be,write_cost=20" : "tenant=w/lc/100/0/50000";
      EXPECT_TRUE(Stages(proto::Stages::SET, "q", spec).ok());
      ++changes;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  });
  for (int i = 0; i < kFiles; ++i) {
    const std::string data(4096, static_cast<char>('A' + i % 26));
    auto n = host_.Write("w", "//A/f" + std::to_string(i), 0,
                         std::span<const char>(data.data(), data.size()));
    ASSERT_TRUE(n.ok()) << n.status();
  }
  stop = true;
  changer.join();
  EXPECT_GT(changes.load(), 0);
  for (int i = 0; i < kFiles; ++i) {
    EXPECT_EQ(testing::ReadWholeFile(dir_ / ("f" + std::to_string(i))),
              std::string(4096, static_cast<char>('A' + i % 26)));
  }
  EXPECT_EQ(Counters()["w.bytes_written"], int64_t{kFiles} * 4096);
}

}  // namespace
}  // namespace sroute
