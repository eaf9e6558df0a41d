// SPDX-License-Identifier: Apache-2.0
// sroutectl --controller for real: a controller, a storage server and a
// mounted FUSE volume as separate processes on 127.0.0.1, driven only
// through the sroutectl binary: hosts, rules add/ls/load/rm, stats, quiesce
// and drain through the controller, and its exit codes when the controller
// is away or refuses the secret.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "proto/cli_json.pb.h"
#include "proto/controller.pb.h"
#include "tests/util/ctl_json.h"
#include "tests/util/mounted_volume.h"
#include "tests/util/run_command.h"
#include "tests/util/server_process.h"
#include "tests/util/temp_dir.h"
#include "tests/util/wait.h"

namespace sroute {
namespace {

using ::sroute::testing::Eventually;
using ::sroute::testing::FromJson;
using ::sroute::testing::MountedVolume;
using ::sroute::testing::ReadWholeFile;
using ::sroute::testing::RunCommand;
using ::sroute::testing::ServerProcess;
using ::sroute::testing::TempDir;
using ::sroute::testing::WriteSecretFile;
using ::sroute::testing::WriteWholeFile;

const std::string kFuse = "fuse-test";
const std::string kMoveRule = "<*, *, //home/moved/*> -> <IO, //S2/moved/*>";

// `s` as one shell word.
std::string Quote(const std::string& s) {
  std::string out = "'";
  for (const char c : s) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

// The first line of `text` that holds `needle` ("" if none).
std::string LineWith(const std::string& text, const std::string& needle) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.find(needle) != std::string::npos) return line;
  }
  return "";
}

// The row of a table that starts with the cell `first`.
std::string Row(const std::string& table, const std::string& first) {
  std::istringstream in(table);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(first + " ", 0) == 0) return line;
  }
  return "";
}

// The host named `sswitch` in `hosts` (an empty one if there is none).
proto::CtlHost HostIn(
    const google::protobuf::RepeatedPtrField<proto::CtlHost>& hosts,
    const std::string& sswitch) {
  for (const proto::CtlHost& h : hosts) {
    if (h.sswitch() == sswitch) return h;
  }
  return proto::CtlHost();
}

// The rule with `cid` in `rules` (an empty one if there is none).
proto::CtlRule RuleIn(
    const google::protobuf::RepeatedPtrField<proto::CtlRule>& rules,
    uint64_t cid) {
  for (const proto::CtlRule& r : rules) {
    if (r.cid() == cid) return r;
  }
  return proto::CtlRule();
}

// Counter `name` of stage `stage` in `stages` (-1 if there is none).
int64_t StageCounter(
    const google::protobuf::RepeatedPtrField<proto::StageStats>& stages,
    const std::string& stage, const std::string& name) {
  for (const proto::StageStats& s : stages) {
    if (s.config().name() != stage) continue;
    auto it = s.counters().find(name);
    return it == s.counters().end() ? -1 : it->second;
  }
  return -1;
}

int PwriteAll(const std::string& path, const std::string& data, off_t offset) {
  const int fd = open(path.c_str(), O_WRONLY);
  if (fd < 0) return errno;
  const ssize_t n = pwrite(fd, data.data(), data.size(), offset);
  const int err = n < 0 ? errno : 0;
  close(fd);
  if (err != 0) return err;
  return n == static_cast<ssize_t>(data.size()) ? 0 : EIO;
}

class SroutectlControllerTest : public ::testing::Test {
 protected:
  void SetUp() override { secret_ = WriteSecretFile(keys_ / "secret"); }
  void TearDown() override {
    volume_.reset();
    server_.reset();
    controller_.reset();
  }

  // The controller, storage server S2 and the volume (named kFuse, with S2
  // as an endpoint), all registered with the controller.
  void StartCluster() {
    controller_ = std::make_unique<ServerProcess>(
        SROUTE_CONTROLLER_BINARY,
        std::vector<std::string>{"--db", db_ / "db", "--secret-file", secret_,
                                 "--listen", "127.0.0.1:0",
                                 "--stats-interval-ms", "200"});
    ASSERT_TRUE(controller_->ok()) << "sroute-controller did not start";
    server_ = std::make_unique<ServerProcess>(
        SROUTE_SERVER_BINARY,
        std::vector<std::string>{
            "--root", r2_.path(), "--name", "S2", "--secret-file", secret_,
            "--listen", "127.0.0.1:0", "--controller", controller_->address()});
    ASSERT_TRUE(server_->ok()) << "sroute-server did not start";
    MountVolume();
    ASSERT_TRUE(
        Eventually([&] { return Connected(kFuse) && Connected("S2"); }));
  }

