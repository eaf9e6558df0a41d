// SPDX-License-Identifier: Apache-2.0
#include "sim/scenario.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "absl/strings/numbers.h"
#include "controller/app_api.h"
#include "endpoints/flash_model.h"
#include "sim/storage.h"
#include "util/strings.h"
#include "util/text_proto.h"

namespace sroute::sim {
namespace {

// Past these a scenario is a typo, not a study (and would exhaust memory
// before it said so).
constexpr uint64_t kMaxMachines = 100'000;
constexpr uint64_t kMaxDevicesPerServer = 64;
constexpr uint32_t kMaxClosedLoopDepth = 4096;
constexpr uint64_t kMaxTraceIoBytes = 64 << 20;

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
  const bool open = f.open_loop_iops() != 0;
  const bool closed = f.closed_loop_depth() != 0;
  const bool trace = !f.trace().empty();
  if (open + closed + trace != 1) {
    return Bad(where,
               "needs one of open_loop_iops, closed_loop_depth and trace");
  }
  if (open && !Positive(f.open_loop_iops())) {
    return Bad(StrCat(where, ".open_loop_iops"), "must be above 0");
  }
  if (f.closed_loop_depth() > kMaxClosedLoopDepth) {
    return Bad(StrCat(where, ".closed_loop_depth"),
               StrCat("must be within 1 to ", kMaxClosedLoopDepth));
  }
  if (!(f.think_us() >= 0 && std::isfinite(f.think_us()))) {
    return Bad(StrCat(where, ".think_us"), "must be 0 or more");
  }
  if (f.think_us() != 0 && !closed) {
    return Bad(StrCat(where, ".think_us"), "is for closed_loop_depth flows");
  }
  if (!(f.read_percent() >= 0 && f.read_percent() <= 100)) {
    return Bad(StrCat(where, ".read_percent"), "must be within 0 to 100");
  }
  if (f.io_bytes() != 0 && f.io_bytes() % 4096 != 0) {
    return Bad(StrCat(where, ".io_bytes"), "must be a multiple of 4096");
  }
  if (!(f.zipf() >= 0 && f.zipf() < 1)) {
    return Bad(StrCat(where, ".zipf"), "must be within [0, 1)");
  }
  if (!f.ycsb().empty()) {
    if (f.ycsb().size() != 1 || f.ycsb()[0] < 'A' || f.ycsb()[0] > 'F') {
      return Bad(StrCat(where, ".ycsb"),
                 StrCat("\"", f.ycsb(), "\" is no YCSB workload (A to F)"));
    }
    if (f.read_percent() != 0 || trace) {
      return Bad(StrCat(where, ".ycsb"),
                 "sets the mix itself: not with read_percent or trace");
    }
  }
  if (f.bursts_size() > 0 && !open) {
    return Bad(StrCat(where, ".bursts"), "are for open_loop_iops flows");
  }
  for (int b = 0; b < f.bursts_size(); ++b) {
    const proto::SimBurst& burst = f.bursts(b);
    if (!(burst.start_s() >= 0) || !Positive(burst.duration_s()) ||
        !(burst.factor() >= 0 && std::isfinite(burst.factor()))) {
      return Bad(StrCat(where, ".bursts[", b, "]"),
                 "start_s and factor must be 0 or more, duration_s above 0");
    }
  }
  if (trace) {
    if (!f.file().empty()) {
      return Bad(StrCat(where, ".file"),
                 "a trace's lines name their files: leave it out");
    }
    return absl::OkStatus();
  }
  if (f.file_bytes() < std::max<uint64_t>(f.io_bytes(), 4096)) {
    return Bad(StrCat(where, ".file_bytes"), "must hold one IO at least");
  }
  return absl::OkStatus();
}

// A stable hash of a name (the same on every machine and build).
uint64_t NameHash(std::string_view name) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (char c : name)
    h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ull;
  return h;
}

