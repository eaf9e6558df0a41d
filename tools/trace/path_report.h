// SPDX-License-Identifier: Apache-2.0
// PathReport: the hops of sampled IOs, folded into one row per hop of their
// path, as sroute-trace shows them (like mtr: samples, errors, last, mean,
// min, max, stdev, p50, p99), with each hop's own time and share of the
// end-to-end time, and the slowest one marked.
//
// A trace's hops (proto::TraceRecord, sswitch/trace.h) form a tree: on one
// host a hop inside another (by time: one clock) is its child; the hops a
// server sent back for a call (depth d + 1, just before the call's "rpc"
// hop at depth d, Trace::AddCall) are the call's children. A hop's own
// time is its time less its children's span: for an rpc hop, the network
// and the RPC layers (the server's wait between reading the request and
// routing it is its own "queue" hop); for a rule hop to a local file, the
// device. Times of different hosts are never compared: a span is taken
// on one host's clock.
//
// Thread safety: not thread-safe.
#ifndef SROUTE_TOOLS_TRACE_PATH_REPORT_H_
#define SROUTE_TOOLS_TRACE_PATH_REPORT_H_

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "proto/cli_json.pb.h"
#include "proto/hostctl.pb.h"

namespace sroute::trace {

// Durations of one hop over the samples.
class Durations {
 public:
  void Add(uint64_t ns);
  uint64_t count() const { return count_; }
  uint64_t last() const { return last_; }
  uint64_t min() const { return count_ ? min_ : 0; }
  uint64_t max() const { return max_; }
  double mean() const { return count_ ? sum_ / count_ : 0; }
  double stdev() const;
  // The q-quantile (0..1) of the kept durations (every one up to
  // kKept, a uniform sample of them after).
  uint64_t Quantile(double q) const;
  // Counts by log2 bucket: [i] counts durations in [2^i, 2^(i+1)) ns.
  const std::array<uint64_t, 64>& log2_histogram() const { return hist_; }

  static constexpr size_t kKept = 1 << 16;

 private:
  uint64_t count_ = 0, last_ = 0, min_ = 0, max_ = 0;
  double sum_ = 0, sum_squares_ = 0;
  std::vector<uint64_t> kept_;
  uint64_t rng_ = 0x9e3779b97f4a7c15ULL;
  std::array<uint64_t, 64> hist_{};
};

struct HopRow {
  // Where: the hop's key.
  uint32_t depth = 0;  // 0: the sampling host; servers deeper
  std::string host;
  // rule, default, stage, rpc, connect, queue, park, split, scatter
  std::string kind;
  uint64_t rule_id = 0;
  std::string next;
  int32_t copy = -1;
  int level = 0;    // nesting in the path, for indentation
  int parent = -1;  // the row it sits in (-1: the IO itself)

  Durations time;
  Durations own;  // time less the children's span
  uint64_t errors = 0;
  // For a copy or piece: how often it was the one that set its split's or
  // scatter's completion time.
  uint64_t deciding = 0;
  // Monotonic end (its host's clock) of the last sample, for --plot.
  std::vector<std::pair<uint64_t, uint64_t>> series;  // (end_ns, ns)
};

class PathReport {
 public:
  // Adds one sampled IO.
  void Add(const proto::TraceRecord& record);

  uint64_t ios() const { return total_.count(); }
  uint64_t errors() const { return errors_; }
  const Durations& total() const { return total_; }
  // In path order: each row after its parent, siblings by start.
  const std::vector<HopRow>& rows() const { return rows_; }
  // The row with the largest mean own time; -1 if there is none.
  int Slowest() const;
  // The row's share of the time of every sampled IO: its own time summed
  // over its samples, over the end-to-end times summed (so rows that only
  // some IOs pass, reads' or writes', weigh what they took).
  double Share(const HopRow& row) const;

  // The table (mtr's columns), a row per hop, widths fitted; `title` first.
  std::string Text(const std::string& title) const;
  // What --json prints: the rows in path order, each with its times and a
  // log2 histogram of them; `path` the pattern traced.
  proto::CtlPathReport Proto(const std::string& path) const;
  // An SVG plot of each hop's latency over time (one line per row).
  std::string Svg(const std::string& title) const;

 private:
  using Key = std::tuple<int, uint32_t, std::string, std::string, uint64_t,
                         std::string, int32_t>;  // parent, hop's fields
  int RowFor(int parent, const proto::TraceHop& hop, int level);

  std::vector<HopRow> rows_;
  std::map<Key, int> index_;
  Durations total_;
  uint64_t errors_ = 0;
  uint64_t first_end_ns_ = 0;  // of the sampling host, for the plot's x
};

}  // namespace sroute::trace

#endif  // SROUTE_TOOLS_TRACE_PATH_REPORT_H_