  // The volume kFuse, registered with the controller (again, after a
  // volume_.reset()).
  void MountVolume() {
    volume_ = std::make_unique<MountedVolume>(
        SROUTE_FUSE_BINARY, mnt_.path(),
        std::vector<std::string>{"--backing", home_.path(), "--secret-file",
                                 secret_, "--kernel-cache", "off", "--name",
                                 kFuse, "--controller", controller_->address(),
                                 "--control", ctl_ / "sock", "--endpoint",
                                 "S2=" + server_->address()});
    ASSERT_TRUE(volume_->ok()) << "sroute-fuse did not mount";
  }

  // sroutectl --controller ADDR --secret-file F ARGS: exit code and output.
  std::pair<int, std::string> Ctl(const std::string& args) {
    return RunCommand(std::string(SROUTECTL_BINARY) + " --controller " +
                      controller_->address() + " --secret-file " + secret_ +
                      " " + args);
  }
  // sroutectl --host unix:VOLUME_SOCKET ARGS: the volume's own sSwitch.
  std::pair<int, std::string> VolumeCtl(const std::string& args) {
    return RunCommand(std::string(SROUTECTL_BINARY) +
                      " --host unix:" + (ctl_ / "sock") + " " + args);
  }
  proto::CtlHostStats VolumeStats() {
    auto [rc, out] = VolumeCtl("stats --json");
    EXPECT_EQ(rc, 0) << out;
    return rc == 0 ? FromJson<proto::CtlHostStats>(out) : proto::CtlHostStats();
  }
  // Whether `hosts --json` says `sswitch` is connected (false while the
  // controller cannot answer).
  bool Connected(const std::string& sswitch) {
    auto [rc, out] = Ctl("hosts --json");
    return rc == 0 &&
           HostIn(FromJson<proto::CtlHosts>(out).hosts(), sswitch).connected();
  }
  // Adds `rule` to the volume's sSwitch; returns its cid (0 on failure).
  uint64_t AddToVolume(const std::string& rule, const std::string& extra = "") {
    auto [rc, out] =
        Ctl("rules add --host " + kFuse + " " + extra + " " + Quote(rule));
    EXPECT_EQ(rc, 0) << out;
    return rc == 0 ? std::stoull(out) : 0;
  }

  TempDir keys_, db_, home_, mnt_, ctl_, r2_, files_;
  std::string secret_;
  std::unique_ptr<ServerProcess> controller_;
  std::unique_ptr<ServerProcess> server_;
  std::unique_ptr<MountedVolume> volume_;
};

TEST_F(SroutectlControllerTest, HostsListsBothHostsConnected) {
  StartCluster();
  auto [rc, table] = Ctl("hosts");
  ASSERT_EQ(rc, 0) << table;
  const std::string fuse = Row(table, kFuse);
  EXPECT_NE(fuse.find(" fuse "), std::string::npos) << table;
  EXPECT_NE(fuse.find("connected, seen"), std::string::npos) << table;
  EXPECT_NE(fuse.find("home=" + home_.path() + "/dir"), std::string::npos)
      << table;
  EXPECT_NE(fuse.find("S2=" + server_->address() + "/server"),
            std::string::npos)
      << table;
  const std::string s2 = Row(table, "S2");
  EXPECT_NE(s2.find(" server "), std::string::npos) << table;
  EXPECT_NE(s2.find(server_->address()), std::string::npos) << table;
  EXPECT_NE(s2.find("connected, seen"), std::string::npos) << table;

  auto [jrc, json] = Ctl("hosts --json");
  ASSERT_EQ(jrc, 0) << json;
  const auto hosts = FromJson<proto::CtlHosts>(json).hosts();
  const proto::CtlHost fj = HostIn(hosts, kFuse);
  EXPECT_EQ(fj.role(), "fuse") << json;
  EXPECT_TRUE(fj.connected()) << json;
  EXPECT_TRUE(fj.has_last_seen_ms_ago()) << json;
  EXPECT_EQ(fj.rules(), 0u) << json;
  bool s2_endpoint = false;
  for (const proto::CtlEndpoint& e : fj.endpoints()) {
    s2_endpoint |= e.name() == "S2" && e.address() == server_->address() &&
                   e.kind() == "server";
  }
  EXPECT_TRUE(s2_endpoint) << json;
  const proto::CtlHost sj = HostIn(hosts, "S2");
  EXPECT_EQ(sj.role(), "server") << json;
  EXPECT_EQ(sj.address(), server_->address()) << json;
  EXPECT_TRUE(sj.connected()) << json;
}

