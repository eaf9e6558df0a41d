// SPDX-License-Identifier: Apache-2.0
// The stage layer: the registry of kinds, stages written on one line, and
// the control requests that add, change and remove stages of a live host.
#include "stages/stage.h"

#include <atomic>
#include <thread>
#include <vector>

#include "embed/embedded_host.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rules/parser.h"
#include "stages/cache/shards.h"
#include "stages/cache/shards_delegate.h"
#include "stages/host_stages.h"
#include "stages/stage_spec.h"
#include "tests/util/temp_dir.h"

namespace sroute {
namespace {

using ::sroute::testing::ReadWholeFile;
using ::sroute::testing::TempDir;
using ::sroute::testing::WriteWholeFile;
using ::testing::HasSubstr;

IoArgs Dir() {
  IoArgs a;
  a.mode = 0755;
  return a;
}

proto::StageConfig Spec(std::string_view text) {
  auto c = ParseStageSpec(text);
  EXPECT_TRUE(c.ok()) << text << ": " << c.status();
  return c.ok() ? *c : proto::StageConfig();
}

TEST(StageRegistryTest, KnowsTheBuiltInKindsAndRefusesOthersByName) {
  StageRegistry& r = StageRegistry::Global();
  EXPECT_THAT(r.Kinds(), ::testing::Contains("delay"));
  StageEnv env;
  auto made = r.Create(Spec("d=delay:delay_us=5"), env);
  ASSERT_TRUE(made.ok()) << made.status();
  EXPECT_EQ((*made)->config().delay().delay_us(), 5u);

  proto::StageConfig unknown;
  unknown.set_name("x");
  unknown.set_kind("teleport");
  auto bad = r.Create(unknown, env);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(),
              HasSubstr("stage x: unknown kind 'teleport' (kinds: "));
  EXPECT_THAT(bad.status().message(), HasSubstr("delay"));

  // Options of another kind are a mistake, not ignored.
  proto::StageConfig mixed;
  mixed.set_name("m");
  mixed.set_kind("delay");
  mixed.mutable_cache()->set_block_size(4096);
  bad = r.Create(mixed, env);
  EXPECT_THAT(bad.status().message(),
              HasSubstr("options 'cache' given for a stage of kind 'delay'"));

