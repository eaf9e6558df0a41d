// SPDX-License-Identifier: Apache-2.0
// Several controllers on one etcd store, for real: a three-member etcd
// cluster, two sroute-controller processes, storage servers and a FUSE
// volume, all started by the test on 127.0.0.1. One controller leads; the
// other points hosts and clients to it; when the leader is killed during
// two-phase updates under checksumming writers, the other takes over and
// every sSwitch ends with the store's rules, nothing lost, no IO routed by
// mixed rules; a leader paused past its lease changes nothing once another
// leads; etcd losing one member changes nothing, losing two stops changes
// (with a clear error) but not IO.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "controller/client.h"
#include "gtest/gtest.h"
#include "proto/controller.pb.h"
#include "rpc/channel.h"
#include "rpc/io_threads.h"
#include "rpc/leader.h"
#include "tests/util/block_writers.h"
#include "tests/util/cluster_fixture.h"
#include "tests/util/ctl_json.h"
#include "tests/util/etcd_cluster.h"
#include "tests/util/mounted_volume.h"
#include "tests/util/real_programs.h"
#include "tests/util/run_command.h"
#include "tests/util/server_process.h"
#include "tests/util/temp_dir.h"
#include "tests/util/wait.h"

namespace sroute {
namespace {

using ::sroute::testing::BlockWriters;
using ::sroute::testing::EtcdCluster;
using ::sroute::testing::Eventually;
using ::sroute::testing::FreeLoopbackPort;
using ::sroute::testing::JoinAll;
using ::sroute::testing::ReadWholeFile;
using ::sroute::testing::RunCommand;
using ::sroute::testing::ServerProcess;
using ::sroute::testing::TempDir;
using ::sroute::testing::WriteWholeFile;

const std::string kHaFuse = "fuse-ha";

// The rule texts of a host (sroutectl --host ... rules ls), sorted.
std::multiset<std::string> RuleTexts(const std::string& listing) {
  std::multiset<std::string> out;
  size_t at = 0;
  while (at < listing.size()) {
    size_t nl = listing.find('\n', at);
    if (nl == std::string::npos) nl = listing.size();
    std::string line = listing.substr(at, nl - at);
    at = nl + 1;
    const size_t colon = line.find(": ");
    if (colon == std::string::npos) continue;
    line = line.substr(colon + 2);
    line = line.substr(0, line.find("  # "));
    out.insert(line);
  }
  return out;
}

class HaControllerTest : public testing::ClusterFixture {
 protected:
  HaControllerTest() : ClusterFixture(kHaFuse) {}
  void SetUp() override {
    ClusterFixture::SetUp();
    ASSERT_TRUE(etcd_.ok()) << "etcd did not start: " << etcd_.log(0);
    ports_ = {FreeLoopbackPort(), FreeLoopbackPort()};
    controllers_.resize(2);
  }
  void TearDown() override {
    ClusterFixture::TearDown();
    for (auto& c : controllers_) c.reset();
  }
  std::string ControllerList() const override { return AllControllers(); }

