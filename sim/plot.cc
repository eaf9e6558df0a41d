// SPDX-License-Identifier: Apache-2.0
#include "sim/plot.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <initializer_list>
#include <numeric>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "util/errno_status.h"
#include "util/strings.h"

namespace sroute::sim {
namespace {

// At most this many flows are drawn: those with the most IOs.
constexpr size_t kMaxFlows = 12;
// A flow's colour, by its place among the flows drawn.
constexpr const char* kPalette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728",
                                    "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
                                    "#bcbd22", "#17becf", "#393b79", "#637939"};
constexpr size_t kPaletteSize = sizeof(kPalette) / sizeof(kPalette[0]);

// The plots' layout, in pixels: the plot area, then the legend right of it.
constexpr double kLeft = 80;
constexpr double kTop = 44;
constexpr double kPlotWidth = 640;
constexpr double kPlotHeight = 380;
constexpr double kBottom = 56;
constexpr double kLegendGap = 24;
constexpr double kLegendRow = 18;
// A rough width of a character of the 12 px sans-serif text.
constexpr double kCharWidth = 7;
// The latency CDF's top: -log10(1 - fraction) for 0.9999 and above.
constexpr double kTailTop = 4;

// A coordinate.
std::string Px(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f", v);
  return buf;
}

// A number on an axis or in a label.
std::string Num(double v) {
  char buf[32];
  if (std::fabs(v) >= 1e6) {
    std::snprintf(buf, sizeof(buf), "%gM", v / 1e6);
  } else if (std::fabs(v) >= 1e4) {
    std::snprintf(buf, sizeof(buf), "%gk", v / 1e3);
  } else {
    std::snprintf(buf, sizeof(buf), "%g", v);
  }
  return buf;
}

// The label of 10^decade microseconds: 10, 100, 1 ms, 10 ms, 100 ms, 1 s.
std::string LatencyLabel(int decade) {
  const double us = std::pow(10.0, decade);
  char buf[32];
  if (decade < 3) {
    std::snprintf(buf, sizeof(buf), "%g", us);
  } else if (decade < 6) {
    std::snprintf(buf, sizeof(buf), "%g ms", us / 1e3);
  } else {
    std::snprintf(buf, sizeof(buf), "%g s", us / 1e6);
  }
  return buf;
}

// A step of 1, 2 or 5 times a power of ten that cuts `span` in about
// `steps`.
double NiceStep(double span, int steps) {
  if (!(span > 0)) return 1;
  const double raw = span / steps;
  const double power = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0}) {
    if (m * power >= raw * (1 - 1e-9)) return m * power;
  }
  return 10 * power;
}

std::string Line(double x1, double y1, double x2, double y2,
                 std::string_view attrs) {
  return StrCat("<line x1=\"", Px(x1), "\" y1=\"", Px(y1), "\" x2=\"", Px(x2),
                "\" y2=\"", Px(y2), "\" ", attrs, "/>\n");
}

std::string Text(double x, double y, std::string_view text,
                 std::string_view attrs = "") {
  return StrCat("<text x=\"", Px(x), "\" y=\"", Px(y), "\"",
                attrs.empty() ? "" : " ", attrs, ">", XmlEscape(text),
                "</text>\n");
}

std::string Document(double width, double height, const std::string& body) {
  return StrCat("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"", Px(width),
                "\" height=\"", Px(height), "\" viewBox=\"0 0 ", Px(width), " ",
                Px(height), "\" font-family=\"sans-serif\" font-size=\"12\">\n",
                "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n", body,
                "</svg>\n");
}

// The plot area and the data ranges it shows.
struct Frame {
  double left = kLeft, top = kTop, width = kPlotWidth, height = kPlotHeight;
  double x0 = 0, x1 = 1, y0 = 0, y1 = 1;

  double X(double v) const { return left + (v - x0) / (x1 - x0) * width; }
  double Y(double v) const {
    return top + height - (v - y0) / (y1 - y0) * height;
  }
  double Right() const { return left + width; }
  double Bottom() const { return top + height; }
};

struct Tick {
  double at;
  std::string label;
};

// Ticks at multiples of a nice step from 0 to `max`.
std::vector<Tick> LinearTicks(double max, int steps) {
  const double step = NiceStep(max, steps);
  std::vector<Tick> ticks;
  for (int i = 0; i * step <= max * (1 + 1e-9); ++i) {
    ticks.push_back({i * step, Num(i * step)});
  }
  return ticks;
}

