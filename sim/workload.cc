// SPDX-License-Identifier: Apache-2.0
#include "sim/workload.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <string>
#include <tuple>

#include "absl/container/flat_hash_map.h"
#include "sim/storage.h"
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
  auto options = DeviceOptions(preset);
  return options.ok() ? FlashModel(*options).logical_pages() : 0;
}

bool RuleChange::operator==(const RuleChange& o) const {
  if (at_ns != o.at_ns || host != o.host || app != o.app ||
      remove != o.remove || reclaimed != o.reclaimed ||
      insert.size() != o.insert.size()) {
    return false;
  }
  for (size_t i = 0; i < insert.size(); ++i) {
    if (insert[i].cid != o.insert[i].cid ||
        insert[i].text != o.insert[i].text) {
      return false;
    }
  }
  return true;
}

std::vector<Io> DrawIos(const Layout& layout) {
  const proto::SimScenario& s = layout.scenario;
  const double end_s = s.duration_s();
  std::vector<Io> out;
  for (uint32_t f = 0; f < static_cast<uint32_t>(s.flows_size()); ++f) {
    const proto::SimFlow& flow = s.flows(static_cast<int>(f));
    const uint32_t bytes =
        flow.io_bytes() == 0 ? kSimPageBytes : flow.io_bytes();
    const Zipfian addresses(flow.file_bytes() / bytes, flow.zipf());
    double peak = 1;  // thinning: draw at the peak rate, keep by the factor
    for (const proto::SimBurst& b : flow.bursts()) {
      peak *= std::max(1.0, b.factor());
    }
    for (uint32_t host : layout.flow_hosts[f]) {
      std::mt19937_64 rng(Mix(s.seed() ^ Mix(f * 1'000'003ull + host)));
      std::exponential_distribution<double> gap(flow.open_loop_iops() * peak);
      std::uniform_real_distribution<double> unit(0, 1);
      for (double t = gap(rng); t < end_s; t += gap(rng)) {
        if (unit(rng) * peak >= Factor(flow, t)) continue;
        Io io;
        io.arrival_ns = static_cast<uint64_t>(std::llround(t * 1e9));
        io.flow = f;
        io.host = host;
        io.bytes = bytes;
        io.read = unit(rng) * 100 < flow.read_percent();
        io.offset = addresses.Key(rng) * bytes;
        out.push_back(io);
      }
    }
  }
  std::stable_sort(out.begin(), out.end(), [](const Io& a, const Io& b) {
    return std::tie(a.arrival_ns, a.flow, a.host) <
           std::tie(b.arrival_ns, b.flow, b.host);
  });
  return out;
}

