// SPDX-License-Identifier: Apache-2.0
#include "sim/simulate.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <deque>
#include <fstream>
#include <map>
#include <optional>
#include <queue>
#include <set>
#include <string>
#include <tuple>

#include "absl/container/flat_hash_map.h"
#include "sim/apps.h"
#include "sim/network.h"
#include "sim/storage.h"
#include "sim/workload.h"
#include "util/errno_status.h"
#include "util/quantile.h"
#include "util/strings.h"

namespace sroute::sim {
namespace {

double Mean(const std::vector<double>& v) {
  double sum = 0;
  for (double x : v) sum += x;
  return v.empty() ? 0 : sum / static_cast<double>(v.size());
}

double RelativeDistance(double x, double y) {
  const double m = std::max(std::abs(x), std::abs(y));
  return m == 0 ? 0 : std::abs(x - y) / m;
}

uint64_t PeakRss() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  }
  return 0;
}

// Where one pass left every request.
struct Pass {
  std::vector<uint64_t> storage_in, storage_out, network_in, network_out;
  // When each request's host started it, where that is not its arrival (a
  // bound on the host's IOs under way made it wait); empty: never.
  std::vector<uint64_t> start;
  // How the pass copied the reclaims its timeline started.
  CopyLog copies;
  // Requests that failed (a server down): they end at storage_out and
  // send nothing.
  std::vector<uint8_t> failed;
  // When each request ended for its issuer, and the throughput (MB/s) of
  // those that did not fail.
  std::vector<uint64_t> end;
  std::vector<double> mbps;
  // What the devices did, and per replica set the reads GC redirected.
  StorageSim::Counts counts;
  std::vector<uint64_t> gc_redirects;
};

void Finish(const std::vector<Request>& requests, Pass& p) {
  p.end.resize(requests.size());
  p.mbps.clear();
  p.mbps.reserve(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    const Request& r = requests[i];
    if (p.failed[i]) {
      p.end[i] = p.storage_out[i];
      continue;
    }
    p.end[i] = r.read ? p.network_out[i] : p.storage_out[i];
    const double s =
        static_cast<double>(std::max<uint64_t>(1, p.end[i] - r.arrival_ns)) *
        1e-9;
    p.mbps.push_back(r.bytes / s / 1e6);
  }
}

// The distribution of `us` at the fractions SimFlowReport's CDFs name.
void AddCdf(std::vector<double> us,
            google::protobuf::RepeatedPtrField<proto::SimQuantile>* out) {
  if (us.empty()) return;
  std::sort(us.begin(), us.end());
  std::vector<double> fractions;
  for (int i = 1; i <= 99; ++i) fractions.push_back(i / 100.0);
  for (double f : {0.995, 0.999, 0.9999, 1.0}) fractions.push_back(f);
  for (double f : fractions) {
    // The smallest latency at least a fraction f of the IOs are within.
    const double rank = std::ceil(f * static_cast<double>(us.size()));
    const size_t i =
        std::min(us.size() - 1, static_cast<size_t>(std::max(1.0, rank)) - 1);
    proto::SimQuantile* q = out->Add();
    q->set_fraction(f);
    q->set_us(us[i]);
  }
}

std::string FlowName(const proto::SimScenario& s, int f) {
  return f == s.flows_size()         ? "(reclaim)"
         : s.flows(f).name().empty() ? StrCat("flow", f)
                                     : s.flows(f).name();
}

// Each server_down event as the flows met it: those with a request on the
// server under way when it went down, or one that failed on it in the
// outage (sent to it until it was back). Their failover is from the death
// to the end of their first IO that did not fail among those issued after
// it and those that failed over (bench/replica_failover.sh's "first good
// read": a reply already on its way at the death does not count).
// `io_end`, `io_failed`: per IO, when it ended for its issuer and whether
// it failed.
void AddOutages(const Layout& layout, const std::vector<Request>& requests,
                const Pass& p, const std::vector<uint64_t>& io_end,
                const std::vector<uint8_t>& io_failed, proto::SimReport* out) {
  const proto::SimScenario& s = layout.scenario;
  for (const Layout::DownSpell& spell : layout.down) {
    proto::SimOutageReport* o = out->add_outages();
    o->set_server(layout.servers[spell.server].name);
    o->set_at_s(static_cast<double>(spell.from_ns) * 1e-9);
    o->set_hang(spell.hang);
    struct Met {
      std::set<uint64_t> failed_ios, failed_over;
      uint64_t retried = 0;
      uint64_t first_good = UINT64_MAX;
    };
    std::map<uint32_t, Met> met;
    for (size_t i = 0; i < requests.size(); ++i) {
      const Request& r = requests[i];
      if (r.server != spell.server || p.end[i] < spell.from_ns) continue;
      const bool under_way = r.arrival_ns <= spell.from_ns;
      const bool failed = p.failed[i] && p.storage_in[i] < spell.until_ns;
      if (!under_way && !failed) continue;
      Met& m = met[r.flow];
      if (!failed) continue;
      if (io_failed[r.io]) {
        m.failed_ios.insert(r.io);
      } else {
        // The IO got past it: a read asked another member (counted), a
        // write had its acknowledgement from the others.
        if (r.read) ++m.retried;
        m.failed_over.insert(r.io);
      }
    }
    for (const Request& r : requests) {
      auto it = met.find(r.flow);
      if (it == met.end() || io_failed[r.io] || io_end[r.io] < spell.from_ns ||
          (r.arrival_ns < spell.from_ns &&
           !it->second.failed_over.contains(r.io))) {
        continue;
      }
      it->second.first_good = std::min(it->second.first_good, io_end[r.io]);
    }
    for (const auto& [flow, m] : met) {
      proto::SimFailover* f = o->add_flows();
      f->set_flow(FlowName(s, static_cast<int>(flow)));
      f->set_first_good_us(
          m.first_good == UINT64_MAX
              ? -1
              : static_cast<double>(m.first_good - spell.from_ns) / 1e3);
      f->set_errors(m.failed_ios.size());
      f->set_retried(m.retried);
    }
  }
}

