// SPDX-License-Identifier: Apache-2.0
// GC coordination of a replica set over emulated flash members
// (stages/replica_set/gc.cc): two replicas under write pressure never
// collect at once unless one must (a regular request, or a device with no
// free block left), reads go around the member that collects (counted),
// and every write lands on both.
#include <fcntl.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "embed/embedded_host.h"
#include "endpoints/flash_endpoint.h"
#include "gtest/gtest.h"
#include "stages/stage.h"
#include "tests/util/gc_passes.h"
#include "tests/util/temp_dir.h"

namespace sroute {
namespace {

using ::sroute::testing::ReadWholeFile;
using ::sroute::testing::TempDir;

constexpr uint64_t kPage = 4096;

class GcCoordinationTest : public ::testing::Test {
 protected:
  void Start(const std::string& gc) {
    host_ = std::make_unique<EmbeddedHost>("h");
    for (int i = 0; i < 2; ++i) {
      FlashEndpoint::Options o;
      auto model = FlashModel::Preset("small");
      ASSERT_TRUE(model.ok());
      o.model = *model;
      o.model.mode = gc == "redirect" ? GcMode::kAuto : GcMode::kCoordinated;
      // Devices that collect on their own hold a die for a whole pass
      // here: with GC yielding between steps a die is busy a few ms at a
      // time, which the stage's asking catches only by chance.
      o.model.gc_yields = gc != "redirect";
      auto ssd = FlashEndpoint::Open(dirs_[i].path(), o);
      ASSERT_TRUE(ssd.ok()) << ssd.status();
      ssd_[i] = *ssd;
      ASSERT_TRUE(host_->AddEndpoint(i == 0 ? "F1" : "F2", ssd_[i]).ok());
    }
    proto::StageConfig config;
    config.set_name("rs");
    config.set_kind("replica_set");
    proto::ReplicaSetOptions& o = *config.mutable_replica_set();
    o.add_member("F1");
    o.add_member("F2");
    o.set_read("random");
    o.set_ack("all");
    o.set_gc(gc);
    o.set_gc_poll_us(300);
    StageEnv env;
    env.sswitch = &host_->sswitch();
    env.state_dir = state_.path();
    auto stage = StageRegistry::Global().Create(config, env);
    ASSERT_TRUE(stage.ok()) << stage.status();
    stage_ = *stage;
    ASSERT_TRUE(host_->AddStage("rs", stage_).ok());
    ASSERT_TRUE(host_->LoadRules("<*, *, //home/*> -> <IO, stage:rs>\n").ok());
  }
  void TearDown() override {
    if (stage_) {
      ASSERT_TRUE(stage_->Stop().ok());
    }
    stage_.reset();
    host_.reset();
  }
  proto::StageStats Stats() {
    proto::StageStats stats;
    stage_->Report(&stats);
    return stats;
  }
  int64_t Counter(const std::string& name) {
    proto::StageStats stats = Stats();
    auto it = stats.counters().find(name);
    return it == stats.counters().end() ? -1 : it->second;
  }
  // Over-writes `pages` pages of //home/f at random from two writers while
  // a reader reads; returns what the file must hold.
  std::string Pressure(int writes, uint64_t pages) {
    IoArgs create;
    create.mode = 0644;
    create.open_flags = O_CREAT | O_WRONLY;
    EXPECT_TRUE(host_->Call("t", Op::kCreate, "//home/f", create).ok());
    std::string model(pages * kPage, '\0');
    std::atomic<bool> writing{true};
    std::thread reader([&] {
      std::vector<char> buf(kPage);
      std::mt19937_64 rng(7);
      while (writing.load()) {
        auto n = host_->Read("t", "//home/f", (rng() % pages) * kPage,
                             std::span<char>(buf));
        EXPECT_TRUE(n.ok()) << n.status();
      }
    });
    // Two writers on disjoint halves: the model is theirs without a lock.
    auto writer = [&](uint64_t first, uint64_t count, int seed) {
      std::mt19937_64 rng(seed);
      for (int i = 0; i < writes / 2; ++i) {
        const uint64_t page = first + rng() % count;
        std::string block(kPage, static_cast<char>('a' + rng() % 26));
        block[0] = static_cast<char>(i);
        auto w = host_->Write("t", "//home/f", page * kPage,
                              std::span<const char>(block.data(), kPage));
        ASSERT_TRUE(w.ok()) << w.status();
        // Bytes in place: replace() would set the length both writers
        // share.
        std::memcpy(model.data() + page * kPage, block.data(), kPage);
      }
    };
    std::thread w1(writer, 0, pages / 2, 1);
    std::thread w2(writer, pages / 2, pages - pages / 2, 2);
    w1.join();
    w2.join();
    writing = false;
    reader.join();
    return model;
  }

