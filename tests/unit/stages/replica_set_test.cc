// The replica_set stage (stages/replica_set/), first slice: changes to
// every member, reads from one with failover, members leaving the set.
#include <atomic>
#include <chrono>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "sswitch/host.h"
#include "sswitch/local_endpoint.h"
#include "stages/stage.h"
#include "stages/stage_spec.h"
#include "tests/util/temp_dir.h"
#include "util/errno_status.h"

namespace sroute {
namespace {

using ::sroute::testing::ReadWholeFile;
using ::sroute::testing::TempDir;
using ::sroute::testing::WriteWholeFile;

// A member whose disk is gone: every IO fails with EIO.
class DeadEndpoint : public Endpoint {
 public:
  void Submit(Io* io, std::string_view) override {
    ++ios;
    io->Complete(ErrnoStatus(EIO, "disk gone"));
  }
  std::atomic<int> ios{0};
};

// A member that takes a random 0-100 us before each IO (a busier disk):
// copies of concurrent changes reach it in other orders than the others.
class JitterEndpoint : public Endpoint {
 public:
  explicit JitterEndpoint(std::shared_ptr<Endpoint> inner, int min_us = 0)
      : inner_(std::move(inner)), min_us_(min_us) {}
  void Submit(Io* io, std::string_view path) override {
    thread_local std::mt19937 rng(std::random_device{}());
    std::this_thread::sleep_for(
        std::chrono::microseconds(min_us_ + rng() % 100));
    inner_->Submit(io, path);
  }

 private:
  std::shared_ptr<Endpoint> inner_;
  const int min_us_;
};

class ReplicaSetTest : public ::testing::Test {
 protected:
  // Members R1..R3 (directories, or `dead` for R1), //home/* through the
  // stage.
  void Start(const std::string& ack, bool dead_first = false,
             bool jitter_second = false, bool slow_first = false) {
    if (dead_first) {
      ASSERT_TRUE(host_.AddEndpoint("R1", dead_).ok());
    } else if (slow_first) {
      auto r1 = LocalEndpoint::Open(r_[0].path());
      ASSERT_TRUE(r1.ok()) << r1.status();
      ASSERT_TRUE(host_
                      .AddEndpoint("R1", std::make_shared<JitterEndpoint>(
                                             *r1, /*min_us=*/2000))
                      .ok());
    } else {
      ASSERT_TRUE(host_.AddLocalEndpoint("R1", r_[0].path()).ok());
    }
    if (jitter_second) {
      auto r2 = LocalEndpoint::Open(r_[1].path());
      ASSERT_TRUE(r2.ok()) << r2.status();
      ASSERT_TRUE(
          host_.AddEndpoint("R2", std::make_shared<JitterEndpoint>(*r2)).ok());
    } else {
      ASSERT_TRUE(host_.AddLocalEndpoint("R2", r_[1].path()).ok());
    }
    ASSERT_TRUE(host_.AddLocalEndpoint("R3", r_[2].path()).ok());
    proto::StageConfig config;
    config.set_name("rs");
    config.set_kind("replica_set");
    for (const char* m : {"R1", "R2", "R3"}) {
      config.mutable_replica_set()->add_member(m);
    }
    config.mutable_replica_set()->set_ack(ack);
    auto stage =
        StageRegistry::Global().Create(config, StageEnv{&host_.sswitch()});
    ASSERT_TRUE(stage.ok()) << stage.status();
    stage_ = *stage;
    ASSERT_TRUE(host_.AddStage("rs", stage_).ok());
    ASSERT_TRUE(host_.LoadRules("<*, *, //home/*> -> <IO, stage:rs>\n").ok());
  }
  std::string ReadFile(const std::string& file, absl::Status* status) {
    std::string buf(64, '\0');
    auto n = host_.Read("t", file, 0, std::span<char>(buf));
    *status = n.status();
    return n.ok() ? buf.substr(0, *n) : "";
  }
  int64_t Counter(const std::string& name) {
    proto::StageStats stats;
    stage_->Report(&stats);
    auto it = stats.counters().find(name);
    return it == stats.counters().end() ? -1 : it->second;
  }

