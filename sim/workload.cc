// SPDX-License-Identifier: Apache-2.0
#include "sim/workload.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <tuple>

#include "stages/flash/flash_model.h"
#include "util/strings.h"
#include "util/zipfian.h"

namespace sroute::sim {
namespace {

constexpr uint64_t kStripe = 1 << 20;

uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// The rate factor at `t` (seconds): the product of the bursts under way.
double Factor(const proto::SimFlow& f, double t) {
  double factor = 1;
  for (const proto::SimBurst& b : f.bursts()) {
    if (t >= b.start_s() && t < b.start_s() + b.duration_s()) {
      factor *= b.factor();
    }
  }
  return factor;
}

}  // namespace

uint64_t DevicePages(const std::string& preset) {
  auto options = FlashModel::Preset(preset);
  return options.ok() ? FlashModel(*options).logical_pages() : 0;
}

absl::StatusOr<std::vector<Request>> DrawRequests(const Layout& layout) {
  const proto::SimScenario& s = layout.scenario;
  std::vector<uint64_t> pages;  // per server
  for (const Layout::Server& server : layout.servers) {
    pages.push_back(DevicePages(server.preset));
  }
  // A piece of `bytes` at `offset` of `file` (a hash of it when routed,
  // of the flow's number when placed by hash) on `server`: its device and
  // its page there, by the 1 MiB stripe and the offset.
  auto place = [&](Request& r, uint32_t server, uint64_t file,
                   uint64_t offset) {
    const uint64_t stripe = Mix(file * 0x100000001b3ull + offset / kStripe);
    r.server = server;
    r.device =
        static_cast<uint32_t>((stripe >> 20) % layout.servers[server].devices);
    const uint64_t span = std::max<uint64_t>(1, r.bytes / kSimPageBytes);
    const uint64_t slots = std::max<uint64_t>(1, pages[server] / span);
    r.page = (Mix(stripe ^ offset) % slots) * span;
  };
  const double end_s = s.duration_s();
  std::vector<Request> out;
  std::vector<Place> places;
  uint64_t next_io = 0;
  for (uint32_t f = 0; f < static_cast<uint32_t>(s.flows_size()); ++f) {
    const proto::SimFlow& flow = s.flows(static_cast<int>(f));
    const uint32_t bytes =
        flow.io_bytes() == 0 ? kSimPageBytes : flow.io_bytes();
    const uint64_t ios = flow.file_bytes() / bytes;
    const Zipfian addresses(ios, flow.zipf());
    const std::vector<uint32_t>& servers = layout.flow_servers[f];
    double peak = 1;  // thinning: draw at the peak rate, keep by the factor
    for (const proto::SimBurst& b : flow.bursts()) {
      peak *= std::max(1.0, b.factor());
    }
    IoHeader h;
    h.source = flow.name();
    h.file = flow.file();
    for (uint32_t host : layout.flow_hosts[f]) {
      std::mt19937_64 rng(Mix(s.seed() ^ Mix(f * 1'000'003ull + host)));
      std::exponential_distribution<double> gap(flow.open_loop_iops() * peak);
      std::uniform_real_distribution<double> unit(0, 1);
      for (double t = gap(rng); t < end_s; t += gap(rng)) {
        if (unit(rng) * peak >= Factor(flow, t)) continue;
        Request r;
        r.arrival_ns = static_cast<uint64_t>(std::llround(t * 1e9));
        r.io = next_io++;
        r.flow = f;
        r.host = host;
        r.bytes = bytes;
        r.read = unit(rng) * 100 < flow.read_percent();
        const uint64_t offset = addresses.Key(rng) * bytes;
        if (flow.file().empty()) {
          const uint64_t stripe = Mix(f * 0x100000001b3ull + offset / kStripe);
          place(r, servers[stripe % servers.size()], f, offset);
          out.push_back(r);
          continue;
        }
        h.op = r.read ? Op::kRead : Op::kWrite;
        h.offset = offset;
        h.length = bytes;
        if (absl::Status st = layout.router->Route(h, &places); !st.ok()) {
          return absl::InvalidArgumentError(
              StrCat("flows[", f, "]: ", st.message()));
        }
        for (const Place& p : places) {
          Request piece = r;
          piece.bytes = static_cast<uint32_t>(p.length);
          place(piece, p.server, Mix(std::hash<std::string>()(p.file)),
                p.offset);
          out.push_back(piece);
        }
      }
    }
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const Request& a, const Request& b) {
                     return std::tie(a.arrival_ns, a.flow, a.host) <
                            std::tie(b.arrival_ns, b.flow, b.host);
                   });
  return out;
}

}  // namespace sroute::sim