  std::string ControllerAddress(int i) const {
    return "127.0.0.1:" + std::to_string(ports_[i]);
  }
  std::string AllControllers() const {
    return ControllerAddress(0) + "," + ControllerAddress(1);
  }
  // `startup`: how long it may take to listen (it waits for its store first,
  // up to its --store-wait-s, 30 s).
  void StartController(
      int i, int ttl_s = 2,
      std::chrono::seconds startup = std::chrono::seconds(15)) {
    controllers_[i] = std::make_unique<ServerProcess>(
        SROUTE_CONTROLLER_BINARY,
        std::vector<std::string>{
            "--store", "etcd://" + etcd_.endpoints() + "/ha-test/",
            "--secret-file", secret_, "--listen", ControllerAddress(i), "--id",
            "c" + std::to_string(i), "--leader-ttl-s", std::to_string(ttl_s),
            "--stats-interval-ms", "200"},
        startup);
    ASSERT_TRUE(controllers_[i]->ok()) << "controller " << i;
  }
  std::unique_ptr<ControllerClient> Client(const std::string& address,
                                           bool expect_ok = true) {
    ControllerClient::Options o;
    o.address = address;
    o.secret = kSecret;
    o.name = "test";
    o.timeout = absl::Seconds(20);
    auto c = ControllerClient::Connect(o);
    if (expect_ok) {
      EXPECT_TRUE(c.ok()) << c.status();
    }
    return c.ok() ? *std::move(c) : nullptr;
  }
  // The index of the leading controller, once one leads (-1 if none does
  // within the time).
  int Leader(int seconds = 20) {
    int leader = -1;
    Eventually(
        [&] {
          for (int i = 0; i < 2; ++i) {
            if (!controllers_[i]) continue;
            // A controller may be on its way out: not an error here.
            auto c = Client(ControllerAddress(i), /*expect_ok=*/false);
            if (!c) continue;
            auto m = c->ListControllers();
            if (!m.ok()) continue;
            for (const auto& member : m->members()) {
              if (!member.leader()) continue;
              for (int j = 0; j < 2; ++j) {
                if (member.address() == ControllerAddress(j)) leader = j;
              }
            }
            if (leader >= 0) return true;
          }
          return false;
        },
        seconds);
    return leader;
  }
  // A channel that does not follow redirects (ControllerClient does).
  absl::StatusOr<std::unique_ptr<RpcChannel>> RawChannel(
      IoThreads* threads, const std::string& address) {
    RpcChannel::Options co;
    co.address = address;
    co.secret = kSecret;
    co.name = "raw";
    co.role = "client";
    return RpcChannel::Create(threads, co);
  }
  // Controller 0 (leading), then 1, server S1 and the volume, with
  // //home/a/* routed to S1; `client` works through both controllers.
  void StartRoutedVolume(int ttl_s, std::unique_ptr<ControllerClient>* client) {
    StartController(0, ttl_s);
    ASSERT_EQ(Leader(), 0);
    StartController(1, ttl_s);
    ServerProcess* s1 = StartServer("S1", r1_.path());
    Mount({"S1=" + s1->address()});
    *client = Client(AllControllers());
    ASSERT_TRUE(*client);
    ASSERT_TRUE(Eventually([&] { return Connected(**client, kHaFuse); }));
    ASSERT_TRUE((*client)
                    ->Insert(kHaFuse, "<*, *, //home/a/*> -> <IO, //S1/a/*>")
                    .ok());
  }
  bool Connected(ControllerClient& c, const std::string& sswitch) {
    for (const TopologyHost& h : c.Topology()) {
      if (h.info.sswitch() == sswitch) return h.connected;
    }
    return false;
  }
  // The store's rules of `sswitch` (through the leader), as texts.
  std::multiset<std::string> StoreRules(ControllerClient& c,
                                        const std::string& sswitch) {
    std::multiset<std::string> out;
    auto rules = c.Rules(sswitch);
    EXPECT_TRUE(rules.ok()) << rules.status();
    if (rules.ok()) {
      for (const auto& r : *rules) out.insert(r.text());
    }
    return out;
  }

