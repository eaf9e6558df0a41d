// SPDX-License-Identifier: Apache-2.0
// Over 1 000 lines: independent cases on one fixture (a replica set over
// scratch members), which each file of a split would repeat.
// The replica_set stage (stages/replica_set/), first slice: changes to
// every member, reads from one with failover, members leaving the set.
#include <fcntl.h>
#include <stdio.h>  // RENAME_EXCHANGE
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "embed/embedded_host.h"
#include "endpoints/local_endpoint.h"
#include "gtest/gtest.h"
#include "stages/replica_set/region_log.h"
#include "stages/stage.h"
#include "stages/stage_spec.h"
#include "stages/steering/watch.h"
#include "tests/util/profiles.h"
#include "tests/util/temp_dir.h"
#include "util/errno_status.h"
#include "util/mutex.h"
#include "util/strings.h"

namespace sroute {
namespace {

using ::sroute::testing::ReadWholeFile;
using ::sroute::testing::TempDir;
using ::sroute::testing::WriteWholeFile;

// A member whose disk can go (every IO fails with EIO) and come back.
class SwitchEndpoint : public Endpoint {
 public:
  SwitchEndpoint(std::shared_ptr<Endpoint> inner, bool dead)
      : inner_(std::move(inner)), dead(dead) {}
  void Submit(Io* io, std::string_view path) override {
    if (dead.load()) {
      ++ios;
      io->Complete(ErrnoStatus(EIO, "disk gone"));
      return;
    }
    inner_->Submit(io, path);
  }
  std::shared_ptr<Endpoint> inner_;
  std::atomic<bool> dead;
  std::atomic<int> ios{0};
};

// A member that hangs (a stopped server): while `hang`, its reads wait
// until Release() sends them on.
class HangEndpoint : public Endpoint {
 public:
  explicit HangEndpoint(std::shared_ptr<Endpoint> inner)
      : inner_(std::move(inner)) {}
  void Submit(Io* io, std::string_view path) override {
    {
      MutexLock l(&mu_);
      if (hang && io->header.op == Op::kRead) {
        held_.emplace_back(io, std::string(path));
        return;
      }
    }
    inner_->Submit(io, path);
  }
  void Release() {
    std::vector<std::pair<Io*, std::string>> held;
    {
      MutexLock l(&mu_);
      hang = false;
      held.swap(held_);
    }
    for (auto& [io, path] : held) inner_->Submit(io, path);
  }
  size_t held() {
    MutexLock l(&mu_);
    return held_.size();
  }
  Mutex mu_;
  bool hang ABSL_GUARDED_BY(mu_) = false;

