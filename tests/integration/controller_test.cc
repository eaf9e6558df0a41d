// SPDX-License-Identifier: Apache-2.0
// Over 1 000 lines: independent cases on one fixture (a controller, servers
// and volumes as processes), which each file of a split would repeat.
// sroute-controller for real: a controller, storage servers and FUSE
// volumes as separate processes on 127.0.0.1, driven through the
// ControllerClient API: persisted rules across restarts, two-phase updates
// under load (checked with per-IO version stamps), a nack that changes
// nothing, delegate-made rules recovered after a crash, and the
// controller-bound detours while the controller is away.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "controller/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/cli_json.pb.h"
#include "proto/controller.pb.h"
#include "rules/parser.h"
#include "tests/util/block_writers.h"
#include "tests/util/cluster_fixture.h"
#include "tests/util/controller_fixture.h"
#include "tests/util/ctl_json.h"
#include "tests/util/mounted_volume.h"
#include "tests/util/real_programs.h"
#include "tests/util/run_as.h"
#include "tests/util/run_command.h"
#include "tests/util/server_process.h"
#include "tests/util/temp_dir.h"
#include "tests/util/wait.h"
#include "tools/exercise/exerciser.h"
#include "util/strings.h"

namespace sroute {
namespace {

using ::sroute::testing::BlockWriters;
using ::sroute::testing::Eventually;
using ::sroute::testing::Exercise;
using ::sroute::testing::ExerciseOptions;
using ::sroute::testing::ExerciseResult;
using ::sroute::testing::FromJson;
using ::sroute::testing::JoinAll;
using ::sroute::testing::MountedVolume;
using ::sroute::testing::OutputLines;
using ::sroute::testing::ReadWholeFile;
using ::sroute::testing::RunCommand;
using ::sroute::testing::ServerProcess;
using ::sroute::testing::StartCommand;
using ::sroute::testing::TempDir;
using ::sroute::testing::Throughout;
using ::sroute::testing::WaitCommand;
using ::sroute::testing::WriteWholeFile;

const std::string kFuse = "fuse-test";

int PwriteAll(const std::string& path, const std::string& data, off_t offset) {
  const int fd = open(path.c_str(), O_WRONLY);
  if (fd < 0) return errno;
  const ssize_t n = pwrite(fd, data.data(), data.size(), offset);
  const int err = n < 0 ? errno : 0;
  close(fd);
  if (err != 0) return err;
  return n == static_cast<ssize_t>(data.size()) ? 0 : EIO;
}

class ControllerTest : public testing::ControllerFixture {
 protected:
  ControllerTest() : ControllerFixture(kFuse) {}
  bool Connected(const std::string& sswitch) {
    for (const TopologyHost& h : Client().Topology()) {
      if (h.info.sswitch() == sswitch) return h.connected;
    }
    return false;
  }
  uint64_t VersionOf(const std::string& sswitch) {
    for (const TopologyHost& h : Client().Topology()) {
      if (h.info.sswitch() == sswitch) return h.version;
    }
    return 0;
  }
  proto::CtlHostStats HostStats(const std::string& host) {
    auto [rc, out] =
        RunCommand(std::string(SROUTECTL_BINARY) + " --host " + host +
                   " --secret-file " + secret_ + " stats --json");
    EXPECT_EQ(rc, 0) << out;
    return rc == 0 ? FromJson<proto::CtlHostStats>(out) : proto::CtlHostStats();
  }
};

TEST_F(ControllerTest, RulesSurviveVolumeAndControllerRestarts) {
  StartController();
  ServerProcess* s2 = StartServer("S2", r2_.path());
  Mount({"S2=" + s2->address()});
  ASSERT_TRUE(Eventually([&] { return Connected(kFuse); }));
  auto cid =
      Client().Insert(kFuse, "<*, *, //home/moved/*> -> <IO, //S2/moved/*>");
  ASSERT_TRUE(cid.ok()) << cid.status();
  // A rule read where it was written travels parsed and is checked at the
  // controller, not parsed: one no text could spell is refused, named, and
  // nothing changes.
  Rule escaping = *ParseRule("<*, *, //home/esc/*> -> <IO, //S2/esc/*>");
  escaping.detours[0].target.file = "//S2/../esc/*";
  UpdateSpec refused;
  refused.changes.push_back(RuleChanges{kFuse, {escaping}, {}});
  auto no = Client().Update(refused);
  EXPECT_EQ(no.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(no.status().message()),
              ::testing::HasSubstr("rule 1: detour 1: path component '..'"));
  ASSERT_EQ(Client().Rules(kFuse)->size(), 1u);
  // Text and parsed rules in one change are installed in their order.
  UpdateSpec mixed;
  mixed.changes.push_back(
      RuleChanges{kFuse,
                  {"<*, r, //home/m1/*> -> <IO, //S2/m1/*>",
                   *ParseRule("<*, r, //home/m2/*> -> <IO, //S2/m2/*>")},
                  {}});
  auto both = Client().Update(mixed);
  ASSERT_TRUE(both.ok()) << both.status();
  ASSERT_EQ(both->cids.size(), 2u);
  auto listed = Client().Rules(kFuse);
  ASSERT_TRUE(listed.ok()) << listed.status();
  std::map<uint64_t, std::string> text_of;
  for (const proto::ManagedRule& m : *listed) text_of[m.cid()] = m.text();
  EXPECT_EQ(text_of[both->cids[0]], "<*, r, //home/m1/*> -> <IO, //S2/m1/*>");
  EXPECT_EQ(text_of[both->cids[1]], "<*, r, //home/m2/*> -> <IO, //S2/m2/*>");
  UpdateSpec undo;
  undo.changes.push_back(RuleChanges{kFuse, {}, both->cids});
  ASSERT_TRUE(Client().Update(undo).ok());
  ASSERT_EQ(Client().Rules(kFuse)->size(), 1u);
  std::filesystem::create_directories(home_ / "moved");
  WriteWholeFile(mnt_ / "moved/a", "first");
  EXPECT_EQ(ReadWholeFile(r2_ / "moved/a"), "first");
  EXPECT_FALSE(std::filesystem::exists(home_ / "moved/a"));

  // The FUSE daemon restarts: the controller gives the rule back before the
  // volume serves.
  volume_.reset();
  Mount({"S2=" + s2->address()});
  WriteWholeFile(mnt_ / "moved/b", "second");
  EXPECT_EQ(ReadWholeFile(r2_ / "moved/b"), "second");

  // The controller restarts: running hosts keep their rules and come back.
  const int port = controller_->port();
  controller_.reset();
  client_.reset();
  WriteWholeFile(mnt_ / "moved/c", "no controller");
  EXPECT_EQ(ReadWholeFile(r2_ / "moved/c"), "no controller");
  StartController(port);
  ASSERT_TRUE(Eventually([&] { return Connected(kFuse); }));
  auto rules = Client().Rules(kFuse);
  ASSERT_TRUE(rules.ok()) << rules.status();
  ASSERT_EQ(rules->size(), 1u);
  EXPECT_EQ((*rules)[0].cid(), *cid);
  EXPECT_EQ((*rules)[0].text(), "<*, *, //home/moved/*> -> <IO, //S2/moved/*>");
  WriteWholeFile(mnt_ / "moved/d", "after");
  EXPECT_EQ(ReadWholeFile(r2_ / "moved/d"), "after");
  // And an update after the restart goes through.
  ASSERT_TRUE(Client().Delete(kFuse, *cid).ok());
  WriteWholeFile(mnt_ / "moved/e", "home again");
  EXPECT_EQ(ReadWholeFile(home_ / "moved/e"), "home again");
}

TEST_F(ControllerTest, VolumeRefusesToStartWithoutItsController) {
  StartController();
  const int port = controller_->port();
  controller_.reset();
  auto [rc, out] =
      RunCommand(std::string(SROUTE_FUSE_BINARY) + " " + mnt_.path() +
                 " -f --backing " + home_.path() + " --secret-file " + secret_ +
                 " --controller 127.0.0.1:" + std::to_string(port) +
                 " --controller-timeout-ms 500");
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("cannot register with the controller"), std::string::npos)
      << out;
}

// Phase zero: the controller runs the rule checker over every sSwitch's
// rules and the topology before an update, and refuses one that makes two
// servers forward a file to each other, installing nothing anywhere.
TEST_F(ControllerTest, RuleCheckerRefusesALoopAcrossTwoServers) {
  StartController();
  const int p1 = testing::FreeLoopbackPort(), p2 = testing::FreeLoopbackPort();
  ASSERT_NE(p1, 0);
  ASSERT_NE(p2, 0);
  // At once: a server registers only once it has heard from every server
  // it forwards to (to recover their records of its rules).
  std::unique_ptr<ServerProcess> first;
  std::thread starting([&] {
    first = std::make_unique<ServerProcess>(
        SROUTE_SERVER_BINARY,
        std::vector<std::string>{
            "--root", r1_.path(), "--name", "S1", "--secret-file", secret_,
            "--listen", StrCat("127.0.0.1:", p1), "--controller",
            controller_->address(), "--endpoint", StrCat("S2=127.0.0.1:", p2)});
  });
  ServerProcess* s2 = StartServer("S2", r2_.path(), p2,
                                  {"--endpoint", StrCat("S1=127.0.0.1:", p1)});
  starting.join();
  ServerProcess* s1 = first.get();
  servers_["S1"] = std::move(first);
  ASSERT_TRUE(s1->ok() && s2->ok());
  ASSERT_TRUE(Eventually([&] { return Connected("S1") && Connected("S2"); }));
  const std::string there = "<*, *, //S1/data/*> -> <IO, //S2/data/*>";
  const std::string back = "<*, *, //S2/data/*> -> <IO, //S1/data/*>";

  // One update with both rules: refused, with the loop and its witness.
  UpdateSpec both;
  both.changes = {{"S1", {there}, {}}, {"S2", {back}, {}}};
  absl::StatusOr<UpdateOutcome> refused = Client().Update(both);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("error: loop"), std::string::npos)
      << refused.status();
  EXPECT_NE(refused.status().message().find("(again)"), std::string::npos)
      << refused.status();
  for (const char* sw : {"S1", "S2"}) {
    auto rules = Client().Rules(sw);
    ASSERT_TRUE(rules.ok()) << rules.status();
    EXPECT_TRUE(rules->empty()) << sw;
  }
  EXPECT_EQ(HostRules(s1->address()), "");
  EXPECT_EQ(HostRules(s2->address()), "");