  TempDir r_[3];
  Host host_{"h"};
  std::shared_ptr<DeadEndpoint> dead_ = std::make_shared<DeadEndpoint>();
  std::shared_ptr<HostStage> stage_;
};

// A write lands on every member; a read answers from the primary.
TEST_F(ReplicaSetTest, WritesReachEveryMemberReadsThePrimary) {
  Start("all");
  for (TempDir& d : r_) WriteWholeFile(d / "f", "");
  auto w = host_.Write("t", "//home/f", 0, std::span<const char>("abcd", 4));
  ASSERT_TRUE(w.ok()) << w.status();
  for (TempDir& d : r_) EXPECT_EQ(ReadWholeFile(d / "f"), "abcd");
  WriteWholeFile(r_[1] / "f", "R2's");  // only the primary is read
  absl::Status s;
  EXPECT_EQ(ReadFile("//home/f", &s), "abcd");
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(Counter("members_in"), 3);
}

// The op's own answer (no such file on any member) is the caller's; no
// member leaves the set for it.
TEST_F(ReplicaSetTest, TheOpsOwnErrorIsNotAMembersFailure) {
  Start("all");
  absl::Status s;
  ReadFile("//home/none", &s);
  EXPECT_EQ(ErrnoOf(s), ENOENT) << s;
  EXPECT_EQ(Counter("members_in"), 3);
  EXPECT_EQ(Counter("failovers"), 0);
}

// A dead primary: the read goes on to the next member, the primary leaves
// the set (later reads do not try it); a change needs all three members
// with ack=all and fails, loudly.
TEST_F(ReplicaSetTest, ADeadMemberLeavesTheSetAndReadsFailOver) {
  Start("all", /*dead_first=*/true);
  WriteWholeFile(r_[1] / "f", "good");
  WriteWholeFile(r_[2] / "f", "good");
  absl::Status s;
  EXPECT_EQ(ReadFile("//home/f", &s), "good");
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(Counter("failovers"), 1);
  EXPECT_EQ(Counter("member.R1.in"), 0);
  const int dead_ios = dead_->ios.load();
  EXPECT_EQ(ReadFile("//home/f", &s), "good");
  EXPECT_EQ(dead_->ios.load(), dead_ios);  // not tried again
  auto w = host_.Write("t", "//home/f", 0, std::span<const char>("next", 4));
  EXPECT_EQ(ErrnoOf(w.status()), EIO) << w.status();
  EXPECT_NE(w.status().message().find("2 of 3 members"), std::string::npos)
      << w.status();
}

// Setting the stage again (same members, another read policy) does not
// bring a member that left back: it may have missed changes.
TEST_F(ReplicaSetTest, AMemberThatLeftStaysOutWhenTheStageIsSetAgain) {
  Start("quorum", /*dead_first=*/true);
  WriteWholeFile(r_[1] / "f", "good");
  absl::Status s;
  ReadFile("//home/f", &s);
  ASSERT_EQ(Counter("member.R1.in"), 0);
  proto::StageConfig next = stage_->config();
  next.mutable_replica_set()->set_read("random");
  ASSERT_TRUE(stage_->Reconfigure(next).ok());
  EXPECT_EQ(Counter("member.R1.in"), 0);
  EXPECT_EQ(Counter("member.R2.in"), 1);
}

// Concurrent overlapping writes (and truncates) leave every member
// identical: each range's changes land in one order everywhere.
TEST_F(ReplicaSetTest, OverlappingWritesLandInOneOrderOnEveryMember) {
  Start("all", /*dead_first=*/false, /*jitter_second=*/true);
  for (TempDir& d : r_) WriteWholeFile(d / "f", std::string(72 << 10, '.'));
  for (int seed = 0; seed < 5; ++seed) {
    std::vector<std::thread> writers;
    for (int t = 0; t < 4; ++t) {
      writers.emplace_back([&, t] {
        std::mt19937 rng(seed * 16 + t);
        for (int i = 0; i < 200; ++i) {
          const uint64_t off = rng() % (64 << 10);
          const std::string data(1 + rng() % 8192,
                                 static_cast<char>('a' + (t * 7 + i) % 26));
          if (i % 50 == 49) {
            IoArgs args;
            args.size = off;
            args.truncate_mode = TruncateMode::kExact;
            (void)host_.Call("t", Op::kTruncate, "//home/f", args);
            continue;
          }
          auto w = host_.Write("t", "//home/f", off,
                               std::span<const char>(data.data(), data.size()));
          ASSERT_TRUE(w.ok()) << w.status();
        }
      });
    }
    for (std::thread& w : writers) w.join();
    const std::string first = ReadWholeFile(r_[0] / "f");
    EXPECT_EQ(ReadWholeFile(r_[1] / "f"), first) << "seed " << seed;
    EXPECT_EQ(ReadWholeFile(r_[2] / "f"), first) << "seed " << seed;
  }
}

// least_loaded: a member whose reads take 2 ms gets few of them once its
// time is known.
TEST_F(ReplicaSetTest, LeastLoadedReadsAvoidASlowMember) {
  Start("all", /*dead_first=*/false, /*jitter_second=*/false,
        /*slow_first=*/true);
  proto::StageConfig next = stage_->config();
  next.mutable_replica_set()->set_read("least_loaded");
  ASSERT_TRUE(stage_->Reconfigure(next).ok());
  for (TempDir& d : r_) WriteWholeFile(d / "f", "same");
  absl::Status s;
  for (int i = 0; i < 100; ++i) {
    ASSERT_EQ(ReadFile("//home/f", &s), "same");
  }
  EXPECT_LE(Counter("member.R1.reads"), 5);
  EXPECT_EQ(Counter("member.R2.reads") + Counter("member.R3.reads") +
                Counter("member.R1.reads"),
            100);
  EXPECT_GE(Counter("member.R1.read_us"), 1000);
}

// weighted: reads in proportion to the weights (3:1:0 here), a member
// with weight 0 never read while the others are in the set.
TEST_F(ReplicaSetTest, WeightedReadsFollowTheWeights) {
  Start("all");
  proto::StageConfig next = stage_->config();
  next.mutable_replica_set()->set_read("weighted");
  for (uint32_t w : {3u, 1u, 0u}) next.mutable_replica_set()->add_weight(w);
  ASSERT_TRUE(stage_->Reconfigure(next).ok());
  for (TempDir& d : r_) WriteWholeFile(d / "f", "same");
  absl::Status s;
  for (int i = 0; i < 400; ++i) ASSERT_EQ(ReadFile("//home/f", &s), "same");
  EXPECT_EQ(Counter("member.R3.reads"), 0);
  // 300 expected of 400: far from 200 (even) and 400 (all), whatever the
  // draw (a binomial's deviation is about 9).
  EXPECT_GT(Counter("member.R1.reads"), 250);
  EXPECT_LT(Counter("member.R1.reads"), 350);
  next.mutable_replica_set()->clear_weight();
  EXPECT_NE(stage_->Reconfigure(next).message().find("needs a weight"),
            std::string::npos);
}

// With ack=quorum two of three members are enough.
TEST_F(ReplicaSetTest, AQuorumWriteGoesOnWithoutOneMember) {
  Start("quorum", /*dead_first=*/true);
  WriteWholeFile(r_[1] / "f", "");
  WriteWholeFile(r_[2] / "f", "");
  auto w = host_.Write("t", "//home/f", 0, std::span<const char>("q", 1));
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(ReadWholeFile(r_[1] / "f"), "q");
  EXPECT_EQ(ReadWholeFile(r_[2] / "f"), "q");
  EXPECT_EQ(Counter("member.R1.in"), 0);
}

// Bad options are refused, naming the option.
TEST_F(ReplicaSetTest, BadOptionsAreRefused) {
  proto::StageConfig config;
  config.set_name("rs");
  config.set_kind("replica_set");
  auto st = StageRegistry::Global().Create(config, StageEnv{&host_.sswitch()});
  EXPECT_NE(st.status().message().find("at least one member"),
            std::string::npos)
      << st.status();
  config.mutable_replica_set()->add_member("A");
  config.mutable_replica_set()->set_primary("B");
  st = StageRegistry::Global().Create(config, StageEnv{&host_.sswitch()});
  EXPECT_NE(st.status().message().find("primary B is not a member"),
            std::string::npos)
      << st.status();
  config.mutable_replica_set()->clear_primary();
  config.mutable_replica_set()->set_read("fastest");
  st = StageRegistry::Global().Create(config, StageEnv{&host_.sswitch()});
  EXPECT_NE(st.status().message().find("read 'fastest'"), std::string::npos)
      << st.status();
}

// On the command line: --stage rs=replica_set:member=S1,member=S2,...
TEST(ReplicaSetSpecTest, MembersAreRepeatedKeys) {
  auto config =
      ParseStageSpec("rs=replica_set:member=S1,member=S2,member=S3,ack=quorum");
  ASSERT_TRUE(config.ok()) << config.status();
  ASSERT_EQ(config->replica_set().member_size(), 3);
  EXPECT_EQ(config->replica_set().member(2), "S3");
  EXPECT_EQ(config->replica_set().ack(), "quorum");
}

}  // namespace
}  // namespace sroute
