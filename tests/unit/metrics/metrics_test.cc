// SPDX-License-Identifier: Apache-2.0
// The Prometheus text format as written and read back, and the HTTP server
// that answers /metrics.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmath>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "metrics/exposition.h"
#include "metrics/http_server.h"
#include "metrics/text_parser.h"

namespace sroute::metrics {
namespace {

using ::testing::HasSubstr;

TEST(ExpositionTest, RendersFamiliesWithHelpTypeAndEscapedLabels) {
  Exposition e;
  Family& ops = e.Declare("sroute_x_ops_total", MetricType::kCounter,
                          "IOs routed\nby a rule");
  Family& open = e.Declare("sroute_x_open", MetricType::kGauge, "open now");
  ops.Add({{"rule", "<r, *, //h/a\"b\\c\nd> -> (//E/)"}, {"op", "read"}}, 3);
  open.Add({}, -2);
  // A family declared again is the same one: its samples stay together.
  e.Declare("sroute_x_ops_total", MetricType::kCounter, "")
      .Add({{"rule", "2"}, {"op", "write"}}, 1.5);
  EXPECT_EQ(e.Render(),
            "# HELP sroute_x_ops_total IOs routed\\nby a rule\n"
            "# TYPE sroute_x_ops_total counter\n"
            "sroute_x_ops_total{rule=\"<r, *, //h/a\\\"b\\\\c\\nd> -> "
            "(//E/)\",op=\"read\"} 3\n"
            "sroute_x_ops_total{rule=\"2\",op=\"write\"} 1.5\n"
            "# HELP sroute_x_open open now\n"
            "# TYPE sroute_x_open gauge\n"
            "sroute_x_open -2\n");
  auto parsed = ParseMetrics(e.Render());
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  auto found = parsed->Find("sroute_x_ops_total", {{"op", "read"}});
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0]->labels.at("rule"), "<r, *, //h/a\"b\\c\nd> -> (//E/)");
  EXPECT_EQ(parsed->Sum("sroute_x_ops_total"), 4.5);
  EXPECT_EQ(parsed->types.at("sroute_x_open"), MetricType::kGauge);
}

TEST(ExpositionTest, HistogramIsCumulativeWithInfSumAndCount) {
  Exposition e;
  HistogramData h = HistogramData::Empty({0.001, 0.01});
  h.Observe(0.0005);
  h.Observe(0.001);  // on the bound: in it
  h.Observe(0.005, 3);
  h.Observe(7);
  h.sum = 7.0165;
  EXPECT_EQ(h.count(), 6u);
  e.Declare("sroute_x_latency_seconds", MetricType::kHistogram, "latency")
      .AddHistogram({{"rule", "1"}}, h);
  EXPECT_EQ(e.Render(),
            "# HELP sroute_x_latency_seconds latency\n"
            "# TYPE sroute_x_latency_seconds histogram\n"
            "sroute_x_latency_seconds_bucket{rule=\"1\",le=\"0.001\"} 2\n"
            "sroute_x_latency_seconds_bucket{rule=\"1\",le=\"0.01\"} 5\n"
            "sroute_x_latency_seconds_bucket{rule=\"1\",le=\"+Inf\"} 6\n"
            "sroute_x_latency_seconds_sum{rule=\"1\"} 7.0164999999999997\n"
            "sroute_x_latency_seconds_count{rule=\"1\"} 6\n");
  auto parsed = ParseMetrics(e.Render());
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->Sum("sroute_x_latency_seconds_count"), 6);
}

TEST(ExpositionTest, SanitizesForeignKeys) {
  EXPECT_EQ(SanitizeName("alice.hits"), "alice_hits");
  EXPECT_EQ(SanitizeName("9lives-x"), "_9lives_x");
}

TEST(ExpositionDeathTest, RefusesNamesAgainstTheConventions) {
  Exposition e;
  EXPECT_DEATH(e.Declare("sroute_ops", MetricType::kCounter, ""), "_total");
  EXPECT_DEATH(e.Declare("sroute_open_total", MetricType::kGauge, ""),
               "_total");
  EXPECT_DEATH(e.Declare("9bad", MetricType::kGauge, ""), "conventions");
}

