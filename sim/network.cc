// SPDX-License-Identifier: Apache-2.0
#include "sim/network.h"

#include <xbt/log.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <simgrid/s4u.hpp>
#include <tuple>

#include "util/strings.h"

namespace sroute::sim {

namespace sg4 = simgrid::s4u;

struct NetworkSim::Impl {
  std::unique_ptr<sg4::Engine> engine;
  std::vector<sg4::Host*> servers, hosts;
  // Per machine (servers, then hosts), its ToR and its pod (a rack: one).
  std::vector<uint32_t> tor, pod;
  // IdleNs's probes: (kind of route, bytes, read) -> time.
  std::map<std::tuple<int, uint32_t, bool>, uint64_t> idle;
};

namespace {

bool made_one = false;

double BytesPerSecond(double gbps) { return gbps * 1e9 / 8; }

// A machine on its own split-duplex link in a star zone.
sg4::Host* AddMachine(sg4::NetZone* zone, const std::string& name, double gbps,
                      double latency_s) {
  sg4::Host* h = zone->create_host(name, 1e9)->seal();
  sg4::Link* l =
      zone->create_split_duplex_link(name + "-link", BytesPerSecond(gbps))
          ->set_latency(latency_s)
          ->seal();
  zone->add_route(h->get_netpoint(), nullptr, nullptr, nullptr,
                  {sg4::LinkInRoute(l, sg4::LinkInRoute::Direction::UP)}, true);
  return h;
}

// A zone's gateway (its switch) on a fabric that limits nothing: a star
// zone routes only between members with links of their own, and the
// gateway's traffic is already counted on the links to and from it.
void AddFabric(sg4::NetZone* zone, simgrid::kernel::routing::NetPoint* gw,
               const std::string& name) {
  sg4::Link* fabric =
      zone->create_link(name + "-fabric", 1e15)
          ->set_sharing_policy(sg4::Link::SharingPolicy::FATPIPE)
          ->seal();
  zone->add_route(gw, nullptr, nullptr, nullptr, {sg4::LinkInRoute(fabric)},
                  true);
}

}  // namespace

absl::StatusOr<std::unique_ptr<NetworkSim>> NetworkSim::Create(
    const Layout& layout) {
  if (made_one) {
    return absl::FailedPreconditionError(
        "SimGrid runs one network per process (sim::Simulate forks for each "
        "scenario)");
  }
  made_one = true;
  auto impl = std::make_unique<Impl>();
  // SimGrid's own messages (its configuration, its progress) would bury
  // the report.
  int argc = 2;
  char name[] = "sroute-sim";
  char quiet[] = "--log=root.thres:critical";
  char* argv[] = {name, quiet, nullptr};
  impl->engine = std::make_unique<sg4::Engine>(&argc, argv);
  xbt_log_control_set("root.thres:critical");

  std::vector<std::string> machines;
  for (const Layout::Server& s : layout.servers) machines.push_back(s.name);
  for (const std::string& h : layout.hosts) machines.push_back(h);
  std::vector<sg4::Host*> made;
  const proto::SimNetwork& n = layout.scenario.network();
  if (n.has_rack()) {
    sg4::NetZone* rack = sg4::create_star_zone("rack");
    const double latency = n.rack().link_latency_us() * 1e-6;
    for (const std::string& m : machines) {
      made.push_back(AddMachine(rack, m, n.rack().link_gbps(), latency));
    }
    rack->seal();
  } else {
    // Zones within zones, each a star: machines on their ToR's zone, ToRs
    // on their pod's, pods on the spines'. A route climbs to the lowest
    // zone both ends share and down again, found by lookups (a routed
    // zone over every switch spent most of a large run finding paths).
    // Each hop is a full-duplex link: a machine's to its ToR, a ToR's to
    // its pod's leaves, a pod's to the spines.
    const proto::SimClos& c = n.clos();
    const double latency = c.link_latency_us() * 1e-6;
    const size_t tors = size_t{c.pods()} * c.tors_per_pod();
    const double up = c.leaves_per_pod() * c.up_gbps();
    made.resize(machines.size());
    sg4::NetZone* spines = sg4::create_star_zone("spines");
    for (uint32_t p = 0; p < c.pods(); ++p) {
      sg4::NetZone* pod = sg4::create_star_zone(StrCat("pod", p));
      pod->set_parent(spines);
      for (uint32_t t = 0; t < c.tors_per_pod(); ++t) {
        const size_t index = size_t{p} * c.tors_per_pod() + t;
        const std::string name = StrCat("pod", p, "-tor", t);
        sg4::NetZone* tor = sg4::create_star_zone(name);
        tor->set_parent(pod);
        // Machines go round the ToRs (servers and hosts in every pod).
        for (size_t m = index; m < machines.size(); m += tors) {
          made[m] = AddMachine(tor, machines[m], c.down_gbps(), latency);
        }
        auto* tor_router = tor->create_router(name + "-switch");
        AddFabric(tor, tor_router, name);
        tor->seal();
        sg4::Link* l =
            pod->create_split_duplex_link(name + "-up", BytesPerSecond(up))
                ->set_latency(latency)
                ->seal();
        pod->add_route(tor->get_netpoint(), nullptr, tor_router, nullptr,
                       {sg4::LinkInRoute(l, sg4::LinkInRoute::Direction::UP)},
                       true);
      }
      // The pod's leaves, its way to the spines: a zone of their own (a
      // route between the pod's zones and a switch of the pod itself
      // would not resolve).
      const std::string leaves_name = StrCat("pod", p, "-leaves");
      sg4::NetZone* leaves_zone = sg4::create_star_zone(leaves_name);
      leaves_zone->set_parent(pod);
      auto* leaves = leaves_zone->create_router(leaves_name + "-switch");
      AddFabric(leaves_zone, leaves, leaves_name);
      leaves_zone->seal();
      sg4::Link* fabric =
          pod->create_link(leaves_name + "-in", 1e15)
              ->set_sharing_policy(sg4::Link::SharingPolicy::FATPIPE)
              ->seal();
      pod->add_route(leaves_zone->get_netpoint(), nullptr, leaves, nullptr,
                     {sg4::LinkInRoute(fabric)}, true);
      pod->seal();
      sg4::Link* l = spines
                         ->create_split_duplex_link(StrCat("pod", p, "-up"),
                                                    BytesPerSecond(up))
                         ->set_latency(latency)
                         ->seal();
      spines->add_route(pod->get_netpoint(), nullptr, leaves, nullptr,
                        {sg4::LinkInRoute(l, sg4::LinkInRoute::Direction::UP)},
                        true);
    }
    spines->seal();
  }
  impl->tor.assign(machines.size(), 0);
  impl->pod.assign(machines.size(), 0);
  if (n.has_clos()) {
    const size_t tors = size_t{n.clos().pods()} * n.clos().tors_per_pod();
    for (size_t m = 0; m < machines.size(); ++m) {
      impl->tor[m] = static_cast<uint32_t>(m % tors);
      impl->pod[m] = impl->tor[m] / n.clos().tors_per_pod();
    }
  }
  impl->servers.assign(made.begin(), made.begin() + layout.servers.size());
  impl->hosts.assign(made.begin() + layout.servers.size(), made.end());
  sg4::Activity::on_completion_cb([](const sg4::Activity& a) {
    if (auto* comm = dynamic_cast<const sg4::Comm*>(&a)) {
      if (auto* finish = comm->get_data<double>()) {
        *finish = comm->get_finish_time();
      }
    }
  });
  return std::unique_ptr<NetworkSim>(new NetworkSim(std::move(impl)));
}

NetworkSim::NetworkSim(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
NetworkSim::~NetworkSim() = default;

uint64_t NetworkSim::IdleNs(uint32_t host, uint32_t server, uint32_t bytes,
                            bool read) {
  const size_t h = impl_->servers.size() + host;
  const int kind = impl_->tor[h] == impl_->tor[server]   ? 0
                   : impl_->pod[h] == impl_->pod[server] ? 1
                                                         : 2;
  auto [it, made] = impl_->idle.try_emplace({kind, bytes, read}, 0);
  if (!made) return it->second;
  // One transfer on idle links, after whatever ran before.
  const double base = std::ceil(sg4::Engine::get_clock()) + 1;
  impl_->engine->run_until(base);
  sg4::Host* s = impl_->servers[server];
  sg4::Host* c = impl_->hosts[host];
  sg4::CommPtr comm =
      read ? sg4::Comm::sendto_init(s, c) : sg4::Comm::sendto_init(c, s);
  double finish = base;
  comm->set_payload_size(bytes);
  comm->set_data(&finish);
  comm->start();
  impl_->engine->run();
  it->second = static_cast<uint64_t>(std::llround((finish - base) * 1e9));
  return it->second;
}

std::vector<uint64_t> NetworkSim::Run(const std::vector<Request>& requests,
                                      const std::vector<uint64_t>& start_ns,
                                      const std::vector<uint8_t>* skip) {
  // SimGrid's clock only goes forward: each run begins a second after the
  // last one ended, on idle links, and its times are taken from there.
  const double base = std::ceil(sg4::Engine::get_clock()) + 1;
  std::vector<uint32_t> order(requests.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    return start_ns[a] < start_ns[b];
  });
  std::vector<double> finish(requests.size(), -1);
  // The transfers under way. Those done are let go now and then: millions
  // kept to the end would hold gigabytes.
  std::vector<sg4::CommPtr> comms;
  for (uint32_t i : order) {
    const Request& r = requests[i];
    if (skip != nullptr && (*skip)[i]) continue;
    const double at = base + static_cast<double>(start_ns[i]) * 1e-9;
    if (at > sg4::Engine::get_clock()) impl_->engine->run_until(at);
    sg4::Host* server = impl_->servers[r.server];
    sg4::Host* host = impl_->hosts[r.host];
    sg4::CommPtr c = r.read ? sg4::Comm::sendto_init(server, host)
                            : sg4::Comm::sendto_init(host, server);
    c->set_payload_size(r.bytes);
    c->set_data(&finish[i]);
    c->start();
    comms.push_back(std::move(c));
    if (comms.size() % 4096 == 0) {
      std::erase_if(comms, [](const sg4::CommPtr& comm) {
        return comm->get_state() == sg4::Activity::State::FINISHED;
      });
    }
  }
  impl_->engine->run();
  std::vector<uint64_t> done(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    const double end = std::max(finish[i], base) - base;
    done[i] = std::max<uint64_t>(
        start_ns[i], static_cast<uint64_t>(std::llround(end * 1e9)));
  }
  return done;
}

}  // namespace sroute::sim
