// SPDX-License-Identifier: Apache-2.0
// Steering (issue 49) for real: a controller running the steering app, two
// storage servers whose devices are emulated flash of different presets
// (healthy and fast, dilated), and a volume whose replica set over them is
// steered (steer=sandook) while a user (uid 1001) reads through it.
// Profile sweeps run through the controller to the servers' devices, in
// several budgeted calls; the profiles stored at the app become the
// servers' congestion watches; the app's
// weights follow the profiles (the fast device takes more reads); a device
// slower than its profile says gets its replies marked, and the volume's
// replica set cuts its weight on its own (AIMD); every byte read is what
// was written.
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "controller/client.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "tests/util/controller_fixture.h"
#include "tests/util/profiles.h"
#include "tests/util/run_as.h"
#include "tests/util/temp_dir.h"
#include "tests/util/wait.h"
#include "util/strings.h"

namespace sroute {
namespace {

using ::sroute::testing::Eventually;
using ::sroute::testing::RunAs;
using ::sroute::testing::TempDir;
using ::sroute::testing::User;

constexpr int kDilation = 5;
constexpr size_t kSteerFileBytes = 1 << 20;

class SteeringTest : public testing::ControllerFixture {
 protected:
  SteeringTest() : ControllerFixture("fuse-steer") {}
  absl::StatusOr<proto::AppAnswer> App(const std::string& command,
                                       std::vector<std::string> args = {}) {
    proto::AppCall call;
    call.set_app("steering");
    call.set_command(command);
    for (std::string& a : args) call.add_args(std::move(a));
    return Client().CallApp(call);
  }
  // The volume's replica set rs as it is now.
  proto::StageStats VolumeStage() {
    proto::Stages list;
    list.set_action(proto::Stages::LIST);
    auto lists = Client().StagesAt("fuse-steer", list);
    if (lists.ok()) {
      for (const proto::HostStages& h : lists->hosts()) {
        for (const proto::StageStats& s : h.stages()) {
          if (s.config().name() == "rs") return s;
        }
      }
    }
    return proto::StageStats();
  }
  int64_t Counter(const std::string& name) {
    const proto::StageStats s = VolumeStage();
    auto it = s.counters().find(name);
    return it == s.counters().end() ? -1 : it->second;
  }
  TempDir flash1_, flash2_;
};

std::string Pattern(size_t n) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i)
    s[i] = static_cast<char>('a' + (i / 4096 + i) % 26);
  return s;
}

// Reads `count` random 4 KiB blocks of `path`; returns "" or what failed.
std::string ReadBlocks(const std::string& path, int count) {
  const std::string want = Pattern(kSteerFileBytes);
  const int fd = open(path.c_str(), O_RDONLY);
  if (fd < 0) return StrCat("open: ", strerror(errno));
  std::mt19937 rng(7);
  std::string buf(4096, '\0');
  for (int i = 0; i < count; ++i) {
    const size_t block = rng() % (kSteerFileBytes / 4096);
    if (pread(fd, buf.data(), 4096, static_cast<off_t>(block * 4096)) != 4096) {
      close(fd);
      return StrCat("pread: ", strerror(errno));
    }
    if (buf != want.substr(block * 4096, 4096)) {
      close(fd);
      return StrCat("block ", block, " differs");
    }
  }
  close(fd);
  return "";
}