void Report(const Layout& layout, const std::vector<Request>& requests,
            const Pass& p, const SimOptions& options, proto::SimReport* out) {
  const proto::SimScenario& s = layout.scenario;
  struct FlowSums {
    std::vector<double> reads, writes;
    double network_ns = 0, total_ns = 0;
    uint64_t errors = 0;
    // With curves: per interval, the latencies of the IOs that ended in it.
    std::vector<std::vector<double>> intervals;
  };
  // The scenario's flows, and the reclaims' copies after them.
  std::vector<FlowSums> flows(s.flows_size() + 1);
  std::vector<size_t> first_device;
  size_t devices = 0;
  for (const Layout::Server& server : layout.servers) {
    first_device.push_back(devices);
    devices += server.devices;
  }
  std::vector<std::vector<double>> on_device(devices);
  // An IO of several requests (pieces, scattered copies) ends with its
  // last: its latency is counted once, from its first request. One through
  // a replica set ends with the `need`-th of its requests that did not
  // fail (and fails if fewer did).
  uint64_t ios = 0;
  for (const Request& r : requests) ios = std::max(ios, r.io + 1);
  std::vector<uint64_t> io_end(ios, 0);
  std::vector<size_t> io_first(ios, SIZE_MAX);
  std::vector<uint8_t> io_failed(ios, 0);
  absl::flat_hash_map<uint64_t, std::pair<uint8_t, std::vector<uint64_t>>>
      acked;  // IO -> need, its requests' ends
  for (size_t i = 0; i < requests.size(); ++i) {
    const Request& r = requests[i];
    if (io_first[r.io] == SIZE_MAX) io_first[r.io] = i;
    if (r.need > 0) {
      auto& [need, ends] = acked[r.io];
      need = r.need;
      if (!p.failed[i]) ends.push_back(p.end[i]);
      continue;
    }
    io_end[r.io] = std::max(io_end[r.io], p.end[i]);
    io_failed[r.io] |= p.failed[i];
  }
  for (auto& [io, need_ends] : acked) {
    auto& [need, ends] = need_ends;
    std::sort(ends.begin(), ends.end());
    io_failed[io] = ends.size() < need;
    io_end[io] = ends.size() < need ? 0 : ends[need - 1];
  }
  const double interval_s = std::max(0.01, s.duration_s() / 100);
  if (options.curves) out->set_interval_s(interval_s);
  for (uint64_t io = 0; io < ios; ++io) {
    if (io_first[io] == SIZE_MAX) continue;
    const Request& r = requests[io_first[io]];
    FlowSums& f = flows[r.flow];
    if (io_failed[io]) {
      ++f.errors;
      continue;
    }
    const double us = static_cast<double>(io_end[io] - r.arrival_ns) / 1e3;
    (r.read ? f.reads : f.writes).push_back(us);
    if (options.curves) {
      const size_t at = static_cast<size_t>(static_cast<double>(io_end[io]) *
                                            1e-9 / interval_s);
      if (f.intervals.size() <= at) f.intervals.resize(at + 1);
      f.intervals[at].push_back(us);
    }
  }
  for (size_t i = 0; i < requests.size(); ++i) {
    const Request& r = requests[i];
    if (p.failed[i]) continue;
    FlowSums& f = flows[r.flow];
    f.network_ns += static_cast<double>(p.network_out[i] - p.network_in[i]);
    f.total_ns += static_cast<double>(p.end[i] - r.arrival_ns);
    on_device[first_device[r.server] + r.device].push_back(
        static_cast<double>(p.storage_out[i] - p.storage_in[i]) / 1e3);
  }
  for (int f = 0; f <= s.flows_size(); ++f) {
    const FlowSums& sums = flows[f];
    if (f == s.flows_size() && sums.reads.empty() && sums.writes.empty()) {
      break;  // no reclaim copied anything
    }
    proto::SimFlowReport* fr = out->add_flows();
    fr->set_name(FlowName(s, f));
    fr->set_reads(sums.reads.size());
    fr->set_writes(sums.writes.size());
    fr->set_errors(sums.errors);
    fr->set_iops(static_cast<double>(sums.reads.size() + sums.writes.size()) /
                 s.duration_s());
    fr->set_read_p50_us(Quantile(sums.reads, 0.50));
    fr->set_read_p99_us(Quantile(sums.reads, 0.99));
    fr->set_write_p50_us(Quantile(sums.writes, 0.50));
    fr->set_write_p99_us(Quantile(sums.writes, 0.99));
    fr->set_network_share(sums.total_ns > 0 ? sums.network_ns / sums.total_ns
                                            : 0);
    if (!options.curves) continue;
    AddCdf(sums.reads, fr->mutable_read_cdf());
    AddCdf(sums.writes, fr->mutable_write_cdf());
    for (size_t at = 0; at < sums.intervals.size(); ++at) {
      proto::SimInterval* in = fr->add_intervals();
      in->set_from_s(static_cast<double>(at) * interval_s);
      in->set_iops(static_cast<double>(sums.intervals[at].size()) / interval_s);
      in->set_p50_us(Quantile(sums.intervals[at], 0.50));
      in->set_p99_us(Quantile(sums.intervals[at], 0.99));
    }
  }
  AddOutages(layout, requests, p, io_end, io_failed, out);
  for (size_t sv = 0; sv < layout.servers.size(); ++sv) {
    for (uint32_t d = 0; d < layout.servers[sv].devices; ++d) {
      const std::vector<double>& v = on_device[first_device[sv] + d];
      proto::SimDeviceReport* dr = out->add_devices();
      dr->set_name(StrCat(layout.servers[sv].name, "/d", d));
      dr->set_requests(v.size());
      dr->set_p50_us(Quantile(v, 0.50));
      dr->set_p99_us(Quantile(v, 0.99));
      if (first_device[sv] + d < p.counts.devices.size()) {
        const FlashState& st = p.counts.devices[first_device[sv] + d];
        dr->set_gc_passes(st.gc_passes);
        dr->set_reads_behind_gc(st.reads_behind_gc);
        dr->set_writes_waited(st.writes_waited);
      }
    }
  }
  for (size_t i = 0; i < layout.replica_sets.size(); ++i) {
    proto::SimReplicaSetReport* rs = out->add_replica_sets();
    rs->set_name(layout.replica_sets[i].name);
    if (i < p.gc_redirects.size()) rs->set_gc_redirects(p.gc_redirects[i]);
    if (i < p.counts.sets.size()) {
      const StorageSim::Counts::Grants& g = p.counts.sets[i];
      rs->set_gc_granted_soft(g.soft);
      rs->set_gc_soft_delayed(g.soft_delayed);
      rs->set_gc_granted_regular(g.regular);
      rs->set_gc_granted_bg(g.bg);
    }
  }
}

