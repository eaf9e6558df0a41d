// SPDX-License-Identifier: Apache-2.0
// The host-side agent with a real controller over loopback, in one process.
#include "host/agent.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <thread>
#include <vector>

#include "controller/controller.h"
#include "gtest/gtest.h"
#include "rpc/io_threads.h"
#include "sswitch/host.h"
#include "tests/util/holding_endpoint.h"
#include "tests/util/temp_dir.h"
#include "tests/util/wait.h"

namespace sroute {
namespace {

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
  Host host("h0");
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

}  // namespace
}  // namespace sroute