TEST_F(SroutectlControllerTest, RulesAddTakesEffectAndRulesLsShowsIt) {
  StartCluster();
  // Two hosts are registered: which one is meant must be said.
  auto [amb_rc, amb] = Ctl("rules add " + Quote(kMoveRule));
  EXPECT_EQ(amb_rc, 1);
  EXPECT_NE(amb.find("name one with --host"), std::string::npos) << amb;
  auto [none_rc, none] = Ctl("rules add --host nosuch " + Quote(kMoveRule));
  EXPECT_EQ(none_rc, 1);
  EXPECT_NE(none.find("no sSwitch 'nosuch'"), std::string::npos) << none;
  // sroutectl reads the rules: a malformed one is named by number and
  // column, and nothing is sent (the good one before it is not installed).
  auto [bad_rc, bad] =
      Ctl("rules add --host " + kFuse + " " + Quote(kMoveRule) + " " +
          Quote("<*, w, //home/a/../b> -> <IO, //S2/b>"));
  EXPECT_EQ(bad_rc, 1);
  EXPECT_NE(bad.find("rule 2: 17: path component '..' is not allowed"),
            std::string::npos)
      << bad;
  EXPECT_EQ(Ctl("rules ls --host " + kFuse + " --json").second,
            "{\"rules\":[]}\n");

  const uint64_t cid = AddToVolume(kMoveRule, "--owner alice");
  ASSERT_NE(cid, 0u);
  std::filesystem::create_directories(home_ / "moved");
  WriteWholeFile(mnt_ / "moved/a", "routed");
  EXPECT_EQ(ReadWholeFile(r2_ / "moved/a"), "routed");
  EXPECT_FALSE(std::filesystem::exists(home_ / "moved/a"));

  auto [rc, table] = Ctl("rules ls");
  ASSERT_EQ(rc, 0) << table;
  const std::string row = LineWith(table, kMoveRule);
  EXPECT_EQ(row.rfind(std::to_string(cid) + " ", 0), 0u) << table;
  EXPECT_NE(row.find(kFuse), std::string::npos) << table;
  EXPECT_NE(row.find("alice"), std::string::npos) << table;

  auto [jrc, json] = Ctl("rules ls --host " + kFuse + " --json");
  ASSERT_EQ(jrc, 0) << json;
  const proto::CtlRule rule =
      RuleIn(FromJson<proto::CtlRules>(json).rules(), cid);
  EXPECT_EQ(rule.sswitch(), kFuse) << json;
  EXPECT_EQ(rule.owner(), "alice") << json;
  EXPECT_EQ(rule.rule(), kMoveRule) << json;
  // The server's rules are not the volume's.
  EXPECT_EQ(Ctl("rules ls --host S2 --json").second, "{\"rules\":[]}\n");
}