// The apps' changes of the last pass, with the texts of the rules they
// removed, and their own notes.
void AddDecisions(const Layout& layout, const AppReplay& replay,
                  proto::SimReport* out) {
  std::map<uint64_t, std::string> texts;
  for (const SimRule& r : layout.rules) texts[r.cid] = r.text;
  for (const RuleChange& c : replay.timeline) {
    if (!c.reclaiming.empty() && out->decisions_size() > 0) {
      // A copy begins with the update that began its reclaim.
      proto::SimDecision* before =
          out->mutable_decisions(out->decisions_size() - 1);
      if (before->host() == layout.hosts[c.host] &&
          before->at_s() == static_cast<double>(c.at_ns) * 1e-9) {
        before->set_reclaiming(c.reclaiming);
        continue;
      }
    }
    proto::SimDecision* d = out->add_decisions();
    d->set_reclaiming(c.reclaiming);
    d->set_at_s(static_cast<double>(c.at_ns) * 1e-9);
    d->set_app(c.app);
    d->set_host(layout.hosts[c.host]);
    for (const SimRule& r : c.insert) {
      d->add_insert(r.text);
      texts[r.cid] = r.text;
    }
    for (uint64_t cid : c.remove) d->add_remove(texts[cid]);
    d->set_reclaimed(c.reclaimed);
  }
  for (const std::string& note : replay.notes) out->add_app_notes(note);
}

// When request `r` of pass `p` leaves its host: when started, plus the
// host's cost.
uint64_t Leaves(const Layout& layout, const std::vector<Request>& requests,
                const Pass& p, size_t r) {
  return (p.start.empty() ? requests[r].arrival_ns : p.start[r]) +
         layout.host_io_cost_ns[requests[r].host];
}

