// SPDX-License-Identifier: Apache-2.0
// Prometheus metrics of live daemons (--metrics): a storage server and a
// FUSE volume routing through it, and the controller. Each is scraped over
// HTTP and its answer parsed (metrics/text_parser.h checks the format);
// the figures must match the IO the test did.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

#include "metrics/http_server.h"
#include "metrics/text_parser.h"
#include "tests/integration/server_fixture.h"
#include "tests/util/wait.h"

namespace sroute {
namespace {

using metrics::ParsedMetrics;
using testing::Eventually;
using testing::FreeLoopbackPort;
using testing::ServerProcess;
using testing::WriteWholeFile;

ParsedMetrics Scrape(const std::string& address) {
  auto body = metrics::HttpGet(address);
  EXPECT_TRUE(body.ok()) << body.status();
  if (!body.ok()) return {};
  auto parsed = metrics::ParseMetrics(*body);
  EXPECT_TRUE(parsed.ok()) << parsed.status() << "\n" << *body;
  return parsed.ok() ? *std::move(parsed) : ParsedMetrics{};
}

double Value(const ParsedMetrics& m, std::string_view name,
             const std::map<std::string, std::string>& labels = {}) {
  return m.Sum(name, labels).value_or(-1);
}

// The id of the exported rule whose text is `text` ("" if none).
std::string RuleId(const ParsedMetrics& m, const std::string& text) {
  for (const metrics::Sample* s : m.Find("sroute_rule_errors_total")) {
    if (s->labels.at("rule") == text) return s->labels.at("rule_id");
  }
  return "";
}

TEST_F(ServerTest, MetricsOfAServerAndOfAVolumeRoutingThroughIt) {
  const std::string server_metrics =
      "127.0.0.1:" + std::to_string(FreeLoopbackPort());
  const std::string volume_metrics =
      "127.0.0.1:" + std::to_string(FreeLoopbackPort());
  const std::string server_rule = "<*, *, //S1/a/*> -> <IO, //alt/a/*>";
  ServerProcess* s1 = StartServer("S1", r1_.path(),
                                  {"--endpoint", "alt=" + r2_.path(), "--rule",
                                   server_rule, "--metrics", server_metrics});
  const std::string routed = "<*, *, //home/d/*> -> <IO, //S1/a/*>";
  const std::string idle = "<*, r, //home/g> -> <IO, //home/h>";
  // One rule a series: the busiest; the idle one is summed as "other".
  Mount({"S1=" + s1->address()}, routed + "\n" + idle + "\n",
        {"--metrics", volume_metrics, "--metrics-rules", "1"});

  ASSERT_EQ(mkdir((mnt_ / "d").c_str(), 0755), 0);
  const int fd = open((mnt_ / "d/f").c_str(), O_RDWR | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  const std::string block(4096, 'm');
  for (int i = 0; i < 4; ++i) {
    ASSERT_EQ(pwrite(fd, block.data(), block.size(), i * 4096), 4096);
  }
  char back[4096];
  ASSERT_EQ(pread(fd, back, sizeof back, 4096), 4096);
  ASSERT_EQ(close(fd), 0);
  WriteWholeFile(mnt_ / "plain", "not routed");
  // The data went through S1's rule to alt.
  struct stat st {};
  ASSERT_EQ(stat((r2_ / "a/f").c_str(), &st), 0);
  EXPECT_EQ(st.st_size, 4 * 4096);

  // The volume.
  ParsedMetrics v = Scrape(volume_metrics);
  EXPECT_EQ(Value(v, "sroute_rules"), 2);
  EXPECT_EQ(Value(v, "sroute_rules_exported"), 1);
  const std::string id = RuleId(v, routed);
  ASSERT_FALSE(id.empty()) << "the busiest rule has no series of its own";
  EXPECT_GE(
      Value(v, "sroute_rule_ops_total", {{"rule_id", id}, {"op", "write"}}), 4);
  EXPECT_GE(
      Value(v, "sroute_rule_bytes_total", {{"rule_id", id}, {"op", "write"}}),
      4 * 4096);
  EXPECT_GE(
      Value(v, "sroute_rule_bytes_total", {{"rule_id", id}, {"op", "read"}}),
      4096);
  // Any error counts: here the lookups of d/f before it was created
  // (ENOENT); none of the reads and writes failed.
  EXPECT_LE(Value(v, "sroute_rule_errors_total", {{"rule_id", id}}), 2);
  EXPECT_EQ(Value(v, "sroute_rule_in_flight", {{"rule_id", id}}), 0);
  // Every IO it routed completed: the histogram counted each once.
  EXPECT_EQ(Value(v, "sroute_rule_latency_seconds_count", {{"rule_id", id}}),
            Value(v, "sroute_rule_ops_total", {{"rule_id", id}}));
  EXPECT_GT(Value(v, "sroute_rule_latency_seconds_sum", {{"rule_id", id}}), 0);
  EXPECT_EQ(Value(v, "sroute_rule_ops_total", {{"rule_id", "other"}}), 0);
  EXPECT_GE(Value(v, "sroute_unmatched_ops_total", {{"op", "write"}}), 1);
  EXPECT_GE(Value(v, "sroute_endpoint_ios_total", {{"endpoint", "S1"}}), 5);
  EXPECT_GE(Value(v, "sroute_fuse_requests_total", {{"op", "write"}}), 4);
  EXPECT_GE(Value(v, "sroute_fuse_requests_total", {{"op", "create"}}), 1);
  EXPECT_EQ(v.types.at("sroute_fuse_requests_total"),
            metrics::MetricType::kCounter);
  EXPECT_EQ(Value(v, "sroute_info", {{"sswitch", "fuse-test"}}), 1);

  // The server: its rule, its endpoint, its RPC connections.
  ParsedMetrics s = Scrape(server_metrics);
  const std::string sid = RuleId(s, server_rule);
  ASSERT_FALSE(sid.empty());
  EXPECT_GE(
      Value(s, "sroute_rule_bytes_total", {{"rule_id", sid}, {"op", "write"}}),
      4 * 4096);
  EXPECT_GE(Value(s, "sroute_endpoint_ios_total", {{"endpoint", "alt"}}), 5);
  EXPECT_GE(Value(s, "sroute_rpc_connections_authenticated_total"), 1);
  EXPECT_GE(Value(s, "sroute_rpc_connections_open"), 1);
  EXPECT_GE(Value(s, "sroute_rpc_received_bytes_total"), 4 * 4096);
  EXPECT_EQ(Value(s, "sroute_rpc_handshakes_refused_total"), 0);

  // A peer with the wrong secret is refused, and counted.
  const std::string wrong =
      testing::WriteSecretFile(keys_ / "wrong", "not-the-cluster-secret-000");
  EXPECT_NE(
      Ctl("--host " + s1->address() + " --secret-file " + wrong + " stats")
          .first,
      0);
  EXPECT_GE(
      Value(Scrape(server_metrics), "sroute_rpc_handshakes_refused_total"), 1);
}

TEST_F(ServerTest, AMetricsAddressThatCannotServeIsAClearError) {
  // Taken by S1's own metrics: a second daemon there fails to start.
  const std::string taken = "127.0.0.1:" + std::to_string(FreeLoopbackPort());
  StartServer("S1", r1_.path(), {"--metrics", taken});
  auto [rc, out] = testing::RunCommand(
      std::string(SROUTE_SERVER_BINARY) + " --root " + r2_.path() +
      " --secret-file " + secret_ + " --listen 127.0.0.1:0 --metrics " + taken);
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("metrics: cannot listen on " + taken), std::string::npos)
      << out;
  std::tie(rc, out) = testing::RunCommand(
      std::string(SROUTE_FUSE_BINARY) + " " + mnt_.path() + " -f --backing " +
      home_.path() + " --metrics localhost");
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("metrics address 'localhost' is not HOST:PORT"),
            std::string::npos)
      << out;
}

TEST_F(ServerTest, ControllerMetricsCountHostsUpdatesAndReports) {
  const std::string at = "127.0.0.1:" + std::to_string(FreeLoopbackPort());
  testing::TempDir db;
  ServerProcess controller(
      SROUTE_CONTROLLER_BINARY,
      {"--db", db / "db", "--secret-file", secret_, "--listen", "127.0.0.1:0",
       "--stats-interval-ms", "200", "--metrics", at});
  ASSERT_TRUE(controller.ok());
  const std::string server_metrics =
      "127.0.0.1:" + std::to_string(FreeLoopbackPort());
  StartServer("S1", r1_.path(),
              {"--endpoint", "alt=" + r2_.path(), "--controller",
               controller.address(), "--metrics", server_metrics});
  const std::string ctl = "--controller " + controller.address() +
                          " --secret-file " + secret_ + " ";
  auto [rc, out] =
      Ctl(ctl + "rules add --host S1 '<*, *, //S1/a/*> -> <IO, //alt/a/*>'");
  ASSERT_EQ(rc, 0) << out;
  // The rule checker refuses a black hole: nothing reaches the host.
  std::tie(rc, out) = Ctl(
      ctl + "rules add --host S1 '<*, *, //S1/b/*> -> <IO, //nowhere/b/*>'");
  EXPECT_EQ(rc, 1) << out;

  ParsedMetrics m;
  EXPECT_TRUE(Eventually([&] {  // the first stats report
    m = Scrape(at);
    return Value(m, "sroute_controller_stats_reports_total") >= 1;
  }));
  EXPECT_EQ(Value(m, "sroute_controller_hosts",
                  {{"role", "server"}, {"state", "connected"}}),
            1);
  EXPECT_EQ(Value(m, "sroute_controller_hosts", {{"role", "fuse"}}), 0);
  EXPECT_EQ(Value(m, "sroute_controller_rules"), 1);
  EXPECT_EQ(
      Value(m, "sroute_controller_updates_total", {{"result", "committed"}}),
      1);
  EXPECT_EQ(
      Value(m, "sroute_controller_updates_total", {{"result", "refused"}}), 1);
  EXPECT_EQ(
      Value(m, "sroute_controller_updates_total", {{"result", "aborted"}}), 0);
  EXPECT_EQ(Value(m, "sroute_controller_update_seconds_count"), 1);
  EXPECT_GE(Value(m, "sroute_rpc_connections_authenticated_total"), 2);

  // The server sees its controller.
  ParsedMetrics s = Scrape(server_metrics);
  EXPECT_EQ(Value(s, "sroute_controller_connected"), 1);
  EXPECT_EQ(Value(s, "sroute_rules"), 1);
}

}  // namespace
}  // namespace sroute