  EtcdCluster etcd_{3};
  std::vector<int> ports_;
  std::vector<std::unique_ptr<ServerProcess>> controllers_;
};

// One leads, the other follows and says where the leader is; a client or a
// host given only the follower's address ends at the leader; rules added
// through either controller land on the host; `sroutectl controllers`
// shows the members and the store's health.
TEST_F(HaControllerTest,
       EitherControllerTakesRulesAndFollowersPointToTheLeader) {
  StartController(0);
  const int first = Leader();
  ASSERT_EQ(first, 0);
  StartController(1);
  ServerProcess* s1 = StartServer("S1", r1_.path());
  Mount({"S1=" + s1->address()});
  auto via_leader = Client(ControllerAddress(0));
  auto via_follower = Client(ControllerAddress(1));
  ASSERT_TRUE(via_leader && via_follower);
  ASSERT_TRUE(Eventually([&] { return Connected(*via_leader, kHaFuse); }));
  auto a =
      via_follower->Insert(kHaFuse, "<*, *, //home/a/*> -> <IO, //S1/a/*>");
  ASSERT_TRUE(a.ok()) << a.status();
  auto b = via_leader->Insert(kHaFuse, "<*, *, //home/b/*> -> <IO, //S1/b/*>");
  ASSERT_TRUE(b.ok()) << b.status();
  const auto host = RuleTexts(HostRules(VolumeHost()));
  EXPECT_EQ(host.count("<*, *, //home/a/*> -> <IO, //S1/a/*>"), 1u);
  EXPECT_EQ(host.count("<*, *, //home/b/*> -> <IO, //S1/b/*>"), 1u);
  EXPECT_EQ(host, StoreRules(*via_follower, kHaFuse));
  // IO through the new rule reaches S1.
  std::filesystem::create_directories(home_ / "a");
  std::filesystem::create_directories(r1_ / "a");
  WriteWholeFile(mnt_ / "a/x", "through S1");
  EXPECT_EQ(ReadWholeFile(r1_ / "a/x"), "through S1");

  // A raw call to the follower: UNAVAILABLE naming the leader.
  IoThreads threads(1);
  auto raw = RawChannel(&threads, ControllerAddress(1));
  ASSERT_TRUE(raw.ok());
  proto::RpcRequest req;
  req.mutable_controller()->mutable_list_hosts();
  auto reply = (*raw)->CallSync(req, absl::Seconds(5));
  ASSERT_FALSE(reply.ok());
  EXPECT_TRUE(absl::IsUnavailable(reply.status())) << reply.status();
  EXPECT_TRUE(IsNotLeader(reply.status()));
  EXPECT_EQ(LeaderOf(reply.status()), ControllerAddress(0));
  EXPECT_NE(reply.status().message().find("does not lead"), std::string::npos)
      << reply.status();
  (*raw)->Shutdown();

  // The fixture waits for a quorum of etcd members, not for all three: on
  // a busy machine the third may still be starting (CI: "connection
  // refused" from it, once, under ASan). All are healthy within seconds.
  int rc = -1;
  std::string out;
  EXPECT_TRUE(Eventually(
      [&] {
        std::tie(rc, out) =
            RunCommand(std::string(SROUTECTL_BINARY) + " --controller " +
                       ControllerAddress(1) + " --secret-file " + secret_ +
                       " controllers");
        return rc == 0 && out.find("unhealthy") == std::string::npos;
      },
      30));
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("leader " + ControllerAddress(0)), std::string::npos)
      << out;
  EXPECT_NE(out.find("c1"), std::string::npos) << out;
  EXPECT_NE(out.find("follower"), std::string::npos) << out;
  for (const std::string& e : etcd_.member_endpoints()) {
    EXPECT_NE(out.find(e), std::string::npos) << out;
  }
  EXPECT_EQ(out.find("unhealthy"), std::string::npos) << out;
  std::tie(rc, out) = RunCommand(
      std::string(SROUTECTL_BINARY) + " --controller " + ControllerAddress(1) +
      " --secret-file " + secret_ + " controllers --json");
  ASSERT_EQ(rc, 0) << out;
  const auto members =
      ::sroute::testing::FromJson<proto::ControllerMembers>(out);
  EXPECT_EQ(members.self(), ControllerAddress(1));
  ASSERT_EQ(members.members_size(), 2) << out;
  EXPECT_TRUE(members.members(0).leader()) << out;
  EXPECT_EQ(members.members(0).address(), ControllerAddress(0)) << out;
  ASSERT_EQ(members.store_members_size(), 3) << out;
  int raft_leaders = 0;
  for (const auto& m : members.store_members()) {
    EXPECT_TRUE(m.healthy()) << out;
    raft_leaders += m.leader();
  }
  EXPECT_EQ(raft_leaders, 1) << out;
}

// What cannot work is said at start, not at a take-over: a store that is
// neither RocksDB nor etcd, etcd without members, an unknown app, an
// address others cannot reach, etcd that does not answer.
TEST_F(HaControllerTest, BadStoresAndAppsAreClearErrorsAtStart) {
  const std::string base = std::string(SROUTE_CONTROLLER_BINARY) +
                           " --secret-file " + secret_ + " --listen ";
  const std::string etcd = " --store etcd://" + etcd_.endpoints();
  struct Case {
    std::string args;
    std::string says;
  };
  const std::vector<Case> cases = {
      {ControllerAddress(0) + " --store mysql://x", "not rocksdb:DIR nor etcd"},
      {ControllerAddress(0) + " --store etcd:///p", "no etcd member"},
      {ControllerAddress(0) + etcd + " --app nope", "nope"},
      {"0.0.0.0:0" + etcd, "--advertise"},
      {ControllerAddress(0) + " --store-wait-s 1 --store etcd://127.0.0.1:" +
           std::to_string(FreeLoopbackPort()),
       "no member answered"},
      {ControllerAddress(0) + " --store-wait-s 0 --store etcd://127.0.0.1:" +
           std::to_string(FreeLoopbackPort()),
       "--store-wait-s"},
      {ControllerAddress(0) + " --db /tmp/x" + etcd, "excludes"},
  };
  for (const Case& c : cases) {
    // Each refusal comes at once; one that never came (once in CI, 600 s
    // and no word of which) is named here. timeout(1) exits 124.
    auto [rc, out] = RunCommand("timeout 60 " + base + c.args + " 2>&1");
    EXPECT_NE(rc, 124) << "no answer in 60 s: " << c.args << "\n" << out;
    EXPECT_NE(rc, 0) << c.args << "\n" << out;
    EXPECT_NE(out.find(c.says), std::string::npos) << c.args << "\n" << out;
  }
}

// A controller started while its etcd members are still coming up (a boot
// where all start at once) waits for them, then leads.
TEST_F(HaControllerTest, AControllerStartedBeforeEtcdWaitsForIt) {
  for (size_t i = 0; i < etcd_.size(); ++i) etcd_.Kill(i);
  // It listens once its store answers: three members coming back and
  // electing a leader took over 15 s once in CI beside other tests.
  std::thread start([&] { StartController(0, 2, std::chrono::seconds(40)); });
  for (size_t i = 0; i < etcd_.size(); ++i) etcd_.Restart(i);
  start.join();
  EXPECT_EQ(Leader(), 0);
}

// Blocks written by 4 writers through a rule that updates keep flipping
// between two routes (straight to S1, or through S2 which forwards to S1)
// across the FUSE host and S2, two-phase. The leader is SIGKILLed in the
// middle of it: the other controller leads within seconds, the updates go
// on through it, and so does the app started on the first; at the end
// both hosts hold the store's rules, every acknowledged block is on S1,
// nothing was ever written at S2 itself (an IO routed by the FUSE host's
// new rules and S2's old ones would have), and the killed controller,
// started again, follows.
TEST_F(HaControllerTest, LeaderKilledDuringUpdatesUnderWritersLosesNothing) {
  StartController(0);
  ASSERT_EQ(Leader(), 0);
  StartController(1);
  ServerProcess* s1 = StartServer("S1", r1_.path());
  ServerProcess* s2 =
      StartServer("S2", r2_.path(), 0, {"--endpoint", "S1=" + s1->address()});
  ASSERT_TRUE(s2->ok());
  Mount({"S1=" + s1->address(), "S2=" + s2->address()});
  auto client = Client(AllControllers());
  ASSERT_TRUE(client);
  ASSERT_TRUE(Eventually([&] {
    return Connected(*client, kHaFuse) && Connected(*client, "S1") &&
           Connected(*client, "S2");
  }));
  const std::string direct = "<*, *, //home/w/*> -> <IO, //S1/w/*>";
  const std::string via_s2 = "<*, *, //home/w/*> -> <IO, //S2/w/*>";
  const std::string forward = "<*, *, //S2/w/*> -> <IO, //S1/w/*>";
  ASSERT_TRUE(client->Insert(kHaFuse, direct).ok());
  // An app started on the leader runs on the next one. (Kept from acting:
  // an off-load of the writers' flow, flipped under it by the updates
  // below, would move their bytes to wherever it took the flow's home.)
  {
    proto::Apps start;
    start.set_action(proto::Apps::START);
    start.set_name("tail_latency");
    start.set_args("alpha=3,end=1.5,min_ops=1000000000");
    auto started = client->Apps(start);
    ASSERT_TRUE(started.ok()) << started.status();
  }
  std::filesystem::create_directories(home_ / "w");
  std::filesystem::create_directories(r1_ / "w");
  BlockWriters writers(mnt_ / "w", 4, std::chrono::milliseconds(2));
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  JoinAll join_all{stop, threads};
  // The updates: each flips the route, on both hosts at once.
  std::atomic<int> committed{0}, failed{0};
  std::atomic<bool> stop_updates{false};
  threads.emplace_back([&] {
    bool through_s2 = false;
    while (!stop_updates && !stop) {
      auto fuse_rules = client->Rules(kHaFuse);
      auto s2_rules = client->Rules("S2");
      if (!fuse_rules.ok() || !s2_rules.ok()) {
        ++failed;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        continue;
      }
      through_s2 = false;
      UpdateSpec spec;
      RuleChanges f{kHaFuse, {}, {}}, s{"S2", {}, {}};
      for (const auto& r : *fuse_rules) {
        if (r.text() == via_s2) through_s2 = true;
        f.remove.push_back(r.cid());
      }
      for (const auto& r : *s2_rules) s.remove.push_back(r.cid());
      f.insert.push_back(through_s2 ? direct : via_s2);
      if (!through_s2) s.insert.push_back(forward);
      spec.changes = {f, s};
      const auto t0 = std::chrono::steady_clock::now();
      auto done = client->Update(spec);
      const double took =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
              .count();
      if (took > 1) std::cerr << "an update took " << took << " s\n";
      if (done.ok()) {
        ++committed;
      } else {
        std::cerr << "update failed: " << done.status() << "\n";
        ++failed;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    }
  });
  ASSERT_TRUE(Eventually([&] { return committed >= 10; }))
      << committed.load() << " committed, " << failed.load() << " failed";
  // Kill the leader in the middle of the updates.
  const auto killed = std::chrono::steady_clock::now();
  controllers_[0]->Kill();
  controllers_[0].reset();
  const int at_kill = committed;
  ASSERT_TRUE(Eventually([&] { return committed >= at_kill + 10; }, 60))
      << "no update committed after the leader died (" << failed.load()
      << " failed)";
  const double failover_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - killed)
          .count();
  std::cout << "first commits by the new leader " << failover_s
            << " s after the SIGKILL\n";
  stop_updates = true;
  // Writers go on a moment by the final rules, then stop.
  const int before_end = writers.acked(0);
  ASSERT_TRUE(Eventually([&] { return writers.acked(0) >= before_end + 20; }));
  stop = true;
  for (auto& t : threads) t.join();
  threads.clear();
  writers.Stop();
  ASSERT_EQ(writers.errors(), 0);

  // The survivor leads; both hosts hold the store's rules.
  ASSERT_EQ(Leader(), 1);
  auto survivor = Client(ControllerAddress(1));
  ASSERT_TRUE(Eventually([&] {
    return RuleTexts(HostRules(VolumeHost())) ==
               StoreRules(*survivor, kHaFuse) &&
           RuleTexts(HostRules(s2->address())) == StoreRules(*survivor, "S2");
  })) << HostRules(VolumeHost())
      << "\n"
      << HostRules(s2->address());
  proto::Apps list;
  list.set_action(proto::Apps::LIST);
  auto apps = survivor->Apps(list);
  ASSERT_TRUE(apps.ok()) << apps.status();
  ASSERT_EQ(apps->apps_size(), 1);
  EXPECT_EQ(apps->apps(0).name(), "tail_latency");
  EXPECT_EQ(apps->apps(0).args(), "alpha=3,end=1.5,min_ops=1000000000");
  EXPECT_EQ(apps->apps(0).state(), "running");
  // Nothing landed at S2 itself; every acknowledged block is on S1.
  EXPECT_FALSE(std::filesystem::exists(r2_ / "w"));
  EXPECT_EQ(writers.Verify(r1_ / "w"), "");
  // The killed controller, started again, follows: once it has joined (its
  // member key written), both are members and the survivor still leads.
  StartController(0);
  auto c0 = Client(ControllerAddress(0));
  ASSERT_TRUE(c0 != nullptr);
  EXPECT_TRUE(Eventually([&] {
    auto m = c0->ListControllers();
    return m.ok() && m->members_size() == 2;
  }));
  EXPECT_EQ(Leader(), 1);
}

// A leader SIGSTOPped for longer than its lease: the other leads and takes
// a change; the paused one, continued with an update waiting for it, makes
// no change (its store is fenced, the hosts are the new leader's), and
// exits (status 75) for its supervisor to start it again as a follower.
TEST_F(HaControllerTest, APausedLeaderChangesNothingOnceAnotherLeads) {
  std::unique_ptr<ControllerClient> client;
  ASSERT_NO_FATAL_FAILURE(StartRoutedVolume(/*ttl_s=*/1, &client));
  // A raw connection to the leader, made before it pauses.
  IoThreads threads(1);
  auto raw = RawChannel(&threads, ControllerAddress(0));
  ASSERT_TRUE(raw.ok());
  ASSERT_TRUE((*raw)->Connect(absl::Seconds(5)).ok());

  kill(controllers_[0]->pid(), SIGSTOP);
  ASSERT_TRUE(Eventually([&] {
    auto c = Client(ControllerAddress(1));
    auto m = c ? c->ListControllers() : absl::UnavailableError("");
    if (!m.ok()) return false;
    for (const auto& member : m->members()) {
      if (member.leader() && member.address() == ControllerAddress(1)) {
        return true;
      }
    }
    return false;
  }));
  auto follower_client = Client(ControllerAddress(1));
  ASSERT_TRUE(Eventually([&] { return Connected(*follower_client, kHaFuse); }));
  ASSERT_TRUE(
      follower_client->Insert(kHaFuse, "<*, *, //home/b/*> -> <IO, //S1/b/*>")
          .ok());
  // An update sent to the paused leader, which it sees when continued.
  proto::RpcRequest req;
  proto::Update* u = req.mutable_controller()->mutable_update();
  proto::Change* ch = u->add_changes();
  ch->set_sswitch(kHaFuse);
  ch->add_insert("<*, *, //home/c/*> -> <IO, //S1/c/*>");
  absl::StatusOr<proto::RpcReply> reply = absl::UnknownError("not sent");
  std::thread sender([&] { reply = (*raw)->CallSync(req, absl::Seconds(30)); });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  kill(controllers_[0]->pid(), SIGCONT);
  sender.join();
  EXPECT_FALSE(reply.ok() && reply->code() == 0)
      << "the paused leader took an update";
  // It exits by itself, with EX_TEMPFAIL.
  int status = -1;
  ASSERT_TRUE(Eventually([&] { return controllers_[0]->Exited(&status); }));
  EXPECT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 75);
  // The store and the host have the new leader's rules only.
  const auto store = StoreRules(*follower_client, kHaFuse);
  EXPECT_EQ(store.count("<*, *, //home/c/*> -> <IO, //S1/c/*>"), 0u);
  EXPECT_EQ(store.count("<*, *, //home/b/*> -> <IO, //S1/b/*>"), 1u);
  ASSERT_TRUE(Eventually([&] {
    return RuleTexts(HostRules(VolumeHost())) ==
           StoreRules(*follower_client, kHaFuse);
  })) << HostRules(VolumeHost());
  (*raw)->Shutdown();
}

