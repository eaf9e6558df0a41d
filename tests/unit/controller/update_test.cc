// SPDX-License-Identifier: Apache-2.0
// The controller's two-phase update (controller/update.cc, docs/design.md §6)
// with real agents (host/agent.h) over loopback, in one process: no root.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "controller/controller.h"
#include "controller/store.h"
#include "embed/embedded_host.h"
#include "gtest/gtest.h"
#include "host/agent.h"
#include "rpc/io_threads.h"
#include "rules/parser.h"
#include "tests/util/temp_dir.h"

namespace sroute {
namespace {

using ::sroute::testing::ReadWholeFile;
using ::sroute::testing::TempDir;
using ::sroute::testing::WriteWholeFile;

constexpr char kSecret[] = "update-test-cluster-secret-0123456789";

// Holds every IO until Release().
class HoldingEndpoint : public Endpoint {
 public:
  void Submit(Io* io, std::string_view) override {
    std::lock_guard<std::mutex> l(mu_);
    held_.push_back(io);
    cv_.notify_all();
  }
  void WaitHeld() {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return !held_.empty(); });
  }
  void Release() {
    std::vector<Io*> out;
    {
      std::lock_guard<std::mutex> l(mu_);
      out.swap(held_);
    }
    for (Io* io : out) io->Complete();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Io*> held_;
};

std::span<const char> Bytes(const std::string& s) {
  return std::span<const char>(s.data(), s.size());
}

// The canonical text of a rule, as the controller stores it.
std::string Canonical(const std::string& text) {
  auto rule = ParseRule(text);
  EXPECT_TRUE(rule.ok()) << rule.status();
  return rule.ok() ? FormatRule(*rule) : text;
}

// An in-process host named NAME: endpoint NAME (a directory holding files
// f and g, empty), endpoint "slow" (holds its IOs) and, once connected, an
// agent of the controller.
struct TestHost {
  TestHost(const std::string& name, const std::string& root) : host(name) {
    std::filesystem::create_directories(root);
    WriteWholeFile(root + "/f", "");
    WriteWholeFile(root + "/g", "");
    EXPECT_TRUE(host.AddLocalEndpoint(name, root).ok());
    EXPECT_TRUE(host.AddEndpoint("slow", slow).ok());
  }
  ~TestHost() {
    agent.reset();
    slow->Release();
    for (std::thread& t : io) t.join();
  }
  absl::Status Connect(IoThreads* threads, const std::string& address) {
    AgentOptions a;
    a.address = address;
    a.secret = kSecret;
    a.host.set_role("fuse");
    auto started = ControllerAgent::Start(&host.sswitch(), threads, a);
    if (!started.ok()) return started.status();
    agent = *std::move(started);
    return absl::OkStatus();
  }
  // A read of //slow/x that stays in flight until slow->Release().
  void HoldIo() {
    io.emplace_back([this] {
      std::string buf(8, '\0');
      (void)host.Read("t", "//slow/x", 0, std::span<char>(buf));
    });
    slow->WaitHeld();
  }
  // Writes `data` to //NAME/f on a thread of its own, again until one write
  // is parked (the host holds a prepared update of //NAME/f). *done turns
  // true when the parked write completes.
  void ParkWrite(const std::string& data, std::atomic<bool>* done) {
    const std::string file = "//" + host.sswitch().name() + "/f";
    for (int attempt = 0; attempt < 1000; ++attempt) {
      done->store(false);
      std::thread t([this, file, data, done] {
        EXPECT_TRUE(host.Write("t", file, 0, Bytes(data)).ok());
        done->store(true);
      });
      while (!done->load() && host.sswitch().parked() == 0) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      if (host.sswitch().parked() > 0) {
        io.push_back(std::move(t));
        return;
      }
      t.join();  // routed before the prepare parked the flow: again
    }
    ADD_FAILURE() << "no write on " << file << " was ever parked";
  }
  // The rules installed, as "owner: text", in order.
  std::vector<std::string> Rules() {
    std::vector<std::string> out;
    for (const RuleInfo& r : host.sswitch().ListRules()) {
      out.push_back(r.owner + ": " + FormatRule(r.rule));
    }
    return out;
  }