// The axes of `f`: grid lines and labels at the ticks, the axes' titles.
void DrawAxes(const Frame& f, const std::vector<Tick>& xticks,
              const std::vector<Tick>& yticks, std::string_view xtitle,
              std::string_view ytitle, std::string* out) {
  for (const Tick& t : xticks) {
    const double x = f.X(t.at);
    StrAppend(out, Line(x, f.top, x, f.Bottom(), "stroke=\"#e6e6e6\""),
              Line(x, f.Bottom(), x, f.Bottom() + 5, "stroke=\"black\""),
              Text(x, f.Bottom() + 18, t.label, "text-anchor=\"middle\""));
  }
  for (const Tick& t : yticks) {
    const double y = f.Y(t.at);
    StrAppend(out, Line(f.left, y, f.Right(), y, "stroke=\"#e6e6e6\""),
              Line(f.left - 5, y, f.left, y, "stroke=\"black\""),
              Text(f.left - 8, y + 4, t.label, "text-anchor=\"end\""));
  }
  StrAppend(out,
            StrCat("<rect x=\"", Px(f.left), "\" y=\"", Px(f.top),
                   "\" width=\"", Px(f.width), "\" height=\"", Px(f.height),
                   "\" fill=\"none\" stroke=\"black\"/>\n"),
            Text(f.left + f.width / 2, f.Bottom() + 40, xtitle,
                 "text-anchor=\"middle\""));
  if (!ytitle.empty()) {
    const double x = 18, y = f.top + f.height / 2;
    StrAppend(out, Text(x, y, ytitle,
                        StrCat("text-anchor=\"middle\" transform=\"rotate(-90 ",
                               Px(x), " ", Px(y), ")\"")));
  }
}

void DrawTitle(const Frame& f, std::string_view title, std::string* out) {
  StrAppend(out, Text(f.left + f.width / 2, 26, title,
                      "text-anchor=\"middle\" font-size=\"15\" "
                      "font-weight=\"bold\""));
}

// A legend's row: its sample (SVG drawn around (0, 0), within x 0 to 24)
// and its label.
struct LegendEntry {
  std::string sample;
  std::string label;
};

std::string LineSample(std::string_view colour, bool dashed) {
  return Line(0, 0, 24, 0,
              StrCat("stroke=\"", colour, "\" stroke-width=\"2\"",
                     dashed ? " stroke-dasharray=\"6 4\"" : ""));
}

double LegendWidth(const std::vector<LegendEntry>& entries) {
  size_t chars = 0;
  for (const LegendEntry& e : entries) chars = std::max(chars, e.label.size());
  return entries.empty() ? 0 : 36 + kCharWidth * static_cast<double>(chars);
}

// Draws the legend right of `f`; returns the SVG's width and height with it.
std::pair<double, double> DrawLegend(const Frame& f,
                                     const std::vector<LegendEntry>& entries,
                                     std::string* out) {
  const double x = f.Right() + kLegendGap;
  for (size_t i = 0; i < entries.size(); ++i) {
    const double y = f.top + 8 + kLegendRow * static_cast<double>(i);
    StrAppend(out, "<g transform=\"translate(", Px(x), " ", Px(y), ")\">\n",
              entries[i].sample, Text(30, 4, entries[i].label), "</g>\n");
  }
  const double width = x + LegendWidth(entries) + 16;
  const double height =
      std::max(f.Bottom() + kBottom,
               f.top + 8 + kLegendRow * static_cast<double>(entries.size()));
  return {width, height};
}

// The flows drawn, by their index in the report, in the report's order:
// all of them, or the kMaxFlows with the most IOs.
std::vector<int> DrawnFlows(const proto::SimReport& r) {
  std::vector<int> drawn(static_cast<size_t>(r.flows_size()));
  std::iota(drawn.begin(), drawn.end(), 0);
  if (drawn.size() <= kMaxFlows) return drawn;
  auto ios = [&](int i) { return r.flows(i).reads() + r.flows(i).writes(); };
  std::stable_sort(drawn.begin(), drawn.end(),
                   [&](int a, int b) { return ios(a) > ios(b); });
  drawn.resize(kMaxFlows);
  std::sort(drawn.begin(), drawn.end());
  return drawn;
}

// The title of a plot of the report's flows.
std::string FlowsTitle(const proto::SimReport& r, std::string_view what) {
  std::string title(what);
  if (!r.scenario().empty()) StrAppend(&title, " of ", r.scenario());
  if (static_cast<size_t>(r.flows_size()) > kMaxFlows) {
    StrAppend(&title, ", ", kMaxFlows, " of ", r.flows_size(),
              " flows (most IOs)");
  }
  return title;
}