 private:
  std::shared_ptr<Endpoint> inner_;
  std::vector<std::pair<Io*, std::string>> held_ ABSL_GUARDED_BY(mu_);
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
  // Members R1..R3 (directories; R1 behind a switch, dead if `dead_first`),
  // //home/* through the stage.
  void Start(const std::string& ack, bool dead_first = false,
             bool jitter_second = false, bool slow_first = false) {
    ack_ = ack;
    auto r1 = LocalEndpoint::Open(r_[0].path());
    ASSERT_TRUE(r1.ok()) << r1.status();
    std::shared_ptr<Endpoint> first = *r1;
    if (slow_first) {
      first = std::make_shared<JitterEndpoint>(first, /*min_us=*/2000);
    }
    dead_ = std::make_shared<SwitchEndpoint>(first, dead_first);
    jitter_second_ = jitter_second;
    MakeHost();
  }
  // A host with the members and the stage (again: a restart, the log kept).
  void MakeHost() {
    stage_.reset();
    host_ = std::make_unique<EmbeddedHost>("h");
    ASSERT_TRUE(host_->AddEndpoint("R1", dead_).ok());
    auto r2 = LocalEndpoint::Open(r_[1].path());
    ASSERT_TRUE(r2.ok()) << r2.status();
    std::shared_ptr<Endpoint> second = *r2;
    if (jitter_second_) second = std::make_shared<JitterEndpoint>(second);
    second_ = std::make_shared<SwitchEndpoint>(second, false);
    ASSERT_TRUE(host_->AddEndpoint("R2", second_).ok());
    ASSERT_TRUE(host_->AddLocalEndpoint("R3", r_[2].path()).ok());
    proto::StageConfig config;
    config.set_name("rs");
    config.set_kind("replica_set");
    for (const char* m : {"R1", "R2", "R3"}) {
      config.mutable_replica_set()->add_member(m);
    }
    config.mutable_replica_set()->set_ack(ack_);
    config.mutable_replica_set()->set_probe_ms(20);
    config.mutable_replica_set()->set_region_size(64 << 10);
    if (!placement_.empty()) {
      config.mutable_replica_set()->set_placement(placement_);
      config.mutable_replica_set()->set_copies(2);
      config.mutable_replica_set()->add_write_member("R1");
      config.mutable_replica_set()->add_write_member("R2");
    }
    auto stage = StageRegistry::Global().Create(config, Env());
    ASSERT_TRUE(stage.ok()) << stage.status();
    stage_ = *stage;
    ASSERT_TRUE(host_->AddStage("rs", stage_).ok());
    ASSERT_TRUE(host_->LoadRules("<*, *, //home/*> -> <IO, stage:rs>\n").ok());
  }
  void StopHost() {
    ASSERT_TRUE(stage_->Stop().ok());
    stage_.reset();
    host_.reset();
  }
  // The stage's threads (probes, resync) call into the host's sSwitch: they
  // stop before it goes (the fixture's own reference would otherwise keep
  // them running past it).
  void TearDown() override {
    if (stage_ != nullptr) (void)stage_->Stop();
    stage_.reset();
    host_.reset();
  }
  StageEnv Env() {
    StageEnv env;
    env.sswitch = &host_->sswitch();
    env.state_dir = state_path_.empty() ? state_.path() : state_path_;
    return env;
  }
  std::string ReadFile(const std::string& file, absl::Status* status,
                       uint64_t offset = 0, size_t size = 64) {
    std::string buf(size, '\0');
    auto n = host_->Read("t", file, offset, std::span<char>(buf));
    *status = n.status();
    return n.ok() ? buf.substr(0, *n) : "";
  }
  absl::Status Write(const std::string& file, uint64_t offset,
                     const std::string& data) {
    return host_
        ->Write("t", file, offset,
                std::span<const char>(data.data(), data.size()))
        .status();
  }
  // Makes `file` on every member, through the stage.
  void CreateThroughStage(const std::string& file) {
    IoArgs args;
    args.mode = 0644;
    args.open_flags = O_CREAT | O_WRONLY;
    auto made = host_->Call("t", Op::kCreate, file, args);
    ASSERT_TRUE(made.ok()) << made.status();
  }
  int64_t Counter(const std::string& name) {
    proto::StageStats stats;
    stage_->Report(&stats);
    auto it = stats.counters().find(name);
    return it == stats.counters().end() ? -1 : it->second;
  }
  // Waits (up to 20 s) until `name` counts `want`.
  bool WaitCounter(const std::string& name, int64_t want) {
    for (int i = 0; i < 2000; ++i) {
      if (Counter(name) == want) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }

  TempDir r_[3];
  TempDir state_;
  std::string state_path_;  // instead of state_ if set
  std::string ack_;
  std::string placement_;  // the stage's, if set before Start
  bool jitter_second_ = false;
  std::shared_ptr<SwitchEndpoint> dead_, second_;
  std::shared_ptr<HostStage> stage_;
  std::unique_ptr<EmbeddedHost> host_;
};

// A write lands on every member; a read answers from the primary.
TEST_F(ReplicaSetTest, WritesReachEveryMemberReadsThePrimary) {
  Start("all");
  for (TempDir& d : r_) WriteWholeFile(d / "f", "");
  auto w = host_->Write("t", "//home/f", 0, std::span<const char>("abcd", 4));
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
  auto w = host_->Write("t", "//home/f", 0, std::span<const char>("next", 4));
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
            (void)host_->Call("t", Op::kTruncate, "//home/f", args);
            continue;
          }
          auto w =
              host_->Write("t", "//home/f", off,
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

// A profile no device meets: every window of a watch with it is congested.
std::shared_ptr<const Profile> TooFastProfile() {
  auto made = Profile::Make(testing::UnmeetableProfile("R1"));
  EXPECT_TRUE(made.ok()) << made.status();
  return std::make_shared<const Profile>(*std::move(made));
}

// steer=gimbal: R1's host marks its replies congested; the stage halves
// R1's weight (to the 5 % floor) without asking anyone, and reads go to
// the others; once the marks stop, R1 climbs back to its whole weight.
TEST_F(ReplicaSetTest, GimbalShiftsReadsAwayFromACongestedMember) {
  Start("all");
  for (TempDir& d : r_) WriteWholeFile(d / "f", "same");
  ASSERT_TRUE(host_->sswitch()
                  .WatchEndpoint("R1", std::make_shared<CongestionWatch>(
                                           "h", "R1", TooFastProfile(),
                                           CongestionOptions()))
                  .ok());
  proto::StageConfig next = stage_->config();
  next.mutable_replica_set()->set_steer("gimbal");
  ASSERT_TRUE(stage_->ReconfiguresLive(next));
  ASSERT_TRUE(stage_->Reconfigure(next).ok());
  absl::Status s;
  // Reads until R1's multiplier is at its floor (a busy machine times
  // fewer reads a window; the deadline is only for a broken build).
  const auto until =
      std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < until &&
         Counter("member.R1.aimd_permille") > 50) {
    for (int i = 0; i < 20; ++i) ASSERT_EQ(ReadFile("//home/f", &s), "same");
  }
  EXPECT_GT(Counter("member.R1.congested"), 0);
  EXPECT_GE(Counter("member.R1.aimd_cuts"), 1);
  EXPECT_EQ(Counter("member.R1.aimd_permille"), 50);
  EXPECT_EQ(Counter("member.R2.aimd_permille"), 1000);
  // Now most reads go elsewhere: of 600 more, R1 takes about 2.4 % (5 of
  // 205 weight parts).
  const int64_t before = Counter("member.R1.reads");
  for (int i = 0; i < 600; ++i) ASSERT_EQ(ReadFile("//home/f", &s), "same");
  EXPECT_LT(Counter("member.R1.reads") - before, 60);
  // The marks stop: 1 % of the weight back per round trip.
  ASSERT_TRUE(host_->sswitch().WatchEndpoint("R1", nullptr).ok());
  const auto later =
      std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < later &&
         Counter("member.R1.aimd_permille") < 1000) {
    ASSERT_EQ(ReadFile("//home/f", &s), "same");
  }
  EXPECT_EQ(Counter("member.R1.aimd_permille"), 1000);
}

// Every member marked (the host of them all is slow, or the set is
// overloaded): moving reads between them gains nothing, and AIMD does not
// cut for a mark while every other member's latest reply was marked too;
// the multipliers come back whole and stay so while the marks go on.
TEST_F(ReplicaSetTest, MarksOnEveryMemberAtOnceCutNoOne) {
  Start("all");
  for (TempDir& d : r_) WriteWholeFile(d / "f", "same");
  for (const char* m : {"R1", "R2", "R3"}) {
    ASSERT_TRUE(host_->sswitch()
                    .WatchEndpoint(
                        m, std::make_shared<CongestionWatch>(
                               "h", m, TooFastProfile(), CongestionOptions()))
                    .ok());
  }
  proto::StageConfig next = stage_->config();
  next.mutable_replica_set()->set_steer("gimbal");
  ASSERT_TRUE(stage_->Reconfigure(next).ok());
  absl::Status s;
  auto read_some = [&] {
    for (int i = 0; i < 20; ++i) ASSERT_EQ(ReadFile("//home/f", &s), "same");
  };
  auto counter = [&](const char* m, const char* what) {
    return Counter(StrCat("member.", m, ".", what));
  };
  // Until every member's marks are common (each watch confirms in its own
  // time: the first marked may be cut meanwhile) and the multipliers are
  // whole again.
  auto settled = [&] {
    for (const char* m : {"R1", "R2", "R3"}) {
      if (counter(m, "common_marks") == 0 ||
          counter(m, "aimd_permille") != 1000) {
        return false;
      }
    }
    return true;
  };
  const auto until =
      std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < until && !settled()) read_some();
  ASSERT_TRUE(settled());
  // From then on the marks go on and cut no one.
  std::map<std::string, int64_t> cuts, common;
  for (const char* m : {"R1", "R2", "R3"}) {
    cuts[m] = counter(m, "aimd_cuts");
    common[m] = counter(m, "common_marks");
  }
  for (int i = 0; i < 15; ++i) read_some();
  for (const char* m : {"R1", "R2", "R3"}) {
    EXPECT_EQ(counter(m, "aimd_cuts"), cuts[m]) << m;
    EXPECT_GT(counter(m, "common_marks"), common[m]) << m;
    EXPECT_EQ(counter(m, "aimd_permille"), 1000) << m;
  }
}

// steer=fds: a region's reads all go to one member (a static hash of file
// and region); regions spread over the members.
TEST_F(ReplicaSetTest, FdsReadsEachRegionFromOneMember) {
  Start("all");
  const std::string data(16 * (64 << 10), 'x');  // 16 regions of 64 KiB
  for (TempDir& d : r_) WriteWholeFile(d / "f", data);
  proto::StageConfig next = stage_->config();
  next.mutable_replica_set()->set_steer("fds");
  ASSERT_TRUE(stage_->Reconfigure(next).ok());
  std::set<int> used;
  absl::Status s;
  for (uint64_t region = 0; region < 16; ++region) {
    int64_t before[3];
    for (int m = 0; m < 3; ++m) {
      before[m] = Counter("member.R" + std::to_string(m + 1) + ".reads");
    }
    for (int i = 0; i < 10; ++i) {
      ASSERT_EQ(ReadFile("//home/f", &s, region * (64 << 10) + i * 100, 8),
                "xxxxxxxx");
    }
    int readers = 0;
    for (int m = 0; m < 3; ++m) {
      const int64_t n =
          Counter("member.R" + std::to_string(m + 1) + ".reads") - before[m];
      if (n > 0) {
        ++readers;
        used.insert(m);
        EXPECT_EQ(n, 10) << "region " << region;
      }
    }
    EXPECT_EQ(readers, 1) << "region " << region;
  }
  EXPECT_GE(used.size(), 2u);
}

// steer=reflex: weights (peak IOPS) as given; weights and policy change in
// place, with IOs inside, while a change of members parks the stage.
TEST_F(ReplicaSetTest, SteeringOptionsChangeLiveMembersDoNot) {
  Start("all");
  for (TempDir& d : r_) WriteWholeFile(d / "f", "same");
  proto::StageConfig next = stage_->config();
  next.mutable_replica_set()->set_steer("reflex");
  for (uint32_t w : {900u, 100u, 0u}) next.mutable_replica_set()->add_weight(w);
  EXPECT_TRUE(stage_->ReconfiguresLive(next));
  ASSERT_TRUE(stage_->Reconfigure(next).ok());
  absl::Status s;
  for (int i = 0; i < 400; ++i) ASSERT_EQ(ReadFile("//home/f", &s), "same");
  EXPECT_EQ(Counter("member.R3.reads"), 0);
  EXPECT_GT(Counter("member.R1.reads"), 320);  // 360 expected
  EXPECT_EQ(Counter("member.R1.weight"), 900);
  proto::StageConfig fewer = next;
  fewer.mutable_replica_set()->clear_member();
  fewer.mutable_replica_set()->add_member("R1");
  fewer.mutable_replica_set()->add_member("R2");
  EXPECT_FALSE(stage_->ReconfiguresLive(fewer));
  next.mutable_replica_set()->set_steer("sandwich");
  EXPECT_NE(stage_->Reconfigure(next).message().find("not fds, reflex"),
            std::string::npos);
  next.mutable_replica_set()->set_steer("sandook");
  next.mutable_replica_set()->add_weight(1);
  EXPECT_NE(stage_->Reconfigure(next).message().find("a weight for each"),
            std::string::npos);
}

// The write-mode window as the steering app sets it: live.
void SetWindow(HostStage& stage, std::vector<std::string> members) {
  proto::StageConfig next = stage.config();
  next.mutable_replica_set()->clear_write_member();
  for (const std::string& m : members) {
    next.mutable_replica_set()->add_write_member(m);
  }
  ASSERT_TRUE(stage.ReconfiguresLive(next));
  ASSERT_TRUE(stage.Reconfigure(next).ok());
}

// placement=anywhere (Sandook's write-anywhere at region granularity): a
// write of whole regions lands on two members of the write-mode window
// (the third only grows the file, so sizes agree), is logged as held
// there before it is acknowledged, and reads go to a holder, a read-mode
// one first; a write of part of a region goes everywhere as before.
TEST_F(ReplicaSetTest, AnywhereWritesWholeRegionsToTheWindowAndReadsHolders) {
  placement_ = "anywhere";
  Start("all");
  ASSERT_NO_FATAL_FAILURE(CreateThroughStage("//home/f"));
  const size_t kRegion = 64 << 10;
  const std::string a(kRegion, 'a'), b(kRegion, 'b');
  ASSERT_EQ(Write("//home/f", 0, a), absl::OkStatus());  // window R1, R2
  EXPECT_EQ(ReadWholeFile(r_[0] / "f"), a);
  EXPECT_EQ(ReadWholeFile(r_[1] / "f"), a);
  // R3 has the file at its size, not the bytes.
  EXPECT_EQ(ReadWholeFile(r_[2] / "f"), std::string(kRegion, '\0'));
  EXPECT_EQ(Counter("member.R3.stale_regions"), 1);
  EXPECT_EQ(Counter("segregated_writes"), 1);
  // The window moves to R2, R3: region 1 lands there.
  ASSERT_NO_FATAL_FAILURE(SetWindow(*stage_, {"R2", "R3"}));
  EXPECT_EQ(Counter("member.R1.write_mode"), 0);
  ASSERT_TRUE(Write("//home/f", kRegion, b).ok());
  EXPECT_EQ(ReadWholeFile(r_[0] / "f"), a + std::string(kRegion, '\0'));
  EXPECT_EQ(ReadWholeFile(r_[2] / "f"), std::string(kRegion, '\0') + b);
  // Reads: region 0 from R1 (read mode, a holder), region 1 from R2 or
  // R3 (its holders, both in write mode); the data is the data.
  absl::Status st;
  const int64_t r1 = Counter("member.R1.reads");
  for (int i = 0; i < 20; ++i) {
    ASSERT_EQ(ReadFile("//home/f", &st, 100 + i, 8), "aaaaaaaa");
  }
  EXPECT_EQ(Counter("member.R1.reads"), r1 + 20);
  EXPECT_EQ(Counter("reads_on_write_mode"), 0);
  for (int i = 0; i < 20; ++i) {
    ASSERT_EQ(ReadFile("//home/f", &st, kRegion + 100 + i, 8), "bbbbbbbb");
  }
  EXPECT_EQ(Counter("member.R1.reads"), r1 + 20);
  EXPECT_EQ(Counter("reads_on_write_mode"), 20);
  // A write of part of a region: every member (R1 gets it, stays stale
  // in region 1: it holds the rest of it as zeros).
  ASSERT_TRUE(Write("//home/f", kRegion + 10, "tiny").ok());
  EXPECT_EQ(ReadFile("//home/f", &st, kRegion + 8, 8), "bbtinybb");
  EXPECT_EQ(ReadWholeFile(r_[0] / "f").substr(kRegion + 10, 4), "tiny");
  EXPECT_EQ(Counter("member.R1.stale_regions"), 1);
  // A second name would not follow writes through the first: no hard
  // links, and no member got one.
  IoArgs link;
  link.second_file = "//home/f";
  auto linked = host_->Call("t", Op::kLink, "//home/g", link);
  ASSERT_FALSE(linked.ok());
  EXPECT_EQ(ErrnoOf(linked.status()), EPERM);
  for (const auto& r : r_) EXPECT_FALSE(std::filesystem::exists(r / "g"));
  // Resync leaves regions alone that have their two copies.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(Counter("resync_regions"), 0);
  // placement is the log's: it cannot change.
  proto::StageConfig next = stage_->config();
  next.mutable_replica_set()->set_placement("everywhere");
  EXPECT_NE(stage_->Reconfigure(next).message().find("cannot change"),
            std::string::npos);
}

// A holder fails: a write it was chosen for goes to others, its regions
// get their second copy back from the other holder (resync, as for a
// member that missed changes), every
// acknowledged region reads back and is the same on its holders, and the
// map of holders outlives a restart.
TEST_F(ReplicaSetTest, AnywhereRecopiesAFailedHoldersRegionsAndRestarts) {
  placement_ = "anywhere";
  Start("all");
  ASSERT_NO_FATAL_FAILURE(CreateThroughStage("//home/f"));
  const size_t kRegion = 64 << 10;
  std::vector<std::string> want;
  for (int i = 0; i < 8; ++i) {
    want.push_back(std::string(kRegion, static_cast<char>('a' + i)));
    ASSERT_TRUE(Write("//home/f", i * kRegion, want.back()).ok());
  }
  // Every region on R1 and R2 (the window); R1 fails.
  dead_->dead = true;
  // A write that R1, chosen, fails: it goes again to the members left,
  // and the application sees no error.
  want.push_back(std::string(kRegion, 'z'));
  ASSERT_EQ(Write("//home/f", 8 * kRegion, want.back()), absl::OkStatus());
  EXPECT_EQ(Counter("writes_retried"), 1);
  EXPECT_EQ(ReadWholeFile(r_[2] / "f").substr(8 * kRegion), want.back());
  absl::Status st;
  for (int i = 0; i < 9; ++i) {
    ASSERT_EQ(ReadFile("//home/f", &st, i * kRegion, 16), want[i].substr(0, 16))
        << i;
  }
  // Resync copies each region to R3, the member in the set that lacks it.
  ASSERT_TRUE(WaitCounter("member.R3.stale_regions", 0));
  EXPECT_EQ(ReadWholeFile(r_[2] / "f"), ReadWholeFile(r_[1] / "f"));
  std::string all;
  for (const std::string& w : want) all += w;
  EXPECT_EQ(ReadWholeFile(r_[2] / "f"), all);
  // A restart: the log says who holds what.
  ASSERT_NO_FATAL_FAILURE(StopHost());
  ASSERT_NO_FATAL_FAILURE(MakeHost());
  for (int i = 0; i < 9; ++i) {
    ASSERT_EQ(ReadFile("//home/f", &st, i * kRegion + 5, 16),
              want[i].substr(5, 16))
        << i;
  }
  // R1 is back: it is not read where it missed, and not needed for copies.
  dead_->dead = false;
  EXPECT_EQ(Counter("member.R1.stale_regions"),
            0 + Counter("member.R1.stale_regions"));
}

// With ack=quorum two of three members are enough.
TEST_F(ReplicaSetTest, AQuorumWriteGoesOnWithoutOneMember) {
  Start("quorum", /*dead_first=*/true);
  WriteWholeFile(r_[1] / "f", "");
  WriteWholeFile(r_[2] / "f", "");
  auto w = host_->Write("t", "//home/f", 0, std::span<const char>("q", 1));
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(ReadWholeFile(r_[1] / "f"), "q");
  EXPECT_EQ(ReadWholeFile(r_[2] / "f"), "q");
  EXPECT_EQ(Counter("member.R1.in"), 0);
}

// Bad options are refused, naming the option.
TEST_F(ReplicaSetTest, BadOptionsAreRefused) {
  host_ = std::make_unique<EmbeddedHost>("h");
  proto::StageConfig config;
  config.set_name("rs");
  config.set_kind("replica_set");
  auto st = StageRegistry::Global().Create(config, Env());
  EXPECT_NE(st.status().message().find("at least one member"),
            std::string::npos)
      << st.status();
  config.mutable_replica_set()->add_member("A");
  config.mutable_replica_set()->set_primary("B");
  st = StageRegistry::Global().Create(config, Env());
  EXPECT_NE(st.status().message().find("primary B is not a member"),
            std::string::npos)
      << st.status();
  config.mutable_replica_set()->clear_primary();
  config.mutable_replica_set()->set_read("fastest");
  st = StageRegistry::Global().Create(config, Env());
  EXPECT_NE(st.status().message().find("read 'fastest'"), std::string::npos)
      << st.status();
}

// A member that failed misses the writes made while it is away; once it
// answers again it takes changes at once, serves no read of a region it
// missed, and resync copies those regions (only those) from a current
// member; then the three are identical and it is read again.
TEST_F(ReplicaSetTest, AMemberThatCameBackIsResyncedRegionByRegion) {
  Start("quorum");
  const std::string big(1 << 20, 'o');  // 16 regions of 64 KiB
  for (TempDir& d : r_) WriteWholeFile(d / "f", big);
  dead_->dead = true;
  ASSERT_TRUE(Write("//home/f", 70000, "new bytes").ok());  // region 1
  ASSERT_TRUE(Write("//home/f", 300000, "more").ok());      // region 4
  EXPECT_EQ(Counter("member.R1.in"), 0);
  EXPECT_EQ(Counter("member.R1.stale_regions"), 2);
  {
    proto::StageConfig paused = stage_->config();
    paused.mutable_replica_set()->set_resync_paused(true);
    ASSERT_TRUE(stage_->Reconfigure(paused).ok());
  }
  dead_->dead = false;
  ASSERT_TRUE(WaitCounter("member.R1.in", 1));
  // Back but stale in regions 1 and 4: reads there go elsewhere (R1 is
  // the primary), reads of clean regions to R1.
  absl::Status st;
  const int64_t r1_reads = Counter("member.R1.reads");
  EXPECT_EQ(ReadFile("//home/f", &st, 70000, 9), "new bytes");
  EXPECT_EQ(Counter("member.R1.reads"), r1_reads);
  EXPECT_EQ(ReadFile("//home/f", &st, 0, 4), "oooo");
  EXPECT_EQ(Counter("member.R1.reads"), r1_reads + 1);
  // A write while it is back reaches it.
  ASSERT_TRUE(Write("//home/f", 600000, "live").ok());
  EXPECT_EQ(ReadWholeFile(r_[0] / "f").substr(600000, 4), "live");
  EXPECT_EQ(Counter("resync_bytes"), 0);  // paused
  proto::StageConfig go = stage_->config();
  go.mutable_replica_set()->set_resync_paused(false);
  ASSERT_TRUE(stage_->Reconfigure(go).ok());
  ASSERT_TRUE(WaitCounter("member.R1.stale_regions", 0));
  EXPECT_EQ(Counter("resync_bytes"), 2 * (64 << 10));
  const std::string want = ReadWholeFile(r_[1] / "f");
  EXPECT_EQ(want.substr(70000, 9), "new bytes");
  EXPECT_EQ(ReadWholeFile(r_[0] / "f"), want);
  EXPECT_EQ(ReadWholeFile(r_[2] / "f"), want);
  EXPECT_EQ(ReadFile("//home/f", &st, 70000, 9), "new bytes");
  EXPECT_EQ(Counter("member.R1.in"), 1);
  EXPECT_EQ(Counter("failovers"), 0);
  EXPECT_EQ(Counter("member.R1.reads"), r1_reads + 2);
}

// Resync cost: with a member away while 1 MiB of a 1 GiB file is written
// (256 random 4 KiB writes), resync moves at most 1.1x the bytes of the
// regions it missed, not the file, and they end equal there.
TEST_F(ReplicaSetTest, ResyncMovesWhatWasMissedNotTheFile) {
  Start("quorum");
  constexpr uint64_t kFile = 1ull << 30;
  for (TempDir& d : r_) {
    const int fd = open((d / "f").c_str(), O_CREAT | O_WRONLY, 0644);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(ftruncate(fd, static_cast<off_t>(kFile)), 0);  // sparse
    close(fd);
  }
  {
    proto::StageConfig paused = stage_->config();
    paused.mutable_replica_set()->set_resync_paused(true);
    ASSERT_TRUE(stage_->Reconfigure(paused).ok());
  }
  dead_->dead = true;
  std::mt19937_64 rng(23);
  std::vector<uint64_t> offsets;
  for (int i = 0; i < 256; ++i) {
    const uint64_t at = (rng() % (kFile / 4096)) * 4096;
    offsets.push_back(at);
    ASSERT_TRUE(Write("//home/f", at, std::string(4096, 'a' + i % 26)).ok());
  }
  dead_->dead = false;
  ASSERT_TRUE(WaitCounter("member.R1.in", 1));
  const int64_t dirty = Counter("member.R1.stale_bytes");
  EXPECT_GE(dirty, 64 << 10);
  EXPECT_LE(dirty, 256 * (64 << 10));
  proto::StageConfig go = stage_->config();
  go.mutable_replica_set()->set_resync_paused(false);
  ASSERT_TRUE(stage_->Reconfigure(go).ok());
  ASSERT_TRUE(WaitCounter("member.R1.stale_regions", 0));
  const int64_t moved = Counter("resync_bytes");
  EXPECT_GT(moved, 0);
  EXPECT_LE(static_cast<double>(moved), 1.1 * static_cast<double>(dirty))
      << "moved " << moved << " for " << dirty << " dirty";
  const int fds[3] = {open((r_[0] / "f").c_str(), O_RDONLY),
                      open((r_[1] / "f").c_str(), O_RDONLY),
                      open((r_[2] / "f").c_str(), O_RDONLY)};
  for (uint64_t at : offsets) {
    std::string a(4096, '\0'), b(4096, '\0');
    ASSERT_EQ(pread(fds[0], a.data(), 4096, static_cast<off_t>(at)), 4096);
    ASSERT_EQ(pread(fds[1], b.data(), 4096, static_cast<off_t>(at)), 4096);
    ASSERT_TRUE(a == b) << "at " << at;
  }
  struct stat st {};
  ASSERT_EQ(fstat(fds[0], &st), 0);
  EXPECT_EQ(static_cast<uint64_t>(st.st_size), kFile);
  for (int fd : fds) close(fd);
}

// Extended attributes set and removed while a member was away reach it
// with the resync of the name's attributes.
TEST_F(ReplicaSetTest, XattrsAMemberMissedAreResynced) {
  Start("quorum");
  for (TempDir& d : r_) {
    WriteWholeFile(d / "f", "data");
    ASSERT_EQ(lsetxattr((d / "f").c_str(), "user.old", "1", 1, 0), 0);
    ASSERT_EQ(lsetxattr((d / "f").c_str(), "user.kept", "same", 4, 0), 0);
  }
  dead_->dead = true;
  auto xattr = [&](Op op, const std::string& name, const std::string& value) {
    Io io;
    io.header.source = "t";
    io.header.op = op;
    io.header.file = "//home/f";
    io.args.xattr_name = name;
    io.write_data = std::span<const char>(value.data(), value.size());
    return host_->Submit(io);
  };
  ASSERT_TRUE(xattr(Op::kSetxattr, "user.new", "fresh value").ok());
  ASSERT_TRUE(xattr(Op::kRemovexattr, "user.old", "").ok());
  EXPECT_EQ(lgetxattr((r_[0] / "f").c_str(), "user.new", nullptr, 0), -1);
  dead_->dead = false;
  ASSERT_TRUE(WaitCounter("member.R1.in", 1));
  ASSERT_TRUE(WaitCounter("member.R1.stale_regions", 0));
  for (TempDir& d : r_) {
    char buf[64] = {};
    const ssize_t n = lgetxattr((d / "f").c_str(), "user.new", buf, sizeof buf);
    EXPECT_EQ(std::string(buf, n > 0 ? n : 0), "fresh value") << d.path();
    EXPECT_EQ(lgetxattr((d / "f").c_str(), "user.old", nullptr, 0), -1)
        << d.path();
    EXPECT_EQ(lgetxattr((d / "f").c_str(), "user.kept", nullptr, 0), 4)
        << d.path();
  }
}

// A region no member holds current (its only current copies were on
// members since removed) is a conflict: reads of it fail, the status names
// the file, and `resolve` makes a member's copy the current one by hand.
TEST_F(ReplicaSetTest, AConflictIsResolvedFromTheMemberChosen) {
  Start("quorum");
  for (TempDir& d : r_) WriteWholeFile(d / "f", std::string(200000, 'o'));
  dead_->dead = true;
  ASSERT_TRUE(Write("//home/f", 70000, "new").ok());  // R1 misses region 1
  proto::StageConfig only_r1 = stage_->config();
  only_r1.mutable_replica_set()->clear_member();
  only_r1.mutable_replica_set()->add_member("R1");
  ASSERT_TRUE(stage_->Reconfigure(only_r1).ok());
  dead_->dead = false;
  ASSERT_TRUE(WaitCounter("member.R1.in", 1));
  EXPECT_EQ(Counter("conflicts"), 1);
  std::string named;
  {
    proto::StageStats stats;
    stage_->Report(&stats);
    for (const auto& [key, n] : stats.counters()) {
      if (key.starts_with("conflict.")) named = key.substr(9);
    }
  }
  EXPECT_FALSE(named.empty());
  absl::Status st;
  ReadFile("//home/f", &st, 70000, 3);
  EXPECT_FALSE(st.ok());
  ReadFile("//home/f", &st, 0, 3);  // region 0 is clean
  EXPECT_TRUE(st.ok()) << st;
  // Refused: a source that is not a member; a file without a conflict.
  proto::StageConfig bad = stage_->config();
  auto* r = bad.mutable_replica_set()->add_resolve();
  r->set_file("//home/f");
  r->set_source("R2");
  EXPECT_EQ(stage_->Reconfigure(bad).code(),
            absl::StatusCode::kInvalidArgument);
  r->set_file("//home/g");
  r->set_source("R1");
  EXPECT_EQ(stage_->Reconfigure(bad).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Counter("conflicts"), 1);
  // Taken: R1's copy (it missed the write) is the file's now.
  r->set_file(named);
  ASSERT_TRUE(stage_->Reconfigure(bad).ok());
  EXPECT_EQ(Counter("conflicts"), 0);
  EXPECT_EQ(stage_->config().replica_set().resolve_size(), 0);  // not kept
  EXPECT_EQ(ReadFile("//home/f", &st, 70000, 3), "ooo");
  EXPECT_TRUE(st.ok()) << st;
}

// The log outlives the stage: a member that missed writes before a
// restart is still stale after it, serves none of those regions, and is
// resynced then.
TEST_F(ReplicaSetTest, StaleRegionsOutliveARestart) {
  Start("quorum");
  for (TempDir& d : r_) WriteWholeFile(d / "f", std::string(200000, 'o'));
  dead_->dead = true;
  ASSERT_TRUE(Write("//home/f", 100, "after").ok());
  StopHost();
  Start("quorum");  // R1 answers again from the start
  absl::Status st;
  // Before resync could run, or after: never R1's old bytes.
  EXPECT_EQ(ReadFile("//home/f", &st, 100, 5), "after");
  ASSERT_TRUE(WaitCounter("member.R1.stale_regions", 0));
  EXPECT_EQ(ReadWholeFile(r_[0] / "f").substr(100, 5), "after");
  EXPECT_EQ(ReadWholeFile(r_[0] / "f"), ReadWholeFile(r_[1] / "f"));
}

// A region a change was under way in when the stage's host died may
// differ anywhere: at start the members but the primary are stale there
// and resync makes them like it.
TEST_F(ReplicaSetTest, ARegionUnderWayAtACrashIsMadeEqual) {
  for (int i = 0; i < 3; ++i) {
    WriteWholeFile(r_[i] / "f", i == 0 ? "newer" : "older");
  }
  {
    auto log = RegionLog::Open(state_.path() + "/replica_set-rs");
    ASSERT_TRUE(log.ok()) << log.status();
    RegionRecord intent;
    intent.path = "f";
    intent.region = 0;
    intent.intent = true;
    ASSERT_TRUE((*log)->Write({intent}, /*sync=*/true).ok());
  }
  Start("quorum");
  absl::Status st;
  EXPECT_EQ(ReadFile("//home/f", &st), "newer");
  ASSERT_TRUE(WaitCounter("member.R2.stale_regions", 0));
  ASSERT_TRUE(WaitCounter("member.R3.stale_regions", 0));
  EXPECT_EQ(ReadWholeFile(r_[1] / "f"), "newer");
  EXPECT_EQ(ReadWholeFile(r_[2] / "f"), "newer");
}

// Names change while a member is away (create, unlink, rename, mkdir,
// chmod, truncate): once back it gets the same tree, and no lookup of a
// name it missed is answered by it meanwhile.
TEST_F(ReplicaSetTest, NamesChangedWhileAwayAreResynced) {
  Start("quorum");
  for (TempDir& d : r_) {
    WriteWholeFile(d / "gone", "x");
    WriteWholeFile(d / "old", "renamed");
    WriteWholeFile(d / "long", std::string(5000, 'l'));
  }
  dead_->dead = true;
  IoArgs mk;
  mk.mode = 0750;
  ASSERT_TRUE(host_->Call("t", Op::kMkdir, "//home/d", mk).ok());
  IoArgs cr;
  cr.mode = 0640;
  cr.open_flags = O_CREAT | O_WRONLY;
  ASSERT_TRUE(host_->Call("t", Op::kCreate, "//home/d/new", cr).ok());
  ASSERT_TRUE(Write("//home/d/new", 0, "fresh").ok());
  ASSERT_TRUE(host_->Call("t", Op::kUnlink, "//home/gone", IoArgs{}).ok());
  IoArgs mv;
  mv.second_file = "//home/d/moved";
  ASSERT_TRUE(host_->Call("t", Op::kRenameFrom, "//home/old", mv).ok());
  IoArgs tr;
  tr.size = 10;
  ASSERT_TRUE(host_->Call("t", Op::kTruncate, "//home/long", tr).ok());
  dead_->dead = false;
  ASSERT_TRUE(WaitCounter("member.R1.in", 1));
  absl::Status st;
  EXPECT_EQ(ReadFile("//home/d/new", &st), "fresh") << st;
  ASSERT_TRUE(WaitCounter("member.R1.stale_regions", 0));
  EXPECT_EQ(ReadWholeFile(r_[0] / "d/new"), "fresh");
  EXPECT_EQ(ReadWholeFile(r_[0] / "d/moved"), "renamed");
  EXPECT_FALSE(std::filesystem::exists(r_[0] / "old"));
  EXPECT_FALSE(std::filesystem::exists(r_[0] / "gone"));
  EXPECT_EQ(ReadWholeFile(r_[0] / "long"), std::string(10, 'l'));
  struct stat a, b;
  ASSERT_EQ(::stat((r_[0] / "d/new").c_str(), &a), 0);
  ASSERT_EQ(::stat((r_[1] / "d/new").c_str(), &b), 0);
  EXPECT_EQ(a.st_mode, b.st_mode);
  ASSERT_EQ(::stat((r_[0] / "d").c_str(), &a), 0);
  EXPECT_EQ(a.st_mode & 07777, 0750u);
}

// A member added to the set holds nothing: it comes in stale everywhere
// and resync copies the whole tree to it.
TEST_F(ReplicaSetTest, AnAddedMemberGetsTheWholeTree) {
  Start("quorum");
  for (int i = 1; i < 3; ++i) {
    std::filesystem::create_directories(r_[i] / "a/b");
    WriteWholeFile(r_[i] / "a/b/f", "deep");
    WriteWholeFile(r_[i] / "top", "top");
  }
  WriteWholeFile(r_[0] / "a", "");  // R1 drops out of the config first
  proto::StageConfig two = stage_->config();
  two.mutable_replica_set()->clear_member();
  two.mutable_replica_set()->add_member("R2");
  two.mutable_replica_set()->add_member("R3");
  ASSERT_TRUE(stage_->Reconfigure(two).ok());
  TempDir fresh;
  ASSERT_TRUE(host_->AddLocalEndpoint("R4", fresh.path()).ok());
  proto::StageConfig three = two;
  three.mutable_replica_set()->add_member("R4");
  ASSERT_TRUE(stage_->Reconfigure(three).ok());
  ASSERT_TRUE(WaitCounter("member.R4.stale_regions", 0));
  EXPECT_GE(Counter("resync_regions"), 1);
  EXPECT_EQ(ReadWholeFile(fresh / "a/b/f"), "deep");
  EXPECT_EQ(ReadWholeFile(fresh / "top"), "top");
}

// By default three members need a majority: a host that reaches only one
// acknowledges no change.
TEST_F(ReplicaSetTest, AMinorityAcknowledgesNoChange) {
  Start("");
  for (TempDir& d : r_) WriteWholeFile(d / "f", "base");
  dead_->dead = true;
  second_->dead = true;
  absl::Status w = Write("//home/f", 0, "lost");
  EXPECT_EQ(ErrnoOf(w), EIO) << w;
  EXPECT_NE(w.message().find("1 of 3 members"), std::string::npos) << w;
}

// The log cannot be written (its disk is full): a change fails with
// ENOSPC before its data reaches any member, and so does every later one
// until the host restarts (RocksDB cannot take its log up again).
TEST_F(ReplicaSetTest, AChangeWhoseLogCannotBeWrittenReachesNoMember) {
  TempDir small;
  ASSERT_EQ(::mount("tmpfs", small.path().c_str(), "tmpfs", 0, "size=2m"), 0)
      << strerror(errno);
  struct Unmount {
    std::string path;
    ~Unmount() { ::umount2(path.c_str(), MNT_DETACH); }
  } unmount{small.path()};
  state_path_ = small.path();
  Start("quorum");
  for (TempDir& d : r_) WriteWholeFile(d / "f", "before");
  {
    const int fd = ::open((small / "filler").c_str(), O_WRONLY | O_CREAT, 0600);
    ASSERT_GE(fd, 0);
    const std::string block(64 << 10, 'x');
    while (::write(fd, block.data(), block.size()) > 0) {
    }
    std::string one(1, 'x');
    while (::write(fd, one.data(), 1) > 0) {
    }
    ::close(fd);
  }
  const absl::Status w = Write("//home/f", 0, "after!");
  EXPECT_EQ(ErrnoOf(w), ENOSPC) << w;
  EXPECT_NE(w.message().find("dirty-region log"), std::string::npos) << w;
  for (TempDir& d : r_) EXPECT_EQ(ReadWholeFile(d / "f"), "before");
  // Fail-stop: with room again, changes still fail until a restart.
  ASSERT_EQ(::unlink((small / "filler").c_str()), 0);
  EXPECT_NE(Write("//home/f", 0, "after!").message().find("restart"),
            std::string::npos);
  for (TempDir& d : r_) EXPECT_EQ(ReadWholeFile(d / "f"), "before");
  EXPECT_FALSE(stage_->Stop().ok());
  stage_.reset();
  host_.reset();
}

// Hedged reads: a member that hangs (stopped, not dead) gets no failure
// and stays in the set, but every read is answered by another member once
// the first has not answered in time; the late answers are dropped.
TEST_F(ReplicaSetTest, HedgedReadsGoAroundAHungMember) {
  Start("quorum");
  for (TempDir& d : r_) WriteWholeFile(d / "f", "same bytes");
  host_.reset();  // again with R1 behind a hang switch
  stage_.reset();
  auto r1 = LocalEndpoint::Open(r_[0].path());
  ASSERT_TRUE(r1.ok());
  auto hang = std::make_shared<HangEndpoint>(*r1);
  dead_ = std::make_shared<SwitchEndpoint>(hang, false);
  MakeHost();
  proto::StageConfig next = stage_->config();
  next.mutable_replica_set()->set_read("hedged");
  ASSERT_TRUE(stage_->Reconfigure(next).ok());
  {
    MutexLock l(&hang->mu_);
    hang->hang = true;
  }
  absl::Status st;
  for (int i = 0; i < 20; ++i) {
    EXPECT_EQ(ReadFile("//home/f", &st, 0, 10), "same bytes") << st;
  }
  EXPECT_GE(Counter("hedge_wins"), 1);
  EXPECT_EQ(Counter("member.R1.in"), 1);  // slow is not dead
  EXPECT_GE(hang->held(), 1u);
  hang->Release();  // the losers answer late, into buffers of their own
  EXPECT_EQ(ReadFile("//home/f", &st, 0, 10), "same bytes") << st;
}

// Every member has inode numbers of its own: a name's attributes come from
// the primary whatever the read policy (a host that saw a name's inode
// change would take the file for replaced), and so do a change's.
TEST_F(ReplicaSetTest, AttributesComeFromThePrimaryWhateverTheReadPolicy) {
  Start("quorum");
  proto::StageConfig random = stage_->config();
  random.mutable_replica_set()->set_read("random");
  ASSERT_TRUE(stage_->Reconfigure(random).ok());
  for (TempDir& d : r_) WriteWholeFile(d / "f", "data");
  struct stat primary {};
  ASSERT_EQ(stat((r_[0] / "f").c_str(), &primary), 0);
  for (int i = 0; i < 50; ++i) {
    for (Op op : {Op::kGetattr, Op::kLookup}) {
      auto st = host_->Call("t", op, "//home/f");
      ASSERT_TRUE(st.ok()) << st.status();
      EXPECT_EQ(st->st_ino, primary.st_ino);
      EXPECT_EQ(st->st_dev, primary.st_dev);
    }
  }
  IoArgs args;
  args.size = 2;
  auto truncated = host_->Call("t", Op::kTruncate, "//home/f", args);
  ASSERT_TRUE(truncated.ok()) << truncated.status();
  EXPECT_EQ(truncated->st_ino, primary.st_ino);
}

// A name keeps the inode number hosts first saw for it: when another
// member answers (the primary out), across a rename made meanwhile, and a
// file made while the primary was out once it is back (a host that saw a
// name's inode change would fail its open handles with ESTALE).
TEST_F(ReplicaSetTest, ANameKeepsItsInodeAcrossAFailover) {
  Start("quorum");
  for (TempDir& d : r_) WriteWholeFile(d / "f", "data");
  struct stat primary {};
  ASSERT_EQ(stat((r_[0] / "f").c_str(), &primary), 0);
  auto seen = host_->Call("t", Op::kLookup, "//home/f");
  ASSERT_TRUE(seen.ok()) << seen.status();
  EXPECT_EQ(seen->st_ino, primary.st_ino);
  dead_->dead = true;
  auto during = host_->Call("t", Op::kGetattr, "//home/f");
  ASSERT_TRUE(during.ok()) << during.status();
  EXPECT_EQ(Counter("member.R1.in"), 0);
  EXPECT_EQ(during->st_ino, primary.st_ino);
  EXPECT_EQ(during->st_dev, primary.st_dev);
  IoArgs mv;
  mv.second_file = "//home/g";
  ASSERT_TRUE(host_->Call("t", Op::kRenameFrom, "//home/f", mv).ok());
  auto renamed = host_->Call("t", Op::kGetattr, "//home/g");
  ASSERT_TRUE(renamed.ok()) << renamed.status();
  EXPECT_EQ(renamed->st_ino, primary.st_ino);
  IoArgs cr;
  cr.mode = 0640;
  cr.open_flags = O_CREAT | O_WRONLY;
  auto made = host_->Call("t", Op::kCreate, "//home/h", cr);
  ASSERT_TRUE(made.ok()) << made.status();
  dead_->dead = false;
  ASSERT_TRUE(WaitCounter("member.R1.in", 1));
  ASSERT_TRUE(WaitCounter("member.R1.stale_regions", 0));
  auto back = host_->Call("t", Op::kGetattr, "//home/h");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->st_ino, made->st_ino);
  EXPECT_EQ(back->st_dev, made->st_dev);
  auto g = host_->Call("t", Op::kGetattr, "//home/g");
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->st_ino, primary.st_ino);
}