TEST_F(SteeringTest, WeightsFollowProfilesAndCongestedDevicesShedReads) {
  ASSERT_NO_FATAL_FAILURE(StartController(
      0,
      // Watches at 100 % over the profiles: a busy test machine slows S1
      // too, and S1 marked as well would make S2's marks common mode.
      {"--app", StrCat("steering:epoch_ms=100,threshold_percent=100,target_us=",
                       1000 * kDilation)}));
  namespace fs = std::filesystem;
  for (const auto& [name, root, flash, preset] :
       {std::tuple{"S1", r1_.path(), flash1_.path(), "healthy"},
        std::tuple{"S2", r2_.path(), flash2_.path(), "fast"}}) {
    // The user reaches the devices' folders (temporary roots are private).
    fs::permissions(flash, fs::perms::owner_all | fs::perms::group_read |
                               fs::perms::group_exec | fs::perms::others_read |
                               fs::perms::others_exec);
    fs::create_directories(fs::path(flash) / "db");
    fs::permissions(fs::path(flash) / "db", fs::perms::all);
    StartServer(name, root, 0,
                {"--endpoint",
                 StrCat("ssd=flash:", flash, ",preset=", preset,
                        ",dilation=", kDilation),
                 "--rule", StrCat("<*, *, //", name, "/*> -> <IO, //ssd/*>")});
  }
  fs::permissions(home_.path(), fs::perms::all);
  ASSERT_NO_FATAL_FAILURE(Mount(
      {"S1=" + servers_["S1"]->address(), "S2=" + servers_["S2"]->address()},
      {"--stage", "rs=replica_set:member=S1,member=S2,steer=sandook", "--rule",
       "<*, *, //home/db/*> -> <IO, stage:rs>"}));
  fs::create_directories(mnt_ / "db");
  fs::permissions(mnt_ / "db", fs::perms::all);

  // Each device's profile, measured through the controller by a sweep on
  // its server (coarse: reads only and writes only, four steps each),
  // stored at the app: the servers watch their devices with them.
  proto::ProfileEndpoint sweep;
  sweep.set_endpoint("ssd");
  sweep.add_write_percent(0);
  sweep.add_write_percent(100);
  sweep.set_step_percent(25);
  sweep.set_step_ms(150);
  sweep.set_warmup_ms(50);
  sweep.set_size_bytes(8 << 20);
  sweep.set_budget_ms(1000);  // several calls, each going on from the last
  for (const char* server : {"S1", "S2"}) {
    proto::ProfileEndpoint req = sweep;
    int calls = 0;
    absl::StatusOr<proto::ProfileProgress> measured;
    do {
      measured = Client().ProfileStep(server, req);
      ASSERT_TRUE(measured.ok()) << measured.status();
      *req.mutable_so_far() = measured->profile();
      ++calls;
    } while (!measured->done() && calls < 50);
    ASSERT_TRUE(measured->done());
    EXPECT_GT(calls, 1);
    ASSERT_EQ(measured->profile().mix_size(), 2);
    EXPECT_EQ(measured->profile().mix(0).point_size(), 4);
    std::string text;
    google::protobuf::TextFormat::PrintToString(measured->profile(), &text);
    ASSERT_TRUE(App("profile-put", {server, server, "ssd", text}).ok());
  }
  auto watched = Client().SetProfiles("S2", proto::SetProfiles());
  ASSERT_TRUE(watched.ok()) << watched.status();
  ASSERT_EQ(watched->size(), 1u);
  EXPECT_EQ((*watched)[0].endpoint(), "ssd");
  // The app tells a host when one of its devices changes mode (its watch
  // judges nothing for a millisecond); an endpoint the host lacks is
  // named in the refusal.
  proto::SetProfiles switched;
  switched.add_mode_switched("nope");
  auto unknown = Client().SetProfiles("S2", switched);
  EXPECT_TRUE(absl::IsNotFound(unknown.status())) << unknown.status();
  EXPECT_NE(unknown.status().message().find("'nope'"), std::string::npos);
  switched.clear_mode_switched();
  switched.add_mode_switched("ssd");
  ASSERT_TRUE(Client().SetProfiles("S2", switched).ok());
  proto::ControlRequest gauges;
  gauges.mutable_stats();
  auto told = Client().ControlAt("S2", gauges);
  ASSERT_TRUE(told.ok()) << told.status();
  EXPECT_EQ(told->gauges().at("steer.ssd.mode_switches"), 1);

  // A user writes the file, then reads it: the app weighs the fast device
  // above the healthy one (2.7:1 by the model within the target, idle).
  const std::string file = mnt_ / "db/data";
  ASSERT_EQ(RunAs(User{1001, 1001, {}, 022},
                  [&]() -> std::string {
                    const int fd = open(file.c_str(), O_WRONLY | O_CREAT, 0644);
                    if (fd < 0) return strerror(errno);
                    const std::string data = Pattern(kSteerFileBytes);
                    const bool ok = pwrite(fd, data.data(), data.size(), 0) ==
                                    static_cast<ssize_t>(data.size());
                    close(fd);
                    return ok ? "" : "short write";
                  }),
            "");
  ASSERT_TRUE(Eventually([&] {
    const proto::StageStats s = VolumeStage();
    const auto& w = s.config().replica_set().weight();
    return w.size() == 2 && 2 * w[1] > 3 * w[0];
  })) << VolumeStage().ShortDebugString();
  const int64_t s1_before = Counter("member.S1.reads");
  const int64_t s2_before = Counter("member.S2.reads");
  ASSERT_EQ(
      RunAs(User{1001, 1001, {}, 022}, [&] { return ReadBlocks(file, 600); }),
      "");
  const int64_t s1_first = Counter("member.S1.reads") - s1_before;
  const int64_t s2_first = Counter("member.S2.reads") - s2_before;
  EXPECT_GT(s2_first, s1_first);
  auto status = App("status");
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_NE(status->text().find("fuse-steer rs: steer sandook"),
            std::string::npos)
      << status->text();

  // S2's device becomes slower than its profile says (a profile it cannot
  // meet: 1 us): its host marks its replies, and the volume's replica set
  // cuts S2's weight by itself.
  proto::SetProfiles too_fast;
  *too_fast.add_profile() = testing::UnmeetableProfile("ssd");
  // (A calm ratio below the profile's is no setting: refused, named.)
  too_fast.set_max_baseline_percent(50);
  auto refused = Client().SetProfiles("S2", too_fast);
  EXPECT_TRUE(absl::IsInvalidArgument(refused.status())) << refused.status();
  EXPECT_NE(refused.status().message().find("max_baseline_percent"),
            std::string::npos)
      << refused.status();
  too_fast.clear_max_baseline_percent();
  ASSERT_TRUE(Client().SetProfiles("S2", too_fast).ok());
  // (Reads until the first cut: a busy machine fills the watch's windows
  // more slowly.)
  ASSERT_TRUE(Eventually([&] {
    EXPECT_EQ(
        RunAs(User{1001, 1001, {}, 022}, [&] { return ReadBlocks(file, 200); }),
        "");
    return Counter("member.S2.aimd_cuts") > 0;
  }));
  EXPECT_GT(Counter("member.S2.congested"), 0);
  EXPECT_GT(Counter("member.S2.aimd_cuts"), 0);
  EXPECT_LT(Counter("member.S2.aimd_permille"), 1000);
  EXPECT_EQ(Counter("member.S1.congested"), 0);
  // Each cut answered a window S2's watch judged congested, named on the
  // replies across the wire: never more cuts than windows, however many
  // marked replies come (cut once a round trip, S2's replies of one window
  // would cut many times).
  ASSERT_EQ(
      RunAs(User{1001, 1001, {}, 022}, [&] { return ReadBlocks(file, 400); }),
      "");
  EXPECT_GT(Counter("member.S2.congested"), Counter("member.S2.aimd_cuts"));
  const int64_t cuts = Counter("member.S2.aimd_cuts");
  proto::ControlRequest stats;
  stats.mutable_stats();
  auto s2 = Client().ControlAt("S2", stats);
  ASSERT_TRUE(s2.ok()) << s2.status();
  const auto windows = s2->gauges().find("steer.ssd.marked_windows");
  ASSERT_NE(windows, s2->gauges().end());
  EXPECT_LE(cuts, windows->second);
}

}  // namespace
}  // namespace sroute