// etcd without one member: changes go on. Without two: a change fails with
// an error that names etcd, while IO goes on by the rules in place; with
// the members back, changes go on again.
TEST_F(HaControllerTest, EtcdLosingMembersStopsChangesNotIo) {
  std::unique_ptr<ControllerClient> client;
  ASSERT_NO_FATAL_FAILURE(StartRoutedVolume(/*ttl_s=*/2, &client));
  std::filesystem::create_directories(home_ / "a");
  std::filesystem::create_directories(r1_ / "a");
  std::atomic<bool> stop{false};
  std::atomic<int> errors{0}, written{0};
  std::vector<std::thread> threads;
  JoinAll join_all{stop, threads};
  threads.emplace_back([&] {
    for (int i = 0; !stop; ++i) {
      const std::string path = mnt_ / ("a/f" + std::to_string(i % 50));
      const std::string data = std::to_string(i);
      const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      const bool ok = fd >= 0 && write(fd, data.data(), data.size()) ==
                                     static_cast<ssize_t>(data.size());
      if (fd >= 0 && close(fd) != 0) ++errors;
      if (ok) {
        ++written;
      } else {
        ADD_FAILURE() << path << ": " << strerror(errno);
        ++errors;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  });
  etcd_.Kill(2);
  auto one_down =
      client->Insert(kHaFuse, "<*, *, //home/b/*> -> <IO, //S1/b/*>");
  EXPECT_TRUE(one_down.ok()) << one_down.status();
  etcd_.Kill(1);
  auto two_down =
      client->Insert(kHaFuse, "<*, *, //home/c/*> -> <IO, //S1/c/*>");
  ASSERT_FALSE(two_down.ok());
  std::cout << "with two of three etcd members down: " << two_down.status()
            << "\n";
  const std::string why(two_down.status().message());
  EXPECT_TRUE(why.find("etcd") != std::string::npos ||
              why.find("does not lead") != std::string::npos ||
              why.find("no controller") != std::string::npos)
      << why;
  // IO goes on by the rules in place.
  const int before = written;
  ASSERT_TRUE(Eventually([&] { return written >= before + 100; }));
  EXPECT_EQ(errors.load(), 0);
  // (Each file is truncated before it is written again: wait for a write.)
  EXPECT_TRUE(Eventually([&] { return !ReadWholeFile(r1_ / "a/f1").empty(); }));
  // The members come back; a controller leads again (one that lost its
  // lease meanwhile exited, and is started again, as its supervisor would).
  etcd_.Restart(1);
  etcd_.Restart(2);
  ASSERT_TRUE(etcd_.WaitWritable(std::chrono::seconds(30)));
  // A controller whose lease ran out exits, now or a moment later (when its
  // next renewal fails): each is started again, as its supervisor would,
  // until one leads.
  ASSERT_TRUE(Eventually(
      [&] {
        for (int i = 0; i < 2; ++i) {
          int status = 0;
          if (controllers_[i]->Exited(&status)) StartController(i);
        }
        return Leader(2) >= 0;
      },
      40));
  auto again = Client(AllControllers());
  ASSERT_TRUE(Eventually([&] { return Connected(*again, kHaFuse); }, 30));
  auto back = again->Insert(kHaFuse, "<*, *, //home/d/*> -> <IO, //S1/d/*>");
  EXPECT_TRUE(back.ok()) << back.status();
  stop = true;
  for (auto& t : threads) t.join();
  threads.clear();
  EXPECT_EQ(errors.load(), 0);
}

// Real programs as ordinary users through a failover: SQLite (WAL) as
// nobody commits on a routed flow while the leader is SIGKILLed and the new
// leader moves the flow through a two-phase update (its rule replaced by an
// identical one: every IO of the flow parks and drains under the programs);
// git as another user works on the same flow meanwhile. Every transaction
// commits, the database checks whole with every row through the volume and
// on S1's disk, git fsck passes.
TEST_F(HaControllerTest, SqliteAndGitAsUsersThroughAFailoverAndARouteChange) {
  for (TempDir* d : {&home_, &r1_}) {
    ASSERT_EQ(chmod(d->path().c_str(), 0755), 0);
  }
  ASSERT_EQ(mkdir((home_ / "a").c_str(), 0755), 0);
  ASSERT_EQ(mkdir((r1_ / "a").c_str(), 0755), 0);
  std::unique_ptr<ControllerClient> client;
  ASSERT_NO_FATAL_FAILURE(StartRoutedVolume(/*ttl_s=*/1, &client));
  const testing::User nobody = testing::Nobody();
  const testing::User grouped = testing::Grouped();
  const std::string db_dir = mnt_ / "a/db", git_dir = mnt_ / "a/git";
  ASSERT_EQ(mkdir(db_dir.c_str(), 0755), 0) << strerror(errno);
  ASSERT_EQ(chown(db_dir.c_str(), nobody.uid, nobody.gid), 0);
  ASSERT_EQ(mkdir(git_dir.c_str(), 0755), 0);
  ASSERT_EQ(chown(git_dir.c_str(), grouped.uid, grouped.gid), 0);
  // The session runs in a child as nobody: it reports its rows and reads
  // its stop through files.
  TempDir flags;
  ASSERT_EQ(chmod(flags.path().c_str(), 0777), 0);
  const std::string stop_file = flags / "stop", rows_file = flags / "rows";
  auto rows = [&] {
    const std::string n = ReadWholeFile(rows_file);
    return n.empty() ? 0 : std::stoi(n);
  };
  std::string result;
  std::thread app([&] {
    result = testing::SqliteSessionAs(
        nobody, db_dir + "/x.db", "WAL", [&](int committed) {
          WriteWholeFile(rows_file + ".new", std::to_string(committed));
          rename((rows_file + ".new").c_str(), rows_file.c_str());
          return access(stop_file.c_str(), F_OK) != 0;
        });
  });
  struct StopApp {
    const std::string& stop_file;
    std::thread& app;
    ~StopApp() {
      WriteWholeFile(stop_file, "");
      if (app.joinable()) app.join();
    }
  } stop_app{stop_file, app};
  ASSERT_TRUE(Eventually([&] { return rows() >= 100; })) << rows();

  controllers_[0]->Kill();
  controllers_[0].reset();
  const int at_kill = rows();
  // The new leader replaces the flow's rule with an identical one, in a
  // two-phase update, as soon as it leads.
  const std::string rule = "<*, *, //home/a/*> -> <IO, //S1/a/*>";
  absl::Status moved = absl::UnknownError("not tried");
  ASSERT_TRUE(Eventually(
      [&] {
        auto rules = client->Rules(kHaFuse);
        if (!rules.ok()) return false;
        UpdateSpec spec;
        RuleChanges f{kHaFuse, {rule}, {}};
        for (const auto& r : *rules) {
          if (r.text() == rule) f.remove.push_back(r.cid());
        }
        spec.changes = {f};
        moved = client->Update(spec).status();
        return moved.ok();
      },
      60))
      << moved;
  EXPECT_EQ(Leader(), 1);
  const std::string git = testing::GitAs(
      grouped, git_dir,
      "git init -q repo && cd repo && for i in $(seq 1 30); do "
      "seq 1 $((i * 100)) > f$i; done && git add -A && git commit -qm one && "
      "git gc -q && git fsck --full --strict && git log --format=%s");
  EXPECT_TRUE(testing::GitOk(git)) << git;
  EXPECT_EQ(git, "one\n");
  const int at_update = rows();
  EXPECT_GT(at_update, at_kill);
  ASSERT_TRUE(Eventually([&] { return rows() >= at_update + 100; })) << rows();
  WriteWholeFile(stop_file, "");
  app.join();
  EXPECT_EQ(result, "ok");
  const std::string whole = "ok " + std::to_string(rows());
  EXPECT_EQ(testing::SqliteCheckAs(nobody, db_dir + "/x.db"), whole);
  EXPECT_EQ(testing::SqliteCheckAs(nobody, r1_ / "a/db/x.db"), whole);
  EXPECT_FALSE(std::filesystem::exists(home_ / "a/db"));
}

}  // namespace
}  // namespace sroute
