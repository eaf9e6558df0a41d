// SPDX-License-Identifier: Apache-2.0
// ns-3 3.37 packet-level probe, same workload as
// bench/sim/network_probe/simgrid_probe.cc: star of 64 hosts, each on its own
// 10 Gb/s full-duplex point-to-point link (1 us) to one switch node (an IPv4
// router, global routing). TCP NewReno (ns-3 default), BulkSend(MaxBytes=size)
// -> PacketSink. Workload (identical RNG/distributions to the SimGrid probe):
// isolated 1 MiB h0->h1 at t=0, 63->h0 incast of 1 MiB each at t=1 s, then
// Poisson arrivals (20k/s) from t=2 s, size U[4 KiB, 1 MiB]. usage: probe
// [N_transfers=2000] [segsize=1448] [minRto_ms=200] [wall_budget_s=170]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "ns3/applications-module.h"
#include "ns3/core-module.h"
#include "ns3/internet-module.h"
#include "ns3/network-module.h"
#include "ns3/point-to-point-module.h"

using namespace ns3;

struct Xfer {
  double t;
  int src, dst;
  uint64_t bytes;
  uint64_t rx = 0;
  double finish = -1;
};
static std::vector<Xfer> X;
static size_t g_done = 0;
static uint64_t g_rxPkts = 0;

static long vmhwm_kb() {
  std::ifstream f("/proc/self/status");
  std::string l;
  while (std::getline(f, l))
    if (l.rfind("VmHWM:", 0) == 0) return std::stol(l.substr(6));
  return -1;
}

static std::chrono::steady_clock::time_point g_w0;
static double g_budget = 170;
static bool g_cut = false;
static void WallCheck() {  // stop cleanly if the wall-time budget is exhausted
                           // (partial results are reported)
  if (std::chrono::duration<double>(std::chrono::steady_clock::now() - g_w0)
          .count() > g_budget) {
    g_cut = true;
    Simulator::Stop();
    return;
  }
  Simulator::Schedule(MicroSeconds(100), &WallCheck);
}

static void OnRx(size_t i, Ptr<const Packet> p, const Address&) {
  Xfer& x = X[i];
  g_rxPkts++;
  x.rx += p->GetSize();
  if (x.finish < 0 && x.rx >= x.bytes) {
    x.finish = Simulator::Now().GetSeconds();
    if (++g_done == X.size())
      Simulator::Stop();  // all transfers completed: stop (skip TIME_WAIT etc.)
  }
}