  EmbeddedHost host;
  std::shared_ptr<HoldingEndpoint> slow = std::make_shared<HoldingEndpoint>();
  std::unique_ptr<ControllerAgent> agent;
  std::vector<std::thread> io;
};

std::vector<std::string> Texts(const std::vector<proto::ManagedRule>& rules) {
  std::vector<std::string> out;
  for (const auto& m : rules) out.push_back(m.owner() + ": " + m.text());
  return out;
}

class UpdateTest : public ::testing::Test {
 protected:
  // Starts (or restarts) the controller on dir_/db.
  void StartController(absl::Duration command_timeout = absl::Seconds(10)) {
    ControllerOptions o;
    o.listen = "127.0.0.1:0";
    o.secret = kSecret;
    o.db_dir = dir_ / "db";
    o.stats_interval = absl::Milliseconds(100);
    o.command_timeout = command_timeout;
    auto c = Controller::Start(o);
    ASSERT_TRUE(c.ok()) << c.status();
    controller_ = *std::move(c);
  }
  ControllerApi& api() { return controller_->api(); }
  TestHost& AddHost(const std::string& name) {
    auto h = std::make_unique<TestHost>(name, dir_ / name);
    EXPECT_TRUE(h->Connect(&threads_, controller_->address()).ok());
    hosts_[name] = std::move(h);
    return *hosts_[name];
  }
  std::string File(const std::string& host, const std::string& name) {
    return ReadWholeFile(dir_ / (host + "/" + name));
  }
  uint64_t TopologyVersion(const std::string& name) {
    for (const TopologyHost& t : api().Topology()) {
      if (t.info.sswitch() == name) return t.version;
    }
    ADD_FAILURE() << "no host " << name << " in the topology";
    return 0;
  }
  // The rules the controller persisted for each host are the rules the
  // host has.
  void ExpectStoreMatchesHosts() {
    for (auto& [name, h] : hosts_) {
      auto stored = api().Rules(name);
      ASSERT_TRUE(stored.ok()) << stored.status();
      EXPECT_EQ(Texts(*stored), h->Rules()) << "on " << name;
    }
  }

  TempDir dir_;
  IoThreads threads_{2};
  std::unique_ptr<Controller> controller_;
  std::map<std::string, std::unique_ptr<TestHost>> hosts_;
};

UpdateSpec InsertOn(
    const std::vector<std::pair<std::string, std::string>>& rules) {
  UpdateSpec spec;
  for (const auto& [sswitch, text] : rules) {
    spec.changes.push_back(RuleChanges{sswitch, {text}, {}});
  }
  return spec;
}

// An update that installs a rule on each of two hosts commits on both: both
// route by it, both report the update's version, and the store has it.
TEST_F(UpdateTest, UpdateOfTwoHostsCommitsOnBoth) {
  StartController();
  TestHost& a = AddHost("A");
  TestHost& b = AddHost("B");
  const std::string ra = "<*, *, //A/f> -> <IO, //A/g>";
  const std::string rb = "<*, *, //B/f> -> <IO, //B/g>";
  auto out = api().Update(InsertOn({{"A", ra}, {"B", rb}}));
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->cids.size(), 2u);
  EXPECT_NE(out->cids[0], out->cids[1]);

  EXPECT_EQ(a.Rules(), std::vector<std::string>{"api: " + Canonical(ra)});
  EXPECT_EQ(b.Rules(), std::vector<std::string>{"api: " + Canonical(rb)});
  ASSERT_TRUE(a.host.Write("t", "//A/f", 0, Bytes("to-a")).ok());
  ASSERT_TRUE(b.host.Write("t", "//B/f", 0, Bytes("to-b")).ok());
  EXPECT_EQ(File("A", "g"), "to-a");
  EXPECT_EQ(File("A", "f"), "");
  EXPECT_EQ(File("B", "g"), "to-b");
  EXPECT_EQ(File("B", "f"), "");
  EXPECT_EQ(TopologyVersion("A"), a.host.sswitch().version());
  EXPECT_EQ(TopologyVersion("B"), b.host.sswitch().version());
  ExpectStoreMatchesHosts();
}