// The run's end: its flows' last interval's end or its last decision.
double TimeSpan(const proto::SimReport& r) {
  double end = 0;
  for (const auto& flow : r.flows()) {
    if (flow.intervals_size() > 0) {
      end = std::max(end, flow.intervals(flow.intervals_size() - 1).from_s() +
                              r.interval_s());
    }
  }
  for (const auto& d : r.decisions()) end = std::max(end, d.at_s());
  return end > 0 ? end : 1;
}

// "+N/-M rules", "reclaiming", "reclaimed", or several.
std::string DecisionSummary(const proto::SimDecision& d) {
  std::string s;
  if (d.insert_size() > 0 || d.remove_size() > 0 || d.reclaimed().empty()) {
    s = StrCat("+", d.insert_size(), "/-", d.remove_size(), " rules");
  }
  if (!d.reclaiming().empty()) {
    StrAppend(&s, s.empty() ? "" : ", ", "reclaiming");
  }
  if (!d.reclaimed().empty()) StrAppend(&s, s.empty() ? "" : ", ", "reclaimed");
  return s;
}

// A decision's tooltip: when, who, and its first change.
std::string DecisionTooltip(const proto::SimDecision& d) {
  char at[32];
  std::snprintf(at, sizeof(at), "%.3f s", d.at_s());
  std::string s = StrCat(at, " ", d.app(), " on ", d.host(), ": ");
  if (d.insert_size() > 0) {
    StrAppend(&s, "+ ", d.insert(0));
  } else if (d.remove_size() > 0) {
    StrAppend(&s, "- ", d.remove(0));
  } else {
    StrAppend(&s, "reclaimed ", d.reclaimed());
  }
  StrAppend(&s, " (", DecisionSummary(d), ")");
  return s;
}

std::string LatencyCdf(const proto::SimReport& r,
                       const std::vector<int>& drawn) {
  struct Series {
    const google::protobuf::RepeatedPtrField<proto::SimQuantile>* points;
    std::string colour;
    bool dashed;
    std::string label;
  };
  std::vector<Series> series;
  double lo = HUGE_VAL, hi = 0;
  for (size_t i = 0; i < drawn.size(); ++i) {
    const proto::SimFlowReport& flow = r.flows(drawn[i]);
    const char* colour = kPalette[i % kPaletteSize];
    if (flow.read_cdf_size() > 0) {
      series.push_back(
          {&flow.read_cdf(), colour, false, StrCat(flow.name(), " read")});
    }
    if (flow.write_cdf_size() > 0) {
      series.push_back(
          {&flow.write_cdf(), colour, true, StrCat(flow.name(), " write")});
    }
  }
  for (const Series& s : series) {
    for (const proto::SimQuantile& q : *s.points) {
      if (q.us() > 0) lo = std::min(lo, q.us());
      hi = std::max(hi, q.us());
    }
  }
  if (!(lo < HUGE_VAL)) lo = 1;
  Frame f;
  const int first = static_cast<int>(std::floor(std::log10(lo)));
  int last = static_cast<int>(std::ceil(std::log10(std::max(hi, lo))));
  if (last <= first) last = first + 1;
  f.x0 = first;
  f.x1 = last;
  f.y0 = 0;
  f.y1 = kTailTop;
  std::vector<Tick> xticks, yticks;
  for (int d = first; d <= last; ++d)
    xticks.push_back({1.0 * d, LatencyLabel(d)});
  const char* tails[] = {"0", "0.9", "0.99", "0.999", "0.9999"};
  for (int i = 0; i <= 4; ++i) yticks.push_back({1.0 * i, tails[i]});

  std::string body;
  DrawTitle(f, FlowsTitle(r, "latency CDF"), &body);
  DrawAxes(f, xticks, yticks, "latency (µs, log scale)",
           "fraction of IOs (tail stretched)", &body);
  std::vector<LegendEntry> legend;
  for (const Series& s : series) {
    std::string points;
    for (const proto::SimQuantile& q : *s.points) {
      const double x = std::log10(std::max(q.us(), std::pow(10.0, first)));
      const double y =
          q.fraction() >= 1
              ? kTailTop
              : std::clamp(-std::log10(1 - q.fraction()), 0.0, kTailTop);
      StrAppend(&points, points.empty() ? "" : " ", Px(f.X(x)), ",",
                Px(f.Y(y)));
    }
    StrAppend(&body, "<polyline fill=\"none\" stroke=\"", s.colour,
              "\" stroke-width=\"2\"",
              s.dashed ? " stroke-dasharray=\"6 4\"" : "", " points=\"", points,
              "\"><title>", XmlEscape(s.label), "</title></polyline>\n");
    legend.push_back({LineSample(s.colour, s.dashed), s.label});
  }
  const auto [width, height] = DrawLegend(f, legend, &body);
  return Document(width, height, body);
}

