// SPDX-License-Identifier: Apache-2.0
// The host-side agent with a real controller over loopback, in one process.
#include "host/agent.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>
#include <vector>

#include "controller/controller.h"
#include "embed/embedded_host.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rpc/io_threads.h"
#include "rules/parser.h"
#include "tests/util/delay_proxy.h"
#include "tests/util/holding_endpoint.h"
#include "tests/util/temp_dir.h"
#include "tests/util/wait.h"

namespace sroute {
namespace {

using ::sroute::testing::DelayProxy;
using ::sroute::testing::Eventually;
using ::sroute::testing::HoldingEndpoint;
using ::sroute::testing::TempDir;

constexpr char kSecret[] = "agent-test-cluster-secret-0123456789";

// While an update waits for an IO in flight to drain, the host's
// statistics keep reaching the controller every interval: the agent holds
// no lock of theirs across the drain.
TEST(ControllerAgentTest, StatsFlowWhileAnUpdateDrains) {
  TempDir dir;
  ControllerOptions o;
  o.listen = "127.0.0.1:0";
  o.secret = kSecret;
  o.db_dir = dir / "db";
  o.stats_interval = absl::Milliseconds(100);
  auto controller = Controller::Start(o);
  ASSERT_TRUE(controller.ok()) << controller.status();
  EmbeddedHost host("h0");
  auto slow = std::make_shared<HoldingEndpoint>(/*hold=*/true);
  ASSERT_TRUE(host.AddEndpoint("slow", slow).ok());
  IoThreads threads(2);
  AgentOptions a;
  a.address = (*controller)->address();
  a.secret = kSecret;
  a.host.set_role("fuse");
  auto agent = ControllerAgent::Start(&host.sswitch(), &threads, a);
  ASSERT_TRUE(agent.ok()) << agent.status();
  ControllerApi& api = (*controller)->api();

  // An IO held in flight on //slow/f.
  std::thread io([&] {
    std::string buf(16, '\0');
    (void)host.Read("t", "//slow/f", 0, std::span<char>(buf));
  });
  slow->WaitHeld();
  // An update of that flow: its prepare parks the flow and drains it.
  std::atomic<bool> updated{false};
  std::thread update([&] {
    UpdateSpec spec;
    RuleChanges c;
    c.sswitch = "h0";
    c.insert.push_back("<*, *, //slow/g> -> <IO, //slow/h>");
    spec.changes.push_back(std::move(c));
    spec.flows.push_back("<*, *, //slow/f>");
    EXPECT_TRUE(api.Update(spec).ok());
    updated = true;
  });
  // Reports keep coming meanwhile (the snapshot's time moves on).
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const absl::Time first = api.Stats().at;
  const bool moved = Eventually([&] {
    const StatsSnapshot s = api.Stats();
    const HostStats* h = s.Host("h0");
    return s.at > first && h != nullptr && h->in_flight == 1;
  });
  EXPECT_FALSE(updated.load()) << "the drain waits for the held IO";
  slow->Release();
  io.join();
  update.join();
  EXPECT_TRUE(moved) << "no statistics while the update drained";
  EXPECT_TRUE(updated.load());
  agent->reset();
  controller->reset();
}

// Two live hosts under one name: the second is refused with a clear
// error (before, each registration took the other's session, thousands of
// times a second); once the first is gone and silent, the name is free.
TEST(ControllerAgentTest, ASecondHostOfTheSameNameIsRefusedNotSwapped) {
  TempDir dir;
  ControllerOptions o;
  o.listen = "127.0.0.1:0";
  o.secret = kSecret;
  o.db_dir = dir / "db";
  o.stats_interval = absl::Milliseconds(100);  // the hosts report often
  o.host_timeout = absl::Seconds(2);
  auto controller = Controller::Start(o);
  ASSERT_TRUE(controller.ok()) << controller.status();
  IoThreads threads(2);
  EmbeddedHost first("dup"), second("dup");
  std::filesystem::create_directories(dir / "e1");
  std::filesystem::create_directories(dir / "e2");
  ASSERT_TRUE(first.AddLocalEndpoint("e", dir / "e1").ok());
  ASSERT_TRUE(second.AddLocalEndpoint("e", dir / "e2").ok());
  AgentOptions a;
  a.address = (*controller)->address();
  a.secret = kSecret;
  a.host.set_role("fuse");
  auto agent1 = ControllerAgent::Start(&first.sswitch(), &threads, a);
  ASSERT_TRUE(agent1.ok()) << agent1.status();

  a.register_timeout = absl::Seconds(1);
  auto agent2 = ControllerAgent::Start(&second.sswitch(), &threads, a);
  ASSERT_FALSE(agent2.ok());
  EXPECT_TRUE(absl::IsAlreadyExists(agent2.status())) << agent2.status();
  EXPECT_THAT(std::string(agent2.status().message()),
              ::testing::HasSubstr("is in use by another host"));
  // The first keeps its session: an update reaches it.
  ControllerApi& api = (*controller)->api();
  UpdateSpec spec;
  RuleChanges c;
  c.sswitch = "dup";
  c.insert.push_back("<*, *, //e/a> -> <IO, //e/b>");
  spec.changes.push_back(std::move(c));
  ASSERT_TRUE(api.Update(spec).ok());
  EXPECT_EQ(first.sswitch().ListRules().size(), 1u);
  EXPECT_EQ(second.sswitch().ListRules().size(), 0u);

  // Gone and silent: the name is the other's (with the stored rules).
  agent1->reset();
  a.register_timeout = absl::Seconds(20);
  agent2 = ControllerAgent::Start(&second.sswitch(), &threads, a);
  ASSERT_TRUE(agent2.ok()) << agent2.status();
  EXPECT_EQ(second.sswitch().ListRules().size(), 1u);
  agent2->reset();
  controller->reset();
}

// A host cut off from its controller in the middle of an update (prepared:
// a flow parked, neither commit nor abort coming) releases the flow when the
// update's lease ends, by the rules it had: IO never waits for a controller
// that may not come back. Once it is back, the host gets the stored rules.
TEST(ControllerAgentTest,
     APreparedUpdateCutOffFromItsControllerEndsAtItsLease) {
  TempDir dir;
  ControllerOptions o;
  o.listen = "127.0.0.1:0";
  o.secret = kSecret;
  o.db_dir = dir / "db";
  o.command_timeout = absl::Milliseconds(300);
  auto controller = Controller::Start(o);
  ASSERT_TRUE(controller.ok()) << controller.status();
  const std::string address = (*controller)->address();
  DelayProxy link(
      static_cast<uint16_t>(std::stoi(address.substr(address.rfind(':') + 1))),
      std::chrono::microseconds(0));
  IoThreads threads(2);

  // h0 reaches the controller through `link`; h1 directly, with an IO held
  // in flight on the update's flow so that the update waits in its drain.
  EmbeddedHost h0("h0"), h1("h1");
  std::filesystem::create_directories(dir / "e");
  std::ofstream(dir / "e/f") << "";
  ASSERT_TRUE(h0.AddLocalEndpoint("e", dir / "e").ok());
  auto slow = std::make_shared<HoldingEndpoint>(/*hold=*/true);
  ASSERT_TRUE(h1.AddEndpoint("slow", slow).ok());
  AgentOptions a;
  a.secret = kSecret;
  a.host.set_role("fuse");
  a.address = link.address();
  auto agent0 = ControllerAgent::Start(&h0.sswitch(), &threads, a);
  ASSERT_TRUE(agent0.ok()) << agent0.status();
  a.address = address;
  auto agent1 = ControllerAgent::Start(&h1.sswitch(), &threads, a);
  ASSERT_TRUE(agent1.ok()) << agent1.status();
  std::thread held([&] {
    std::string buf(16, '\0');
    (void)h1.Read("t", "//slow/f", 0, std::span<char>(buf));
  });
  slow->WaitHeld();

  ControllerApi& api = (*controller)->api();
  std::thread update([&] {
    UpdateSpec spec;
    spec.timeout = absl::Seconds(1);
    for (const char* sw : {"h0", "h1"}) {
      RuleChanges c;
      c.sswitch = sw;
      c.insert.push_back(sw == std::string("h0")
                             ? "<*, *, //e/g> -> <IO, //e/h>"
                             : "<*, *, //slow/g> -> <IO, //slow/h>");
      spec.changes.push_back(std::move(c));
    }
    spec.flows.push_back("<*, *, //e/f>");
    spec.flows.push_back("<*, *, //slow/f>");
    (void)api.Update(spec);  // h0 never answers its commit
  });
  // h0 prepared: a write of the flow parks there (until then they pass).
  std::atomic<bool> parked{false}, written{false};
  std::thread write([&] {
    while (true) {
      EXPECT_TRUE(
          h0.Write("t", "//e/f", 0, std::span<const char>("x", 1)).ok());
      if (parked) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    written = true;
  });
  ASSERT_TRUE(Eventually([&] { return h0.sswitch().parked() == 1; }));
  parked = true;
  link.Cut(true);  // h0 can neither hear the outcome nor register again
  slow->Release();
  held.join();
  update.join();
  const bool released = Eventually([&] { return written.load(); });
  EXPECT_TRUE(released)
      << "the parked write waited for a controller that is gone";

  // Back: the host registers again and takes the stored rules.
  link.Cut(false);
  write.join();
  EXPECT_EQ(h0.sswitch().parked(), 0u);
  EXPECT_TRUE(Eventually([&] {
    for (const RuleInfo& r : h0.sswitch().ListRules()) {
      if (FormatRule(r.rule) == "<*, *, //e/g> -> <IO, //e/h>") return true;
    }
    return false;
  })) << "the stored update did not reach the host after it came back";
  agent0->reset();
  agent1->reset();
  controller->reset();
}

}  // namespace
}  // namespace sroute