  // Through sroutectl, one rule at a time: the first is fine, the second
  // closes the loop and is refused (exit 1, the report on stderr).
  const std::string ctl =
      StrCat(SROUTECTL_BINARY, " --controller ", controller_->address(),
             " --secret-file ", secret_);
  auto [rc, out] = RunCommand(ctl + " rules add --host S1 '" + there + "'");
  ASSERT_EQ(rc, 0) << out;
  std::tie(rc, out) = RunCommand(ctl + " rules add --host S2 '" + back + "'");
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("error: loop: " + back), std::string::npos) << out;
  EXPECT_NE(out.find("witness at S2: <tenant-x, getattr, //S2/data/x>"),
            std::string::npos)
      << out;
  EXPECT_EQ(HostRules(s2->address()), "");
  // The same rules checked without installing them say the same.
  const std::string file = keys_ / "back.rules";
  WriteWholeFile(file, back + "\n");
  std::tie(rc, out) = RunCommand(ctl + " --host S2 rules check " + file);
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("error: loop"), std::string::npos) << out;
  // --force installs it anyway, and the cluster check then reports it.
  std::tie(rc, out) =
      RunCommand(ctl + " rules add --force --host S2 '" + back + "'");
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(HostRules(s2->address()).find("//S2/data/*"), std::string::npos);
  std::tie(rc, out) = RunCommand(ctl + " rules check");
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("error: loop"), std::string::npos) << out;
}

// A stage a server is started with is known to the rule checker from the
// server's registration, not from its first stats report (an update right
// after the server came up was refused as naming an unknown stage), and a
// stage the controller adds or removes counts at once: with reports a
// minute apart, a rule naming the stage is taken at once; one naming a
// stage the server lacks is refused, then taken once the stage is added;
// once a configured stage is removed, a rule naming it is refused.
TEST_F(ControllerTest, ConfiguredStagesAreKnownFromRegistration) {
  ASSERT_NO_FATAL_FAILURE(StartController(0, {"--stats-interval-ms", "60000"}));
  ServerProcess* s1 = StartServer(
      "S1", r1_.path(), 0,
      {"--stage", "d=delay:delay_us=10", "--stage", "g=delay:delay_us=10"});
  ASSERT_TRUE(s1->ok());
  ASSERT_TRUE(Eventually([&] { return Connected("S1"); }));
  auto taken = Client().Insert("S1", "<*, w, //S1/x/*> -> <IO, stage:d>");
  EXPECT_TRUE(taken.ok()) << taken.status();
  auto refused = Client().Insert("S1", "<*, w, //S1/y/*> -> <IO, stage:e>");
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("has no stage e"),
            std::string::npos)
      << refused.status();
  auto stages = [&](proto::Stages::Action action, const std::string& name,
                    const std::string& spec) {
    proto::Stages request;
    request.set_action(action);
    request.mutable_stage()->set_name(name);
    request.set_spec(spec);
    return Client().StagesAt("S1", request).status();
  };
  ASSERT_TRUE(stages(proto::Stages::ADD, "", "e=delay:delay_us=10").ok());
  auto added = Client().Insert("S1", "<*, w, //S1/y/*> -> <IO, stage:e>");
  EXPECT_TRUE(added.ok()) << added.status();
  // g, configured and unused, removed: gone from the checker's view too.
  ASSERT_TRUE(stages(proto::Stages::REMOVE, "g", "").ok());
  auto gone = Client().Insert("S1", "<*, w, //S1/z/*> -> <IO, stage:g>");
  ASSERT_FALSE(gone.ok());
  EXPECT_NE(gone.status().message().find("has no stage g"), std::string::npos)
      << gone.status();
}