// A pass's network times, for the next pass of a workload whose IOs follow
// others' ends: that pass draws its own IOs, and finds each one's (by its
// key) to say when a read's issuer has its data and when a write reaches
// storage; an IO the pass did not have takes its flow's mean.
class NetworkTimes {
 public:
  // The first pass: every transfer as long as on idle links.
  explicit NetworkTimes(NetworkSim* idle) : idle_(idle) {}
  NetworkTimes(NetworkSim* idle, const std::vector<Io>& ios,
               const std::vector<Request>& requests, const Pass& p)
      : idle_(idle) {
    ns_.resize(requests.size());
    std::vector<std::array<double, 2>> sum, count;
    for (size_t r = 0; r < requests.size(); ++r) {
      const Request& q = requests[r];
      ns_[r] = p.failed[r] ? 0 : p.network_out[r] - p.network_in[r];
      if (q.flow >= sum.size()) {
        sum.resize(q.flow + 1, {0, 0});
        count.resize(q.flow + 1, {0, 0});
      }
      if (!p.failed[r]) {
        sum[q.flow][q.read] += static_cast<double>(ns_[r]);
        count[q.flow][q.read] += 1;
      }
      if (r == 0 || requests[r - 1].io != q.io) {
        first_.push_back({ios[q.io].key, r});
      }
    }
    mean_.resize(sum.size());
    for (size_t f = 0; f < sum.size(); ++f) {
      for (int read = 0; read < 2; ++read) {
        mean_[f][read] =
            count[f][read] > 0
                ? static_cast<uint64_t>(sum[f][read] / count[f][read])
                : 0;
      }
    }
    ends_.resize(first_.size());
    for (size_t k = 0; k < first_.size(); ++k) {
      ends_[k] = k + 1 < first_.size() ? first_[k + 1].second : ns_.size();
    }
    std::vector<size_t> order(first_.size());
    for (size_t k = 0; k < order.size(); ++k) order[k] = k;
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return first_[a].first < first_[b].first;
    });
    std::vector<std::pair<uint64_t, size_t>> sorted;
    std::vector<size_t> sorted_ends;
    for (size_t k : order) {
      sorted.push_back(first_[k]);
      sorted_ends.push_back(ends_[k]);
    }
    first_ = std::move(sorted);
    ends_ = std::move(sorted_ends);
  }

  // The network time of request `q`, the `piece`-th of the IO `key`.
  uint64_t Of(uint64_t key, size_t piece, const Request& q) const {
    auto it = std::lower_bound(first_.begin(), first_.end(), key,
                               [](const std::pair<uint64_t, size_t>& e,
                                  uint64_t k) { return e.first < k; });
    if (it != first_.end() && it->first == key) {
      const size_t r = it->second + piece;
      if (r < ends_[static_cast<size_t>(it - first_.begin())]) return ns_[r];
    }
    if (q.flow < mean_.size() && mean_[q.flow][q.read] > 0) {
      return mean_[q.flow][q.read];
    }
    return idle_->IdleNs(q.host, q.server, q.bytes, q.read);
  }

 private:
  NetworkSim* idle_;
  std::vector<uint64_t> ns_;                        // per request of the pass
  std::vector<std::pair<uint64_t, size_t>> first_;  // key, first request
  std::vector<size_t> ends_;                   // past each IO's last request
  std::vector<std::array<uint64_t, 2>> mean_;  // per flow, [write, read]
};

