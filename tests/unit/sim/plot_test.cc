// SPDX-License-Identifier: Apache-2.0
// sim::WritePlots: the three SVG files of a report's curves, their text
// escaped, the flows drawn (at most 12), and its errors; and the plots of
// a real run of examples/sim/tail_latency.textproto.
#include "sim/plot.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "gtest/gtest.h"
#include "sim/scenario.h"
#include "sim/simulate.h"

namespace sroute::sim {
namespace {

namespace fs = std::filesystem;

// A fresh directory of its own under the test's temporary directory.
fs::path TempDir(const std::string& name) {
  const fs::path dir = fs::path(testing::TempDir()) /
                       ("plot_test_" + std::to_string(getpid()) + "_" + name);
  fs::remove_all(dir);
  return dir;
}

std::string Read(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

size_t Count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos;
       at = text.find(what, at + what.size())) {
    ++n;
  }
  return n;
}

void AddFlow(proto::SimReport* r, const std::string& name, uint64_t ios,
             double scale) {
  proto::SimFlowReport* f = r->add_flows();
  f->set_name(name);
  f->set_reads(ios / 2);
  f->set_writes(ios - ios / 2);
  for (double fraction : {0.01, 0.5, 0.9, 0.99, 0.999, 0.9999, 1.0}) {
    proto::SimQuantile* q = f->add_read_cdf();
    q->set_fraction(fraction);
    q->set_us(scale * 100 / (1.0001 - fraction));
    q = f->add_write_cdf();
    q->set_fraction(fraction);
    q->set_us(scale * 300 / (1.0001 - fraction));
  }
  for (int i = 0; i < 10; ++i) {
    proto::SimInterval* in = f->add_intervals();
    in->set_from_s(i * 0.5);
    in->set_iops(scale * (100 + 40 * i));
    in->set_p50_us(200);
    in->set_p99_us(900);
  }
}

// Two flows with curves, an insert on H0 with a rule of < and >, and a
// reclaim on H1.
proto::SimReport SmallReport() {
  proto::SimReport r;
  r.set_scenario("small");
  r.set_interval_s(0.5);
  AddFlow(&r, "alpha", 1000, 1);
  AddFlow(&r, "beta", 500, 2);
  proto::SimDecision* d = r.add_decisions();
  d->set_at_s(1.5);
  d->set_app("tail_latency");
  d->set_host("H0");
  d->add_insert("<*, w, //home/a/*> -> <IO, //S2/a/*>");
  d = r.add_decisions();
  d->set_at_s(3.5);
  d->set_app("tail_latency");
  d->set_host("H1");
  d->add_remove("<*, w, //home/a/*> -> <IO, //S2/a/*>");
  d->set_reclaimed("//home/a/");
  return r;
}

void ExpectSvg(const std::string& text, const fs::path& path) {
  EXPECT_EQ(text.rfind("<svg", 0), 0u) << path;
  ASSERT_GE(text.size(), 7u) << path;
  EXPECT_EQ(text.substr(text.size() - 7), "</svg>\n") << path;
}

TEST(PlotTest, WritesTheThreeFiles) {
  const fs::path dir = TempDir("small") / "a" / "b";  // made, parents too
  ASSERT_TRUE(WritePlots(SmallReport(), dir.string()).ok());
  const std::string cdf = Read(dir / "latency_cdf.svg");
  const std::string throughput = Read(dir / "throughput.svg");
  const std::string decisions = Read(dir / "decisions.svg");
  ExpectSvg(cdf, dir / "latency_cdf.svg");
  ExpectSvg(throughput, dir / "throughput.svg");
  ExpectSvg(decisions, dir / "decisions.svg");

  // A read and a write series per flow, dashed writes; the legend.
  EXPECT_EQ(Count(cdf, "<polyline"), 4u);
  EXPECT_EQ(Count(cdf, "stroke-dasharray=\"6 4\" points="), 2u);
  EXPECT_NE(cdf.find(">alpha read<"), std::string::npos);
  EXPECT_NE(cdf.find(">beta write<"), std::string::npos);
  EXPECT_NE(cdf.find(">0.9999<"), std::string::npos);
  EXPECT_NE(cdf.find(">1 ms<"), std::string::npos);
  EXPECT_NE(cdf.find("latency CDF of small"), std::string::npos);

  // A series per flow; the decisions as lines with their labels.
  EXPECT_EQ(Count(throughput, "<polyline"), 2u);
  EXPECT_NE(throughput.find(">alpha<"), std::string::npos);
  EXPECT_NE(throughput.find(">beta<"), std::string::npos);
  EXPECT_NE(throughput.find("tail_latency +1/-0 rules"), std::string::npos);
  EXPECT_NE(throughput.find("reclaimed"), std::string::npos);
  EXPECT_NE(throughput.find("&lt;*, w, //home/a/*&gt;"), std::string::npos);

  // A row per host, the rule in the tooltip, escaped.
  EXPECT_NE(decisions.find(">H0<"), std::string::npos);
  EXPECT_NE(decisions.find(">H1<"), std::string::npos);
  EXPECT_NE(decisions.find("<title>1.500 s tail_latency on H0: + &lt;*, w, "
                           "//home/a/*&gt; -&gt; &lt;IO, //S2/a/*&gt;"),
            std::string::npos);
  EXPECT_EQ(Count(decisions, "<g><title>"), 2u);
  EXPECT_EQ(decisions.find("no decisions"), std::string::npos);

  // No rule's text anywhere unescaped.
  for (const std::string* text : {&cdf, &throughput, &decisions}) {
    EXPECT_EQ(text->find("<*"), std::string::npos);
    EXPECT_EQ(text->find("<IO"), std::string::npos);
  }
  fs::remove_all(TempDir("small"));
}

TEST(PlotTest, SkipsSeriesWithoutPoints) {
  proto::SimReport r = SmallReport();
  r.mutable_flows(1)->clear_write_cdf();
  r.mutable_flows(1)->clear_intervals();
  const fs::path dir = TempDir("skips");
  ASSERT_TRUE(WritePlots(r, dir.string()).ok());
  const std::string cdf = Read(dir / "latency_cdf.svg");
  EXPECT_EQ(Count(cdf, "<polyline"), 3u);
  EXPECT_EQ(cdf.find("beta write"), std::string::npos);
  EXPECT_EQ(Count(Read(dir / "throughput.svg"), "<polyline"), 1u);
  fs::remove_all(dir);
}

TEST(PlotTest, NoDecisionsStillDrawsTheTimeline) {
  proto::SimReport r = SmallReport();
  r.clear_decisions();
  const fs::path dir = TempDir("none");
  ASSERT_TRUE(WritePlots(r, dir.string()).ok());
  const std::string decisions = Read(dir / "decisions.svg");
  ExpectSvg(decisions, dir / "decisions.svg");
  EXPECT_NE(decisions.find(">no decisions<"), std::string::npos);
  EXPECT_NE(decisions.find(">time (s)<"), std::string::npos);
  fs::remove_all(dir);
}

TEST(PlotTest, DrawsTheTwelveFlowsWithTheMostIos) {
  proto::SimReport r;
  r.set_scenario("many");
  r.set_interval_s(0.5);
  // f0 .. f14, f14 with the most IOs: f0, f1 and f2 are left out.
  for (int i = 0; i < 15; ++i) {
    AddFlow(&r, "f" + std::to_string(i), 100 * (i + 1), 1);
  }
  const fs::path dir = TempDir("many");
  ASSERT_TRUE(WritePlots(r, dir.string()).ok());
  const std::string cdf = Read(dir / "latency_cdf.svg");
  const std::string throughput = Read(dir / "throughput.svg");
  EXPECT_NE(cdf.find("12 of 15 flows (most IOs)"), std::string::npos);
  EXPECT_NE(throughput.find("12 of 15 flows (most IOs)"), std::string::npos);
  EXPECT_EQ(Count(cdf, "<polyline"), 24u);
  EXPECT_EQ(Count(throughput, "<polyline"), 12u);
  EXPECT_EQ(throughput.find(">f2<"), std::string::npos);
  EXPECT_NE(throughput.find(">f3<"), std::string::npos);
  EXPECT_NE(throughput.find(">f14<"), std::string::npos);
  fs::remove_all(dir);
}

TEST(PlotTest, ReportWithoutCurvesIsRefused) {
  proto::SimReport r = SmallReport();
  for (auto& f : *r.mutable_flows()) {
    f.clear_read_cdf();
    f.clear_write_cdf();
    f.clear_intervals();
  }
  const fs::path dir = TempDir("nocurves");
  const absl::Status s = WritePlots(r, dir.string());
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("no curves"), std::string::npos) << s;
  EXPECT_FALSE(fs::exists(dir));
}

