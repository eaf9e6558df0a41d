// SPDX-License-Identifier: Apache-2.0
// The slo_admission app (controller/apps/slo_admission.h) for real: a
// controller running it, two storage servers with a qos stage each, and a
// volume whose tenants are real users (uids 1001 and 1002) writing through
// it. Registrations reach the stages live, one that does not fit is refused
// and changes nothing, a reservation over both servers follows the tenant's
// demand, no acknowledged write is lost while the stages change under the
// writers, and the registrations are back after a controller restart.
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "controller/client.h"
#include "gtest/gtest.h"
#include "proto/controller.pb.h"
#include "tests/util/controller_fixture.h"
#include "tests/util/mounted_volume.h"
#include "tests/util/run_as.h"
#include "tests/util/server_process.h"
#include "tests/util/temp_dir.h"
#include "tests/util/wait.h"
#include "util/strings.h"

namespace sroute {
namespace {

using ::sroute::testing::Eventually;
using ::sroute::testing::ReadWholeFile;
using ::sroute::testing::RunAs;
using ::sroute::testing::ServerProcess;
using ::sroute::testing::TempDir;
using ::sroute::testing::User;

const std::string kQosVolume = "fuse-qos";
// 1 000 tokens/s within 2 ms, 4 000 within 20 ms; writes cost 10.
const std::string kQosStageSpec =
    "q=qos:write_cost=10,curve=2000/1000/2000,curve=20000/4000/8000";
constexpr int kPassBlocks = 64;
constexpr size_t kPassBlockBytes = 4096;

// Block i of pass p: its bytes say both.
std::string PassBlock(int pass, int i) {
  std::string b(kPassBlockBytes, static_cast<char>('a' + (pass + i) % 26));
  const std::string tag = StrCat("pass ", pass, " block ", i, "\n");
  b.replace(0, tag.size(), tag);
  return b;
}

// Writes whole passes over `path` (kPassBlocks blocks each) for `seconds`, each
// write acknowledged before the next; returns the passes done, or what
// failed.
std::string WritePasses(const std::string& path, int seconds) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT, 0644);
  if (fd < 0) return StrCat("open: ", strerror(errno));
  const auto end =
      std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  int pass = 0;
  for (; pass == 0 || std::chrono::steady_clock::now() < end; ++pass) {
    for (int i = 0; i < kPassBlocks; ++i) {
      const std::string b = PassBlock(pass, i);
      if (pwrite(fd, b.data(), b.size(), i * kPassBlockBytes) !=
          static_cast<ssize_t>(b.size())) {
        const std::string why = strerror(errno);
        close(fd);
        return StrCat("pwrite: ", why);
      }
    }
  }
  close(fd);
  return StrCat(pass);
}

std::string LastPass(int passes) {
  std::string out;
  for (int i = 0; i < kPassBlocks; ++i) out += PassBlock(passes - 1, i);
  return out;
}

class QosAdmissionTest : public testing::ControllerFixture {
 protected:
  QosAdmissionTest() : ControllerFixture(kQosVolume) {}
  void StartAdmission(int port = 0) {
    StartController(port, {"--app", "slo_admission"});
  }
  absl::StatusOr<proto::AppAnswer> Qos(const std::string& command,
                                       std::vector<std::string> args = {}) {
    proto::AppCall call;
    call.set_app("slo_admission");
    call.set_command(command);
    for (std::string& a : args) call.add_args(std::move(a));
    return Client().CallApp(call);
  }
  // The tenants of `sswitch`'s stage q: NAME -> reserved IOPS (0: be).
  std::map<std::string, uint32_t> StageTenants(const std::string& sswitch) {
    std::map<std::string, uint32_t> out;
    proto::Stages list;
    list.set_action(proto::Stages::LIST);
    auto lists = Client().StagesAt(sswitch, list);
    if (!lists.ok()) return {{"<error>", 0}};
    for (const proto::HostStages& h : lists->hosts()) {
      for (const proto::StageStats& s : h.stages()) {
        if (s.config().name() != "q") continue;
        for (const auto& t : s.config().qos().tenant()) {
          out[t.name()] = t.qos_class() == "lc" ? t.iops() : 0;
        }
      }
    }
    return out;
  }
};