// One pass's storage side when IOs follow others' ends (closed loop,
// read-modify-write, a reclaim's copy) or hosts bound their IOs under
// way: IOs issued in order of time, started when their host has a free
// worker (at once without a bound), routed when started, served by the
// devices when their requests reach them. An IO ends for its host (its
// worker is free, the IO that follows it is issued) when its last request
// is done at storage plus, for a read, its network time in the pass
// before; the network runs after storage, over the whole pass, as in
// every pass. A reclaim the timeline starts copies what is away then, a
// chunk at a time (read where it is, then write it through the host's
// rules, which bring it home), no faster than its rate; its IOs are the
// flow after the scenario's, and take no worker.
absl::Status RunFollowing(const Layout& layout, const Workload& workload,
                          const StorageSim& storage,
                          const std::vector<RuleChange>& timeline,
                          const NetworkTimes& network,
                          std::vector<AwayEvent>* away, std::vector<Io>* ios,
                          std::vector<Request>* requests, Pass* p) {
  ios->clear();
  requests->clear();
  p->copies.clear();
  Routing routing(layout, timeline, away);
  StorageSim::Pass devices(storage);
  // What replica sets choose by: the servers up, the devices collecting,
  // and the reads under way (sent, not ended) per server.
  class PassState : public ServerState {
   public:
    PassState(const StorageSim& storage, StorageSim::Pass& devices,
              size_t servers)
        : storage_(storage),
          devices_(devices),
          under_way_(servers, 0),
          learned_(servers, {UINT64_MAX, UINT64_MAX}) {}
    // A crashed server is known down at once (its connections close); one
    // that hangs once an IO on it has timed out.
    bool Up(uint32_t server, uint64_t at_ns) const override {
      const Layout::DownSpell* d = storage_.DownSpellAt(server, at_ns);
      if (d == nullptr) return true;
      if (!d->hang) return false;
      const auto [from, learned] = learned_[server];
      return !(from == d->from_ns && learned <= at_ns);
    }
    // An IO on `server` timed out at `at_ns` in its hang from `from_ns`.
    void TimedOut(uint32_t server, uint64_t from_ns, uint64_t at_ns) {
      auto& [from, learned] = learned_[server];
      if (from != from_ns) {
        from = from_ns;
        learned = at_ns;
      }
      learned = std::min(learned, at_ns);
    }
    bool Collecting(uint32_t server, uint32_t device,
                    uint64_t at_ns) const override {
      return devices_.Collecting(server, device, at_ns);
    }
    uint32_t ReadsUnderWay(uint32_t server, uint64_t at_ns) const override {
      for (; !ends_.empty() && ends_.top().first <= at_ns; ends_.pop()) {
        --under_way_[ends_.top().second];
      }
      return under_way_[server];
    }
    void Sent(uint32_t server) { ++under_way_[server]; }
    void Ends(uint32_t server, uint64_t at_ns) { ends_.push({at_ns, server}); }

   private:
    const StorageSim& storage_;
    StorageSim::Pass& devices_;  // its GC spells begin as time comes
    mutable std::vector<uint32_t> under_way_;
    // Per server: the hang it is in as its hosts know it (its start), and
    // when they learned of it.
    std::vector<std::pair<uint64_t, uint64_t>> learned_;
    mutable std::priority_queue<std::pair<uint64_t, uint32_t>,
                                std::vector<std::pair<uint64_t, uint32_t>>,
                                std::greater<>>
        ends_;
  };
  PassState state(storage, devices, layout.servers.size());
  routing.set_state(&state);
  const uint32_t copy_flow =
      static_cast<uint32_t>(layout.scenario.flows_size());
  const uint64_t run_ns =
      static_cast<uint64_t>(layout.scenario.duration_s() * 1e9);
  // At the same instant a worker frees, then a reclaim moves on, then an
  // IO is issued.
  enum Kind : uint8_t { kFree, kCopyStart, kCopyIo, kIssue };
  struct Event {
    uint64_t at;
    Kind kind;
    uint64_t order;
    // kIssue, kCopyIo: the IO; kFree: io.host's worker; kCopyStart: the
    // reclaim's start is timeline[io.copy].
    Io io;
    bool operator>(const Event& o) const {
      return std::tie(at, kind, order) > std::tie(o.at, o.kind, o.order);
    }
  };
  using Arrival = std::pair<uint64_t, size_t>;  // at storage, request
  std::priority_queue<Event, std::vector<Event>, std::greater<>> events;
  std::priority_queue<Arrival, std::vector<Arrival>, std::greater<>> arrivals;
  uint64_t order = 0;
  for (const Io& io : workload.fixed()) {
    events.push({io.arrival_ns, kIssue, order++, io});
  }
  struct Copy {
    std::vector<Routing::CopyChunk> chunks;
    uint64_t begun_ns = 0, issued_bytes = 0;
  };
  std::map<size_t, Copy> copies;
  for (size_t c = 0; c < timeline.size(); ++c) {
    if (timeline[c].reclaiming.empty()) continue;
    Io io{};
    io.host = timeline[c].host;
    io.copy = static_cast<uint32_t>(c);
    events.push({timeline[c].at_ns, kCopyStart, order++, io});
  }
  // The IO of a reclaim's chunk (its read, or its write).
  auto copy_io = [&](size_t c, uint32_t chunk, bool read, uint64_t at) {
    Io io{};
    io.arrival_ns = at;
    io.host = timeline[c].host;
    io.flow = copy_flow;
    io.copy = static_cast<uint32_t>(c);
    io.seq = chunk;
    io.read = read;
    io.bytes =
        copies[c].chunks[chunk].pages * static_cast<uint32_t>(kSimPageBytes);
    io.key = (uint64_t{3} << 62) | (uint64_t{io.copy} << 33) |
             (uint64_t{chunk} << 1) | (read ? 0 : 1);
    events.push({at, kCopyIo, order++, io});
  };
  std::vector<uint32_t> busy(layout.hosts.size(), 0);  // workers per host
  std::vector<std::deque<Io>> waiting(layout.hosts.size());
  // Per IO: its requests not done, those done and failed, how many it
  // needs done (0: all), whether it is over for its host, and when its
  // host sees it end.
  struct IoState {
    uint32_t pending = 0, ok = 0, failed = 0, need = 0;
    bool over = false;
    uint64_t seen = 0;
  };
  std::vector<IoState> state_of;
  // Request r's times, once it is in `requests`: it leaves its host at
  // `leave` (after the host's cost) and reaches storage after its network
  // time if a write.
  auto send = [&](size_t r, uint64_t now, size_t piece) {
    const Request& q = (*requests)[r];
    p->start.resize(requests->size(), now);
    p->start[r] = now;
    p->storage_in.resize(requests->size());
    p->storage_out.resize(requests->size());
    p->failed.resize(requests->size());
    p->storage_in[r] = Leaves(layout, *requests, *p, r) +
                       (q.read ? 0 : network.Of((*ios)[q.io].key, piece, q));
    if (q.read) state.Sent(q.server);
    arrivals.push({p->storage_in[r], r});
  };
  auto start = [&](const Io& io, uint64_t now) -> absl::Status {
    const size_t x = ios->size();
    ios->push_back(io);
    const size_t from = requests->size();
    if (io.copy == Io::kNone) {
      ++busy[io.host];
      if (absl::Status st = routing.Route(io, x, now, requests); !st.ok()) {
        return st;
      }
    } else if (absl::Status st = routing.RouteCopy(
                   io, copies[io.copy].chunks[io.seq], x, now, requests);
               !st.ok()) {
      return st;
    }
    IoState st;
    st.pending = static_cast<uint32_t>(requests->size() - from);
    st.need = (*requests)[from].need == 0 ? st.pending : (*requests)[from].need;
    state_of.push_back(st);
    for (size_t r = from; r < requests->size(); ++r) send(r, now, r - from);
    return absl::OkStatus();
  };
  // A reclaim's chunk moved: the next one, no sooner than its rate allows.
  auto copied = [&](const Io& io, uint64_t end) {
    const RuleChange& change = timeline[io.copy];
    Copy& c = copies[io.copy];
    CopyProgress& progress = p->copies[io.copy];
    progress.writes.push_back({end, io.bytes});
    const uint32_t next = io.seq + 1;
    if (next == c.chunks.size()) {
      progress.complete = true;
      return;
    }
    uint64_t at = end;
    if (change.rate_bytes_per_s > 0) {
      at = std::max(at, c.begun_ns + static_cast<uint64_t>(
                                         static_cast<double>(c.issued_bytes) /
                                         change.rate_bytes_per_s * 1e9));
    }
    if (at >= run_ns) return;
    c.issued_bytes += c.chunks[next].pages * kSimPageBytes;
    copy_io(io.copy, next, /*read=*/true, at);
  };
  while (!events.empty() || !arrivals.empty()) {
    if (!events.empty() &&
        (arrivals.empty() || events.top().at <= arrivals.top().first)) {
      const Event e = events.top();
      events.pop();
      const uint32_t host = e.io.host;
      const uint32_t bound = layout.host_max_in_flight[host];
      switch (e.kind) {
        case kFree:
          --busy[host];
          if (!waiting[host].empty()) {
            const Io io = waiting[host].front();
            waiting[host].pop_front();
            if (absl::Status st = start(io, e.at); !st.ok()) return st;
          }
          continue;
        case kCopyStart: {
          if (absl::Status st = routing.AdvanceTo(e.at); !st.ok()) return st;
          const RuleChange& change = timeline[e.io.copy];
          Copy& c = copies[e.io.copy];
          c.chunks =
              routing.AwayChunks(host, change.reclaiming, change.chunk_bytes);
          c.begun_ns = e.at;
          CopyProgress& progress = p->copies[e.io.copy];
          for (const Routing::CopyChunk& chunk : c.chunks) {
            progress.total_bytes += chunk.pages * kSimPageBytes;
          }
          if (c.chunks.empty()) {
            progress.complete = true;
            continue;
          }
          c.issued_bytes = c.chunks[0].pages * kSimPageBytes;
          copy_io(e.io.copy, 0, /*read=*/true, e.at);
          continue;
        }
        case kCopyIo:
          if (absl::Status st = start(e.io, e.at); !st.ok()) return st;
          continue;
        case kIssue:
          if (bound > 0 && busy[host] >= bound) {
            waiting[host].push_back(e.io);
            continue;
          }
          if (absl::Status st = start(e.io, e.at); !st.ok()) return st;
          continue;
      }
    }
    const auto [at, r] = arrivals.top();
    arrivals.pop();
    const Request q = (*requests)[r];
    const StorageSim::Served served = devices.Serve(q, at);
    p->storage_out[r] = served.done_ns;
    p->failed[r] = served.failed;
    uint64_t end = served.done_ns;
    if (q.read && !served.failed) {
      // Its place among its IO's requests: they are consecutive.
      size_t first = r;
      while (first > 0 && (*requests)[first - 1].io == q.io) --first;
      end += network.Of((*ios)[q.io].key, r - first, q);
    }
    if (q.read) state.Ends(q.server, end);
    const size_t x = q.io;
    IoState& st = state_of[x];
    --st.pending;
    if (served.hung) state.TimedOut(q.server, served.hang_from_ns, end);
    if (served.failed) {
      // A replica set's read fails over to another member up, at once.
      if (q.set != Request::kNoSet && q.read &&
          routing.RetryRead(r, served.done_ns, requests)) {
        ++st.pending;
        send(requests->size() - 1, served.done_ns, 0);
        continue;
      }
      ++st.failed;
      st.seen = std::max(st.seen, served.done_ns);
    } else {
      ++st.ok;
      st.seen = std::max(st.seen, end);
    }
    if (st.over) continue;
    if (st.ok < st.need && st.ok + st.pending >= st.need) continue;
    st.over = true;
    const Io io = (*ios)[x];
    const uint64_t seen = state_of[x].seen;
    if (io.copy != Io::kNone) {
      if (io.read) {
        copy_io(io.copy, io.seq, /*read=*/false, seen);
      } else {
        copied(io, seen);
      }
      continue;
    }
    if (layout.host_max_in_flight[io.host] > 0) {
      events.push({seen, kFree, order++, io});
    } else {
      --busy[io.host];
    }
    if (std::optional<Io> next = workload.Next(io, seen)) {
      events.push({next->arrival_ns, kIssue, order++, *next});
    }
  }
  p->counts = devices.counts();
  p->gc_redirects = routing.gc_redirects();
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<proto::SimReport> SimulateHere(const Layout& layout,
                                              const SimOptions& options) {
  const auto began = std::chrono::steady_clock::now();
  const proto::SimScenario& s = layout.scenario;
  const proto::SimIteration& it = s.iteration();
  const double sigma = it.sigma() == 0 ? 0.10 : it.sigma();
  const double tau = it.tau() == 0 ? 0.02 : it.tau();
  const uint32_t n = it.n() == 0 ? 3 : it.n();
  const uint32_t max_iterations =
      it.max_iterations() == 0 ? 20 : it.max_iterations();

  const bool apps = s.apps_size() > 0;
  Workload workload(layout);
  // With IOs that follow others' ends, each pass draws and routes its own
  // (RunFollowing); otherwise they are drawn and routed once, and again
  // only when the apps' changes differ.
  const bool following = workload.dynamic() || !layout.replica_sets.empty() ||
                         std::any_of(layout.host_max_in_flight.begin(),
                                     layout.host_max_in_flight.end(),
                                     [](uint32_t bound) { return bound > 0; });
  std::vector<Io> ios;
  // The apps' changes the requests are routed by (those of the pass before).
  std::vector<RuleChange> timeline;
  std::vector<AwayEvent> away;
  // The pass's requests; whether they are the fixed IOs routed by the
  // timeline (a pass that does not follow ends needs them routed again
  // only when the timeline changed).
  std::vector<Request> requests;
  bool routed = false;
  const StorageSim storage(layout);
  auto network = NetworkSim::Create(layout);
  if (!network.ok()) return network.status();

  proto::SimReport report;
  report.set_scenario(s.name());
  report.set_seed(s.seed());
  report.set_device_model_bytes(storage.model_bytes());
  Pass last;
  // Where the last pass's requests of each IO begin (they are in IO order):
  // requests of a re-routed IO take the times of the same piece before.
  std::vector<size_t> last_first;
  bool last_followed = false;
  // For a pass that follows ends: the network times of the last pass.
  NetworkTimes last_network(network->get());
  AppReplay replay;
  uint32_t steady = 0;  // passes in a row whose criterion moved <= tau
  double last_criterion = -1;
  for (uint32_t i = 0; i < max_iterations; ++i) {
    // A reclaim's copy follows the ends of its chunks.
    const bool follows =
        following ||
        std::any_of(timeline.begin(), timeline.end(),
                    [](const RuleChange& c) { return !c.reclaiming.empty(); });
    Pass p;
    std::vector<size_t> first;
    if (follows) {
      away.clear();
      absl::Status st =
          RunFollowing(layout, workload, storage, timeline, last_network,
                       apps ? &away : nullptr, &ios, &requests, &p);
      if (!st.ok()) return st;
      routed = false;
    } else {
      if (!routed) {
        away.clear();
        absl::StatusOr<std::vector<Request>> r = RouteIos(
            layout, workload.fixed(), timeline, apps ? &away : nullptr);
        if (!r.ok()) return r.status();
        requests = *std::move(r);
        routed = true;
        if (apps) {
          ios = workload.fixed();
        } else {
          // Only the apps' changes route the IOs again, and nothing follows
          // an IO's end: let them go (the largest runs hold millions).
          workload.ReleaseFixed();
        }
      }
      // Where each IO's requests begin, when the apps may re-route them
      // (without apps the requests stay as they are, and so do their
      // places).
      if (apps) {
        first.assign(ios.size() + 1, requests.size());
        for (size_t r = requests.size(); r-- > 0;) first[requests[r].io] = r;
        for (size_t io = ios.size(); io-- > 0;) {
          first[io] = std::min(first[io], first[io + 1]);
        }
      }
      p.storage_in.resize(requests.size());
      for (size_t r = 0; r < requests.size(); ++r) {
        // Eq. 2: a write reaches storage when the last pass's network was
        // done (with it, when it was not routed there then), not before it
        // left its host in this pass.
        const Request& q = requests[r];
        p.storage_in[r] = Leaves(layout, requests, p, r);
        if (q.read) continue;
        size_t before = r;
        bool found = i > 0 && !last_followed;
        if (found && apps) {
          before = last_first[q.io] + (r - first[q.io]);
          found = before < last_first[q.io + 1];
        }
        if (found) {
          p.storage_in[r] = std::max(p.storage_in[r], last.network_out[before]);
        } else if (i > 0 && apps) {
          // The last pass drew its own IOs (a reclaim's copy): the same
          // IO's network time there, by its key, as a pass that follows
          // ends takes it (the times before the apps' first new change
          // must not move).
          p.storage_in[r] += last_network.Of(ios[q.io].key, r - first[q.io], q);
        } else {
          // The first pass (or a piece the last pass did not have): its
          // transfer as long as on idle links.
          p.storage_in[r] +=
              (*network)->IdleNs(q.host, q.server, q.bytes, /*read=*/false);
        }
      }
      p.storage_out = storage.Run(requests, p.storage_in, &p.failed, &p.counts);
    }
    p.network_in.resize(requests.size());
    for (size_t r = 0; r < requests.size(); ++r) {
      // Eq. 1: a read's data leaves when storage is done.
      p.network_in[r] =
          requests[r].read ? p.storage_out[r] : Leaves(layout, requests, p, r);
    }
    p.network_out = (*network)->Run(requests, p.network_in, &p.failed);
    Finish(requests, p);
    proto::SimIterationReport* ir = report.add_iterations();
    ir->set_iteration(i);
    ir->set_mean_mbps(Mean(p.mbps));
    ir->set_median_mbps(Quantile(p.mbps, 0.50));
    ir->set_p90_mbps(Quantile(p.mbps, 0.90));
    if (i > 0) {
      const proto::SimIterationReport& before =
          report.iterations(static_cast<int>(i) - 1);
      ir->set_rd_mean(RelativeDistance(ir->mean_mbps(), before.mean_mbps()));
      ir->set_rd_median(
          RelativeDistance(ir->median_mbps(), before.median_mbps()));
      ir->set_rd_p90(RelativeDistance(ir->p90_mbps(), before.p90_mbps()));
      ir->set_criterion((ir->rd_mean() + ir->rd_median() + ir->rd_p90()) / 3);
    }
    bool settled = true;
    if (apps) {
      absl::StatusOr<AppReplay> r = ReplayApps(layout, requests, p.start, p.end,
                                               timeline, away, p.copies);
      if (!r.ok()) return r.status();
      replay = *std::move(r);
      ir->set_decisions(static_cast<uint32_t>(replay.timeline.size()));
      ir->set_decisions_settled(replay.settled);
      settled = replay.settled;
    }
    if (follows || apps) {
      last_network = NetworkTimes(network->get(), ios, requests, p);
    }
    last = std::move(p);
    last_first = std::move(first);
    last_followed = follows;
    if (!settled) {
      // Routed again by the apps' new changes; the iteration goes on.
      timeline = replay.timeline;
      routed = false;
      steady = 0;
      last_criterion = -1;
      continue;
    }
    if (i == 0) continue;
    const double criterion = ir->criterion();
    if (criterion < sigma) {
      report.set_converged(true);
      report.set_stopped(StrCat("criterion ", criterion, " under sigma ", sigma,
                                " at iteration ", i));
      break;
    }
    steady = last_criterion >= 0 && std::abs(criterion - last_criterion) <= tau
                 ? steady + 1
                 : 0;
    last_criterion = criterion;
    if (steady >= n) {
      report.set_converged(true);
      report.set_stopped(StrCat("criterion moved by at most ", tau, " for ", n,
                                " iterations (", criterion, ")"));
      break;
    }
  }
  if (!report.converged()) {
    report.set_stopped(
        StrCat("not converged after ", max_iterations, " iterations"));
  }
  if (!report.converged() && apps && !replay.settled) {
    report.set_stopped(StrCat("the apps' changes did not settle in ",
                              max_iterations, " iterations"));
  }
  report.set_requests(requests.size());
  Report(layout, requests, last, options, &report);
  AddDecisions(layout, replay, &report);
  report.set_wall_s(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - began)
          .count());
  report.set_peak_rss_bytes(PeakRss());
  return report;
}