TEST_F(SroutectlControllerTest, RulesLoadInstallsAFileAllOrNothing) {
  StartCluster();
  const std::string bad = files_ / "bad.rules";
  WriteWholeFile(bad, kMoveRule + "\n<*, q, //home/x> -> <IO, //S2/x>\n");
  auto [brc, bout] = Ctl("rules load --host " + kFuse + " " + bad);
  EXPECT_EQ(brc, 1);
  EXPECT_NE(bout.find(bad + ":2:"), std::string::npos) << bout;
  EXPECT_NE(bout.find("nothing installed"), std::string::npos) << bout;
  EXPECT_EQ(Ctl("rules ls --json").second, "{\"rules\":[]}\n");

  const std::string good = files_ / "good.rules";
  WriteWholeFile(good, "# moved files live on S2\n" + kMoveRule +
                           "\n<*, *, //home/logs/*> -> <IO, //S2/logs/*>\n");
  auto [rc, out] =
      Ctl("rules load --host " + kFuse + " --owner loader " + good);
  ASSERT_EQ(rc, 0) << out;
  std::istringstream cids(out);
  uint64_t first = 0, second = 0;
  cids >> first >> second;
  EXPECT_NE(first, 0u) << out;
  EXPECT_NE(second, 0u) << out;
  const std::string listed = Ctl("rules ls --json").second;
  const auto rules = FromJson<proto::CtlRules>(listed).rules();
  EXPECT_EQ(RuleIn(rules, first).rule(), kMoveRule) << listed;
  EXPECT_EQ(RuleIn(rules, second).owner(), "loader") << listed;
  std::filesystem::create_directories(home_ / "logs");
  WriteWholeFile(mnt_ / "logs/today", "log line");
  EXPECT_EQ(ReadWholeFile(r2_ / "logs/today"), "log line");
}

TEST_F(SroutectlControllerTest, RulesRmDeletesByCid) {
  StartCluster();
  const uint64_t cid = AddToVolume(kMoveRule);
  ASSERT_NE(cid, 0u);
  auto [urc, unknown] = Ctl("rules rm " + std::to_string(cid + 100));
  EXPECT_EQ(urc, 1);
  EXPECT_NE(unknown.find("no rule with cid " + std::to_string(cid + 100)),
            std::string::npos)
      << unknown;
  EXPECT_EQ(Ctl("rules rm '<*, *, //home/moved/*>'").first, 1);

  auto [rc, out] = Ctl("rules rm " + std::to_string(cid));
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(Ctl("rules ls --json").second, "{\"rules\":[]}\n");
  std::filesystem::create_directories(home_ / "moved");
  WriteWholeFile(mnt_ / "moved/b", "home again");
  EXPECT_EQ(ReadWholeFile(home_ / "moved/b"), "home again");
  EXPECT_FALSE(std::filesystem::exists(r2_ / "moved/b"));
}

TEST_F(SroutectlControllerTest, StatsShowTheRuleThatSawIo) {
  StartCluster();
  const uint64_t cid = AddToVolume(kMoveRule);
  ASSERT_NE(cid, 0u);
  std::filesystem::create_directories(home_ / "moved");
  WriteWholeFile(mnt_ / "moved/s", "");
  // Stats are per interval: keep writing until an interval reports the rule.
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    for (int i = 0; !stop; ++i) {
      ASSERT_EQ(PwriteAll(mnt_ / "moved/s", "x", i % 4096), 0);
    }
  });
  std::string json;
  proto::CtlClusterStats stats;
  proto::CtlRule rule;
  const bool seen = Eventually([&] {
    int rc = 0;
    std::tie(rc, json) = Ctl("stats --json");
    if (rc != 0) return false;
    stats = FromJson<proto::CtlClusterStats>(json);
    rule = RuleIn(stats.rules(), cid);
    return rule.writes() > 0;
  });
  stop = true;
  writer.join();
  ASSERT_TRUE(seen) << json;
  EXPECT_EQ(rule.sswitch(), kFuse) << json;
  EXPECT_GT(rule.write_bytes(), 0u) << json;
  EXPECT_EQ(rule.ops(), rule.reads() + rule.writes() + rule.others()) << json;
  EXPECT_FALSE(rule.has_p999_ns()) << json;  // a host's only
  EXPECT_TRUE(HostIn(stats.hosts(), kFuse).connected()) << json;
  EXPECT_TRUE(HostIn(stats.hosts(), "S2").connected()) << json;

  auto [rc, table] = Ctl("stats");
  ASSERT_EQ(rc, 0) << table;
  EXPECT_NE(Row(table, kFuse).find("connected"), std::string::npos) << table;
}

