// SPDX-License-Identifier: Apache-2.0
#include "tools/trace/path_report.h"

#include <algorithm>
#include <cmath>
#include <functional>

#include "tools/sroutectl/format.h"
#include "util/strings.h"

namespace sroute::trace {
namespace {

using ctl::Printf;
using Hops = google::protobuf::RepeatedPtrField<proto::TraceHop>;

constexpr size_t kSeriesKept = 20000;

// A hop in one trace's tree.
struct Node {
  int hop;
  std::vector<int> children;  // node indices, by start
  uint64_t own_ns = 0;
};

uint64_t Span(const proto::TraceHop& h) {
  return h.end_ns() > h.start_ns() ? h.end_ns() - h.start_ns() : 0;
}

// Builds the nodes of hops[lo, hi) at `depth` (one host's clock) into
// *nodes; returns the top ones by start. An rpc hop's children are the
// deeper hops just before it (Trace::AddCall).
std::vector<int> Build(const Hops& hops, int lo, int hi, uint32_t depth,
                       std::vector<Node>* nodes) {
  std::vector<int> local;  // node indices
  for (int i = lo; i < hi; ++i) {
    if (hops[i].depth() != depth) continue;
    const int n = static_cast<int>(nodes->size());
    nodes->push_back(Node{i, {}, 0});
    local.push_back(n);
    const proto::TraceHop& h = hops[i];
    uint64_t inner_span = 0;
    if (h.kind() == "rpc") {
      int run = i;
      while (run > lo && hops[run - 1].depth() > depth) --run;
      std::vector<int> inner = Build(hops, run, i, depth + 1, nodes);
      uint64_t first = UINT64_MAX, last = 0;
      for (int c : inner) {
        first = std::min(first, hops[(*nodes)[c].hop].start_ns());
        last = std::max(last, hops[(*nodes)[c].hop].end_ns());
      }
      if (!inner.empty() && last > first) inner_span = last - first;
      (*nodes)[n].children = std::move(inner);
    }
    (*nodes)[n].own_ns = Span(h) > inner_span ? Span(h) - inner_span : 0;
  }
  // Nesting on this clock: outer hops first (earlier start, later end, and
  // of equal times the one that ended later in the list).
  std::sort(local.begin(), local.end(), [&](int a, int b) {
    const proto::TraceHop& x = hops[(*nodes)[a].hop];
    const proto::TraceHop& y = hops[(*nodes)[b].hop];
    if (x.start_ns() != y.start_ns()) return x.start_ns() < y.start_ns();
    if (x.end_ns() != y.end_ns()) return x.end_ns() > y.end_ns();
    return (*nodes)[a].hop > (*nodes)[b].hop;
  });
  std::vector<int> top, stack;
  for (int n : local) {
    const proto::TraceHop& h = hops[(*nodes)[n].hop];
    while (!stack.empty()) {
      const proto::TraceHop& s = hops[(*nodes)[stack.back()].hop];
      if (s.start_ns() <= h.start_ns() && h.end_ns() <= s.end_ns()) break;
      stack.pop_back();
    }
    if (stack.empty()) {
      top.push_back(n);
    } else {
      (*nodes)[stack.back()].children.push_back(n);
    }
    stack.push_back(n);
  }
  // A local parent's own time: less the union of its local children (an
  // rpc's: its wait for a connection), and for an rpc, less the server's
  // span taken above too.
  for (int n : local) {
    Node& node = (*nodes)[n];
    const proto::TraceHop& h = hops[node.hop];
    uint64_t covered = 0, reach = 0;
    for (int c : node.children) {  // the local ones by start (sorted above)
      const proto::TraceHop& ch = hops[(*nodes)[c].hop];
      if (ch.depth() != depth) continue;  // a server's, on its clock
      const uint64_t from = std::max(ch.start_ns(), reach);
      if (ch.end_ns() > from) covered += ch.end_ns() - from;
      reach = std::max(reach, ch.end_ns());
    }
    if (covered == 0) continue;
    const uint64_t base = h.kind() == "rpc" ? node.own_ns : Span(h);
    node.own_ns = base > covered ? base - covered : 0;
  }
  return top;
}

std::string Micros(double ns) { return Printf("%.1f", ns / 1000.0); }

}  // namespace

void Durations::Add(uint64_t ns) {
  if (count_ == 0 || ns < min_) min_ = ns;
  max_ = std::max(max_, ns);
  last_ = ns;
  ++count_;
  sum_ += static_cast<double>(ns);
  sum_squares_ += static_cast<double>(ns) * static_cast<double>(ns);
  ++hist_[ns == 0 ? 0 : 63 - __builtin_clzll(ns)];
  if (kept_.size() < kKept) {
    kept_.push_back(ns);
  } else {
    // Reservoir sampling: every duration is kept with the same chance.
    rng_ ^= rng_ << 13;
    rng_ ^= rng_ >> 7;
    rng_ ^= rng_ << 17;
    const uint64_t slot = rng_ % count_;
    if (slot < kKept) kept_[slot] = ns;
  }
}

double Durations::stdev() const {
  if (count_ < 2) return 0;
  const double m = mean();
  return std::sqrt(std::max(0.0, sum_squares_ / count_ - m * m));
}

uint64_t Durations::Quantile(double q) const {
  if (kept_.empty()) return 0;
  std::vector<uint64_t> sorted = kept_;
  const size_t i = std::min(sorted.size() - 1,
                            static_cast<size_t>(q * (sorted.size() - 1) + 0.5));
  std::nth_element(sorted.begin(), sorted.begin() + i, sorted.end());
  return sorted[i];
}

int PathReport::RowFor(int parent, const proto::TraceHop& hop, int level) {
  // An rpc hop's rule is its parent's (when it has one): one row for it.
  const uint64_t rule = hop.kind() == "rpc" ? 0 : hop.rule_id();
  Key key{parent, hop.depth(), hop.host(), hop.kind(),
          rule,   hop.next(),  hop.copy()};
  auto [it, added] = index_.try_emplace(key, static_cast<int>(rows_.size()));
  if (added) {
    HopRow row;
    row.depth = hop.depth();
    row.host = hop.host();
    row.kind = hop.kind();
    row.rule_id = rule;
    row.next = hop.next();
    row.copy = hop.copy();
    row.level = level;
    row.parent = parent;
    rows_.push_back(std::move(row));
  }
  return it->second;
}

void PathReport::Add(const proto::TraceRecord& record) {
  const uint64_t total = record.end_ns() > record.start_ns()
                             ? record.end_ns() - record.start_ns()
                             : 0;
  total_.Add(total);
  if (record.code() != 0) ++errors_;
  if (first_end_ns_ == 0) first_end_ns_ = record.end_ns();
  const Hops& hops = record.hops();
  std::vector<Node> nodes;
  nodes.reserve(hops.size());
  const std::vector<int> top = Build(hops, 0, hops.size(), /*depth=*/0, &nodes);
  // Children by start, as the tree is shown.
  auto by_start = [&](std::vector<int> v) {
    std::stable_sort(v.begin(), v.end(), [&](int a, int b) {
      return hops[nodes[a].hop].start_ns() < hops[nodes[b].hop].start_ns();
    });
    return v;
  };
  std::function<void(const std::vector<int>&, int, int, const proto::TraceHop*)>
      walk = [&](const std::vector<int>& level_nodes, int parent_row, int level,
                 const proto::TraceHop* parent_hop) {
        for (int n : by_start(level_nodes)) {
          const proto::TraceHop& h = hops[nodes[n].hop];
          const int r = RowFor(parent_row, h, level);
          HopRow& row = rows_[r];
          row.time.Add(Span(h));
          row.own.Add(nodes[n].own_ns);
          if (h.code() != 0) ++row.errors;
          if (parent_hop != nullptr &&
              (parent_hop->kind() == "split" ||
               parent_hop->kind() == "scatter") &&
              h.copy() == parent_hop->copy()) {
            ++row.deciding;
          }
          if (row.series.size() >= kSeriesKept) {
            row.series.erase(row.series.begin(),
                             row.series.begin() + kSeriesKept / 2);
          }
          row.series.emplace_back(record.end_ns(), Span(h));
          walk(nodes[n].children, r, level + 1, &h);
        }
      };
  walk(top, -1, 0, nullptr);
}

double PathReport::Share(const HopRow& r) const {
  const double total = total_.mean() * static_cast<double>(total_.count());
  return total > 0 ? r.own.mean() * static_cast<double>(r.own.count()) / total
                   : 0.0;
}

int PathReport::Slowest() const {
  int best = -1;
  for (size_t i = 0; i < rows_.size(); ++i) {
    if (best < 0 || rows_[i].own.mean() > rows_[best].own.mean()) {
      best = static_cast<int>(i);
    }
  }
  return best;
}

namespace {

// Row indices in path order: each after its parent, in order of creation.
std::vector<int> PathOrder(const std::vector<HopRow>& rows) {
  std::vector<std::vector<int>> children(rows.size() + 1);
  for (size_t i = 0; i < rows.size(); ++i) {
    children[rows[i].parent + 1].push_back(static_cast<int>(i));
  }
  std::vector<int> order;
  std::function<void(int)> visit = [&](int parent) {
    for (int c : children[parent + 1]) {
      order.push_back(c);
      visit(c);
    }
  };
  visit(-1);
  return order;
}

std::string KindText(const HopRow& r) {
  std::string kind = r.kind;
  if (r.copy >= 0) kind += Printf("#%d", r.copy);
  return kind;
}

}  // namespace

std::string PathReport::Text(const std::string& title) const {
  std::vector<std::vector<std::string>> table;
  table.push_back({"HOST", "HOP", "RULE", "NEXT", "SAMPLES", "ERR%", "LAST",
                   "AVG", "MIN", "MAX", "STDEV", "P50", "P99", "OWN", "SHARE",
                   ""});
  const int slowest = Slowest();
  auto add = [&](const std::string& host, const std::string& hop,
                 const std::string& rule, const std::string& next,
                 const Durations& t, uint64_t errors, const std::string& own,
                 const std::string& share, const std::string& note) {
    table.push_back(
        {host, hop, rule, next, std::to_string(t.count()),
         Printf("%.1f", t.count() ? 100.0 * errors / t.count() : 0.0),
         Micros(t.last()), Micros(t.mean()), Micros(t.min()), Micros(t.max()),
         Micros(t.stdev()), Micros(t.Quantile(0.5)), Micros(t.Quantile(0.99)),
         own, share, note});
  };
  add("", "IO", "", "(end to end)", total_, errors_, "", "100%", "");
  for (int i : PathOrder(rows_)) {
    const HopRow& r = rows_[i];
    std::string note;
    if (r.deciding != 0 && r.time.count() != 0) {
      note = Printf("set the end %.0f%%", 100.0 * r.deciding / r.time.count());
    }
    if (i == slowest) note += note.empty() ? "<- slowest" : ", <- slowest";
    add(std::string(2 * (r.level + 1), ' ') + r.host, KindText(r),
        r.rule_id ? std::to_string(r.rule_id) : "-",
        r.next.empty() ? "-" : r.next, r.time, r.errors, Micros(r.own.mean()),
        Printf("%.0f%%", 100.0 * Share(r)), note);
  }
  return (title.empty() ? "" : title + "\n") + ctl::Table(table) +
         "(times in microseconds; OWN: the hop's time less the hops inside "
         "it; SHARE: OWN over all samples, of the end-to-end time)\n";
}

namespace {

proto::CtlDurations DurationsOf(const Durations& t) {
  proto::CtlDurations d;
  d.set_samples(t.count());
  d.set_last_ns(t.last());
  d.set_avg_ns(t.mean());
  d.set_min_ns(t.min());
  d.set_max_ns(t.max());
  d.set_stdev_ns(t.stdev());
  d.set_p50_ns(t.Quantile(0.5));
  d.set_p99_ns(t.Quantile(0.99));
  for (size_t b = 0; b < t.log2_histogram().size(); ++b) {
    if (t.log2_histogram()[b] != 0) {
      (*d.mutable_log2_ns_histogram())[b] = t.log2_histogram()[b];
    }
  }
  return d;
}

}  // namespace

proto::CtlPathReport PathReport::Proto(const std::string& path) const {
  proto::CtlPathReport out;
  out.set_path(path);
  out.set_ios(ios());
  out.set_errors(errors_);
  *out.mutable_total() = DurationsOf(total_);
  const int slowest = Slowest();
  for (int i : PathOrder(rows_)) {
    const HopRow& r = rows_[i];
    proto::CtlPathHop* h = out.add_hops();
    h->set_row(i);
    h->set_parent(r.parent);
    h->set_level(r.level);
    h->set_depth(r.depth);
    h->set_host(r.host);
    h->set_kind(r.kind);
    h->set_rule(r.rule_id);
    h->set_next(r.next);
    h->set_copy(r.copy);
    h->set_errors(r.errors);
    h->set_deciding(r.deciding);
    h->set_own_avg_ns(r.own.mean());
    h->set_share(Share(r));
    h->set_slowest(i == slowest);
    *h->mutable_time() = DurationsOf(r.time);
  }
  return out;
}

std::string PathReport::Svg(const std::string& title) const {
  constexpr int kWidth = 900, kHeight = 480, kLeft = 70, kRight = 260,
                kTop = 40, kBottom = 40;
  static const char* kColors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728",
                                  "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
                                  "#bcbd22", "#17becf"};
  uint64_t x_min = UINT64_MAX, x_max = 0, y_max = 1;
  for (const HopRow& r : rows_) {
    for (const auto& [x, y] : r.series) {
      x_min = std::min(x_min, x);
      x_max = std::max(x_max, x);
      y_max = std::max(y_max, y);
    }
  }
  if (x_min == UINT64_MAX) x_min = x_max = 0;
  const double xs =
      x_max > x_min ? double(kWidth - kLeft - kRight) / double(x_max - x_min)
                    : 0;
  const double ys = double(kHeight - kTop - kBottom) / double(y_max);
  std::string out = Printf(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
      "font-family=\"monospace\" font-size=\"11\">\n"
      "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
      kWidth, kHeight);
  out += Printf("<text x=\"%d\" y=\"20\">%s</text>\n", kLeft,
                XmlEscape(title).c_str());
  out += Printf(
      "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"black\"/>\n"
      "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"black\"/>\n",
      kLeft, kHeight - kBottom, kWidth - kRight, kHeight - kBottom, kLeft, kTop,
      kLeft, kHeight - kBottom);
  out += Printf("<text x=\"5\" y=\"%d\">%s us</text>\n", kTop,
                Micros(static_cast<double>(y_max)).c_str());
  out += Printf("<text x=\"%d\" y=\"%d\">time (%.1f s)</text>\n", kLeft,
                kHeight - 10, (x_max - x_min) / 1e9);
  int color = 0, legend = 0;
  for (int i : PathOrder(rows_)) {
    const HopRow& r = rows_[i];
    if (r.series.empty()) continue;
    const char* c = kColors[color++ % 10];
    std::string points;
    for (const auto& [x, y] : r.series) {
      points += Printf("%.1f,%.1f ", kLeft + (x - x_min) * xs,
                       kHeight - kBottom - y * ys);
    }
    out += Printf(
        "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1\" "
        "points=\"%s\"/>\n",
        c, points.c_str());
    out += Printf("<text x=\"%d\" y=\"%d\" fill=\"%s\">%s</text>\n",
                  kWidth - kRight + 8, kTop + 14 * legend++, c,
                  XmlEscape(r.host + " " + KindText(r) + " " + r.next).c_str());
  }
  out += "</svg>\n";
  return out;
}

}  // namespace sroute::trace