// Writers keep writing while an update moves their files' route from S1 to
// a path through S2 (which forwards to S1): no IO may be routed by the new
// rules at one sSwitch and the old at another (the servers count IOs by
// the sender's and their own rule version), and nothing is lost.
TEST_F(ControllerTest, TwoPhaseUpdateUnderWritersIsNeverMixed) {
  StartController();
  ServerProcess* s1 = StartServer("S1", r1_.path());
  ServerProcess* s2 = StartServer("S2", r2_.path());
  // S2 reaches S1 as an endpoint of its own.
  servers_.erase("S2");
  s2 = nullptr;
  {
    auto s = std::make_unique<ServerProcess>(
        SROUTE_SERVER_BINARY,
        std::vector<std::string>{
            "--root", r2_.path(), "--name", "S2", "--secret-file", secret_,
            "--listen", "127.0.0.1:0", "--controller", controller_->address(),
            "--endpoint", "S1=" + s1->address()});
    ASSERT_TRUE(s->ok());
    s2 = s.get();
    servers_["S2"] = std::move(s);
  }
  Mount({"S1=" + s1->address(), "S2=" + s2->address()});
  ASSERT_TRUE(Eventually(
      [&] { return Connected(kFuse) && Connected("S1") && Connected("S2"); }));
  auto old_rule =
      Client().Insert(kFuse, "<*, *, //home/w/*> -> <IO, //S1/w/*>");
  ASSERT_TRUE(old_rule.ok()) << old_rule.status();
  std::filesystem::create_directories(home_ / "w");
  std::filesystem::create_directories(r1_ / "w");
  // Whatever fails below, the writers stop and are joined.
  BlockWriters writers(mnt_ / "w", 4);
  // Waits until writer 0 acknowledged `n` blocks (false if the writers
  // failed or stalled).
  auto wait_acked = [&](int n) {
    return Eventually(
               [&] { return writers.acked(0) >= n || writers.errors() > 0; }) &&
           writers.errors() == 0;
  };
  ASSERT_TRUE(wait_acked(50)) << writers.errors() << " writers failed";

  // A host that refuses (S2 does not know endpoint "nowhere") leaves every
  // host with its old rules; so does the controller's own check.
  const uint64_t fuse_before = VersionOf(kFuse), s2_before = VersionOf("S2");
  const std::string fuse_rules = HostRules(VolumeHost());
  const std::string s2_rules = HostRules(s2->address());
  UpdateSpec bad;
  bad.changes.push_back(RuleChanges{
      kFuse, {"<*, *, //home/w/*> -> <IO, //S2/w/*>"}, {*old_rule}});
  bad.changes.push_back(
      RuleChanges{"S2", {"<*, *, //S2/w/*> -> <IO, //nowhere/w/*>"}, {}});
  // The rule checker sees it first (phase zero)...
  auto checked = Client().Update(bad);
  EXPECT_EQ(checked.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(checked.status().message().find("black-hole"), std::string::npos)
      << checked.status();
  // ...and forced past it, S2 itself says no in phase one.
  bad.force = true;
  auto refused = Client().Update(bad);
  EXPECT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("S2 refused"), std::string::npos)
      << refused.status();
  EXPECT_EQ(HostRules(VolumeHost()), fuse_rules);
  EXPECT_EQ(HostRules(s2->address()), s2_rules);
  auto rules = Client().Rules(kFuse);
  ASSERT_TRUE(rules.ok());
  ASSERT_EQ(rules->size(), 1u);
  EXPECT_EQ((*rules)[0].cid(), *old_rule);

  // The real update, across the FUSE host and S2, while the writers run.
  ASSERT_TRUE(wait_acked(100)) << writers.errors() << " writers failed";
  UpdateSpec good;
  good.changes.push_back(RuleChanges{
      kFuse, {"<*, *, //home/w/*> -> <IO, //S2/w/*>"}, {*old_rule}});
  good.changes.push_back(
      RuleChanges{"S2", {"<*, *, //S2/w/*> -> <IO, //S1/w/*>"}, {}});
  auto done = Client().Update(good);
  ASSERT_TRUE(done.ok()) << done.status();
  const int at_switch = writers.acked(0);
  EXPECT_TRUE(wait_acked(at_switch + 100))
      << writers.errors() << " writers failed";
  writers.Stop();
  ASSERT_EQ(writers.errors(), 0);

  // Nothing landed at S2 itself, and every acknowledged block is on S1.
  EXPECT_FALSE(std::filesystem::exists(r2_ / "w"));
  EXPECT_EQ(writers.Verify(r1_ / "w"), "");
  // Per-IO version stamps at S2: every write the FUSE host routed by its new
  // table met S2's new table.
  const proto::CtlHostStats stats = HostStats(s2->address());
  const uint64_t fuse_new = VersionOf(kFuse), s2_new = VersionOf("S2");
  ASSERT_GT(fuse_new, fuse_before);
  ASSERT_GT(s2_new, s2_before);
  int seen = 0;
  for (const auto& [gauge, n] : stats.gauges()) {
    if (gauge.rfind("io_version ", 0) != 0) continue;
    std::istringstream line(gauge.substr(11));
    std::string via;
    uint64_t theirs = 0, ours = 0;
    line >> via >> theirs >> ours;
    ASSERT_EQ(via, kFuse);
    EXPECT_GE(ours, s2_new)
        << "an IO routed by " << kFuse << " version " << theirs
        << " met S2's old rules (version " << ours << ")";
    ++seen;
  }
  EXPECT_GT(seen, 0) << stats.DebugString();
}

// Many overlapping tracked writes leave S2 one record per run of bytes
// the FUSE host's read rules route (not one per write), and after a
// SIGKILL of the FUSE host those records bring back read rules that send
// every range to its newest bytes.
TEST_F(ControllerTest, TrackWritesRulesComeBackAfterTheVolumeIsKilled) {
  StartController();
  ServerProcess* s2 = StartServer("S2", r2_.path());
  constexpr size_t kSize = 1 << 20;
  WriteWholeFile(home_ / "vhd", std::string(kSize, 'o'));
  WriteWholeFile(r2_ / "vhd.tmp", "");
  Mount({"S2=" + s2->address()});
  ASSERT_TRUE(Eventually([&] { return Connected(kFuse); }));
  ASSERT_TRUE(Client()
                  .Insert(kFuse,
                          "<*, w, //home/vhd> -> track_writes(); "
                          "<IO, //S2/vhd.tmp>")
                  .ok());
  std::string model(kSize, 'o');
  std::mt19937 rng(11);
  const int kWrites = 1500;
  for (int i = 0; i < kWrites; ++i) {
    // Unaligned, overlapping, mostly in the first half (runs merge there,
    // stay apart in the rest).
    const size_t off = rng() % 3 == 0 ? rng() % kSize : rng() % (kSize / 2);
    const size_t len = std::min<size_t>(kSize - off, 1 + rng() % 6000);
    const std::string block(len, static_cast<char>('A' + i % 26));
    ASSERT_EQ(PwriteAll(mnt_ / "vhd", block, off), 0);
    model.replace(off, len, block);
  }
  EXPECT_EQ(ReadWholeFile(mnt_ / "vhd"), model);
  // The home copy is stale: only the rules know where the data is.
  EXPECT_NE(ReadWholeFile(home_ / "vhd"), model);
  auto read_rules = [&] {
    std::set<std::string> out;
    for (const std::string& line : OutputLines(HostRules(VolumeHost()))) {
      std::string text = line.substr(line.find(": ") + 2);
      text = text.substr(0, text.find("  # owner="));
      if (text.find("<*, r, //home/vhd[") == 0) out.insert(text);
    }
    return out;
  };
  const std::set<std::string> before = read_rules();
  ASSERT_GT(before.size(), 1u);
  ASSERT_LT(before.size(), 200u);
  auto [rc, out] =
      RunCommand(std::string(SROUTECTL_BINARY) + " --host " + s2->address() +
                 " --secret-file " + secret_ + " records --sswitch " + kFuse);
  ASSERT_EQ(rc, 0) << out;
  std::set<std::string> records;
  for (const std::string& line : OutputLines(out)) {
    const size_t a = line.find(' '), b = line.find(' ', a + 1);
    records.insert(line.substr(b + 1));
  }
  EXPECT_EQ(records, before);
  volume_->Kill();
  volume_.reset();
  Mount({"S2=" + s2->address()});
  EXPECT_EQ(ReadWholeFile(mnt_ / "vhd"), model);
  EXPECT_EQ(read_rules(), before);
  std::tie(rc, out) =
      RunCommand(std::string(SROUTECTL_BINARY) +
                 " --host unix:" + (ctl_ / "sock") + " stats --json");
  ASSERT_EQ(rc, 0) << out;
  const auto gauges = FromJson<proto::CtlHostStats>(out).gauges();
  auto restored = gauges.find("delegate_rules_restored");
  ASSERT_NE(restored, gauges.end()) << out;
  EXPECT_EQ(restored->second, static_cast<int64_t>(before.size())) << out;
}

// Blocks of a file written with their number, a version and a checksum,
// so that a reader can tell a block is whole and not older than one it
// knows was acknowledged.
constexpr size_t kBlock = 4096;

std::string VersionedBlock(uint32_t block, uint32_t version) {
  std::string b(kBlock, '\0');
  std::memcpy(b.data(), &block, 4);
  std::memcpy(b.data() + 4, &version, 4);
  uint32_t x = block * 2654435761u ^ version;
  uint32_t sum = 0;
  for (size_t i = 12; i < kBlock; ++i) {
    x = x * 1664525u + 1013904223u;
    b[i] = static_cast<char>(x >> 24);
    sum = sum * 31 + static_cast<unsigned char>(b[i]);
  }
  std::memcpy(b.data() + 8, &sum, 4);
  return b;
}