TEST_F(SroutectlControllerTest, QuiesceAndDrainThroughTheController) {
  StartCluster();
  const std::string pattern = Quote("<*, w, //home/q>");
  WriteWholeFile(home_ / "q", "");
  auto [rc, out] = Ctl("quiesce --host " + kFuse + " " + pattern + " on");
  ASSERT_EQ(rc, 0) << out;
  std::atomic<bool> written{false};
  std::thread writer([&] {
    EXPECT_EQ(PwriteAll(mnt_ / "q", "parked", 0), 0);
    written = true;
  });
  // The write waits at the volume's sSwitch, parked.
  const bool parked = Eventually([&] { return VolumeStats().parked() == 1; });
  EXPECT_TRUE(parked) << VolumeStats().DebugString();
  EXPECT_FALSE(written);
  // A parked IO is not in flight: the drain is done at once, the write
  // stays parked.
  auto [drc, dout] =
      Ctl("drain --host " + kFuse + " " + pattern + " --timeout-ms 5000");
  EXPECT_EQ(drc, 0) << dout;
  EXPECT_FALSE(written);
  auto [orc, oout] = Ctl("quiesce --host " + kFuse + " " + pattern + " off");
  EXPECT_EQ(orc, 0) << oout;
  writer.join();
  EXPECT_TRUE(written);
  EXPECT_EQ(ReadWholeFile(home_ / "q"), "parked");
  // A bad pattern is refused by the controller, not a transport failure.
  EXPECT_EQ(Ctl("quiesce --host " + kFuse + " '<nonsense' on").first, 1);
}

TEST_F(SroutectlControllerTest, StagesAddSetRmAndListThroughTheController) {
  StartCluster();
  // Not a structured binding: clang 14 cannot capture one in a lambda.
  int rc = 0;
  std::string out;
  std::tie(rc, out) =
      Ctl("stages add --host " + kFuse + " tap=delay:delay_us=10");
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("delay_us=10"), std::string::npos) << out;
  // A rule through it, and IO: the stage's counters reach the controller
  // with the host's next report.
  ASSERT_NE(AddToVolume("<*, w, //home/t/*> -> <IO, stage:tap>"), 0u);
  std::filesystem::create_directories(home_ / "t");
  WriteWholeFile(mnt_ / "t/f", "through the tap");
  EXPECT_EQ(ReadWholeFile(home_ / "t/f"), "through the tap");
  std::string json;
  ASSERT_TRUE(Eventually([&] {
    int rc = 0;
    std::tie(rc, json) = Ctl("stages ls --json");
    if (rc != 0) return false;
    const auto stages = FromJson<proto::CtlStages>(json);
    for (const proto::CtlHostStages& h : stages.hosts()) {
      for (const proto::StageStats& s : h.stages()) {
        if (h.sswitch() == kFuse && s.config().name() == "tap" && s.ios() > 0) {
          return true;
        }
      }
    }
    return false;
  })) << json;
  // set goes to the host now; bad options are the host's clear refusal.
  std::tie(rc, out) = Ctl("stages set --host " + kFuse + " tap delay_us=20");
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("delay_us=20"), std::string::npos) << out;
  std::tie(rc, out) = Ctl("stages set --host " + kFuse + " tap warp=9");
  EXPECT_EQ(rc, 1);
  EXPECT_NE(out.find("unknown option 'warp'"), std::string::npos) << out;
  // rm: refused while a rule names it, done once none does.
  std::tie(rc, out) = Ctl("stages rm --host " + kFuse + " tap");
  EXPECT_EQ(rc, 1);
  EXPECT_NE(out.find("in use by rule"), std::string::npos) << out;
  std::tie(rc, out) = Ctl("stages add --host S2 sc=delay");
  ASSERT_EQ(rc, 0) << out;
  // Every host's stages, as of their last reports.
  EXPECT_TRUE(Eventually([&] {
    std::tie(rc, out) = Ctl("stages ls");
    return rc == 0 && Row(out, "S2").find("sc") != std::string::npos;
  })) << out;
  EXPECT_NE(Row(out, kFuse).find("tap"), std::string::npos) << out;
  std::tie(rc, out) = Ctl("stages rm --host S2 sc");
  EXPECT_EQ(rc, 0) << out;
  EXPECT_EQ(out.find("sc "), std::string::npos) << out;
}