// The lines of flow `f`'s trace file into `out` (those before the run's
// end), each on the host its source names or picks. Errors name the file
// and line: "t.trace:3: OP must be r or w".
absl::Status ReadTrace(const proto::SimScenario& s, uint32_t f,
                       const std::string& path, const Layout& layout,
                       std::vector<Layout::TraceIo>* out) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(StrCat("cannot read trace ", path));
  const std::vector<uint32_t>& hosts = layout.flow_hosts[f];
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (const size_t hash = line.find('#'); hash != std::string::npos) {
      line.resize(hash);
    }
    std::replace(line.begin(), line.end(), ',', ' ');
    std::istringstream words(line);
    std::vector<std::string> w;
    for (std::string x; words >> x;) w.push_back(x);
    if (w.empty()) continue;
    auto bad = [&](std::string_view why) {
      return absl::InvalidArgumentError(StrCat(path, ":", n, ": ", why));
    };
    if (w.size() != 6) {
      return bad(StrCat("needs TIME_S SOURCE OP FILE OFFSET LENGTH, not ",
                        w.size(), " words"));
    }
    double at_s = 0;
    uint64_t offset = 0, length = 0;
    if (!absl::SimpleAtod(w[0], &at_s) || !(at_s >= 0) ||
        !std::isfinite(at_s)) {
      return bad(StrCat("TIME_S \"", w[0], "\" is no time in seconds"));
    }
    const bool read = w[2] == "r" || w[2] == "read";
    if (!read && w[2] != "w" && w[2] != "write") {
      return bad(StrCat("OP \"", w[2], "\" must be r or w"));
    }
    if (w[3] != "-" && (!w[3].starts_with("//") || w[3].size() < 3)) {
      return bad(StrCat("FILE \"", w[3], "\" must be //VOLUME/PATH or -"));
    }
    if (!absl::SimpleAtoi(w[4], &offset)) {
      return bad(StrCat("OFFSET \"", w[4], "\" is no byte offset"));
    }
    if (!absl::SimpleAtoi(w[5], &length) || length == 0 ||
        length > kMaxTraceIoBytes) {
      return bad(StrCat("LENGTH \"", w[5], "\" must be within 1 to ",
                        kMaxTraceIoBytes, " bytes"));
    }
    if (at_s >= s.duration_s()) continue;
    // Whole pages: the device's unit.
    const uint64_t first = offset / 4096;
    const uint64_t last = (offset + length + 4095) / 4096;
    Layout::TraceIo io;
    io.at_ns = static_cast<uint64_t>(std::llround(at_s * 1e9));
    io.offset = first * 4096;
    io.bytes = static_cast<uint32_t>((last - first) * 4096);
    io.source = w[1];
    io.file = w[3] == "-" ? "" : w[3];
    io.flow = f;
    io.read = read;
    io.host = hosts[NameHash(w[1]) % hosts.size()];
    for (uint32_t h : hosts) {
      if (layout.hosts[h] == w[1]) io.host = h;
    }
    out->push_back(std::move(io));
  }
  return absl::OkStatus();
}