// The version of a whole block `block`, or -1 if it is not one.
int64_t VersionOfBlock(const std::string& b, uint32_t block) {
  if (b.size() != kBlock) return -1;
  uint32_t id, version;
  std::memcpy(&id, b.data(), 4);
  std::memcpy(&version, b.data() + 4, 4);
  if (id != block && !(version == 0 && id == 0)) return -1;
  if (version == 0 && id == 0 && b == std::string(kBlock, '\0')) return 0;
  return b == VersionedBlock(block, version) ? version : -1;
}

// The tail_latency app end to end: a quiet flow on S1 bursts; the app
// off-loads its writes to the least loaded other server (S3: S2 serves a
// flow of its own) while checksumming readers see every block whole and
// never older than its last acknowledged write; when the burst ends it
// reclaims: every byte is home on S1, the temporary folder, the app's
// rules, the read rules and the servers' records are gone. With spread=2
// the writes go to S3 and S2 (each 1 MiB chunk of the file to one).
// Who is SIGKILLed (and started again) during the scenario, and when.
struct Crash {
  const char* who;  // "", "volume", "S1" (home), "S3" (target), "controller"
  bool in_reclaim;  // while the bytes come home, rather than while away
  bool spread = false;  // the app's spread=2
};

class TailLatencyTest : public ControllerTest,
                        public ::testing::WithParamInterface<Crash> {
 protected:
  // The burst, off-load and reclaim. With a crash, the workload stops, the
  // process is SIGKILLed and started again (same address, same state): every
  // block then reads at its acknowledged version, and the reclaim still
  // brings every byte home.
  void Scenario(const Crash& crash);
};

TEST_P(TailLatencyTest, OffLoadsABurstAndReclaimsIt) { Scenario(GetParam()); }

INSTANTIATE_TEST_SUITE_P(
    Crashes, TailLatencyTest,
    ::testing::Values(Crash{"", false}, Crash{"volume", false},
                      Crash{"volume", true}, Crash{"S1", false},
                      Crash{"S1", true}, Crash{"S3", false}, Crash{"S3", true},
                      Crash{"controller", false}, Crash{"controller", true},
                      Crash{"", false, true}, Crash{"S3", true, true}),
    [](const ::testing::TestParamInfo<Crash>& i) {
      const std::string spread = i.param.spread ? "Spread" : "";
      if (*i.param.who == '\0') return spread + "NoCrash";
      return spread + i.param.who +
             (i.param.in_reclaim ? "KilledInReclaim" : "KilledWhileAway");
    });