// A stage added and changed through the controller is kept there: a host
// that restarts without it gets it back (with the options set live) before
// the rules that route through it, which would not install otherwise.
TEST_F(SroutectlControllerTest, ControllerStagesComeBackWhenTheHostRestarts) {
  StartCluster();
  auto [rc, out] = Ctl("stages add --host " + kFuse + " cc=cache");
  ASSERT_EQ(rc, 0) << out;
  std::tie(rc, out) =
      Ctl("stages set --host " + kFuse + " cc partition_bytes=2M");
  ASSERT_EQ(rc, 0) << out;
  ASSERT_NE(AddToVolume("<*, *, //home/t/*> -> <IO, stage:cc>"), 0u);
  std::filesystem::create_directories(home_ / "t");
  WriteWholeFile(mnt_ / "t/f", "cached");

  volume_.reset();  // the host goes; its config has no stage cc
  MountVolume();
  ASSERT_TRUE(Eventually([&] { return Connected(kFuse); }));
  const std::string local =
      std::string(SROUTECTL_BINARY) + " --host unix:" + (ctl_ / "sock") + " ";
  std::tie(rc, out) = RunCommand(local + "stages ls");
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(Row(out, "cc").find("partition_bytes=2097152"), std::string::npos)
      << out;
  std::tie(rc, out) = RunCommand(local + "rules ls");
  EXPECT_NE(out.find("stage:cc"), std::string::npos) << out;
  EXPECT_EQ(ReadWholeFile(mnt_ / "t/f"), "cached");
  EXPECT_EQ(ReadWholeFile(mnt_ / "t/f"), "cached");
  // The second read was the stage's hit.
  std::tie(rc, out) = RunCommand(local + "stats --json");
  EXPECT_GT(
      StageCounter(FromJson<proto::CtlHostStats>(out).stages(), "cc", "hits"),
      0)
      << out;
}

TEST_F(SroutectlControllerTest, UnreachableControllerExitsTwo) {
  const std::string address =
      "127.0.0.1:" + std::to_string(testing::FreeLoopbackPort());
  for (const char* cmd : {"hosts", "rules ls", "stats --json"}) {
    auto [rc, out] =
        RunCommand(std::string(SROUTECTL_BINARY) + " --controller " + address +
                   " --secret-file " + secret_ + " " + cmd);
    EXPECT_EQ(rc, 2) << cmd << ": " << out;
    EXPECT_NE(out.find(address), std::string::npos) << out;
    EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << out;
  }
}

TEST_F(SroutectlControllerTest, WrongSecretFailsClearly) {
  StartCluster();
  const std::string wrong =
      WriteSecretFile(keys_ / "wrong", "another-cluster-secret-9876543210");
  auto [rc, out] =
      RunCommand(std::string(SROUTECTL_BINARY) + " --controller " +
                 controller_->address() + " --secret-file " + wrong + " hosts");
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("cluster secret"), std::string::npos) << out;
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << out;
  // No secret at all is bad input too.
  auto [nrc, nout] =
      RunCommand(std::string(SROUTECTL_BINARY) + " --controller " +
                 controller_->address() + " hosts");
  EXPECT_EQ(nrc, 1) << nout;
  EXPECT_NE(nout.find("--secret-file"), std::string::npos) << nout;
}