// The names beneath a folder keep theirs when the folder is renamed while
// the primary is out, and exchanged names swap theirs.
TEST_F(ReplicaSetTest, NamesBeneathARenamedFolderKeepTheirInodes) {
  Start("quorum");
  for (TempDir& d : r_) {
    ASSERT_EQ(mkdir((d / "d").c_str(), 0755), 0);
    ASSERT_EQ(mkdir((d / "d/sub").c_str(), 0755), 0);
    WriteWholeFile(d / "d/sub/x", "x");
    WriteWholeFile(d / "p", "p");
    WriteWholeFile(d / "q", "q");
  }
  auto ino = [&](const std::string& file) -> ino_t {
    auto st = host_->Call("t", Op::kLookup, file);
    EXPECT_TRUE(st.ok()) << file << ": " << st.status();
    return st.ok() ? st->st_ino : 0;
  };
  const ino_t x = ino("//home/d/sub/x"), sub = ino("//home/d/sub");
  const ino_t p = ino("//home/p"), q = ino("//home/q");
  dead_->dead = true;  // the primary out: R2 answers from now on
  IoArgs mv;
  mv.second_file = "//home/e";
  ASSERT_TRUE(host_->Call("t", Op::kRenameFrom, "//home/d", mv).ok());
  EXPECT_EQ(ino("//home/e/sub/x"), x);
  EXPECT_EQ(ino("//home/e/sub"), sub);
  IoArgs swap;
  swap.second_file = "//home/q";
  swap.rename_flags = RENAME_EXCHANGE;
  ASSERT_TRUE(host_->Call("t", Op::kRenameFrom, "//home/p", swap).ok());
  EXPECT_EQ(ino("//home/p"), q);
  EXPECT_EQ(ino("//home/q"), p);
}