  proto::StageConfig nameless;
  nameless.set_kind("delay");
  EXPECT_THAT(r.Create(nameless, env).status().message(),
              HasSubstr("a stage needs a name"));
  EXPECT_EQ(r.Register("delay", nullptr).code(),
            absl::StatusCode::kAlreadyExists);
}

TEST(StageSpecTest, ParsesKindsOptionsSizesAndNamedEntries) {
  proto::StageConfig c = Spec(
      "cacheA=cache:block_size=4K,partition_bytes=64M,policy=lru,"
      "partition=alice/1G,partition=bob/512K,sequential_cutoff_bytes=3");
  EXPECT_EQ(c.name(), "cacheA");
  EXPECT_EQ(c.kind(), "cache");
  EXPECT_EQ(c.cache().block_size(), 4096u);
  EXPECT_EQ(c.cache().partition_bytes(), 64u << 20);
  EXPECT_EQ(c.cache().policy(), "lru");
  ASSERT_EQ(c.cache().partition_size(), 2);
  EXPECT_EQ(c.cache().partition(0).name(), "alice");
  EXPECT_EQ(c.cache().partition(0).bytes(), 1ull << 30);
  EXPECT_EQ(c.cache().partition(1).bytes(), 512u << 10);
  EXPECT_EQ(c.cache().sequential_cutoff_bytes(), 3u);
  // What listings show reads back as the same options.
  proto::StageConfig again;
  again.set_name("cacheA");
  again.set_kind("cache");
  ASSERT_TRUE(ApplyStageOptions(FormatStageOptions(c), &again).ok());
  EXPECT_EQ(again.SerializeAsString(), c.SerializeAsString());

  EXPECT_EQ(Spec("t=delay").kind(), "delay");
  EXPECT_FALSE(Spec("t=delay").has_delay());
}

TEST(StageSpecTest, BadSpecsSayWhatIsWrong) {
  auto error = [](std::string_view spec) {
    auto c = ParseStageSpec(spec);
    EXPECT_FALSE(c.ok()) << spec;
    return std::string(c.status().message());
  };
  EXPECT_THAT(error("noequals"), HasSubstr("expected NAME=KIND"));
  EXPECT_THAT(error("a b=delay"), HasSubstr("stage name 'a b'"));
  EXPECT_THAT(error("x="), HasSubstr("no kind"));
  EXPECT_THAT(error("x=cache:bogus=1"),
              HasSubstr("unknown option 'bogus' for a cache stage (options: "
                        "block_size"));
  EXPECT_THAT(error("x=cache:block_size=lots"),
              HasSubstr("block_size: expected a number"));
  EXPECT_THAT(error("x=cache:block_size"), HasSubstr("expected key=value"));
  EXPECT_THAT(error("x=cache:partition=alice"),
              HasSubstr("partition: expected NAME/NUMBER"));
  EXPECT_THAT(error("x=delay:delay_us=99999999999"), HasSubstr("too large"));
  EXPECT_THAT(error("x=teleport:speed=1"),
              HasSubstr("stage kind 'teleport' takes no options"));
}

TEST(StageSpecTest, SettingOptionsReplacesNamedEntriesAndKeepsTheRest) {
  proto::StageConfig c =
      Spec("c=cache:partition=alice/1M,partition=bob/2M,policy=lru");
  ASSERT_TRUE(
      ApplyStageOptions("partition=bob/8M,partition=carol/1K", &c).ok());
  ASSERT_EQ(c.cache().partition_size(), 3);
  EXPECT_EQ(c.cache().partition(0).bytes(), 1u << 20);
  EXPECT_EQ(c.cache().partition(1).name(), "bob");
  EXPECT_EQ(c.cache().partition(1).bytes(), 8u << 20);
  EXPECT_EQ(c.cache().partition(2).name(), "carol");
  EXPECT_EQ(c.cache().policy(), "lru");
}

// A live host's stages through control requests, as sroutectl sends them.
class StageControlTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(host_.AddLocalEndpoint("A", dir_.path()).ok());
  }
  absl::Status Do(proto::Stages::Action action, const std::string& name,
                  const std::string& spec, proto::ControlResponse* resp) {
    proto::Stages req;
    req.set_action(action);
    req.mutable_stage()->set_name(name);
    req.set_spec(spec);
    return HandleStagesRequest(host_.sswitch(), req, resp, origin_);
  }
  TempDir dir_;
  EmbeddedHost host_{"h"};
  ControlOrigin origin_ = ControlOrigin::kLocal;
};

// A peer with the cluster secret may change stages, but not make one keep
// data in a directory of its choosing: only the host's own config, flags
// or control socket may name one.
TEST_F(StageControlTest, ANetworkRequestCannotChooseADirectory) {
  proto::ControlResponse resp;
  const std::string tier = dir_ / "tier";
  std::filesystem::create_directories(tier);
  origin_ = ControlOrigin::kNetwork;
  absl::Status s = Do(proto::Stages::ADD, "",
                      "c=cache:tier_dir=" + tier + ",tier_bytes=1M", &resp);
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
  EXPECT_THAT(s.message(), HasSubstr("tier_dir"));
  EXPECT_TRUE(std::filesystem::is_empty(tier)) << "nothing was made there";
  // Without a directory, or keeping the one the host chose, it may.
  ASSERT_TRUE(
      Do(proto::Stages::ADD, "", "n=cache:partition_bytes=1M", &resp).ok());
  origin_ = ControlOrigin::kLocal;
  ASSERT_TRUE(Do(proto::Stages::ADD, "",
                 "c=cache:tier_dir=" + tier + ",tier_bytes=1M", &resp)
                  .ok());
  origin_ = ControlOrigin::kNetwork;
  EXPECT_TRUE(Do(proto::Stages::SET, "c", "partition_bytes=2M", &resp).ok());
  s = Do(proto::Stages::SET, "c", "tier_dir=/etc", &resp);
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
  EXPECT_TRUE(Do(proto::Stages::SET, "c", "tier_dir=" + tier, &resp).ok());
}