std::string Throughput(const proto::SimReport& r,
                       const std::vector<int>& drawn) {
  double top = 0;
  for (int i : drawn) {
    for (const proto::SimInterval& in : r.flows(i).intervals()) {
      top = std::max(top, in.iops());
    }
  }
  Frame f;
  f.x1 = TimeSpan(r);
  const double step = NiceStep(top > 0 ? top : 1, 6);
  f.y1 = std::max(1.0, std::ceil((top > 0 ? top : 1) / step - 1e-9)) * step;

  std::string title = FlowsTitle(r, "IOs per second");
  if (r.interval_s() > 0) {
    StrAppend(&title, " (intervals of ", Num(r.interval_s()), " s)");
  }
  std::string body;
  DrawTitle(f, title, &body);
  DrawAxes(f, LinearTicks(f.x1, 8), LinearTicks(f.y1, 6), "time (s)",
           "IOs per second", &body);
  std::vector<LegendEntry> legend;
  for (size_t i = 0; i < drawn.size(); ++i) {
    const proto::SimFlowReport& flow = r.flows(drawn[i]);
    if (flow.intervals_size() == 0) continue;
    const char* colour = kPalette[i % kPaletteSize];
    std::string points;
    for (const proto::SimInterval& in : flow.intervals()) {
      StrAppend(&points, points.empty() ? "" : " ", Px(f.X(in.from_s())), ",",
                Px(f.Y(in.iops())));
    }
    StrAppend(&body, "<polyline fill=\"none\" stroke=\"", colour,
              "\" stroke-width=\"1.5\" points=\"", points, "\"><title>",
              XmlEscape(flow.name()), "</title></polyline>\n");
    legend.push_back({LineSample(colour, false), flow.name()});
  }
  // The decisions, their labels down the line (side by side when close).
  double last_label = -HUGE_VAL;
  for (const proto::SimDecision& d : r.decisions()) {
    const double x = f.X(d.at_s());
    const double label_x = std::max(x + 3, last_label + 12);
    last_label = label_x;
    const double label_y = f.top + 6;
    StrAppend(&body, "<g><title>", XmlEscape(DecisionTooltip(d)), "</title>\n",
              Line(x, f.top, x, f.Bottom(),
                   "stroke=\"#999999\" stroke-width=\"1\" "
                   "stroke-dasharray=\"4 3\""),
              Text(label_x, label_y, StrCat(d.app(), " ", DecisionSummary(d)),
                   StrCat("font-size=\"10\" fill=\"#555555\" "
                          "stroke=\"white\" stroke-width=\"3\" "
                          "paint-order=\"stroke\" transform=\"rotate(90 ",
                          Px(label_x), " ", Px(label_y), ")\"")),
              "</g>\n");
  }
  if (r.decisions_size() > 0) {
    legend.push_back(
        {Line(0, 0, 24, 0, "stroke=\"#999999\" stroke-dasharray=\"4 3\""),
         "an app's decision"});
  }
  const auto [width, height] = DrawLegend(f, legend, &body);
  return Document(width, height, body);
}

enum class DecisionKind { kInsert, kRemove, kReclaimed };

DecisionKind KindOf(const proto::SimDecision& d) {
  if (!d.reclaimed().empty()) return DecisionKind::kReclaimed;
  return d.insert_size() > 0 ? DecisionKind::kInsert : DecisionKind::kRemove;
}

// A decision's marker, centred on (x, y).
std::string Marker(DecisionKind kind, double x, double y) {
  auto polygon = [](std::initializer_list<std::pair<double, double>> points,
                    const char* colour) {
    std::string p;
    for (const auto& [px, py] : points) {
      StrAppend(&p, p.empty() ? "" : " ", Px(px), ",", Px(py));
    }
    return StrCat("<polygon points=\"", p, "\" fill=\"", colour,
                  "\" stroke=\"black\" stroke-width=\"0.5\"/>\n");
  };
  switch (kind) {
    case DecisionKind::kInsert:
      return polygon({{x, y - 6}, {x + 6, y + 5}, {x - 6, y + 5}}, "#2ca02c");
    case DecisionKind::kRemove:
      return polygon({{x, y + 6}, {x + 6, y - 5}, {x - 6, y - 5}}, "#d62728");
    case DecisionKind::kReclaimed:
      break;
  }
  return polygon({{x, y - 6}, {x + 6, y}, {x, y + 6}, {x - 6, y}}, "#1f77b4");
}