namespace {

// Where a page that a write took away is now: the server and its file.
struct AwayPlace {
  uint32_t server;
  std::string file;
};

// A host's rules as the timeline changed them, and the pages of its files
// that writes took away (file -> page -> where).
struct HostRoutes {
  std::vector<SimRule> rules;
  std::shared_ptr<const Router> router;
  absl::flat_hash_map<std::string, std::map<uint64_t, AwayPlace>> away;
};

absl::Status Apply(const RuleChange& c,
                   const std::vector<std::string>& server_names,
                   HostRoutes& h) {
  if (!c.insert.empty() || !c.remove.empty()) {
    std::erase_if(h.rules, [&](const SimRule& r) {
      return std::find(c.remove.begin(), c.remove.end(), r.cid) !=
             c.remove.end();
    });
    h.rules.insert(h.rules.end(), c.insert.begin(), c.insert.end());
    auto router = Router::Create(h.rules, server_names);
    if (!router.ok()) return router.status();
    h.router = *std::move(router);
  }
  if (!c.reclaimed.empty()) {
    absl::erase_if(h.away, [&](const auto& file) {
      return file.first.starts_with(c.reclaimed);
    });
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<Request>> RouteIos(
    const Layout& layout, const std::vector<Io>& ios,
    const std::vector<RuleChange>& timeline, std::vector<AwayEvent>* away) {
  const proto::SimScenario& s = layout.scenario;
  std::vector<uint64_t> pages;  // per server
  std::vector<std::string> server_names;
  std::map<std::string, uint64_t> pages_of;  // per preset: a model each
  for (const Layout::Server& server : layout.servers) {
    auto [it, made] = pages_of.try_emplace(server.preset, 0);
    if (made) it->second = DevicePages(server.preset);
    pages.push_back(it->second);
    server_names.push_back(server.name);
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
  std::vector<HostRoutes> hosts(layout.hosts.size());
  for (HostRoutes& h : hosts) {
    h.rules = layout.rules;
    h.router = layout.router;
  }
  std::vector<Request> out;
  out.reserve(ios.size());
  std::vector<Place> places;
  size_t next_change = 0;
  IoHeader h;
  for (size_t i = 0; i < ios.size(); ++i) {
    const Io& io = ios[i];
    for (; next_change < timeline.size() &&
           timeline[next_change].at_ns <= io.arrival_ns;
         ++next_change) {
      const RuleChange& c = timeline[next_change];
      if (absl::Status st = Apply(c, server_names, hosts[c.host]); !st.ok()) {
        return absl::InvalidArgumentError(
            StrCat("a change by ", c.app, " at ", c.at_ns * 1e-9, " s on ",
                   layout.hosts[c.host], ": ", st.message()));
      }
    }
    const proto::SimFlow& flow = s.flows(static_cast<int>(io.flow));
    Request r;
    r.arrival_ns = io.arrival_ns;
    r.io = i;
    r.rule = 0;
    r.flow = io.flow;
    r.host = io.host;
    r.bytes = io.bytes;
    r.read = io.read;
    if (flow.file().empty()) {
      const std::vector<uint32_t>& servers = layout.flow_servers[io.flow];
      const uint64_t stripe =
          Mix(io.flow * 0x100000001b3ull + io.offset / kStripe);
      place(r, servers[stripe % servers.size()], io.flow, io.offset);
      out.push_back(r);
      continue;
    }
    HostRoutes& routes = hosts[io.host];
    h.source = flow.name();
    h.file = flow.file();
    h.op = io.read ? Op::kRead : Op::kWrite;
    h.offset = io.offset;
    h.length = io.bytes;
    if (absl::Status st = routes.router->Route(h, &places); !st.ok()) {
      return absl::InvalidArgumentError(
          StrCat("flows[", io.flow, "]: ", st.message()));
    }
    auto emit = [&](uint32_t server, const std::string& file, uint64_t offset,
                    uint64_t length, uint64_t rule) {
      Request piece = r;
      piece.rule = rule;
      piece.bytes = static_cast<uint32_t>(length);
      place(piece, server, Mix(std::hash<std::string>()(file)), offset);
      out.push_back(piece);
    };
    for (const Place& p : places) {
      const uint64_t first = p.offset / kSimPageBytes;
      const uint64_t last = (p.offset + p.length + kSimPageBytes - 1) /
                            kSimPageBytes;  // exclusive
      if (!io.read) {
        if (p.track != Track::kNone) {
          auto& file_away = routes.away[h.file];
          for (uint64_t pg = first; pg < last; ++pg) {
            if (p.track == Track::kAway) {
              file_away[pg] = AwayPlace{p.server, p.file};
            } else {
              file_away.erase(pg);
            }
            if (away != nullptr) {
              away->push_back({io.arrival_ns, io.host, p.track == Track::kAway,
                               h.file, pg});
            }
          }
        }
        emit(p.server, p.file, p.offset, p.length, p.rule);
        continue;
      }
      // A read: the pages writes took away are read where they went (the
      // delegate's read rules, not a managed rule), the rest by the rule.
      auto file_away = routes.away.find(h.file);
      if (file_away == routes.away.end() || file_away->second.empty()) {
        emit(p.server, p.file, p.offset, p.length, p.rule);
        continue;
      }
      uint64_t run_start = p.offset;
      const AwayPlace* run_at = nullptr;
      auto where = [&](uint64_t pg) -> const AwayPlace* {
        auto it = file_away->second.find(pg);
        return it == file_away->second.end() ? nullptr : &it->second;
      };
      run_at = where(first);
      for (uint64_t pg = first + 1; pg <= last; ++pg) {
        const AwayPlace* at = pg < last ? where(pg) : nullptr;
        const bool same =
            pg < last && (at == run_at || (at != nullptr && run_at != nullptr &&
                                           at->server == run_at->server &&
                                           at->file == run_at->file));
        if (same) continue;
        const uint64_t run_end =
            std::min(p.offset + p.length, pg * kSimPageBytes);
        if (run_at == nullptr) {
          emit(p.server, p.file, run_start, run_end - run_start, p.rule);
        } else {
          emit(run_at->server, run_at->file, run_start, run_end - run_start, 0);
        }
        run_start = run_end;
        run_at = at;
      }
    }
  }
  return out;
}

absl::StatusOr<std::vector<Request>> DrawRequests(const Layout& layout) {
  return RouteIos(layout, DrawIos(layout), {}, nullptr);
}

}  // namespace sroute::sim
