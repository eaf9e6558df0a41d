// SPDX-License-Identifier: Apache-2.0
// sroute-sim: runs scenarios (proto/sim.proto, examples/sim/) of servers
// with emulated flash, hosts and a network on SimGrid, through SNIS's
// storage-network iteration; prints each one's convergence, its flows'
// and devices' latencies, and its own costs (docs/reference/sim.md);
// --plot draws each report's curves as SVG files (sim/plot.h).
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "google/protobuf/util/json_util.h"
#include "sim/plot.h"
#include "sim/scenario.h"
#include "sim/simulate.h"

namespace {

void PrintTables(const sroute::proto::SimReport& r, size_t device_rows) {
  std::printf("scenario %s (seed %llu): %llu requests; %s\n",
              r.scenario().c_str(), static_cast<unsigned long long>(r.seed()),
              static_cast<unsigned long long>(r.requests()),
              r.stopped().c_str());
  std::printf("%-9s %10s %10s %10s %8s %9s %8s %9s\n", "ITERATION", "MEAN_MB/s",
              "MEDIAN", "P90", "RD_MEAN", "RD_MEDIAN", "RD_P90", "CRITERION");
  for (const auto& it : r.iterations()) {
    std::printf("%-9u %10.2f %10.2f %10.2f %8.4f %9.4f %8.4f %9.4f\n",
                it.iteration(), it.mean_mbps(), it.median_mbps(), it.p90_mbps(),
                it.rd_mean(), it.rd_median(), it.rd_p90(), it.criterion());
  }
  std::printf("%-16s %9s %9s %10s %12s %12s %12s %12s %9s %8s\n", "FLOW",
              "READS", "WRITES", "IOPS", "READ_P50_US", "READ_P99_US",
              "WRITE_P50_US", "WRITE_P99_US", "NET_SHARE", "ERRORS");
  for (const auto& f : r.flows()) {
    std::printf(
        "%-16s %9llu %9llu %10.1f %12.1f %12.1f %12.1f %12.1f %9.2f %8llu\n",
        f.name().c_str(), static_cast<unsigned long long>(f.reads()),
        static_cast<unsigned long long>(f.writes()), f.iops(), f.read_p50_us(),
        f.read_p99_us(), f.write_p50_us(), f.write_p99_us(), f.network_share(),
        static_cast<unsigned long long>(f.errors()));
  }
  if (r.decisions_size() > 0) {
    std::printf("%-8s %-14s %-8s %s\n", "AT_S", "APP", "HOST", "CHANGE");
    for (const auto& d : r.decisions()) {
      auto row = [&](const std::string& change) {
        std::printf("%-8.3f %-14s %-8s %s\n", d.at_s(), d.app().c_str(),
                    d.host().c_str(), change.c_str());
      };
      for (const std::string& rule : d.insert()) row("+ " + rule);
      for (const std::string& rule : d.remove()) row("- " + rule);
      if (!d.reclaiming().empty()) row("reclaiming " + d.reclaiming());
      if (!d.reclaimed().empty()) row("reclaimed " + d.reclaimed());
    }
    for (const std::string& note : r.app_notes()) {
      std::printf("%s\n", note.c_str());
    }
  }
  if (r.outages_size() > 0) {
    std::printf("%-8s %-10s %-6s %-16s %14s %8s %8s\n", "DOWN_S", "SERVER",
                "HOW", "FLOW", "FIRST_GOOD_US", "ERRORS", "RETRIED");
    for (const auto& o : r.outages()) {
      for (const auto& f : o.flows()) {
        std::printf("%-8.3f %-10s %-6s %-16s %14.1f %8llu %8llu\n", o.at_s(),
                    o.server().c_str(), o.hang() ? "hang" : "crash",
                    f.flow().c_str(), f.first_good_us(),
                    static_cast<unsigned long long>(f.errors()),
                    static_cast<unsigned long long>(f.retried()));
      }
    }
  }
  std::vector<const sroute::proto::SimDeviceReport*> devices;
  for (const auto& d : r.devices()) devices.push_back(&d);
  std::stable_sort(
      devices.begin(), devices.end(),
      [](const auto* a, const auto* b) { return a->p99_us() > b->p99_us(); });
  const size_t shown = std::min(devices.size(), device_rows);
  std::printf(
      "%-16s %9s %10s %10s %9s %15s %13s   (%zu of %zu devices, slowest p99 "
      "first)\n",
      "DEVICE", "REQUESTS", "P50_US", "P99_US", "GC_PASSES", "READS_BEHIND_GC",
      "WRITES_WAITED", shown, devices.size());
  for (size_t i = 0; i < shown; ++i) {
    const auto& d = *devices[i];
    std::printf("%-16s %9llu %10.1f %10.1f %9llu %15llu %13llu\n",
                d.name().c_str(), static_cast<unsigned long long>(d.requests()),
                d.p50_us(), d.p99_us(),
                static_cast<unsigned long long>(d.gc_passes()),
                static_cast<unsigned long long>(d.reads_behind_gc()),
                static_cast<unsigned long long>(d.writes_waited()));
  }
  if (r.replica_sets_size() > 0) {
    std::printf("%-16s %12s %10s %13s %10s %7s\n", "REPLICA_SET",
                "GC_REDIRECTS", "SOFT_GC", "SOFT_DELAYED", "REGULAR_GC",
                "BG_GC");
    for (const auto& rs : r.replica_sets()) {
      std::printf("%-16s %12llu %10llu %13llu %10llu %7llu\n",
                  rs.name().c_str(),
                  static_cast<unsigned long long>(rs.gc_redirects()),
                  static_cast<unsigned long long>(rs.gc_granted_soft()),
                  static_cast<unsigned long long>(rs.gc_soft_delayed()),
                  static_cast<unsigned long long>(rs.gc_granted_regular()),
                  static_cast<unsigned long long>(rs.gc_granted_bg()));
    }
  }
  std::printf("run: %.2f s wall, peak RSS %.1f MiB, device models %.1f MiB\n",
              r.wall_s(), static_cast<double>(r.peak_rss_bytes()) / (1 << 20),
              static_cast<double>(r.device_model_bytes()) / (1 << 20));
}

// Where a scenario's plots go: `dir`, or with several scenarios
// DIR/NAME (its name, or its file's stem when it has none).
std::string PlotDir(const std::string& dir, size_t scenarios,
                    const std::string& name, const std::string& file) {
  if (scenarios <= 1) return dir;
  std::string sub =
      name.empty() ? std::filesystem::path(file).stem().string() : name;
  std::replace(sub.begin(), sub.end(), '/', '_');
  if (sub.empty() || sub == "." || sub == "..") sub = "scenario";
  return (std::filesystem::path(dir) / sub).string();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"sroute-sim: storage and network of a rack, simulated"};
  app.set_version_flag("--version",
                       std::string("sroute-sim ") + SROUTE_VERSION);
  std::vector<std::string> files;
  bool json = false;
  size_t device_rows = 10;
  std::string plot_dir;
  app.add_flag("--json", json,
               "print each report (proto SimReport, with the flows' curves) "
               "as JSON");
  app.add_option("--devices", device_rows,
                 "device rows to print, slowest p99 first (default 10)");
  app.add_option("--plot", plot_dir,
                 "write SVG plots of each report into DIR (DIR/SCENARIO/ "
                 "with several scenarios): latency_cdf.svg, throughput.svg, "
                 "decisions.svg")
      ->type_name("DIR");
  app.add_option("scenario", files, "scenario files (protobuf text)")
      ->required();
  CLI11_PARSE(app, argc, argv);
  int rc = 0;
  for (const std::string& file : files) {
    auto layout = sroute::sim::LoadScenario(file);
    if (!layout.ok()) {
      std::fprintf(stderr, "sroute-sim: %s\n",
                   std::string(layout.status().message()).c_str());
      rc = 2;
      continue;
    }
    // Simulate forks: what is buffered must not be written twice.
    std::fflush(stdout);
    auto report = sroute::sim::Simulate(
        *layout, sroute::sim::SimOptions{.curves = json || !plot_dir.empty()});
    if (!report.ok()) {
      std::fprintf(stderr, "sroute-sim: %s: %s\n", file.c_str(),
                   std::string(report.status().message()).c_str());
      rc = 1;
      continue;
    }
    if (json) {
      google::protobuf::util::JsonPrintOptions o;
      o.preserve_proto_field_names = true;
      std::string text;
      (void)google::protobuf::util::MessageToJsonString(*report, &text, o);
      std::printf("%s\n", text.c_str());
    } else {
      PrintTables(*report, device_rows);
    }
    if (!plot_dir.empty()) {
      const std::string dir =
          PlotDir(plot_dir, files.size(), report->scenario(), file);
      const absl::Status s = sroute::sim::WritePlots(*report, dir);
      if (!s.ok()) {
        std::fprintf(stderr, "sroute-sim: %s: %s\n", file.c_str(),
                     std::string(s.message()).c_str());
        rc = 1;
        continue;
      }
      // After --json's report, on stderr: stdout stays JSON.
      std::fprintf(json ? stderr : stdout,
                   "plots: %s/latency_cdf.svg %s/throughput.svg "
                   "%s/decisions.svg\n",
                   dir.c_str(), dir.c_str(), dir.c_str());
    }
  }
  return rc;
}