TEST_F(QosAdmissionTest, ReservationsFollowRegistrationsDemandAndRestarts) {
  ASSERT_NO_FATAL_FAILURE(StartAdmission());
  for (const auto& [name, root] :
       {std::pair{"S1", r1_.path()}, std::pair{"S2", r2_.path()}}) {
    StartServer(name, root, 0,
                {"--stage", kQosStageSpec, "--rule",
                 StrCat("<*, *, //", name, "/db/*> -> <IO, stage:q>")});
  }
  // The users reach their folders (the temporary roots are private).
  namespace fs = std::filesystem;
  for (const std::string& root : {home_.path(), r1_.path(), r2_.path()}) {
    fs::permissions(root, fs::perms::owner_all | fs::perms::group_read |
                              fs::perms::group_exec | fs::perms::others_read |
                              fs::perms::others_exec);
  }
  for (const fs::path dir :
       {home_ / "a", home_ / "b", r1_ / "db", r2_ / "db"}) {
    fs::create_directories(dir);
    fs::permissions(dir, fs::perms::all);
  }
  ASSERT_NO_FATAL_FAILURE(Mount(
      {"S1=" + servers_["S1"]->address(), "S2=" + servers_["S2"]->address()},
      {"--tenant", "alice=uid:1001", "--tenant", "bob=uid:1002", "--rule",
       "<*, *, //home/a/*> -> <IO, //S1/db/*>", "--rule",
       "<*, *, //home/b/*> -> <IO, //S2/db/*>"}));

  // alice reserves 1 000 reads/s within 20 ms over both servers: with no
  // demand seen yet, half on each.
  auto admitted =
      Qos("register", {"alice", "class=lc", "iops=1000", "read_percent=100",
                       "p95_us=20000", "stage=q", "on=S1+S2"});
  ASSERT_TRUE(admitted.ok()) << admitted.status();
  EXPECT_EQ(admitted->text(), "admitted alice: S1/q 500 IOPS, S2/q 500 IOPS");
  EXPECT_EQ(StageTenants("S1"),
            (std::map<std::string, uint32_t>{{"alice", 500}}));
  EXPECT_EQ(StageTenants("S2"),
            (std::map<std::string, uint32_t>{{"alice", 500}}));

  // bob wants 1 100 reads/s within 2 ms on S1, where the device serves
  // 1 000 tokens/s at that target: refused, whatever alice's split.
  auto refused =
      Qos("register", {"bob", "iops=1100", "p95_us=2000", "stage=q", "on=S1"});
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find(
                "bob is refused: S1/q cannot hold its reservations: they "
                "need 1100 tokens/s (bob 1100) and it serves 1000 within 2000 "
                "us: 100 tokens/s short"),
            std::string::npos)
      << refused.status();
  EXPECT_EQ(StageTenants("S1"),
            (std::map<std::string, uint32_t>{{"alice", 500}}));
  // A target stricter than the device's curve: nothing says it can.
  auto strict =
      Qos("register", {"bob", "iops=10", "p95_us=500", "stage=q", "on=S1"});
  ASSERT_FALSE(strict.ok());
  EXPECT_NE(strict.status().message().find("its curve begins at 2000 us"),
            std::string::npos)
      << strict.status();

  // alice writes only to S1 (a/), bob to S2 (b/), as themselves, while the
  // registrations change under them.
  std::string alice_passes, bob_passes;
  std::thread alice([&] {
    alice_passes = RunAs(User{1001, 1001, {}, 022},
                         [&] { return WritePasses(mnt_ / "a/data", 4); });
  });
  std::thread bob([&] {
    bob_passes = RunAs(User{1002, 1002, {}, 022},
                       [&] { return WritePasses(mnt_ / "b/data", 4); });
  });
  for (int round = 0; round < 3; ++round) {
    auto r = Qos("register", {"bob", "class=be", "stage=q", "on=S1+S2"});
    EXPECT_TRUE(r.ok()) << r.status();
    r = Qos("register", {"carol", "iops=300", "read_percent=50", "p95_us=20000",
                         "stage=q", "on=S2"});
    EXPECT_TRUE(r.ok()) << r.status();
    r = Qos("unregister", {"carol"});
    EXPECT_TRUE(r.ok()) << r.status();
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  }
  // The split follows alice's demand: S1 gets nearly all of it, S2 keeps
  // its 5 %.
  EXPECT_TRUE(Eventually([&] {
    auto s1 = StageTenants("S1"), s2 = StageTenants("S2");
    return s1["alice"] >= 900 && s2["alice"] <= 100 && s2["alice"] >= 50 &&
           s1["alice"] + s2["alice"] >= 1000 && s1.count("bob") == 1;
  })) << "S1 alice "
      << StageTenants("S1")["alice"] << ", S2 alice "
      << StageTenants("S2")["alice"];
  alice.join();
  bob.join();

  // Every acknowledged write is there, in the last pass's bytes.
  const int a_passes = std::atoi(alice_passes.c_str());
  const int b_passes = std::atoi(bob_passes.c_str());
  ASSERT_GT(a_passes, 0) << alice_passes;
  ASSERT_GT(b_passes, 0) << bob_passes;
  EXPECT_EQ(ReadWholeFile(r1_ / "db/data"), LastPass(a_passes));
  EXPECT_EQ(ReadWholeFile(r2_ / "db/data"), LastPass(b_passes));
  EXPECT_EQ(ReadWholeFile(mnt_ / "a/data"), LastPass(a_passes));
  auto status = Qos("status");
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_NE(status->json().find("\"name\":\"alice\""), std::string::npos)
      << status->json();

  // The controller restarts: the registrations are its store's, and a
  // change after the restart is checked against them.
  const int port = controller_->port();
  client_.reset();
  controller_.reset();
  ASSERT_NO_FATAL_FAILURE(StartAdmission(port));
  ASSERT_TRUE(Eventually([&] {
    auto ls = Qos("ls");
    return ls.ok() &&
           ls->text().find(
               "\nalice  lc  1000  100  20000  q  "
               "S1,S2\n") != std::string::npos &&
           ls->text().find("\nbob  be") != std::string::npos;
  }));
  EXPECT_TRUE(Eventually([&] { return StageTenants("S1").count("alice"); }));
  auto too_much = Qos(
      "register", {"dave", "iops=4001", "p95_us=20000", "stage=q", "on=S2"});
  ASSERT_FALSE(too_much.ok());
  EXPECT_NE(too_much.status().message().find("tokens/s short"),
            std::string::npos)
      << too_much.status();
  ASSERT_TRUE(Qos("unregister", {"alice"}).ok());
  EXPECT_TRUE(Eventually([&] {
    return StageTenants("S1") == std::map<std::string, uint32_t>{{"bob", 0}} &&
           StageTenants("S2") == std::map<std::string, uint32_t>{{"bob", 0}};
  }));
}

}  // namespace
}  // namespace sroute