int main(int argc, char** argv) {
  size_t N = argc > 1 ? std::stoul(argv[1]) : 2000;
  uint32_t seg = argc > 2 ? std::stoul(argv[2]) : 1448;
  double minRtoMs = argc > 3 ? std::stod(argv[3]) : 200;
  if (argc > 4) g_budget = std::stod(argv[4]);
  const int H = 64;
  const double BWbps = 10e9, LAT = 1e-6;

  auto s0 = std::chrono::steady_clock::now();
  Config::SetDefault("ns3::TcpSocket::SegmentSize",
                     UintegerValue(seg));  // default 536 is unrealistic
  Config::SetDefault("ns3::TcpSocketBase::MinRto",
                     TimeValue(MilliSeconds(minRtoMs)));  // default 1 s
  Config::SetDefault("ns3::TcpSocket::SndBufSize", UintegerValue(1 << 20));
  Config::SetDefault("ns3::TcpSocket::RcvBufSize", UintegerValue(1 << 20));

  // ---- topology: node 0 = switch (router), nodes 1..64 = hosts ----
  NodeContainer sw;
  sw.Create(1);
  NodeContainer hosts;
  hosts.Create(H);
  InternetStackHelper stack;
  stack.Install(sw);
  stack.Install(hosts);
  PointToPointHelper p2p;
  p2p.SetDeviceAttribute("DataRate", StringValue("10Gbps"));
  p2p.SetChannelAttribute("Delay", StringValue("1us"));
  Ipv4AddressHelper addr;
  std::vector<Ipv4Address> hip(H);
  for (int i = 0; i < H; i++) {
    NetDeviceContainer d = p2p.Install(hosts.Get(i), sw.Get(0));
    std::string net = "10.1." + std::to_string(i + 1) + ".0";
    addr.SetBase(net.c_str(), "255.255.255.0");
    Ipv4InterfaceContainer ifc = addr.Assign(d);
    hip[i] = ifc.GetAddress(0);
  }
  Ipv4GlobalRoutingHelper::PopulateRoutingTables();

  // ---- workload: identical to the SimGrid probe ----
  std::mt19937_64 rng(42);
  X.push_back({0.0, 0, 1, 1u << 20});  // isolated 1 MiB
  for (int s = 1; s < H; s++)
    X.push_back({1.0, s, 0, 1u << 20});  // incast 63 -> h0 at t=1s
  std::exponential_distribution<double> gap(20000.0);
  std::uniform_int_distribution<int> hd(0, H - 1);
  std::uniform_int_distribution<uint64_t> sz(4096, 1u << 20);
  double t = 2.0;
  while (X.size() < N) {
    t += gap(rng);
    int a = hd(rng), b = hd(rng);
    while (b == a) b = hd(rng);
    X.push_back({t, a, b, sz(rng)});
  }
  if (X.size() > 60000) {
    fprintf(stderr, "N too large for one port per transfer\n");
    return 1;
  }

  // one PacketSink (own port) + one BulkSend per transfer
  for (size_t i = 0; i < X.size(); i++) {
    uint16_t port = 1000 + i;
    Xfer& x = X[i];
    PacketSinkHelper sinkH("ns3::TcpSocketFactory",
                           InetSocketAddress(Ipv4Address::GetAny(), port));
    ApplicationContainer sa = sinkH.Install(hosts.Get(x.dst));
    sa.Start(Seconds(0));
    sa.Get(0)->TraceConnectWithoutContext("Rx", MakeBoundCallback(&OnRx, i));
    BulkSendHelper bs("ns3::TcpSocketFactory",
                      InetSocketAddress(hip[x.dst], port));
    bs.SetAttribute("MaxBytes", UintegerValue(x.bytes));
    bs.SetAttribute("SendSize",
                    UintegerValue(std::min<uint64_t>(x.bytes, 64 * 1024)));
    ApplicationContainer ba = bs.Install(hosts.Get(x.src));
    ba.Start(Seconds(x.t));
  }
  Simulator::Stop(Seconds(
      t + 600));  // safety net; normally stopped by OnRx when all are done
  double setup =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - s0)
          .count();

  auto w0 = std::chrono::steady_clock::now();
  g_w0 = w0;
  Simulator::Schedule(Seconds(0), &WallCheck);
  Simulator::Run();
  double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - w0)
          .count();
  double simEnd = Simulator::Now().GetSeconds();
  uint64_t events = Simulator::GetEventCount();
  Simulator::Destroy();

  size_t done = 0;
  uint64_t totBytes = 0;
  for (auto& x : X) {
    done += x.finish >= 0;
    totBytes += x.bytes;
  }
  if (g_cut)
    printf("WALL BUDGET (%.0fs) EXHAUSTED: run cut short, results partial\n",
           g_budget);
  printf(
      "ns-3 3.37 transfers=%zu completed=%zu seg=%u minRto=%.0fms "
      "sim_end=%.6fs setup=%.3fs run_wall=%.3fs "
      "-> %.0f transfers/s (run only), %.0f transfers/s (setup+run); "
      "events=%lu (%.2f M ev/s), "
      "rx_pkts=%lu, bytes=%.1f MB, VmHWM=%ld kB\n",
      X.size(), done, seg, minRtoMs, simEnd, setup, wall, X.size() / wall,
      X.size() / (wall + setup), (unsigned long)events, events / wall / 1e6,
      (unsigned long)g_rxPkts, totBytes / 1e6, vmhwm_kb());
  double ideal = (1u << 20) * 8 / BWbps;
  printf(
      "isolated 1MiB: %.3f us from app start (incl. SYN handshake); "
      "1MiB/10Gb/s = %.3f us, ratio %.4f; "
      "2*lat+size/bw = %.3f us\n",
      (X[0].finish - X[0].t) * 1e6, ideal * 1e6, (X[0].finish - X[0].t) / ideal,
      (2 * LAT + ideal) * 1e6);
  double mn = 1e9, mx = 0;
  for (int s = 1; s < H && s < (int)X.size(); s++) {
    if (X[s].finish < 0) continue;
    double d = X[s].finish - X[s].t;
    mn = std::min(mn, d);
    mx = std::max(mx, d);
  }
  printf(
      "incast 63x1MiB: per-flow duration min %.3f max %.3f us; "
      "63*ideal_bw_time = %.3f us\n",
      mn * 1e6, mx * 1e6, 63 * ideal * 1e6);
  {  // concurrency of the random phase (and all), from app start to completion
    std::vector<std::pair<double, int>> ev;
    for (auto& x : X)
      if (x.finish >= 0) {
        ev.push_back({x.t, 1});
        ev.push_back({x.finish, -1});
      }
    std::sort(ev.begin(), ev.end());
    int cur = 0, pk = 0;
    for (auto& [tt, d] : ev) {
      cur += d;
      pk = std::max(pk, cur);
    }
    double rs = 0, rn = 0;
    for (size_t i = H; i < X.size(); i++)
      if (X[i].finish >= 0) {
        rs += X[i].finish - X[i].t;
        rn++;
      }
    printf(
        "concurrency: peak %d active flows; random-phase mean FCT %.1f us over "
        "%.0f flows\n",
        pk, rn ? rs / rn * 1e6 : 0, rn);
  }
  return 0;
}