TEST_F(StageControlTest, AddListSetRemove) {
  proto::ControlResponse resp;
  ASSERT_TRUE(Do(proto::Stages::ADD, "", "tap=delay:delay_us=0", &resp).ok());
  ASSERT_EQ(resp.stages_size(), 1);
  EXPECT_EQ(resp.stages(0).config().name(), "tap");
  // A stage with a taken name, or of an unknown kind, is refused.
  EXPECT_EQ(Do(proto::Stages::ADD, "", "tap=delay", &resp).code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(Do(proto::Stages::ADD, "", "x=nope", &resp).message(),
              HasSubstr("unknown kind 'nope'"));

  ASSERT_TRUE(host_.LoadRules("<*, *, //A/t/*> -> <IO, stage:tap>").ok());
  ASSERT_TRUE(host_.Call("t", Op::kMkdir, "//A/t", Dir()).ok());
  WriteWholeFile(dir_.path() + "/t/f", "");
  ASSERT_TRUE(
      host_.Write("t", "//A/t/f", 0, std::span<const char>("abc", 3)).ok());
  EXPECT_EQ(ReadWholeFile(dir_.path() + "/t/f"), "abc");

  proto::ControlResponse listed;
  ASSERT_TRUE(Do(proto::Stages::LIST, "", "", &listed).ok());
  ASSERT_EQ(listed.stages_size(), 1);
  EXPECT_EQ(listed.stages(0).ios(), 1u);  // the write
  EXPECT_EQ(listed.stages(0).counters().at("delayed"),
            static_cast<int64_t>(listed.stages(0).ios()));

  // set: options of the same kind; a bad one changes nothing.
  proto::ControlResponse set;
  ASSERT_TRUE(Do(proto::Stages::SET, "tap", "delay_us=7", &set).ok());
  EXPECT_EQ(set.stages(0).config().delay().delay_us(), 7u);
  EXPECT_THAT(
      Do(proto::Stages::SET, "tap", "delay_us=99000000", &resp).message(),
      HasSubstr("stage tap: delay_us is above 10 s"));
  EXPECT_THAT(Do(proto::Stages::SET, "tap", "speed=2", &resp).message(),
              HasSubstr("unknown option 'speed'"));
  proto::ControlResponse relisted;
  ASSERT_TRUE(Do(proto::Stages::LIST, "", "", &relisted).ok());
  EXPECT_EQ(relisted.stages(0).config().delay().delay_us(), 7u);
  EXPECT_EQ(Do(proto::Stages::SET, "nope", "delay_us=1", &resp).code(),
            absl::StatusCode::kNotFound);

  // rm: not while a rule sends IOs there.
  absl::Status in_use = Do(proto::Stages::REMOVE, "tap", "", &resp);
  EXPECT_EQ(in_use.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(in_use.message(), HasSubstr("in use by rule 1"));
  ASSERT_TRUE(host_.sswitch().Delete(1).ok());
  proto::ControlResponse after;
  ASSERT_TRUE(Do(proto::Stages::REMOVE, "tap", "", &after).ok());
  EXPECT_EQ(after.stages_size(), 0);
  EXPECT_TRUE(host_.sswitch().Stages().empty());
}

TEST_F(StageControlTest, ChangesUnderWritersLoseNothing) {
  proto::ControlResponse resp;
  ASSERT_TRUE(Do(proto::Stages::ADD, "", "tap=delay:delay_us=200", &resp).ok());
  ASSERT_TRUE(host_.Call("t", Op::kMkdir, "//A/w", Dir()).ok());
  for (int w = 0; w < 4; ++w) {
    WriteWholeFile(dir_.path() + "/w/f" + std::to_string(w), "");
  }
  ASSERT_TRUE(host_.LoadRules("<*, *, //A/w/*> -> <IO, stage:tap>").ok());
  constexpr int kWriters = 4, kWrites = 200;
  std::atomic<bool> failed{false};
  std::vector<std::thread> writers;
  for (int w = 0; w < kWriters; ++w) {
    writers.emplace_back([&, w] {
      const std::string file = "//A/w/f" + std::to_string(w);
      for (int i = 0; i < kWrites && !failed; ++i) {
        const std::string block(16, static_cast<char>('a' + (i + w) % 26));
        auto n = host_.Write("t", file, i * 16,
                             std::span<const char>(block.data(), 16));
        if (!n.ok() || *n != 16) failed = true;
      }
    });
  }
  // Changes while the writers run: each parks their IOs and drains the
  // stage (200 us in it) first.
  for (int round = 0; round < 30; ++round) {
    ASSERT_TRUE(Do(proto::Stages::SET, "tap",
                   "delay_us=" + std::to_string(round % 2 ? 50 : 300), &resp)
                    .ok());
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  for (auto& t : writers) t.join();
  EXPECT_FALSE(failed.load());
  proto::ControlResponse listed;
  ASSERT_TRUE(Do(proto::Stages::LIST, "", "", &listed).ok());
  EXPECT_EQ(listed.stages(0).ios(), static_cast<uint64_t>(kWriters * kWrites));
  for (int w = 0; w < kWriters; ++w) {
    std::string want;
    for (int i = 0; i < kWrites; ++i) {
      want += std::string(16, static_cast<char>('a' + (i + w) % 26));
    }
    EXPECT_TRUE(ReadWholeFile(dir_.path() + "/w/f" + std::to_string(w)) == want)
        << "writer " << w;
  }
  EXPECT_EQ(host_.sswitch().in_flight(), 0);
  ASSERT_TRUE(StopStages(host_.sswitch()).ok());
}

}  // namespace
}  // namespace sroute

namespace sroute {
namespace {

TEST(ShardsDelegateTest, SamplesReadBlocksAndEmitsThemWithTheCount) {
  (void)StageRegistry::Global();  // registers the delegate
  auto rule =
      ParseRule("<*, r, //A/*> -> shards(rate=1, block=4096); <IO, //A/*>");
  ASSERT_TRUE(rule.ok()) << rule.status();
  auto d = DelegateRegistry::Global().Create(*rule->delegate, *rule);
  ASSERT_TRUE(d.ok()) << d.status();
  IoHeader h{"alice", "", Op::kRead, "//A/f", 4096, 8192};
  struct NoContext : DelegateContext {
    absl::StatusOr<std::vector<uint64_t>> Update(
        std::vector<Rule>, const std::vector<uint64_t>&) override {
      return absl::UnimplementedError("");
    }
    absl::Status Delete(const HeaderPattern&) override {
      return absl::UnimplementedError("");
    }
    absl::Status Quiesce(const HeaderPattern&, bool) override {
      return absl::UnimplementedError("");
    }
    absl::Status Drain(const HeaderPattern&, absl::Duration) override {
      return absl::UnimplementedError("");
    }
    const Rule& rule() const override { return r; }
    uint64_t rule_id() const override { return 1; }
    std::shared_ptr<void> SharedState(
        const std::string&, std::function<std::shared_ptr<void>()>) override {
      return nullptr;
    }
    Rule r;
  } ctx;
  Decision dec = (*d)->OnRequest(h, ctx);
  ASSERT_TRUE(dec.emit.has_value());
  auto s = ParseShardsSample(*dec.emit);
  ASSERT_TRUE(s.ok()) << s.status() << ": " << *dec.emit;
  EXPECT_EQ(s->rate, 1.0);
  EXPECT_EQ(s->refs, 2u);  // blocks 1 and 2
  EXPECT_EQ(s->keys, (std::vector<uint64_t>{BlockKey("//A/f", 1),
                                            BlockKey("//A/f", 2)}));
  // Writes are not references unless asked for; the count goes on.
  h.op = Op::kWrite;
  EXPECT_FALSE((*d)->OnRequest(h, ctx).emit.has_value());
  h.op = Op::kRead;
  h.length = 1;
  s = ParseShardsSample(*(*d)->OnRequest(h, ctx).emit);
  EXPECT_EQ(s->refs, 3u);

  // At 1 %, about 1 % of blocks are kept.
  rule = ParseRule("<*, r, //A/*> -> shards(rate=0.01); <IO, //A/*>");
  d = DelegateRegistry::Global().Create(*rule->delegate, *rule);
  ASSERT_TRUE(d.ok());
  size_t kept = 0;
  for (uint64_t b = 0; b < 100000; ++b) {
    IoHeader one{"bob", "", Op::kRead, "//A/big", b * 4096, 4096};
    auto e = (*d)->OnRequest(one, ctx).emit;
    if (e) kept += ParseShardsSample(*e)->keys.size();
  }
  EXPECT_GT(kept, 800u);
  EXPECT_LT(kept, 1200u);

  for (const char* bad : {"shards(rate=2)", "shards(block=1000)",
                          "shards(speed=1)", "shards(writes=yes)"}) {
    rule = ParseRule(std::string("<*, r, //A/*> -> ") + bad + "; <IO, //A/*>");
    ASSERT_TRUE(rule.ok()) << bad << ": " << rule.status();
    EXPECT_FALSE(DelegateRegistry::Global().Create(*rule->delegate, *rule).ok())
        << bad;
  }
}

}  // namespace
}  // namespace sroute