// Every --json output this cluster gives, at the controller and at the
// volume's and the server's own ports, and offline, parses back into the
// message docs/reference/json.md names for its command (FromJson: one
// document on one line, no key the message lacks), with the values the
// text shows.
TEST_F(SroutectlControllerTest, EveryJsonOutputParsesIntoItsMessage) {
  StartCluster();
  const uint64_t cid = AddToVolume(
      "<*, w, //home/t/*> -> trace(1); <IO, //home/t/*>", "--owner json");
  ASSERT_NE(cid, 0u);
  std::filesystem::create_directories(home_ / "t");
  WriteWholeFile(mnt_ / "t/f", "traced");
  // What a command printed, once it exited 0.
  auto out = [](const std::pair<int, std::string>& run) {
    EXPECT_EQ(run.first, 0) << run.second;
    return run.second;
  };

  // The controller.
  EXPECT_EQ(
      HostIn(FromJson<proto::CtlHosts>(out(Ctl("hosts --json"))).hosts(), "S2")
          .role(),
      "server");
  const proto::CtlRule managed = RuleIn(
      FromJson<proto::CtlRules>(out(Ctl("rules ls --json"))).rules(), cid);
  EXPECT_EQ(managed.owner(), "json");
  EXPECT_EQ(managed.sswitch(), kFuse);
  EXPECT_EQ(
      FromJson<proto::CtlClusterStats>(out(Ctl("stats --json"))).hosts_size(),
      2);
  const proto::CtlStages cluster_stages =
      FromJson<proto::CtlStages>(out(Ctl("stages ls --json")));
  ASSERT_EQ(cluster_stages.hosts_size(), 2);
  EXPECT_TRUE(cluster_stages.hosts(0).has_sswitch());
  EXPECT_EQ(FromJson<proto::CtlCheck>(out(Ctl("rules check --json"))).errors(),
            0u);
  const proto::AppList apps =
      FromJson<proto::AppList>(out(Ctl("apps ls --json")));
  EXPECT_NE(std::find(apps.available().begin(), apps.available().end(),
                      "tail_latency"),
            apps.available().end());
  out(Ctl("apps start tail_latency"));
  const proto::AppInfo app =
      FromJson<proto::AppInfo>(out(Ctl("apps status tail_latency --json")));
  EXPECT_EQ(app.name(), "tail_latency");
  EXPECT_EQ(app.state(), "running");
  EXPECT_EQ(FromJson<proto::CtlOffloadStatus>(out(Ctl("offload status --json")))
                .flows_size(),
            0);
  out(Ctl("apps stop tail_latency"));

  // The volume.
  const proto::CtlRules local =
      FromJson<proto::CtlRules>(out(VolumeCtl("rules ls --json")));
  ASSERT_EQ(local.rules_size(), 1);
  EXPECT_FALSE(local.rules(0).has_sswitch());
  EXPECT_EQ(local.rules(0).owner(), "json");
  const proto::CtlHostStats stats = VolumeStats();
  ASSERT_EQ(stats.rules_size(), 1);
  EXPECT_GT(stats.rules(0).ops(), 0u);
  EXPECT_TRUE(stats.rules(0).has_p999_ns());
  EXPECT_FALSE(stats.rules(0).has_reads());  // the controller's only
  const proto::CtlTraces traces =
      FromJson<proto::CtlTraces>(out(VolumeCtl("traces --json")));
  ASSERT_GT(traces.traces_size(), 0);
  EXPECT_EQ(traces.traces(0).file(), "//home/t/f");
  EXPECT_GT(traces.traces(0).hops_size(), 0);
  EXPECT_GT(FromJson<proto::CtlSlowOps>(out(VolumeCtl("slow --json")))
                .slow_threshold_ns(),
            0u);
  EXPECT_EQ(
      FromJson<proto::CtlCheck>(out(VolumeCtl("rules check --json"))).errors(),
      0u);
  out(VolumeCtl("stages add rs=replica_set:member=home,member=S2"));
  const proto::CtlStages stages =
      FromJson<proto::CtlStages>(out(VolumeCtl("stages ls --json")));
  ASSERT_EQ(stages.hosts_size(), 1);
  EXPECT_FALSE(stages.hosts(0).has_sswitch());
  ASSERT_EQ(stages.hosts(0).stages_size(), 1);
  EXPECT_EQ(stages.hosts(0).stages(0).config().kind(), "replica_set");
  for (const char* cmd : {"replicas ls --json", "replicas status rs --json"}) {
    const proto::CtlReplicaSets sets =
        FromJson<proto::CtlReplicaSets>(out(VolumeCtl(cmd)));
    ASSERT_EQ(sets.sets_size(), 1) << cmd;
    EXPECT_EQ(sets.sets(0).set(), "rs") << cmd;
    EXPECT_EQ(sets.sets(0).members_size(), 2) << cmd;
  }
  const proto::CtlGcStatus gc =
      FromJson<proto::CtlGcStatus>(out(VolumeCtl("gc status rs --json")));
  ASSERT_EQ(gc.sets_size(), 1);
  EXPECT_EQ(gc.sets(0).mode(), "off");

  // The server.
  const std::string server = std::string(SROUTECTL_BINARY) + " --host " +
                             server_->address() + " --secret-file " + secret_;
  EXPECT_EQ(
      FromJson<proto::CtlRecords>(out(RunCommand(server + " records --json")))
          .records_size(),
      0);
  EXPECT_EQ(
      FromJson<proto::CtlHostStats>(out(RunCommand(server + " stats --json")))
          .rules_size(),
      0);

  // Offline: a rule file's shadowed rule.
  const std::string file = files_ / "shadow.rules";
  WriteWholeFile(file,
                 "<*, *, //home/a> -> <IO, //x/a>\n"
                 "<*, *, //home/a> -> <IO, //y/a>\n");
  auto [rc, text] =
      RunCommand(std::string(SROUTECTL_BINARY) + " rules check --json " + file);
  EXPECT_EQ(rc, 0) << text;
  const proto::CtlCheck check = FromJson<proto::CtlCheck>(text);
  ASSERT_EQ(check.findings_size(), 1) << text;
  EXPECT_EQ(check.findings(0).kind(), "shadowed") << text;
  EXPECT_EQ(check.findings(0).origin(), file + ":2") << text;
}