TEST(PlotTest, UnwritableDirectoryNamesThePath) {
  const fs::path base = TempDir("unwritable");
  fs::create_directories(base);
  const fs::path file = base / "regular";
  std::ofstream(file) << "x";
  const fs::path dir = file / "plots";
  const absl::Status s = WritePlots(SmallReport(), dir.string());
  EXPECT_FALSE(s.ok());
  EXPECT_NE(std::string(s.message()).find(dir.string()), std::string::npos)
      << s;
  fs::remove_all(base);
}

TEST(PlotTest, PlotsARealRun) {
  auto layout = LoadScenario(
      (fs::path(SROUTE_SOURCE_DIR) / "examples/sim/tail_latency.textproto")
          .string());
  ASSERT_TRUE(layout.ok()) << layout.status();
  auto report = Simulate(*layout, SimOptions{.curves = true});
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_GT(report->interval_s(), 0);
  ASSERT_GT(report->flows_size(), 0);
  const proto::SimFlowReport* most = &report->flows(0);
  for (const auto& f : report->flows()) {
    if (f.reads() + f.writes() > most->reads() + most->writes()) most = &f;
  }
  EXPECT_GT(most->intervals_size(), 0) << most->name();
  EXPECT_GT(most->read_cdf_size(), 0) << most->name();
  EXPECT_GT(report->decisions_size(), 0);

  const fs::path dir = TempDir("real");
  ASSERT_TRUE(WritePlots(*report, dir.string()).ok());
  for (const char* name :
       {"latency_cdf.svg", "throughput.svg", "decisions.svg"}) {
    ExpectSvg(Read(dir / name), dir / name);
  }
  const std::string throughput = Read(dir / "throughput.svg");
  EXPECT_EQ(Count(throughput, "<polyline"),
            static_cast<size_t>(report->flows_size()));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace sroute::sim