TEST(TextParserTest, NamesTheLineOfEachDefect) {
  const std::pair<const char*, const char*> bad[] = {
      {"x 1\n", "line 1: x has no TYPE"},
      {"# TYPE x gauge\nx{a=\"1\"} 1\nx{a=\"1\"} 2\n", "line 3: x: the same"},
      {"# TYPE x_total counter\nx_total -1\n", "negative counter"},
      {"# TYPE x gauge\nx{a=\"\\q\"} 1\n", "bad escape"},
      {"# TYPE x gauge\nx{a=\"1} 1\n", "unterminated"},
      {"# TYPE x gauge\nx one\n", "bad value"},
      {"# TYPE x summary\n", "unknown type"},
      {"# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"2\"} 1\n"
       "h_bucket{le=\"+Inf\"} 2\nh_count 2\n",
       "not cumulative"},
      {"# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_count 2\n", "+Inf"},
      {"# TYPE h histogram\nh_bucket{le=\"+Inf\"} 2\nh_count 3\n",
       "_count differs"},
  };
  for (const auto& [text, why] : bad) {
    auto parsed = ParseMetrics(text);
    ASSERT_FALSE(parsed.ok()) << text;
    EXPECT_THAT(std::string(parsed.status().message()), HasSubstr(why)) << text;
  }
  EXPECT_TRUE(
      ParseMetrics("# a comment\n# TYPE x gauge\nx 1 1700000000\n").ok());
}

// Sends `request` on a fresh connection to 127.0.0.1:`port` and returns
// everything the server sends until it closes.
std::string RawExchange(uint16_t port, const std::string& request) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  EXPECT_EQ(write(fd, request.data(), request.size()),
            static_cast<ssize_t>(request.size()));
  std::string got;
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0) got.append(buf, n);
  close(fd);
  return got;
}

TEST(MetricsServerTest, AnswersMetricsAndNothingElse) {
  int collected = 0;
  auto server = MetricsServer::Start("127.0.0.1:0", [&collected] {
    ++collected;
    Exposition e;
    e.Declare("sroute_test_scrapes_total", MetricType::kCounter, "scrapes")
        .Add({}, collected);
    return e.Render();
  });
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string address = (*server)->address();
  EXPECT_EQ(address, "127.0.0.1:" + std::to_string((*server)->port()));

  for (int i = 1; i <= 2; ++i) {
    auto body = HttpGet(address);
    ASSERT_TRUE(body.ok()) << body.status();
    auto parsed = ParseMetrics(*body);
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(parsed->Sum("sroute_test_scrapes_total"), i);
  }
  EXPECT_EQ((*server)->scrapes(), 2u);

  auto missing = HttpGet(address, "/other");
  EXPECT_TRUE(absl::IsFailedPrecondition(missing.status()));
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("404"));

  // Two requests on one kept-alive connection, the second closing it; a
  // POST is refused with the methods allowed.
  const std::string both =
      RawExchange((*server)->port(),
                  "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"
                  "POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n"
                  "Connection: close\r\n\r\n");
  EXPECT_THAT(both, HasSubstr("HTTP/1.1 200 OK"));
  EXPECT_THAT(both, HasSubstr("Content-Type: text/plain; version=0.0.4"));
  EXPECT_THAT(both, HasSubstr("HTTP/1.1 405 Method Not Allowed"));
  EXPECT_THAT(both, HasSubstr("Allow: GET, HEAD"));
  EXPECT_EQ(collected, 3);

  // Garbage gets the connection closed; the server goes on.
  RawExchange((*server)->port(), "NOT HTTP\r\n\r\n");
  EXPECT_TRUE(HttpGet(address).ok());
}

TEST(MetricsServerTest, BadAddressesAreClearErrors) {
  auto collect = [] { return std::string(); };
  auto bad = MetricsServer::Start("localhost", collect);
  EXPECT_TRUE(absl::IsInvalidArgument(bad.status()));
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("HOST:PORT"));
  bad = MetricsServer::Start("example.org:9100", collect);
  EXPECT_TRUE(absl::IsInvalidArgument(bad.status()));
  auto first = MetricsServer::Start("127.0.0.1:0", collect);
  ASSERT_TRUE(first.ok());
  // reuse_address does not let two listen on one port.
  auto second = MetricsServer::Start((*first)->address(), collect);
  EXPECT_TRUE(absl::IsUnavailable(second.status()));
  EXPECT_THAT(std::string(second.status().message()),
              HasSubstr("cannot listen"));
}

}  // namespace
}  // namespace sroute::metrics