// Offline with the host known: a rule file checked against a volume's
// configuration (its home, endpoints, stages and own rules) or against
// named endpoints and stages reports the black holes the host would refuse;
// alone, the same file has no host to hold it to.
TEST(SroutectlOfflineTest, RulesCheckKnowsTheHostFromItsConfigOrFlags) {
  TempDir dir;
  const std::string rules = dir / "r.rules";
  WriteWholeFile(rules,
                 "<*, *, //home/a/*> -> <IO, stage:nowhere>\n"
                 "<*, *, //home/b/*> -> <IO, //fast/b/*>\n"
                 "<*, *, //home/c/*> -> <IO, //ghost/c/*>\n");
  const std::string config = dir / "volume.conf";
  WriteWholeFile(config,
                 "name: \"vol\"\n"
                 "backing: \"/srv/vol\"\n"
                 "endpoint { name: \"fast\" dir: \"/srv/fast\" }\n"
                 "stage { name: \"c\" kind: \"cache\" }\n"
                 "rule: \"<*, *, //home/d/*> -> <IO, stage:c>\"\n");
  const std::string ctl = std::string(SROUTECTL_BINARY) + " rules check ";
  auto [alone_rc, alone] = RunCommand(ctl + rules);
  EXPECT_EQ(alone_rc, 0) << alone;

  auto [rc, json] = RunCommand(ctl + "--json --config " + config + " " + rules);
  EXPECT_EQ(rc, 1) << json;
  const proto::CtlCheck check = FromJson<proto::CtlCheck>(json);
  std::vector<std::string> holes;
  for (const auto& f : check.findings()) {
    EXPECT_EQ(f.kind(), "black-hole") << json;
    holes.push_back(f.origin());
  }
  EXPECT_EQ(holes, (std::vector<std::string>{rules + ":1", rules + ":3"}))
      << json;

  // The same host named by flags; a stage of the config's own rules that
  // is not declared is a black hole too.
  auto [flags_rc, text] =
      RunCommand(ctl + "--endpoints home,fast,ghost --stages nowhere " + rules);
  EXPECT_EQ(flags_rc, 0) << text;
  WriteWholeFile(config,
                 "backing: \"/srv/vol\"\n"
                 "rule: \"<*, *, //home/d/*> -> <IO, stage:c>\"\n");
  std::tie(rc, text) = RunCommand(ctl + "--config " + config);
  EXPECT_EQ(rc, 1) << text;
  EXPECT_NE(text.find("fuse has no stage c"), std::string::npos) << text;
  // A config that does not parse is an error that says where.
  WriteWholeFile(config, "backing: \"/srv/vol\"\nnonsense: 1\n");
  std::tie(rc, text) = RunCommand(ctl + "--config " + config + " 2>&1");
  EXPECT_NE(rc, 0) << text;
  EXPECT_NE(text.find(config + ":2"), std::string::npos) << text;
}

}  // namespace
}  // namespace sroute