void TailLatencyTest::Scenario(const Crash& crash) {
  // The reclaim is slow enough (about 3 s) to crash something in it. The
  // quiet load is about 35 IOs/s (twice that in an interval on a busy
  // machine, the opens included); the burst (four writers, closed loop) is
  // about 2 000, and passes 150 even under a sanitizer.
  const std::string app =
      StrCat("tail_latency:alpha=2,end=1.5,window=1,min_ops=150,hold=1,",
             "cooldown=600,rate=512K", crash.spread ? ",spread=2" : "");
  const char* kApp = app.c_str();
  StartController(0, {"--app", kApp});
  TempDir r3;
  ServerProcess* s1 = StartServer("S1", r1_.path());
  ServerProcess* s2 = StartServer("S2", r2_.path());
  ServerProcess* s3 = StartServer("S3", r3.path());
  constexpr uint32_t kBlocks = 512;
  std::filesystem::create_directories(r1_ / "vol");
  std::filesystem::create_directories(r2_ / "v2");
  WriteWholeFile(r1_ / "vol/f", std::string(kBlocks * kBlock, '\0'));
  WriteWholeFile(r2_ / "v2/g", std::string(64 * kBlock, 'g'));
  std::filesystem::create_directories(home_ / "vol");
  std::filesystem::create_directories(home_ / "v2");
  WriteWholeFile(home_ / "vol/f", "");
  WriteWholeFile(home_ / "v2/g", "");
  Mount({"S1=" + s1->address(), "S2=" + s2->address(), "S3=" + s3->address()});
  ASSERT_TRUE(Eventually([&] { return Connected(kFuse); }));
  ASSERT_TRUE(
      Client().Insert(kFuse, "<*, *, //home/vol/*> -> <IO, //S1/vol/*>").ok());
  ASSERT_TRUE(
      Client().Insert(kFuse, "<*, *, //home/v2/*> -> <IO, //S2/v2/*>").ok());

  // Writer w (0..4) owns the blocks b with b % 5 == w; 4 is the quiet one.
  std::vector<std::atomic<uint32_t>> acked(kBlocks);
  std::atomic<bool> burst{false}, stop{false};
  std::atomic<int> bad{0};
  std::atomic<uint64_t> reads{0};
  const std::string f = mnt_ / "vol/f";
  auto writer = [&](uint32_t w) {
    const int fd = open(f.c_str(), O_WRONLY);
    ASSERT_GE(fd, 0);
    std::mt19937 rng(w);
    uint32_t version = 0;
    while (!stop) {
      const bool active = w == 4 || burst;
      if (!active) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        continue;
      }
      const uint32_t b = (rng() % (kBlocks / 5)) * 5 + w;
      const std::string data = VersionedBlock(b, ++version);
      ASSERT_EQ(pwrite(fd, data.data(), kBlock, off_t{b} * kBlock),
                static_cast<ssize_t>(kBlock));
      acked[b] = version;
      if (w == 4) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    close(fd);
  };
  auto reader = [&] {
    const int fd = open(f.c_str(), O_RDONLY);
    ASSERT_GE(fd, 0);
    std::mt19937 rng(99);
    std::string buf(kBlock, '\0');
    while (!stop) {
      const uint32_t b = rng() % kBlocks;
      const uint32_t floor = acked[b];
      ASSERT_EQ(pread(fd, buf.data(), kBlock, off_t{b} * kBlock),
                static_cast<ssize_t>(kBlock));
      const int64_t v = VersionOfBlock(buf, b);
      if (v < 0 || v < floor) {
        ++bad;
        ADD_FAILURE() << "block " << b << " read version " << v
                      << ", acknowledged " << floor;
      }
      ++reads;
      std::this_thread::sleep_for(std::chrono::milliseconds(40));
    }
    close(fd);
  };
  auto background = [&] {  // S2's own flow
    const int fd = open((mnt_ / "v2/g").c_str(), O_RDONLY);
    ASSERT_GE(fd, 0);
    char c[512];
    while (!stop) {
      (void)pread(fd, c, sizeof(c), 0);
      std::this_thread::sleep_for(std::chrono::milliseconds(15));
    }
    close(fd);
  };
  std::vector<std::thread> threads;
  // A failed ASSERT returns early: the workload still ends.
  JoinAll join_all{stop, threads};
  for (uint32_t w = 0; w < 5; ++w) threads.emplace_back(writer, w);
  threads.emplace_back(reader);
  threads.emplace_back(background);
  auto app_rules = [&] {
    std::vector<std::string> out;
    auto rules = Client().Rules(kFuse);
    if (rules.ok()) {
      for (const auto& r : *rules) {
        if (r.owner() == "tail_latency") out.push_back(r.text());
      }
    }
    return out;
  };
  std::this_thread::sleep_for(std::chrono::seconds(3));  // the quiet norm
  EXPECT_TRUE(app_rules().empty());
  {
    // An off-load of the quiet load (and its reclaim) could have come and
    // gone in these 3 s; the cooldown would then hide the real burst.
    auto [rc, status] =
        RunCommand(std::string(SROUTECTL_BINARY) + " --controller " +
                   controller_->address() + " --secret-file " + secret_ +
                   " offload status");
    ASSERT_EQ(rc, 0) << status;
    ASSERT_EQ(status.find("off-load:"), std::string::npos)
        << "the quiet load was taken for a burst:\n"
        << status;
  }
  burst = true;
  ASSERT_TRUE(Eventually([&] { return !app_rules().empty(); }));
  const std::vector<std::string> away = app_rules();
  ASSERT_EQ(away.size(), 1u);
  // Without a crash, the model-based exerciser runs on two more files of
  // the flow from the off-load to the end of the reclaim, paced (about 60
  // operations a second) so that the burst's end is still seen.
  std::string exercise_error;
  uint64_t exercised = 0;
  if (*crash.who == '\0') {
    threads.emplace_back([&] {
      for (uint64_t seed = 1; !stop && exercise_error.empty(); ++seed) {
        ExerciseOptions eo;
        eo.seed = seed;
        eo.ops = 300;
        eo.max_size = 128 * 1024;
        eo.max_io = 32 * 1024;
        eo.check_every = 100;
        eo.shifts_may_be_refused = true;  // FUSE passes no collapse/insert
        eo.after_op = [](uint64_t) {
          std::this_thread::sleep_for(std::chrono::milliseconds(15));
          return std::string();
        };
        const ExerciseResult r =
            Exercise({mnt_ / "vol/ea", mnt_ / "vol/eb"}, eo);
        if (!r.ok) exercise_error = r.error;
        exercised += r.ops_done;
      }
    });
  }
  EXPECT_NE(away[0].find(crash.spread
                             ? "track_writes(spread); <IO, "
                               "//S3/.sroute-tl-1/vol/*>, <IO, "
                               "//S2/.sroute-tl-1/vol/*>"
                             : "track_writes(); <IO, //S3/.sroute-tl-1/vol/*>"),
            std::string::npos)
      << away[0];
  // What the app does, as an operator sees it.
  auto offload_status = [&] {
    return RunCommand(std::string(SROUTECTL_BINARY) + " --controller " +
                      controller_->address() + " --secret-file " + secret_ +
                      " offload status");
  };
  // The rule is stored before the update that makes it returns to the app,
  // which then records the off-load: wait for that record.
  int src = -1;
  std::string status;
  EXPECT_TRUE(Eventually([&] {
    std::tie(src, status) = offload_status();
    return status.find("  away  fuse-test") != std::string::npos;
  })) << status;
  EXPECT_EQ(src, 0) << status;
  EXPECT_NE(
      status.find(StrCat(
          "  away  fuse-test  <*, *, //home/vol/*> -> <IO, //S1/vol/*>  ",
          crash.spread ? "S1 -> S3,S2  (//S3/.sroute-tl-1,//S2/.sroute-tl-1)"
                       : "S1 -> S3  (//S3/.sroute-tl-1)")),
      std::string::npos)
      << status;
  EXPECT_NE(status.find("off-load: S1 demand"), std::string::npos) << status;
  auto [jrc, json] =
      RunCommand(std::string(SROUTECTL_BINARY) + " --controller " +
                 controller_->address() + " --secret-file " + secret_ +
                 " offload status --json");
  ASSERT_EQ(jrc, 0) << json;
  const proto::CtlOffloadStatus offload =
      FromJson<proto::CtlOffloadStatus>(json);
  ASSERT_EQ(offload.flows_size(), 1) << json;
  EXPECT_EQ(offload.flows(0).home(), "S1") << json;
  ASSERT_GT(offload.flows(0).targets_size(), 0) << json;
  EXPECT_EQ(offload.flows(0).targets(0), "S3") << json;
  // Writes land on S3 (and S2): at least 32 distinct blocks of the burst
  // in each temporary file (sparse: its allocated blocks tell), and the
  // reader has checked 30 blocks while they are away (over 100 in all).
  auto blocks_away = [](const std::filesystem::path& p) -> int64_t {
    struct stat st {};
    return stat(p.c_str(), &st) == 0 ? st.st_blocks * 512 / kBlock : 0;
  };
  const uint64_t reads_at_offload = reads;
  EXPECT_TRUE(Eventually([&] {
    return blocks_away(r3 / ".sroute-tl-1/vol/f") >= 32 &&
           (!crash.spread || blocks_away(r2_ / ".sroute-tl-1/vol/f") >= 32) &&
           reads >= reads_at_offload + 30 && reads > 100;
  })) << "S3: "
      << blocks_away(r3 / ".sroute-tl-1/vol/f")
      << " blocks, S2: " << blocks_away(r2_ / ".sroute-tl-1/vol/f")
      << ", reads " << reads;
  // Stops the workload, kills `crash.who` and starts it again, then checks
  // every block through the volume.
  auto crash_now = [&] {
    stop = true;
    for (auto& t : threads) t.join();
    threads.clear();
    const std::string who = crash.who;
    if (who == "volume") {
      volume_->Kill();
      volume_.reset();
      Mount({"S1=" + s1->address(), "S2=" + s2->address(),
             "S3=" + s3->address()});
    } else if (who == "S1" || who == "S3") {
      TempDir& root = who == "S1" ? r1_ : r3;
      ServerProcess*& s = who == "S1" ? s1 : s3;
      const int port = s->port();
      s->Kill();
      s = StartServer(who, root.path(), port);
    } else if (who == "controller") {
      const int port = controller_->port();
      controller_->Kill();
      client_.reset();
      StartController(port, {"--app", kApp});
    }
    ASSERT_TRUE(Eventually([&] { return Connected(kFuse); }));
    std::string back;
    ASSERT_TRUE(Eventually([&] {
      back = ReadWholeFile(f);  // the servers may still be reconnecting
      return back.size() == kBlocks * kBlock;
    }));
    for (uint32_t b = 0; b < kBlocks; ++b) {
      ASSERT_EQ(VersionOfBlock(back.substr(b * kBlock, kBlock), b),
                static_cast<int64_t>(acked[b].load()))
          << "block " << b << " after " << who << " restarted";
    }
  };
  if (*crash.who != '\0' && !crash.in_reclaim) {
    EXPECT_EQ(app_rules(), away) << "the off-load ended before the crash";
    crash_now();
  }
  burst = false;
  if (*crash.who != '\0' && crash.in_reclaim) {
    ASSERT_TRUE(Eventually([&] {
      const auto r = app_rules();
      return r.size() == 1 &&
             r[0].find("track_writes(home)") != std::string::npos;
    })) << "no reclaim began";
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    EXPECT_TRUE(std::filesystem::exists(r3 / ".sroute-tl-1"))
        << "the reclaim ended before the crash";
    crash_now();
  }
  // A crash during the reclaim costs a step's command timeout (10 s) to the
  // host that went away, and the machine may be busy.
  const bool reclaimed = Eventually(
      [&] {
        return app_rules().empty() &&
               !std::filesystem::exists(r3 / ".sroute-tl-1") &&
               !std::filesystem::exists(r2_ / ".sroute-tl-1");
      },
      60);
  stop = true;
  for (auto& t : threads) t.join();
  ASSERT_TRUE(reclaimed) << "app rules: " << app_rules().size();
  EXPECT_EQ(exercise_error, "");
  if (*crash.who == '\0') {
    EXPECT_GE(exercised, 300u);
  }
  EXPECT_EQ(bad, 0);
  EXPECT_GT(reads, 100u);
  // Every byte is home, at its last acknowledged version.
  const std::string home = ReadWholeFile(r1_ / "vol/f");
  ASSERT_EQ(home.size(), kBlocks * kBlock);
  for (uint32_t b = 0; b < kBlocks; ++b) {
    EXPECT_EQ(VersionOfBlock(home.substr(b * kBlock, kBlock), b),
              static_cast<int64_t>(acked[b].load()))
        << "block " << b;
  }
  std::tie(src, status) = offload_status();
  EXPECT_NE(status.find("FLOWS\nRULES\nDECISIONS\n"), std::string::npos)
      << status;
  EXPECT_NE(status.find("reclaimed: every byte of"), std::string::npos)
      << status;
  // No read rule, no record left.
  EXPECT_EQ(HostRules(VolumeHost()).find("delegate:"), std::string::npos);
  for (ServerProcess* s : {s1, s2, s3}) {
    auto [rc, out] =
        RunCommand(std::string(SROUTECTL_BINARY) + " --host " + s->address() +
                   " --secret-file " + secret_ + " records --sswitch " + kFuse);
    EXPECT_EQ(rc, 0);
    EXPECT_EQ(out, "") << s->address();
  }
}