  TempDir dirs_[2];
  TempDir state_;
  std::shared_ptr<FlashEndpoint> ssd_[2];
  std::shared_ptr<HostStage> stage_;
  std::unique_ptr<EmbeddedHost> host_;
};

// Under write pressure both devices need GC again and again: the stage
// grants soft requests one member at a time, so two passes overlap (by
// more than a predicted end may move) only where one of them had to run
// (regular, or forced on the device); reads
// meanwhile go to the member that does not collect; both members end
// with every byte written.
TEST_F(GcCoordinationTest, ReplicasCollectInTurnAndReadsGoAroundThem) {
  Start("delay");
  constexpr uint64_t kPages = 200;
  const std::string model = Pressure(4000, kPages);
  for (TempDir& d : dirs_) {
    EXPECT_TRUE(ReadWholeFile(d / "f") == model) << d.path();
  }
  const proto::StageStats stats = Stats();
  ASSERT_GT(stats.gc_events_size(), 1);
  int soft = 0;
  for (int i = 0; i < stats.gc_events_size(); ++i) {
    const proto::GcEvent& a = stats.gc_events(i);
    soft += a.kind() == "soft" ? 1 : 0;
    EXPECT_LE(a.start_unix_us(), a.end_unix_us()) << i;
    for (int j = i + 1; j < stats.gc_events_size(); ++j) {
      const proto::GcEvent& b = stats.gc_events(j);
      if (a.member() == b.member()) continue;
      const bool overlap = testing::PassesOverlap(a, b);
      const bool had_to = testing::HadToCollect(a, b);
      EXPECT_TRUE(!overlap || had_to)
          << a.member() << " " << a.kind() << " [" << a.start_unix_us() << ", "
          << a.end_unix_us() << ") and " << b.member() << " " << b.kind()
          << " [" << b.start_unix_us() << ", " << b.end_unix_us() << ")";
    }
  }
  EXPECT_GT(soft, 0);
  // Both replicas take the same writes: they ask at about the same time,
  // and one waits.
  EXPECT_GT(Counter("gc_soft_delayed"), 0);
  EXPECT_EQ(Counter("gc_granted_soft"), soft);
  EXPECT_GT(Counter("gc_redirects"), 0);
  EXPECT_GT(ssd_[0]->State().gc_passes, 0u);
  EXPECT_GT(ssd_[1]->State().gc_passes, 0u);
}

// Redirection alone (devices that collect on their own): the stage sees
// their passes by asking, and grants none.
TEST_F(GcCoordinationTest, RedirectionAloneSeesTheDevicesOwnGc) {
  Start("redirect");
  constexpr uint64_t kPages = 200;
  const std::string model = Pressure(4000, kPages);
  for (TempDir& d : dirs_) {
    EXPECT_TRUE(ReadWholeFile(d / "f") == model) << d.path();
  }
  EXPECT_GT(Counter("gc_device_passes"), 0);
  EXPECT_EQ(Counter("gc_granted_soft"), 0);
  EXPECT_EQ(Counter("gc_granted_regular"), 0);
  // Whether a read met one of these passes depends on timing: reads going
  // around a collecting member are counted in the test above, where the
  // stage knows each pass from its grant.
}

// A mode or poll interval the stage does not know is refused, naming it.
TEST_F(GcCoordinationTest, BadModesAreRefused) {
  EmbeddedHost host("h");
  StageEnv env;
  env.sswitch = &host.sswitch();
  env.state_dir = state_.path();
  proto::StageConfig config;
  config.set_name("rs");
  config.set_kind("replica_set");
  config.mutable_replica_set()->add_member("F1");
  config.mutable_replica_set()->set_gc("always");
  auto bad = StageRegistry::Global().Create(config, env);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("gc 'always'"), std::string::npos)
      << bad.status();
  config.mutable_replica_set()->set_gc("delay");
  config.mutable_replica_set()->set_gc_poll_us(5);
  bad = StageRegistry::Global().Create(config, env);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("gc_poll_us 5"), std::string::npos)
      << bad.status();
}

}  // namespace
}  // namespace sroute