absl::StatusOr<proto::SimReport> Simulate(const Layout& layout,
                                          const SimOptions& options) {
  int fds[2];
  if (pipe(fds) != 0) return ErrnoStatus(errno, "pipe");
  const pid_t child = fork();
  if (child < 0) return ErrnoStatus(errno, "fork");
  if (child == 0) {
    close(fds[0]);
    absl::StatusOr<proto::SimReport> report = SimulateHere(layout, options);
    std::string out;
    if (report.ok()) {
      out = "K" + report->SerializeAsString();
    } else {
      out = "E" + std::string(report.status().message());
    }
    const char* p = out.data();
    size_t left = out.size();
    while (left > 0) {
      const ssize_t n = write(fds[1], p, left);
      if (n <= 0) _exit(1);
      p += n;
      left -= static_cast<size_t>(n);
    }
    _exit(0);
  }
  close(fds[1]);
  std::string in;
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = read(fds[0], buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    in.append(buf, static_cast<size_t>(n));
  }
  close(fds[0]);
  int status = 0;
  while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  if (in.empty()) {
    return absl::InternalError(
        StrCat("the simulation's process ended without a report (",
               WIFSIGNALED(status) ? StrCat("signal ", WTERMSIG(status))
                                   : StrCat("exit ", WEXITSTATUS(status)),
               ")"));
  }
  if (in[0] == 'E') return absl::InvalidArgumentError(in.substr(1));
  proto::SimReport report;
  if (in[0] != 'K' || !report.ParseFromString(in.substr(1))) {
    return absl::InternalError("the simulation's report did not parse");
  }
  return report;
}

}  // namespace sroute::sim