// A host that nacks its prepare (here: its rule names an endpoint it does
// not have) aborts the update everywhere: the error names the host, no
// host has the new rules, the store does not either, and the IO parked by
// the other host's prepare goes on by the old rules at once (not when the
// prepare's lease runs out, 30 s later).
TEST_F(UpdateTest, PrepareNackAbortsEverywhereAndReleasesParkedIo) {
  StartController();
  TestHost& a = AddHost("A");
  TestHost& b = AddHost("B");
  // B's prepare drains //slow/x (an IO in flight) before it validates, so
  // A has prepared (and parks //A/f) while B still decides.
  b.HoldIo();
  UpdateSpec spec = InsertOn({{"A", "<*, *, //A/f> -> <IO, //A/g>"},
                              {"B", "<*, *, //B/f> -> <IO, //nowhere/g>"}});
  spec.flows.push_back("<*, *, //slow/x>");
  absl::StatusOr<UpdateOutcome> out;
  std::thread update([&] { out = api().Update(spec); });
  std::atomic<bool> parked_done{false};
  a.ParkWrite("parked", &parked_done);
  EXPECT_FALSE(parked_done.load());
  b.slow->Release();  // B's drain ends; its validation fails
  update.join();
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("B refused the update"),
            std::string::npos)
      << out.status();
  EXPECT_NE(out.status().message().find("nowhere"), std::string::npos)
      << out.status();
  EXPECT_NE(out.status().message().find("no host changed"), std::string::npos)
      << out.status();

  // The abort released A's parked write, by the old rules.
  for (int i = 0; i < 500 && !parked_done.load(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(parked_done.load()) << "A's parked write was not released";
  EXPECT_EQ(a.host.sswitch().parked(), 0u);
  EXPECT_EQ(File("A", "f"), "parked");
  EXPECT_EQ(File("A", "g"), "");
  EXPECT_TRUE(a.Rules().empty());
  EXPECT_TRUE(b.Rules().empty());
  ExpectStoreMatchesHosts();
  // And the flow is not parked any more.
  ASSERT_TRUE(a.host.Write("t", "//A/f", 0, Bytes("after!")).ok());
  EXPECT_EQ(File("A", "f"), "after!");
}

// A host that goes away after its prepare and before the commit cannot
// commit. The update is persisted by then (the point of no return), so it
// stands: the controller logs which host failed and why, the other hosts
// commit and agree with the store, and the lost host gets the rules when it
// registers again.
TEST_F(UpdateTest, HostGoneBeforeCommitIsReconciledLater) {
  StartController(/*command_timeout=*/absl::Seconds(1));
  TestHost& a = AddHost("A");
  TestHost& b = AddHost("B");
  const std::string ra = "<*, *, //A/f> -> <IO, //A/g>";
  const std::string rb = "<*, *, //B/f> -> <IO, //B/g>";
  // A's prepare drains //slow/x: B prepares first and goes away meanwhile.
  a.HoldIo();
  UpdateSpec spec = InsertOn({{"A", ra}, {"B", rb}});
  spec.flows.push_back("<*, *, //slow/x>");
  absl::StatusOr<UpdateOutcome> out;
  ::testing::internal::CaptureStderr();
  std::thread update([&] { out = api().Update(spec); });
  std::atomic<bool> b_parked_done{false};
  b.ParkWrite("b-parked", &b_parked_done);  // B has parked its flows,
  // and its ack is on its way (it validates, then answers): let it arrive.
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  b.agent.reset();  // B goes away before the commit
  a.slow->Release();
  update.join();
  const std::string log = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_NE(log.find("commit on B failed (host B did not answer"),
            std::string::npos)
      << log;

  // A committed, and agrees with the store.
  EXPECT_EQ(a.Rules(), std::vector<std::string>{"api: " + Canonical(ra)});
  EXPECT_EQ(TopologyVersion("A"), a.host.sswitch().version());
  auto stored_a = api().Rules("A");
  ASSERT_TRUE(stored_a.ok());
  EXPECT_EQ(Texts(*stored_a), a.Rules());
  ASSERT_TRUE(a.host.Write("t", "//A/f", 0, Bytes("to-a")).ok());
  EXPECT_EQ(File("A", "g"), "to-a");
  // B never committed; the store has its rule.
  EXPECT_TRUE(b.Rules().empty());
  auto stored_b = api().Rules("B");
  ASSERT_TRUE(stored_b.ok());
  EXPECT_EQ(Texts(*stored_b),
            std::vector<std::string>{"api: " + Canonical(rb)});

  // What B's agent had parked went on when the agent went.
  for (int i = 0; i < 5000 && !b_parked_done.load(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_TRUE(b_parked_done.load());
  EXPECT_EQ(b.host.sswitch().parked(), 0u);
  // B comes back and is reconciled to the store.
  ASSERT_TRUE(b.Connect(&threads_, controller_->address()).ok());
  EXPECT_EQ(b.Rules(), std::vector<std::string>{"api: " + Canonical(rb)});
  ExpectStoreMatchesHosts();
}

// The rules in the controller's RocksDB store are the hosts' rules after
// updates that succeed (inserts, then a removal) and one that fails; the
// store read back from disk after the controller stops says the same.
TEST_F(UpdateTest, StoreMatchesHostsAfterSuccessAndFailure) {
  StartController();
  AddHost("A");
  AddHost("B");
  auto first = api().Update(InsertOn({{"A", "<*, *, //A/f> -> <IO, //A/g>"},
                                      {"A", "<*, r, //A/g> -> <IO, //A/f>"},
                                      {"B", "<*, *, //B/f> -> <IO, //B/g>"}}));
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_EQ(first->cids.size(), 3u);
  ExpectStoreMatchesHosts();
  EXPECT_EQ(api().Rules("A")->size(), 2u);

  // A removal on A and an insert B refuses: nothing changes.
  UpdateSpec bad = InsertOn({{"B", "<*, *, //B/g> -> <IO, //nowhere/g>"}});
  bad.changes.push_back(RuleChanges{"A", {}, {first->cids[0]}});
  auto failed = api().Update(bad);
  ASSERT_FALSE(failed.ok());
  ExpectStoreMatchesHosts();
  EXPECT_EQ(api().Rules("A")->size(), 2u);
  EXPECT_EQ(api().Rules("B")->size(), 1u);

  // The same removal alone goes through.
  UpdateSpec remove;
  remove.changes.push_back(RuleChanges{"A", {}, {first->cids[0]}});
  auto removed = api().Update(remove);
  ASSERT_TRUE(removed.ok()) << removed.status();
  EXPECT_GT(removed->version, first->version);
  ExpectStoreMatchesHosts();
  EXPECT_EQ(api().Rules("A")->size(), 1u);

  // On disk, after the controller stops.
  std::map<std::string, std::vector<std::string>> on_hosts;
  for (auto& [name, h] : hosts_) {
    on_hosts[name] = h->Rules();
    h->agent.reset();
  }
  controller_.reset();
  auto store = ControllerStore::Open(dir_ / "db");
  ASSERT_TRUE(store.ok()) << store.status();
  for (const auto& [name, rules] : on_hosts) {
    auto stored = (*store)->Rules(name);
    ASSERT_TRUE(stored.ok()) << stored.status();
    EXPECT_EQ(Texts(*stored), rules) << "on " << name;
  }
  EXPECT_EQ((*store)->version(), removed->version);
}

// A host that registers again (here: restarted, with a stale rule of its
// own, to a restarted controller) gets its persisted rules in place of
// what it had.
TEST_F(UpdateTest, ReRegisteringHostGetsPersistedRules) {
  StartController();
  AddHost("A");
  const std::string r1 = "<*, *, //A/f> -> <IO, //A/g>";
  const std::string r2 = "<*, r, //A/g> -> <IO, //A/f>";
  auto out = api().Update(InsertOn({{"A", r1}, {"A", r2}}));
  ASSERT_TRUE(out.ok()) << out.status();
  const std::vector<std::string> want = {"api: " + Canonical(r1),
                                         "api: " + Canonical(r2)};
  EXPECT_EQ(hosts_["A"]->Rules(), want);

  // Host and controller restart; the host comes back with another rule.
  hosts_.clear();
  controller_.reset();
  StartController();
  auto a = std::make_unique<TestHost>("A", dir_ / "A");
  ASSERT_TRUE(
      a->host.LoadRules("<*, *, //A/g> -> <IO, //A/f>", "<stale>", "config")
          .ok());
  ASSERT_TRUE(a->Connect(&threads_, controller_->address()).ok());
  EXPECT_EQ(a->Rules(), want);
  ASSERT_TRUE(a->host.Write("t", "//A/f", 0, Bytes("routed")).ok());
  EXPECT_EQ(File("A", "g"), "routed");
  hosts_["A"] = std::move(a);
  ExpectStoreMatchesHosts();
}

}  // namespace
}  // namespace sroute
