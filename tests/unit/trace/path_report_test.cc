// SPDX-License-Identifier: Apache-2.0
// PathReport (tools/trace/path_report.h): a trace's hops become a tree, one
// row per hop of the path, with own times that add up to the whole.
#include "tools/trace/path_report.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "google/protobuf/util/json_util.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "tools/sroutectl/json_output.h"

namespace sroute::trace {
namespace {

using ::testing::HasSubstr;

proto::TraceHop Hop(std::string host, std::string kind, std::string next,
                    uint64_t start_us, uint64_t end_us, uint32_t depth = 0,
                    int copy = -1, uint64_t rule = 1) {
  proto::TraceHop h;
  h.set_host(host);
  h.set_kind(kind);
  h.set_next(next);
  h.set_start_ns(start_us * 1000);
  h.set_end_ns(end_us * 1000);
  h.set_depth(depth);
  h.set_copy(copy);
  h.set_rule_id(rule);
  return h;
}

// The volume's rule (0..100 us) holds an rpc (10..90) to S1, whose own
// clock is far off: S1's rule (1000..1050) holds a default route
// (1010..1040).
proto::TraceRecord Forwarded() {
  proto::TraceRecord r;
  r.set_start_ns(0);
  r.set_end_ns(100'000);
  // As Trace::Hops gives them: in the order they ended, the server's just
  // before the call.
  *r.add_hops() = Hop("S1", "default", "//S1/x", 1010, 1040, 1, -1, 0);
  *r.add_hops() = Hop("S1", "rule", "//S1/x", 1000, 1050, 1);
  *r.add_hops() = Hop("vol", "rpc", "10.0.0.1:7400", 10, 90);
  *r.add_hops() = Hop("vol", "rule", "//S1/x", 0, 100);
  return r;
}

TEST(PathReportTest, HopsBecomeRowsInPathOrderWithOwnTimes) {
  PathReport report;
  report.Add(Forwarded());
  report.Add(Forwarded());
  ASSERT_EQ(report.rows().size(), 4u);
  EXPECT_EQ(report.ios(), 2u);
  std::vector<std::string> path;
  for (const HopRow& r : report.rows()) {
    path.push_back(r.host + " " + r.kind + " " + std::to_string(r.level));
  }
  EXPECT_THAT(path, ::testing::ElementsAre("vol rule 0", "vol rpc 1",
                                           "S1 rule 2", "S1 default 3"));
  const auto& rows = report.rows();
  EXPECT_EQ(rows[0].time.mean(), 100'000);
  EXPECT_EQ(rows[0].own.mean(), 20'000);  // less the rpc
  EXPECT_EQ(rows[1].own.mean(), 30'000);  // 80 less S1's 50: the link
  EXPECT_EQ(rows[2].own.mean(), 20'000);
  EXPECT_EQ(rows[3].own.mean(), 30'000);  // the device
  EXPECT_EQ(rows[0].time.count(), 2u);
  double own = 0;
  for (const HopRow& r : rows) own += r.own.mean();
  EXPECT_EQ(own, report.total().mean());
  EXPECT_EQ(report.Slowest(), 1);  // the first of the two 30 us hops
  EXPECT_DOUBLE_EQ(report.Share(rows[1]), 0.3);
  const std::string text = report.Text("title");
  EXPECT_THAT(text, HasSubstr("<- slowest"));
  EXPECT_THAT(text, HasSubstr("10.0.0.1:7400"));
  // What --json prints: the rows with their times, and it parses back.
  const proto::CtlPathReport out = report.Proto("<*, *, //h/x>");
  EXPECT_EQ(out.ios(), 2u);
  EXPECT_EQ(out.path(), "<*, *, //h/x>");
  ASSERT_TRUE(out.total().log2_ns_histogram().contains(16));
  EXPECT_EQ(out.total().log2_ns_histogram().at(16), 2u);  // 100 us
  ASSERT_EQ(out.hops_size(), 4);
  for (const proto::CtlPathHop& h : out.hops()) {
    EXPECT_EQ(h.slowest(), h.row() == report.Slowest()) << h.row();
  }
  EXPECT_EQ(out.hops(1).own_avg_ns(), 30'000);
  const std::string json = ctl::ToJson(out);
  EXPECT_THAT(json, HasSubstr("\"ios\":\"2\""));
  proto::CtlPathReport back;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(json, &back).ok())
      << json;
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(back, out))
      << json;
}

// Forwarded()'s path, where the rpc waited 20 us for a connection (10..30)
// before it was sent and S1 queued it 5 us: those are their own rows, and
// the link keeps the rest.
TEST(PathReportTest, AConnectionWaitAndAServersQueueAreTheirOwn) {
  proto::TraceRecord r;
  *r.add_hops() = Hop("vol", "connect", "10.0.0.1:7400", 10, 30);
  *r.add_hops() = Hop("S1", "queue", "", 995, 1000, 1, -1, 0);
  r.MergeFrom(Forwarded());  // its hops after these, its times
  PathReport report;
  report.Add(r);
  std::vector<std::string> path;
  std::vector<double> own;
  for (const HopRow& row : report.rows()) {
    path.push_back(row.host + " " + row.kind + " " + std::to_string(row.level));
    own.push_back(row.own.mean());
  }
  EXPECT_THAT(
      path, ::testing::ElementsAre("vol rule 0", "vol rpc 1", "vol connect 2",
                                   "S1 queue 2", "S1 rule 2", "S1 default 3"));
  // rpc: 80 less S1's 55 (queue to reply) less the 20 of the connect.
  EXPECT_THAT(own, ::testing::ElementsAre(20'000, 5'000, 20'000, 5'000, 20'000,
                                          30'000));
  double sum = 0;
  for (double o : own) sum += o;
  EXPECT_EQ(sum, report.total().mean());
}

// Two scatter copies to two servers: each copy's server hops belong to its
// own call, and the copy that set the scatter's end is counted.
TEST(PathReportTest, ScatterCopiesKeepTheirServersApart) {
  proto::TraceRecord r;
  r.set_start_ns(0);
  r.set_end_ns(200'000);
  *r.add_hops() = Hop("A", "rule", "//A/x", 500, 520, 1);
  *r.add_hops() = Hop("vol", "rpc", "a:1", 10, 50, 0, 0);
  *r.add_hops() = Hop("B", "rule", "//B/x", 700, 800, 1);
  *r.add_hops() = Hop("vol", "rpc", "b:1", 12, 180, 0, 1);
  *r.add_hops() = Hop("vol", "scatter", "2 copies", 5, 190, 0, 1, 0);
  *r.add_hops() = Hop("vol", "rule", "//A/x", 0, 195);
  PathReport report;
  report.Add(r);
  std::vector<std::string> path;
  for (const HopRow& row : report.rows()) {
    path.push_back(row.host + " " + row.kind + " " + row.next + " " +
                   std::to_string(row.level) + " " +
                   std::to_string(row.deciding));
  }
  EXPECT_THAT(path, ::testing::ElementsAre(
                        "vol rule //A/x 0 0", "vol scatter 2 copies 1 0",
                        "vol rpc a:1 2 0", "A rule //A/x 3 0",
                        "vol rpc b:1 2 1", "B rule //B/x 3 0"));
  EXPECT_EQ(report.rows()[4].own.mean(), 68'000);  // 168 less B's 100
}

TEST(DurationsTest, QuantilesAndStdev) {
  Durations d;
  for (uint64_t i = 1; i <= 100; ++i) d.Add(i * 1000);
  EXPECT_EQ(d.count(), 100u);
  EXPECT_EQ(d.min(), 1000u);
  EXPECT_EQ(d.max(), 100'000u);
  EXPECT_EQ(d.last(), 100'000u);
  EXPECT_NEAR(d.Quantile(0.5), 50'000, 1000);
  EXPECT_NEAR(d.Quantile(0.99), 99'000, 1000);
  EXPECT_NEAR(d.stdev(), 28'866, 10);
}

}  // namespace
}  // namespace sroute::trace