// Real programs as ordinary users on a flow whose writes are off-loaded the
// way tail_latency does it (spread over S3 and S2, track_writes), then
// reclaimed the way it does: SQLite (rollback journal and WAL) and git
// work while away; after the reclaim every file reads the same through the
// volume and straight from S1's disk, the databases check whole and git
// fsck passes, as the users.
TEST_F(ControllerTest, SqliteAndGitAsUsersOnAnOffLoadedFlow) {
  StartController();
  TempDir r3;
  ServerProcess* s1 = StartServer("S1", r1_.path());
  ServerProcess* s2 = StartServer("S2", r2_.path());
  ServerProcess* s3 = StartServer("S3", r3.path());
  for (TempDir* d : {&home_, &r1_, &r2_, &r3}) {
    ASSERT_EQ(chmod(d->path().c_str(), 0755), 0);
  }
  ASSERT_EQ(mkdir((home_ / "vol").c_str(), 0755), 0);
  ASSERT_EQ(mkdir((r1_ / "vol").c_str(), 0755), 0);
  Mount({"S1=" + s1->address(), "S2=" + s2->address(), "S3=" + s3->address()});
  ASSERT_TRUE(Eventually([&] { return Connected(kFuse); }));
  ASSERT_TRUE(
      Client().Insert(kFuse, "<*, *, //home/vol/*> -> <IO, //S1/vol/*>").ok());
  const testing::User nobody = testing::Nobody();
  const testing::User grouped = testing::Grouped();
  const std::string db_dir = mnt_ / "vol/db", git_dir = mnt_ / "vol/git";
  ASSERT_EQ(mkdir(db_dir.c_str(), 0755), 0) << strerror(errno);
  ASSERT_EQ(chown(db_dir.c_str(), nobody.uid, nobody.gid), 0);
  ASSERT_EQ(mkdir(git_dir.c_str(), 0755), 0);
  ASSERT_EQ(chown(git_dir.c_str(), grouped.uid, grouped.gid), 0);
  // A database and a repository begun at home.
  EXPECT_EQ(testing::SqliteSessionAs(nobody, db_dir + "/home.db", "WAL",
                                     [](int rows) { return rows < 100; }),
            "ok");
  std::string out = testing::GitAs(
      grouped, git_dir,
      "git init -q repo && cd repo && seq 1 5000 > base && git add -A && "
      "git commit -qm base");
  ASSERT_TRUE(testing::GitOk(out)) << out;

  const char* kAway =
      "@1 <*, w, //home/vol/*> -> track_writes(spread); "
      "<IO, //S3/.sroute-tl-1/vol/*>, <IO, //S2/.sroute-tl-1/vol/*>";
  const char* kHome =
      "@1 <*, w, //home/vol/*> -> track_writes(home); <IO, //S1/vol/*>";
  ASSERT_TRUE(Client().Insert(kFuse, kAway).ok());
  for (const std::string mode : {"DELETE", "WAL"}) {
    EXPECT_EQ(
        testing::SqliteSessionAs(nobody, db_dir + "/" + mode + ".db", mode,
                                 [](int rows) { return rows < 400; }),
        "ok")
        << mode;
  }
  out = testing::GitAs(
      grouped, git_dir,
      "cd repo && echo more >> base && for i in $(seq 1 40); do "
      "mkdir -p d$((i % 5)) && seq 1 $((i * 90)) > d$((i % 5))/f$i; done && "
      "git add -A && git commit -qm away && git gc -q && "
      "git fsck --full --strict && git log --format=%s");
  ASSERT_TRUE(testing::GitOk(out)) << out;
  EXPECT_NE(out.find("away\nbase\n"), std::string::npos) << out;
  EXPECT_EQ(testing::SqliteCheckAs(nobody, db_dir + "/home.db"), "ok 100");
  // The writes went away, to both targets.
  EXPECT_TRUE(std::filesystem::exists(r3 / ".sroute-tl-1/vol"));
  EXPECT_TRUE(std::filesystem::exists(r2_ / ".sroute-tl-1/vol"));

  // Every file as the volume shows it while away.
  auto tree = [](const std::string& root) {
    std::map<std::string, std::string> files;
    for (const auto& e : std::filesystem::recursive_directory_iterator(root)) {
      if (e.is_regular_file()) {
        files[std::filesystem::relative(e.path(), root)] =
            ReadWholeFile(e.path());
      }
    }
    return files;
  };
  const auto away = tree(mnt_ / "vol");
  ASSERT_GT(away.size(), 40u);

  // The reclaim: writes home, the ranges away copied home, rules and
  // folders gone.
  auto rules = Client().Rules(kFuse);
  ASSERT_TRUE(rules.ok());
  RuleChanges to_home{kFuse, {kHome}, {}};
  for (const auto& r : *rules) {
    if (r.text().find("track_writes(spread)") != std::string::npos) {
      to_home.remove.push_back(r.cid());
    }
  }
  ASSERT_EQ(to_home.remove.size(), 1u);
  UpdateSpec spec;
  spec.changes.push_back(to_home);
  ASSERT_TRUE(Client().Update(spec).ok());
  proto::Copy reclaim;
  reclaim.set_mode(proto::Copy::RECLAIM);
  reclaim.set_from("//home/vol/");
  reclaim.set_forget_anchor("<*, w, //home/vol/*>");
  absl::StatusOr<proto::CopyProgress> p;
  for (int step = 0; step < 100; ++step) {
    p = Client().Copy(kFuse, reclaim);
    ASSERT_TRUE(p.ok()) << p.status();
    if (p->done()) break;
  }
  ASSERT_TRUE(p->done()) << p->DebugString();
  rules = Client().Rules(kFuse);
  ASSERT_TRUE(rules.ok());
  RuleChanges drop{kFuse, {}, {}};
  for (const auto& r : *rules) {
    if (r.text().find("track_writes(home)") != std::string::npos) {
      drop.remove.push_back(r.cid());
    }
  }
  UpdateSpec drop_spec;
  drop_spec.changes.push_back(drop);
  ASSERT_TRUE(Client().Update(drop_spec).ok());
  for (const char* folder : {"//S3/.sroute-tl-1", "//S2/.sroute-tl-1"}) {
    proto::Copy rm;
    rm.set_mode(proto::Copy::REMOVE);
    rm.set_from(folder);
    ASSERT_TRUE(Client().Copy(kFuse, rm).ok()) << folder;
  }
  EXPECT_FALSE(std::filesystem::exists(r3 / ".sroute-tl-1"));
  EXPECT_FALSE(std::filesystem::exists(r2_ / ".sroute-tl-1"));
  EXPECT_EQ(HostRules(VolumeHost()).find("delegate:"), std::string::npos);
  // Every byte home: the volume and S1's disk agree with what was read away.
  EXPECT_TRUE(tree(mnt_ / "vol") == away);
  {
    const auto on_disk = tree(r1_ / "vol");
    for (const auto& [name, bytes] : away) {
      auto it = on_disk.find(name);
      EXPECT_TRUE(it != on_disk.end() && it->second == bytes)
          << name << " on S1's disk differs from what the volume read";
    }
    for (const auto& [name, bytes] : on_disk) {
      EXPECT_TRUE(away.contains(name)) << name << " is only on S1's disk";
    }
  }
  for (const std::string mode : {"DELETE", "WAL"}) {
    EXPECT_EQ(testing::SqliteCheckAs(nobody, db_dir + "/" + mode + ".db"),
              "ok 400")
        << mode;
  }
  out = testing::GitAs(grouped, git_dir,
                       "cd repo && git fsck --full --strict && "
                       "echo home >> base && git commit -qam home && "
                       "git log --format=%s");
  ASSERT_TRUE(testing::GitOk(out)) << out;
  EXPECT_NE(out.find("home\naway\nbase\n"), std::string::npos) << out;
}