// Every file `ios` name routes for both ops by `router` (before anything
// runs), and a flow with lines for "-" has servers.
absl::Status CheckTraceRoutes(const Layout& layout, size_t from,
                              const std::string& where) {
  std::set<std::pair<std::string, std::string>> seen;
  for (size_t i = from; i < layout.trace.size(); ++i) {
    const Layout::TraceIo& io = layout.trace[i];
    if (io.file.empty()) {
      if (layout.flow_servers[io.flow].empty()) {
        return Bad(where + ".servers",
                   "the trace has lines for - (placed by hash): name servers");
      }
      continue;
    }
    if (!seen.emplace(io.source, io.file).second) continue;
    for (Op op : {Op::kRead, Op::kWrite}) {
      IoHeader h;
      h.source = io.source;
      h.op = op;
      h.file = io.file;
      h.length = io.bytes;
      std::vector<Place> places;
      if (absl::Status st = layout.router->Route(h, &places); !st.ok()) {
        return Bad(where + ".trace", StrCat(io.file, ": ", st.message()));
      }
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
    if (!(group.warm_fill() >= 0 && group.warm_fill() <= 1)) {
      return bad(where + ".warm_fill", "must be within 0 to 1");
    }
    if (!(group.warm_overwrites() >= 0 && group.warm_overwrites() <= 100)) {
      return bad(where + ".warm_overwrites", "must be within 0 to 100");
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
      out.servers.push_back({StrCat(group.prefix(), i), group.devices(),
                             group.preset(), group.warm_fill(),
                             group.warm_overwrites()});
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
    if (group.remote_timeout_ms() > 3'600'000) {
      return bad(where + ".remote_timeout_ms",
                 "must be at most 3600000 (an hour), as sroute-fuse's");
    }
    for (uint32_t i = 0; i < group.count(); ++i) {
      out.hosts.push_back(StrCat(group.prefix(), i));
      out.host_io_cost_ns.push_back(
          static_cast<uint64_t>(group.io_cost_us() * 1e3));
      out.host_max_in_flight.push_back(group.max_in_flight());
      out.host_remote_timeout_ns.push_back(
          uint64_t{group.remote_timeout_ms() == 0 ? 10'000
                                                  : group.remote_timeout_ms()} *
          1'000'000);
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
  std::vector<std::string> stage_names;
  for (int i = 0; i < s.replica_sets_size(); ++i) {
    const proto::SimReplicaSet& rs = s.replica_sets(i);
    const std::string where = StrCat("replica_sets[", i, "]");
    if (rs.name().empty()) return bad(where + ".name", "is empty");
    if (std::find(stage_names.begin(), stage_names.end(), rs.name()) !=
        stage_names.end()) {
      return bad(where + ".name",
                 StrCat("\"", rs.name(), "\" names another set too"));
    }
    Layout::ReplicaSet set;
    set.name = rs.name();
    for (const std::string& m : rs.member()) {
      const std::vector<uint32_t> found = Resolve(m, server_names, {});
      if (found.size() != 1) {
        return bad(where + ".member", StrCat("no server named \"", m, "\""));
      }
      if (std::find(set.members.begin(), set.members.end(), found[0]) !=
          set.members.end()) {
        return bad(where + ".member", StrCat("\"", m, "\" twice"));
      }
      set.members.push_back(found[0]);
    }
    if (set.members.size() < 2) {
      return bad(where + ".member", "needs two members at least");
    }
    const std::string& read = rs.read();
    if (read.empty() || read == "primary") {
      set.read = Layout::ReplicaSet::Read::kPrimary;
    } else if (read == "random") {
      set.read = Layout::ReplicaSet::Read::kRandom;
    } else if (read == "least_loaded") {
      set.read = Layout::ReplicaSet::Read::kLeastLoaded;
    } else {
      return bad(where + ".read",
                 StrCat("\"", read,
                        "\": primary, random or least_loaded (the stage's "
                        "weighted and hedged reads are not simulated)"));
    }
    const uint32_t n = static_cast<uint32_t>(set.members.size());
    const std::string ack =
        rs.ack().empty() ? (n >= 3 ? "quorum" : "all") : rs.ack();
    if (ack == "all") {
      set.ack = 0;
    } else if (ack == "quorum") {
      set.ack = n / 2 + 1;
    } else if (!absl::SimpleAtoi(ack, &set.ack) || set.ack == 0 ||
               set.ack > n) {
      return bad(where + ".ack", StrCat("\"", ack,
                                        "\": quorum, all, or a "
                                        "count of members (1 to ",
                                        n, ")"));
    }
    using Grants = Layout::ReplicaSet::Grants;
    if (rs.gc() == "" || rs.gc() == "off" || rs.gc() == "redirect") {
      set.gc_grants = Grants::kNone;
    } else if (rs.gc() == "delay") {
      set.gc_grants = Grants::kDelay;
    } else if (rs.gc() == "background") {
      set.gc_grants = Grants::kBackground;
    } else {
      return bad(where + ".gc", StrCat("\"", rs.gc(),
                                       "\": off, redirect, delay or "
                                       "background"));
    }
    set.gc_redirect = rs.gc() != "" && rs.gc() != "off";
    if (rs.gc_poll_us() != 0 &&
        (rs.gc_poll_us() < 100 || rs.gc_poll_us() > 10'000'000)) {
      return bad(where + ".gc_poll_us",
                 "must be within 100 to 10000000, as the stage's");
    }
    set.gc_poll_ns =
        uint64_t{rs.gc_poll_us() == 0 ? 1000 : rs.gc_poll_us()} * 1000;
    stage_names.push_back(set.name);
    out.replica_sets.push_back(std::move(set));
  }
  for (int r = 0; r < s.rules_size(); ++r) {
    out.rules.push_back({static_cast<uint64_t>(r) + 1, s.rules(r), "scenario",
                         StrCat("rules[", r, "]")});
  }
  auto router = Router::Create(out.rules, server_names, stage_names);
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
    if (!flow.trace().empty()) {
      out.flow_servers.push_back(
          flow.servers().empty()
              ? std::vector<uint32_t>()
              : Resolve(flow.servers(), server_names, server_groups));
      if (!flow.servers().empty() && out.flow_servers.back().empty()) {
        return bad(
            where + ".servers",
            StrCat("no server or server group named \"", flow.servers(), "\""));
      }
      std::string path = flow.trace();
      if (const size_t slash = std::string_view(origin).rfind('/');
          !path.starts_with("/") && slash != std::string_view::npos) {
        path = StrCat(origin.substr(0, slash + 1), path);
      }
      const size_t from = out.trace.size();
      if (absl::Status st =
              ReadTrace(s, static_cast<uint32_t>(f), path, out, &out.trace);
          !st.ok()) {
        return bad(where + ".trace", std::string(st.message()));
      }
      if (absl::Status st = CheckTraceRoutes(out, from, where); !st.ok()) {
        return absl::InvalidArgumentError(StrCat(origin, ": ", st.message()));
      }
      continue;
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
    if (event.has_server_down()) {
      const proto::SimServerDown& down = event.server_down();
      const std::vector<uint32_t> found =
          Resolve(down.server(), server_names, {});
      if (found.size() != 1) {
        return bad(where + ".server_down.server",
                   StrCat("no server named \"", down.server(), "\""));
      }
      if (!(down.duration_s() >= 0 && std::isfinite(down.duration_s()))) {
        return bad(where + ".server_down.duration_s", "must be 0 or more");
      }
      const uint64_t from = static_cast<uint64_t>(event.at_s() * 1e9);
      out.down.push_back(
          {from,
           down.duration_s() == 0
               ? UINT64_MAX
               : from + static_cast<uint64_t>(down.duration_s() * 1e9),
           found[0], down.hang()});
      continue;
    }
    if (!event.has_gc()) {
      return bad(where,
                 "says nothing happens (gc { ... } or server_down { ... })");
    }
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
  std::stable_sort(out.down.begin(), out.down.end(),
                   [](const Layout::DownSpell& a, const Layout::DownSpell& b) {
                     return a.from_ns < b.from_ns;
                   });
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