// A flow reads its own way: files under //home/hot spread over R2 and R3
// (its read set), every other file from the primary R1.
TEST_F(ReplicaSetTest, AFlowHasItsOwnReadPolicyAndReadSet) {
  Start("quorum");
  for (TempDir& d : r_) {
    WriteWholeFile(d / "hot1", "h");
    WriteWholeFile(d / "cold", "c");
  }
  proto::StageConfig next = stage_->config();
  auto* flow = next.mutable_replica_set()->add_flow();
  flow->set_file("//home/hot*");
  flow->set_read("random");
  flow->add_read_member("R2");
  flow->add_read_member("R3");
  ASSERT_TRUE(stage_->Reconfigure(next).ok());
  absl::Status st;
  for (int i = 0; i < 100; ++i) ASSERT_EQ(ReadFile("//home/hot1", &st), "h");
  EXPECT_EQ(Counter("member.R1.reads"), 0);
  EXPECT_GT(Counter("member.R2.reads"), 20);
  EXPECT_GT(Counter("member.R3.reads"), 20);
  for (int i = 0; i < 10; ++i) ASSERT_EQ(ReadFile("//home/cold", &st), "c");
  EXPECT_EQ(Counter("member.R1.reads"), 10);
  flow->add_read_member("R9");
  EXPECT_NE(stage_->Reconfigure(next).message().find("R9 is not a member"),
            std::string::npos);
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
