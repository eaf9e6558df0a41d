// SPDX-License-Identifier: Apache-2.0
#include "sim/scenario.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <sstream>

#include "absl/strings/numbers.h"
#include "controller/control_app.h"
#include "sim/storage.h"
#include "stages/flash/flash_model.h"
#include "util/strings.h"
#include "util/text_proto.h"

namespace sroute::sim {
namespace {

// Past these a scenario is a typo, not a study (and would exhaust memory
// before it said so).
constexpr uint64_t kMaxMachines = 100'000;
constexpr uint64_t kMaxDevicesPerServer = 64;

absl::Status Bad(std::string_view where, std::string_view why) {
  return absl::InvalidArgumentError(StrCat(where, ": ", why));
}

bool Positive(double x) { return std::isfinite(x) && x > 0; }

// A group's machines are PREFIX0, PREFIX1, ...; `name` picks one machine or
// a whole group.
std::vector<uint32_t> Resolve(
    const std::string& name, const std::vector<std::string>& machines,
    const std::map<std::string, std::pair<uint32_t, uint32_t>>& groups) {
  if (auto g = groups.find(name); g != groups.end()) {
    std::vector<uint32_t> out;
    for (uint32_t i = g->second.first; i < g->second.second; ++i) {
      out.push_back(i);
    }
    return out;
  }
  for (uint32_t i = 0; i < machines.size(); ++i) {
    if (machines[i] == name) return {i};
  }
  return {};
}

absl::Status CheckNetwork(const proto::SimNetwork& n) {
  switch (n.topology_case()) {
    case proto::SimNetwork::kRack:
      if (!Positive(n.rack().link_gbps())) {
        return Bad("network.rack.link_gbps", "must be above 0");
      }
      if (!std::isfinite(n.rack().link_latency_us()) ||
          n.rack().link_latency_us() < 0) {
        return Bad("network.rack.link_latency_us", "must be 0 or more");
      }
      return absl::OkStatus();
    case proto::SimNetwork::kClos: {
      const proto::SimClos& c = n.clos();
      if (c.pods() == 0 || c.leaves_per_pod() == 0 || c.tors_per_pod() == 0 ||
          c.machines_per_tor() == 0) {
        return Bad("network.clos",
                   "pods, leaves_per_pod, tors_per_pod and machines_per_tor "
                   "must each be 1 or more");
      }
      if (!Positive(c.down_gbps()) || !Positive(c.up_gbps())) {
        return Bad("network.clos", "down_gbps and up_gbps must be above 0");
      }
      if (!std::isfinite(c.link_latency_us()) || c.link_latency_us() < 0) {
        return Bad("network.clos.link_latency_us", "must be 0 or more");
      }
      return absl::OkStatus();
    }
    case proto::SimNetwork::TOPOLOGY_NOT_SET:
      break;
  }
  return Bad("network", "needs a rack { ... } or a clos { ... }");
}

absl::Status CheckFlow(const proto::SimFlow& f, const std::string& where) {
  if (!Positive(f.open_loop_iops())) {
    return Bad(StrCat(where, ".open_loop_iops"), "must be above 0");
  }
  if (!(f.read_percent() >= 0 && f.read_percent() <= 100)) {
    return Bad(StrCat(where, ".read_percent"), "must be within 0 to 100");
  }
  if (f.io_bytes() != 0 && f.io_bytes() % 4096 != 0) {
    return Bad(StrCat(where, ".io_bytes"), "must be a multiple of 4096");
  }
  if (f.file_bytes() < std::max<uint64_t>(f.io_bytes(), 4096)) {
    return Bad(StrCat(where, ".file_bytes"), "must hold one IO at least");
  }
  if (!(f.zipf() >= 0 && f.zipf() < 1)) {
    return Bad(StrCat(where, ".zipf"), "must be within [0, 1)");
  }
  for (int b = 0; b < f.bursts_size(); ++b) {
    const proto::SimBurst& burst = f.bursts(b);
    if (!(burst.start_s() >= 0) || !Positive(burst.duration_s()) ||
        !Positive(burst.factor())) {
      return Bad(StrCat(where, ".bursts[", b, "]"),
                 "start_s must be 0 or more, duration_s and factor above 0");
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Layout> ParseScenario(std::string_view text,
                                     std::string_view origin) {
  Layout out;
  proto::SimScenario& s = out.scenario;
  if (absl::Status st = ParseTextProto(text, origin, &s); !st.ok()) return st;
  auto bad = [&](std::string_view where, std::string_view why) {
    return Bad(StrCat(origin, ": ", where), why);
  };
  if (!Positive(s.duration_s())) return bad("duration_s", "must be above 0");
  if (absl::Status st = CheckNetwork(s.network()); !st.ok()) {
    return absl::InvalidArgumentError(StrCat(origin, ": ", st.message()));
  }
  if (s.servers_size() == 0) return bad("servers", "needs a group at least");
  if (s.hosts_size() == 0) return bad("hosts", "needs a group at least");
  std::map<std::string, std::pair<uint32_t, uint32_t>> server_groups,
      host_groups;
  uint64_t machines = 0;
  for (int g = 0; g < s.servers_size(); ++g) {
    const proto::SimServerGroup& group = s.servers(g);
    const std::string where = StrCat("servers[", g, "]");
    if (group.prefix().empty()) return bad(where + ".prefix", "is empty");
    if (group.count() == 0) return bad(where + ".count", "must be 1 or more");
    if (group.devices() == 0 || group.devices() > kMaxDevicesPerServer) {
      return bad(where + ".devices",
                 StrCat("must be within 1 to ", kMaxDevicesPerServer));
    }
    if (auto p = DeviceOptions(group.preset()); !p.ok()) {
      return bad(where + ".preset", std::string(p.status().message()));
    }
    machines += group.count();
    if (machines > kMaxMachines) {
      return bad(where + ".count", StrCat("more than ", kMaxMachines,
                                          " machines in the scenario"));
    }
    if (!server_groups
             .emplace(group.prefix(), std::pair<uint32_t, uint32_t>(
                                          out.servers.size(),
                                          out.servers.size() + group.count()))
             .second) {
      return bad(where + ".prefix",
                 StrCat("\"", group.prefix(), "\" names another group too"));
    }
    for (uint32_t i = 0; i < group.count(); ++i) {
      out.servers.push_back(
          {StrCat(group.prefix(), i), group.devices(), group.preset()});
    }
  }
  for (int g = 0; g < s.hosts_size(); ++g) {
    const proto::SimHostGroup& group = s.hosts(g);
    const std::string where = StrCat("hosts[", g, "]");
    if (group.prefix().empty()) return bad(where + ".prefix", "is empty");
    if (group.count() == 0) return bad(where + ".count", "must be 1 or more");
    machines += group.count();
    if (machines > kMaxMachines) {
      return bad(where + ".count", StrCat("more than ", kMaxMachines,
                                          " machines in the scenario"));
    }
    if (server_groups.contains(group.prefix()) ||
        !host_groups
             .emplace(group.prefix(),
                      std::pair<uint32_t, uint32_t>(
                          out.hosts.size(), out.hosts.size() + group.count()))
             .second) {
      return bad(where + ".prefix",
                 StrCat("\"", group.prefix(), "\" names another group too"));
    }
    if (!(group.io_cost_us() >= 0 && std::isfinite(group.io_cost_us()))) {
      return bad(where + ".io_cost_us", "must be 0 or more");
    }
    for (uint32_t i = 0; i < group.count(); ++i) {
      out.hosts.push_back(StrCat(group.prefix(), i));
      out.host_io_cost_ns.push_back(
          static_cast<uint64_t>(group.io_cost_us() * 1e3));
    }
  }
  if (s.network().has_clos()) {
    const proto::SimClos& c = s.network().clos();
    const uint64_t places =
        uint64_t{c.pods()} * c.tors_per_pod() * c.machines_per_tor();
    if (machines > places) {
      return bad("network.clos",
                 StrCat(machines,
                        " servers and hosts do not fit in pods x "
                        "tors_per_pod x machines_per_tor = ",
                        places, " places"));
    }
  }
  std::vector<std::string> server_names;
  for (const Layout::Server& server : out.servers) {
    server_names.push_back(server.name);
  }
  for (int r = 0; r < s.rules_size(); ++r) {
    out.rules.push_back({static_cast<uint64_t>(r) + 1, s.rules(r), "scenario",
                         StrCat("rules[", r, "]")});
  }
  auto router = Router::Create(out.rules, server_names);
  if (!router.ok()) {
    return absl::InvalidArgumentError(
        StrCat(origin, ": ", router.status().message()));
  }
  out.router = *std::move(router);
  if (s.flows_size() == 0) return bad("flows", "needs a flow at least");
  for (int f = 0; f < s.flows_size(); ++f) {
    const proto::SimFlow& flow = s.flows(f);
    const std::string where = StrCat("flows[", f, "]");
    if (absl::Status st = CheckFlow(flow, where); !st.ok()) {
      return absl::InvalidArgumentError(StrCat(origin, ": ", st.message()));
    }
    out.flow_hosts.push_back(Resolve(flow.hosts(), out.hosts, host_groups));
    if (out.flow_hosts.back().empty()) {
      return bad(where + ".hosts",
                 StrCat("no host or host group named \"", flow.hosts(), "\""));
    }
    if (!flow.file().empty()) {
      // Routed by the rules: each op once at the start, so that a file the
      // rules send nowhere is refused before anything runs.
      if (!flow.file().starts_with("//") || flow.file().size() < 3) {
        return bad(where + ".file", "must be //VOLUME/PATH");
      }
      for (Op op : {Op::kRead, Op::kWrite}) {
        IoHeader h;
        h.source = flow.name();
        h.op = op;
        h.file = flow.file();
        h.length = flow.io_bytes() == 0 ? 4096 : flow.io_bytes();
        std::vector<Place> places;
        if (absl::Status st = out.router->Route(h, &places); !st.ok()) {
          return bad(where + ".file", std::string(st.message()));
        }
      }
      out.flow_servers.emplace_back();
      continue;
    }
    out.flow_servers.push_back(
        Resolve(flow.servers(), server_names, server_groups));
    if (out.flow_servers.back().empty()) {
      return bad(
          where + ".servers",
          StrCat("no server or server group named \"", flow.servers(), "\""));
    }
  }
  for (int e = 0; e < s.events_size(); ++e) {
    const proto::SimEvent& event = s.events(e);
    const std::string where = StrCat("events[", e, "]");
    if (!(event.at_s() >= 0 && std::isfinite(event.at_s()))) {
      return bad(where + ".at_s", "must be 0 or more");
    }
    if (!event.has_gc()) return bad(where, "says nothing happens (gc { ... })");
    const proto::SimGc& gc = event.gc();
    if (!Positive(gc.duration_s())) {
      return bad(where + ".gc.duration_s", "must be above 0");
    }
    const std::string& name = gc.device();
    const size_t slash = name.find("/d");
    const std::string server = name.substr(0, slash);
    const std::vector<uint32_t> found = Resolve(server, server_names, {});
    uint32_t first = 0, last = 0;
    bool ok = found.size() == 1;
    if (ok) {
      last = out.servers[found[0]].devices;
      if (slash != std::string::npos) {
        uint32_t d = 0;
        ok = absl::SimpleAtoi(name.substr(slash + 2), &d) && d < last;
        first = d;
        last = d + 1;
      }
    }
    if (!ok) {
      return bad(where + ".gc.device",
                 StrCat("no device \"", name,
                        "\" (SERVER/dN, or a server for all its devices)"));
    }
    const uint64_t from = static_cast<uint64_t>(event.at_s() * 1e9);
    const uint64_t until = from + static_cast<uint64_t>(gc.duration_s() * 1e9);
    for (uint32_t d = first; d < last; ++d) {
      out.gc.push_back({from, until, found[0], d});
    }
  }
  std::stable_sort(out.gc.begin(), out.gc.end(),
                   [](const Layout::GcSpell& a, const Layout::GcSpell& b) {
                     return a.from_ns < b.from_ns;
                   });
  for (int a = 0; a < s.apps_size(); ++a) {
    std::string name;
    auto app = ControlAppRegistry::Global().Create(s.apps(a), &name);
    if (!app.ok()) {
      return bad(StrCat("apps[", a, "]"), std::string(app.status().message()));
    }
  }
  if (!(s.stats_interval_s() == 0 || (s.stats_interval_s() >= 0.001 &&
                                      std::isfinite(s.stats_interval_s())))) {
    return bad("stats_interval_s", "must be 0 (1 s), or 0.001 or more");
  }
  const proto::SimIteration& it = s.iteration();
  if (!(it.sigma() >= 0 && it.sigma() < 1) ||
      !(it.tau() >= 0 && it.tau() < 1)) {
    return bad("iteration", "sigma and tau must be within [0, 1)");
  }
  return out;
}

absl::StatusOr<Layout> LoadScenario(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(StrCat("cannot read scenario ", path));
  std::stringstream text;
  text << in.rdbuf();
  return ParseScenario(text.str(), path);
}

}  // namespace sroute::sim
