// SPDX-License-Identifier: Apache-2.0
// SimGrid 3.32 flow-level probe: star of N hosts, per-host 10 Gb/s split-duplex
// links, 1 us latency, optional 40 Gb/s shared backbone. Transfers are injected
// from maestro (no actors) via Engine::run_until. usage: probe [maestro|actor]
// [N_transfers] [backbone0|1] [--cfg=...]
#include <xbt/log.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <simgrid/s4u.hpp>
#include <string>
#include <vector>
namespace sg4 = simgrid::s4u;

struct Xfer {
  double t;
  int src, dst;
  uint64_t bytes;
  double start = -1, finish = -1;
};
static std::vector<Xfer> X;

static long vmhwm_kb() {
  std::ifstream f("/proc/self/status");
  std::string l;
  while (std::getline(f, l))
    if (l.rfind("VmHWM:", 0) == 0) return std::stol(l.substr(6));
  return -1;
}

int main(int argc, char** argv) {
  sg4::Engine e(&argc, argv);  // parses and removes --cfg=... / --log=...
  xbt_log_control_set("root.thres:critical");  // silence everything
  std::string mode = argc > 1 ? argv[1] : "maestro";
  size_t N = argc > 2 ? std::stoul(argv[2]) : 20000;
  bool backbone = argc > 3 && std::string(argv[3]) == "1";
  const int H = 64;
  const double BW = 10e9 / 8, LAT = 1e-6;  // bytes/s, s

  // ---- platform, no XML ----
  auto* zone = sg4::create_star_zone("star");
  sg4::Link* bb = nullptr;
  if (backbone)
    bb = zone->create_link("backbone", 40e9 / 8)
             ->set_latency(0)
             ->seal();  // SHARED by default
  std::vector<sg4::Host*> hosts;
  for (int i = 0; i < H; i++) {
    auto* h = zone->create_host("h" + std::to_string(i), 1e9)->seal();
    auto* l = zone->create_split_duplex_link("l" + std::to_string(i), BW)
                  ->set_latency(LAT)
                  ->seal();
    std::vector<sg4::LinkInRoute> r{{l, sg4::LinkInRoute::Direction::UP}};
    if (bb) r.emplace_back(bb);
    // star zone: (host -> *) route; symmetrical=true also installs (* -> host)
    // using the DOWN half
    zone->add_route(h->get_netpoint(), nullptr, nullptr, nullptr, r, true);
    hosts.push_back(h);
  }
  zone->seal();

  // ---- workload: 2 isolated sanity phases, then Poisson random traffic ----
  std::mt19937_64 rng(42);
  X.push_back({0.0, 0, 1, 1u << 20});  // isolated 1 MiB
  for (int s = 1; s < H; s++)
    X.push_back({1.0, s, 0, 1u << 20});  // incast 63 -> h0 at t=1s
  std::exponential_distribution<double> gap(
      20000.0);  // 20k transfers per simulated second
  std::uniform_int_distribution<int> hd(0, H - 1);
  std::uniform_int_distribution<uint64_t> sz(4096, 1u << 20);
  double t = 2.0;
  while (X.size() < N) {
    t += gap(rng);
    int a = hd(rng), b = hd(rng);
    while (b == a) b = hd(rng);
    X.push_back({t, a, b, sz(rng)});
  }

  // completion callback: static signal on every Activity (3.32 has no
  // per-activity on_this_completion)
  sg4::Activity::on_completion_cb([](sg4::Activity const& a) {
    if (auto* c = dynamic_cast<sg4::Comm const*>(&a)) {
      auto* x = c->get_data<Xfer>();
      if (x) {
        x->start = c->get_start_time();
        x->finish = c->get_finish_time();
      }
    }
  });

  std::vector<sg4::CommPtr> keep;
  keep.reserve(X.size());
  auto issue = [&](Xfer& x) {
    auto c = sg4::Comm::sendto_init(hosts[x.src], hosts[x.dst]);
    c->set_payload_size(x.bytes);
    c->set_data(&x);
    c->start();
    keep.push_back(c);  // keep or detach(); dropping the last CommPtr of a
                        // started comm is fine too with detach()
  };

  auto w0 = std::chrono::steady_clock::now();
  if (mode == "maestro") {
    for (auto& x : X) {
      e.run_until(x.t);
      issue(x);
    }  // external-DES style: advance clock, inject
    e.run();
  } else {
    sg4::Actor::create("driver", hosts[0], [&]() {
      for (auto& x : X) {
        sg4::this_actor::sleep_until(x.t);
        issue(x);
      }
      for (auto& c : keep) c->wait();
    });
    e.run();
  }
  double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - w0)
          .count();

  size_t done = 0;
  for (auto& x : X) done += x.finish >= 0;
  double ideal =
      2 * LAT +
      (1u << 20) / BW;  // route = src UP half + dst DOWN half = 2 links
  printf(
      "mode=%s transfers=%zu completed=%zu sim_end=%.4fs wall=%.3fs -> %.0f "
      "transfers/s, VmHWM=%ld kB\n",
      mode.c_str(), X.size(), done, sg4::Engine::get_clock(), wall,
      X.size() / wall, vmhwm_kb());
  printf("isolated 1MiB: %.3f us (ideal 2*lat+size/bw = %.3f us, ratio %.4f)\n",
         (X[0].finish - X[0].start) * 1e6, ideal * 1e6,
         (X[0].finish - X[0].start) / ideal);
  {  // peak and mean number of simultaneously active flows (concurrency drives
     // solver cost)
    std::vector<std::pair<double, int>> ev;
    for (auto& x : X) {
      ev.push_back({x.start, 1});
      ev.push_back({x.finish, -1});
    }
    std::sort(ev.begin(), ev.end());
    int cur = 0, pk = 0;
    double area = 0, last = ev.front().first;
    for (auto& [tt, d] : ev) {
      area += cur * (tt - last);
      last = tt;
      cur += d;
      pk = std::max(pk, cur);
    }
    printf("concurrency: peak %d, time-avg %.1f active flows\n", pk,
           area / (last - ev.front().first));
  }
  double mn = 1e9, mx = 0;
  for (int s = 1; s < H; s++) {
    double d = X[s].finish - X[s].start;
    mn = std::min(mn, d);
    mx = std::max(mx, d);
  }
  printf(
      "incast 63x1MiB: per-flow duration min %.3f max %.3f us; "
      "63*ideal_bw_time = %.3f us\n",
      mn * 1e6, mx * 1e6, 63 * (1u << 20) / BW * 1e6);
  return 0;
}