std::string Decisions(const proto::SimReport& r) {
  std::vector<std::string> hosts;
  for (const proto::SimDecision& d : r.decisions()) {
    if (std::find(hosts.begin(), hosts.end(), d.host()) == hosts.end()) {
      hosts.push_back(d.host());
    }
  }
  constexpr double kRow = 50;
  Frame f;
  size_t label_chars = 0;
  for (const std::string& h : hosts) {
    label_chars = std::max(label_chars, h.empty() ? 9 : h.size());
  }
  f.left = std::max(kLeft, 20 + kCharWidth * static_cast<double>(label_chars));
  f.height = std::max(80.0, kRow * static_cast<double>(hosts.size()));
  f.x1 = TimeSpan(r);
  // Rows top to bottom: row i's centre at y = rows - i - 0.5.
  f.y1 = std::max<double>(1, static_cast<double>(hosts.size()));
  std::vector<Tick> rows;
  for (size_t i = 0; i < hosts.size(); ++i) {
    rows.push_back({f.y1 - static_cast<double>(i) - 0.5,
                    hosts[i].empty() ? "(no host)" : hosts[i]});
  }
  std::string title = "decisions";
  if (!r.scenario().empty()) StrAppend(&title, " of ", r.scenario());
  StrAppend(&title, " (", r.decisions_size(), ")");
  std::string body;
  DrawTitle(f, title, &body);
  DrawAxes(f, LinearTicks(f.x1, 8), rows, "time (s)", "", &body);
  if (hosts.empty()) {
    StrAppend(&body, Text(f.left + f.width / 2, f.top + f.height / 2 + 5,
                          "no decisions",
                          "text-anchor=\"middle\" font-size=\"14\" "
                          "fill=\"#555555\""));
  }
  // Markers close together in a row are drawn above and below each other.
  std::vector<double> last_x(hosts.size(), -HUGE_VAL);
  std::vector<int> stacked(hosts.size(), 0);
  constexpr double kOffsets[] = {0, -13, 13};
  for (const proto::SimDecision& d : r.decisions()) {
    const size_t row = static_cast<size_t>(
        std::find(hosts.begin(), hosts.end(), d.host()) - hosts.begin());
    const double x = f.X(d.at_s());
    stacked[row] = std::fabs(x - last_x[row]) < 10 ? stacked[row] + 1 : 0;
    last_x[row] = x;
    const double y = f.Y(rows[row].at) + kOffsets[stacked[row] % 3];
    StrAppend(&body, "<g><title>", XmlEscape(DecisionTooltip(d)), "</title>\n",
              Marker(KindOf(d), x, y), "</g>\n");
  }
  std::vector<LegendEntry> legend = {
      {Marker(DecisionKind::kInsert, 12, 0), "rules inserted"},
      {Marker(DecisionKind::kRemove, 12, 0), "rules removed only"},
      {Marker(DecisionKind::kReclaimed, 12, 0), "reclaim ended"}};
  const auto [width, height] = DrawLegend(f, legend, &body);
  return Document(width, height, body);
}

absl::Status WriteFile(const std::filesystem::path& path,
                       const std::string& text) {
  std::FILE* file = std::fopen(path.c_str(), "w");
  if (file == nullptr) return ErrnoStatus(errno, path.string());
  int err = 0;
  if (std::fwrite(text.data(), 1, text.size(), file) != text.size()) {
    err = errno != 0 ? errno : EIO;
  }
  if (std::fclose(file) != 0 && err == 0) err = errno != 0 ? errno : EIO;
  if (err != 0) return ErrnoStatus(err, path.string());
  return absl::OkStatus();
}

}  // namespace

absl::Status WritePlots(const proto::SimReport& report,
                        const std::string& dir) {
  bool curves = false;
  for (const proto::SimFlowReport& flow : report.flows()) {
    curves = curves || flow.read_cdf_size() > 0 || flow.write_cdf_size() > 0 ||
             flow.intervals_size() > 0;
  }
  if (!curves) {
    return absl::FailedPreconditionError(
        "the report has no curves (run with curves)");
  }
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return ErrnoStatus(ec.value(), dir);
  const std::vector<int> drawn = DrawnFlows(report);
  const std::filesystem::path d(dir);
  if (absl::Status s =
          WriteFile(d / "latency_cdf.svg", LatencyCdf(report, drawn));
      !s.ok()) {
    return s;
  }
  if (absl::Status s =
          WriteFile(d / "throughput.svg", Throughput(report, drawn));
      !s.ok()) {
    return s;
  }
  return WriteFile(d / "decisions.svg", Decisions(report));
}

}  // namespace sroute::sim