// sroutectl apps: the controller's apps listed, started with arguments
// (and run again after a restart of the controller), looked at, stopped
// (and not run again); bad names and arguments refused with the reason.
TEST_F(ControllerTest, AppsStartStopAndSurviveARestart) {
  StartController();
  auto ctl = [&](const std::string& args) {
    return RunCommand(std::string(SROUTECTL_BINARY) + " --controller " +
                      controller_->address() + " --secret-file " + secret_ +
                      " " + args);
  };
  auto [rc, out] = ctl("apps ls");
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(out.find("tail_latency  running"), std::string::npos) << out;
  EXPECT_NE(out.find("available: "), std::string::npos) << out;
  EXPECT_NE(out.find("tail_latency"), std::string::npos) << out;
  std::tie(rc, out) = ctl("apps start nope");
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("nope"), std::string::npos) << out;
  std::tie(rc, out) = ctl("apps start tail_latency alpha=0.5");
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("alpha"), std::string::npos) << out;
  std::tie(rc, out) = ctl("apps start tail_latency alpha=3,end=1.5");
  ASSERT_EQ(rc, 0) << out;
  std::tie(rc, out) = ctl("apps start tail_latency");
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("runs already"), std::string::npos) << out;
  std::tie(rc, out) = ctl("apps ls");
  EXPECT_NE(out.find("tail_latency  running  -  alpha=3,end=1.5"),
            std::string::npos)
      << out;
  // A restarted controller runs it again.
  const int port = controller_->port();
  controller_.reset();
  client_.reset();
  StartController(port);
  std::tie(rc, out) = ctl("apps status tail_latency --json");
  ASSERT_EQ(rc, 0) << out;
  const proto::AppInfo app = FromJson<proto::AppInfo>(out);
  EXPECT_EQ(app.state(), "running") << out;
  EXPECT_EQ(app.args(), "alpha=3,end=1.5") << out;
  std::tie(rc, out) = ctl("apps stop tail_latency");
  ASSERT_EQ(rc, 0) << out;
  std::tie(rc, out) = ctl("apps stop tail_latency");
  EXPECT_EQ(rc, 1) << out;
  controller_.reset();
  client_.reset();
  StartController(port);
  std::tie(rc, out) = ctl("apps ls");
  EXPECT_EQ(out.find("tail_latency  running"), std::string::npos) << out;
  std::tie(rc, out) = ctl("apps status tail_latency");
  EXPECT_EQ(rc, 1) << out;
}

// A control app out of process receives the headers that an
// <IOHeader, controller> detour sends, including those sent while the
// controller was away; IO never waits for it.
class HeaderCollector : public ControlApp {
 public:
  absl::Status Start(ControllerApi&) override { return absl::OkStatus(); }
  void OnHeader(const HeaderEvent& e) override {
    std::lock_guard<std::mutex> l(mu);
    files.push_back(e.header.file);
  }
  size_t count() {
    std::lock_guard<std::mutex> l(mu);
    return files.size();
  }
  std::mutex mu;
  std::vector<std::string> files;
};

TEST_F(ControllerTest, HeaderDetoursWaitForAnAbsentController) {
  StartController();
  Mount({});
  ASSERT_TRUE(Eventually([&] { return Connected(kFuse); }));
  ASSERT_TRUE(Client()
                  .Insert(kFuse,
                          "<*, w, //home/watched> -> <IO, //home/watched>, "
                          "<IOHeader, controller>")
                  .ok());
  WriteWholeFile(home_ / "watched", "");
  const int port = controller_->port();
  controller_.reset();
  client_.reset();
  for (int i = 0; i < 5; ++i) {
    ASSERT_EQ(PwriteAll(mnt_ / "watched", "x", i), 0);  // IO goes on
  }
  StartController(port);
  HeaderCollector app;
  std::thread runner([&] { ASSERT_TRUE(Client().Run(app).ok()); });
  const bool got = Eventually([&] { return app.count() >= 5; });
  Client().Stop();
  runner.join();
  EXPECT_TRUE(got) << app.count();
  EXPECT_EQ(ReadWholeFile(home_ / "watched"), "xxxxx");
}

TEST_F(ControllerTest, IoSentToTheControllerIsOrderedAndWaitsForIt) {
  StartController();
  Mount({});
  ASSERT_TRUE(Eventually([&] { return Connected(kFuse); }));
  ASSERT_TRUE(
      Client().Insert(kFuse, "<*, w, //home/serial> -> <IO, controller>").ok());
  WriteWholeFile(home_ / "serial", "");
  std::vector<std::thread> writers;
  for (int w = 0; w < 4; ++w) {
    writers.emplace_back([&, w] {
      for (int i = 0; i < 10; ++i) {
        EXPECT_EQ(
            PwriteAll(mnt_ / "serial", std::string(1, 'a' + w), w * 10 + i), 0);
      }
    });
  }
  for (auto& t : writers) t.join();
  const std::string data = ReadWholeFile(home_ / "serial");
  ASSERT_EQ(data.size(), 40u);
  for (int w = 0; w < 4; ++w) {
    EXPECT_EQ(data.substr(w * 10, 10), std::string(10, 'a' + w));
  }
}

// The cache_sizing app end to end: it adds the cache stage and each
// tenant's route (with the shards() delegate), the volume sends it the
// samples of the tenants' reads, and it sizes their partitions from the
// curves it builds, which sroutectl prints.
TEST_F(ControllerTest, CacheSizingSizesTheTenantsPartitionsFromTheirReads) {
  controller_ = std::make_unique<ServerProcess>(
      SROUTE_CONTROLLER_BINARY,
      std::vector<std::string>{
          "--db", db_ / "db", "--secret-file", secret_, "--listen",
          "127.0.0.1:0", "--stats-interval-ms", "200", "--app",
          "cache_sizing:sswitch=" + kFuse +
              ",stage=cacheA,budget=4M,tenants=alice+bob,rate=1,"
              "files=//home/data/*,interval=1"});
  ASSERT_TRUE(controller_->ok());
  std::filesystem::create_directories(home_ / "data");
  // bob is uid 65534: the mount point and the tree must let him in.
  for (const std::string& d : {mnt_.path(), home_.path(), home_ / "data"}) {
    chmod(d.c_str(), 0755);
  }
  // alice's working set is small (256 KiB), bob's large (3 MiB).
  WriteWholeFile(home_ / "data/a", std::string(256 << 10, 'a'));
  WriteWholeFile(home_ / "data/b", std::string(3 << 20, 'b'));
  chmod((home_ / "data/a").c_str(), 0644);
  chmod((home_ / "data/b").c_str(), 0644);
  volume_ = std::make_unique<MountedVolume>(
      SROUTE_FUSE_BINARY, mnt_.path(),
      std::vector<std::string>{"--backing", home_.path(), "--secret-file",
                               secret_, "--kernel-cache", "off", "--name",
                               kFuse, "--controller", controller_->address(),
                               "--control", ctl_ / "sock", "--tenant",
                               "alice=uid:0", "--tenant", "bob=uid:65534"});
  ASSERT_TRUE(volume_->ok());
  const std::string host = VolumeHost();
  // The app's routes arrive with its first round.
  ASSERT_TRUE(Eventually([&] {
    const std::string rules = HostRules(host);
    return rules.find("<alice, r|w, //home/data/*> -> shards(") !=
               std::string::npos &&
           rules.find("<bob, r|w, //home/data/*> -> shards(") !=
               std::string::npos;
  })) << HostRules(host);
  auto ctl = [&](const std::string& args) {
    return RunCommand(std::string(SROUTECTL_BINARY) + " --controller " +
                      controller_->address() + " --secret-file " + secret_ +
                      " " + args);
  };
  // Both tenants read their files, round after round, until the app has
  // both curves.
  std::string curves;
  const bool built = Eventually([&] {
    for (int i = 0; i < 3; ++i) {
      (void)ReadWholeFile(mnt_ / "data/a");
      (void)testing::RunAs(testing::Nobody(), [&] {
        return std::to_string(ReadWholeFile(mnt_ / "data/b").size());
      });
    }
    int rc = 0;
    std::tie(rc, curves) = ctl("cache mrc --json");
    if (rc != 0) return false;  // no curve yet
    std::set<std::string> seen;
    const auto parsed = FromJson<proto::CtlCacheCurves>(curves);
    for (const proto::CtlCacheCurve& c : parsed.curves()) {
      if (c.references() > 0 && c.points_size() > 0) seen.insert(c.tenant());
    }
    return seen == std::set<std::string>{"alice", "bob"};
  });
  ASSERT_TRUE(built) << curves;
  // The partitions: sized from the curves, within the budget; alice's
  // whole working set fits in what she got.
  std::string stages;
  ASSERT_TRUE(Eventually([&] {
    stages = RunCommand(std::string(SROUTECTL_BINARY) + " --host " + host +
                        " stages ls")
                 .second;
    return stages.find("partition=alice/") != std::string::npos;
  })) << stages;
  auto budget = [&](const std::string& who) -> uint64_t {
    const size_t at = stages.find("partition=" + who + "/");
    return at == std::string::npos
               ? 0
               : std::stoull(stages.substr(at + who.size() + 11));
  };
  EXPECT_GE(budget("alice"), 256u << 10) << stages;
  EXPECT_LE(budget("alice") + budget("bob"), 4u << 20) << stages;
  auto [rc, text] = ctl("cache mrc --tenant bob");
  EXPECT_EQ(rc, 0) << text;
  EXPECT_NE(text.find("# tenant bob references "), std::string::npos) << text;
}

// --- sroute-trace through the controller ------------------------------------

class TraceThroughControllerTest : public ControllerTest {
 protected:
  // FUSE -> S1 -> S2, whose writes wait 5 ms in a delay stage; the rules
  // are the controller's.
  void SetUpPath() {
    StartController();
    ServerProcess* s2 =
        StartServer("S2", r2_.path(), 0, {"--stage", "d=delay:delay_us=5000"});
    ServerProcess* s1 =
        StartServer("S1", r1_.path(), 0, {"--endpoint", "S2=" + s2->address()});
    for (const TempDir* d : {&r1_, &r2_, &home_}) {
      ASSERT_EQ(mkdir((*d / "fwd").c_str(), 0755), 0);
    }
    WriteWholeFile(r2_ / "fwd/x", "");
    Mount({"S1=" + s1->address()});
    for (const char* h : {kFuse.c_str(), "S1", "S2"}) {
      ASSERT_TRUE(Eventually([&] { return Connected(h); })) << h;
    }
    UpdateSpec spec;
    spec.changes = {{kFuse, {"<*, *, //home/fwd/*> -> <IO, //S1/fwd/*>"}, {}},
                    {"S1", {"<*, *, //S1/fwd/*> -> <IO, //S2/fwd/*>"}, {}},
                    {"S2", {"<*, w, //S2/fwd/*> -> <IO, stage:d>"}, {}}};
    auto r = Client().Update(spec);
    ASSERT_TRUE(r.ok()) << r.status();
    cids_ = r->cids;
    writer_ = std::thread([this] {
      while (!stop_) {
        PwriteAll(mnt_ / "fwd/x", "traced", 0);
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
    });
  }
  void TearDown() override {
    stop_ = true;
    if (writer_.joinable()) writer_.join();
    ControllerTest::TearDown();
  }
  std::string Tool() {
    return std::string(SROUTE_TRACE_BINARY) + " --controller " +
           controller_->address() + " --secret-file " + secret_;
  }
  // The rules sroute-trace owns, at the controller and on the hosts.
  int ToolRules() {
    int n = 0;
    for (const std::string& h : {kFuse, std::string("S1"), std::string("S2")}) {
      auto rules = Client().Rules(h);
      if (!rules.ok()) continue;
      for (const proto::ManagedRule& m : *rules) {
        if (m.owner().rfind("sroute-trace:", 0) == 0) ++n;
      }
    }
    for (const std::string& host :
         {VolumeHost(), servers_["S1"]->address(), servers_["S2"]->address()}) {
      for (const std::string& line : OutputLines(HostRules(host))) {
        if (line.find("owner=sroute-trace:") != std::string::npos) ++n;
      }
    }
    return n;
  }
  std::vector<uint64_t> cids_;
  std::atomic<bool> stop_{false};
  std::thread writer_;
};

// The tool finds the path across the three hosts from the rules, taps each
// in one update, and shows every hop with the controller's rule ids; its
// taps are gone from the controller and every host afterwards.
TEST_F(TraceThroughControllerTest, FollowsThePathAcrossHosts) {
  SetUpPath();
  // Not a structured binding: clang 14 cannot capture one in a lambda.
  int rc = 0;
  std::string out;
  std::tie(rc, out) = RunCommand(Tool() + " --op w --count 10 //home/fwd/x");
  ASSERT_EQ(rc, 0) << out;
  // The path, host by host, from the rules.
  for (const std::string& want :
       {"  fuse-test //home/fwd/x  (tapped)\n    rule " +
            std::to_string(cids_[0]),
        "  S1 //S1/fwd/x\n    rule " + std::to_string(cids_[1]),
        "  S2 //S2/fwd/x\n    rule " + std::to_string(cids_[2])}) {
    EXPECT_NE(out.find(want), std::string::npos) << want << "\n" << out;
  }
  // The table: each hop with its host and the controller's rule id.
  auto row = [&](const std::string& host, const std::string& kind) {
    for (const std::string& l : OutputLines(out)) {
      std::istringstream in(l);
      std::string h, k, rule;
      in >> h >> k >> rule;
      if (h == host && k == kind) return rule;
    }
    return std::string("(none)");
  };
  EXPECT_EQ(row("fuse-test", "rule"), std::to_string(cids_[0])) << out;
  EXPECT_EQ(row("S1", "rule"), std::to_string(cids_[1])) << out;
  EXPECT_EQ(row("S2", "rule"), std::to_string(cids_[2])) << out;
  EXPECT_EQ(row("S2", "stage"), std::to_string(cids_[2])) << out;
  std::string slowest;
  for (const std::string& l : OutputLines(out)) {
    if (l.find("<- slowest") != std::string::npos) slowest = l;
  }
  EXPECT_NE(slowest.find("S2"), std::string::npos) << out;
  EXPECT_NE(slowest.find("stage"), std::string::npos) << out;
  EXPECT_EQ(ToolRules(), 0);
}

// Killed, the tool cannot remove its taps: the controller does, from every
// host, when the lease runs out.
TEST_F(TraceThroughControllerTest, TapsOfAKilledToolGoWithItsLease) {
  SetUpPath();
  const pid_t pid =
      StartCommand(Tool() + " --lease-ms 3000 --interval-ms 200 //home/fwd/x");
  // The tap at the controller and on the volume, where the path starts.
  ASSERT_TRUE(Eventually([&] { return ToolRules() == 2; })) << ToolRules();
  // Renewed while the tool lives: the taps outlive two leases. (3 s: a
  // renewal a loaded machine delays by less keeps them.)
  EXPECT_TRUE(Throughout([&] { return ToolRules() == 2; }, 6))
      << "the taps went while their tool renewed the lease";
  kill(pid, SIGKILL);
  WaitCommand(pid);
  EXPECT_TRUE(Eventually([&] { return ToolRules() == 0; })) << ToolRules();
}
}  // namespace
}  // namespace sroute
