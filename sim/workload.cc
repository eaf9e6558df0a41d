// SPDX-License-Identifier: Apache-2.0
#include "sim/workload.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <string>
#include <tuple>

#include "absl/container/flat_hash_map.h"
#include "endpoints/flash_model.h"
#include "sim/storage.h"
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
      reclaiming != o.reclaiming || rate_bytes_per_s != o.rate_bytes_per_s ||
      chunk_bytes != o.chunk_bytes || insert.size() != o.insert.size()) {
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

Workload::Workload(const Layout& layout) : layout_(layout) {
  const proto::SimScenario& s = layout.scenario;
  uint32_t slots = 0;
  for (uint32_t f = 0; f < static_cast<uint32_t>(s.flows_size()); ++f) {
    const proto::SimFlow& flow = s.flows(static_cast<int>(f));
    const uint64_t bytes =
        flow.io_bytes() == 0 ? kSimPageBytes : flow.io_bytes();
    const double theta =
        flow.zipf() == 0 && !flow.ycsb().empty() ? 0.99 : flow.zipf();
    addresses_.emplace_back(std::max<uint64_t>(1, flow.file_bytes() / bytes),
                            flow.trace().empty() ? theta : 0);
    slots_of_flow_.push_back(slots);
    if (flow.closed_loop_depth() > 0) {
      slots += flow.closed_loop_depth() *
               static_cast<uint32_t>(layout.flow_hosts[f].size());
      dynamic_ = true;
    }
    if (flow.ycsb() == "F") dynamic_ = true;
  }
  for (uint32_t f = 0; f < static_cast<uint32_t>(s.flows_size()); ++f) {
    const proto::SimFlow& flow = s.flows(static_cast<int>(f));
    const std::vector<uint32_t>& hosts = layout.flow_hosts[f];
    if (flow.closed_loop_depth() > 0) {
      // Each slot's first IO, its start scattered over 100 us: the slots of
      // real programs do not begin in the same nanosecond.
      for (uint32_t h = 0; h < hosts.size(); ++h) {
        for (uint32_t k = 0; k < flow.closed_loop_depth(); ++k) {
          const uint32_t slot =
              slots_of_flow_[f] + h * flow.closed_loop_depth() + k;
          fixed_.push_back(
              SlotIo(f, hosts[h], slot, 0, Mix(s.seed() ^ slot) % 100'000));
        }
      }
      continue;
    }
    if (flow.open_loop_iops() <= 0) continue;
    // Thinning: draw at the peak rate, keep by the factor. The factor only
    // changes where a burst begins or ends: its peak is at a beginning.
    double peak = 1;
    for (const proto::SimBurst& b : flow.bursts()) {
      peak = std::max(peak, Factor(flow, b.start_s()));
    }
    for (uint32_t h = 0; h < hosts.size(); ++h) {
      const uint32_t host = hosts[h];
      std::mt19937_64 rng(Mix(s.seed() ^ Mix(f * 1'000'003ull + host)));
      std::exponential_distribution<double> gap(flow.open_loop_iops() * peak);
      std::uniform_real_distribution<double> unit(0, 1);
      uint64_t drawn = 0;
      for (double t = gap(rng); t < s.duration_s(); t += gap(rng)) {
        if (unit(rng) * peak >= Factor(flow, t)) continue;
        Io io;
        io.arrival_ns = static_cast<uint64_t>(std::llround(t * 1e9));
        io.flow = f;
        io.host = host;
        DrawMix(f, drawn++ * hosts.size() + h, rng, io);
        fixed_.push_back(io);
      }
    }
  }
  for (uint32_t i = 0; i < layout.trace.size(); ++i) {
    const Layout::TraceIo& t = layout.trace[i];
    Io io;
    io.arrival_ns = t.at_ns;
    io.offset = t.offset;
    io.flow = t.flow;
    io.host = t.host;
    io.bytes = t.bytes;
    io.read = t.read;
    io.trace = i;
    fixed_.push_back(io);
  }
  std::stable_sort(fixed_.begin(), fixed_.end(), [](const Io& a, const Io& b) {
    return std::tie(a.arrival_ns, a.flow, a.host) <
           std::tie(b.arrival_ns, b.flow, b.host);
  });
  for (size_t i = 0; i < fixed_.size(); ++i) {
    if (fixed_[i].slot == Io::kNone) fixed_[i].key = i;
  }
}

void Workload::DrawMix(uint32_t f, uint64_t unique, std::mt19937_64& rng,
                       Io& io) const {
  const proto::SimFlow& flow = layout_.scenario.flows(static_cast<int>(f));
  const uint32_t bytes = flow.io_bytes() == 0 ? kSimPageBytes : flow.io_bytes();
  const Zipfian& z = addresses_[f];
  const uint64_t records = std::max<uint64_t>(1, flow.file_bytes() / bytes);
  const double u = std::uniform_real_distribution<double>(0, 1)(rng);
  io.bytes = bytes;
  io.rmw = false;
  // YCSB D and E insert 5 % of their IOs after the records: about one in
  // twenty of a flow's IOs so far has.
  const uint64_t newest = records + unique / 20;
  const char mix = flow.ycsb().empty() ? 0 : flow.ycsb()[0];
  switch (mix) {
    case 'A':
    case 'B':
    case 'C':
      io.read = u < (mix == 'A' ? 0.5 : mix == 'B' ? 0.95 : 1.0);
      io.offset = z.Key(rng) * bytes;
      return;
    case 'D':
      io.read = u < 0.95;
      // Reads of the latest records: the hottest is the newest.
      io.offset =
          (io.read ? newest - 1 - std::min(newest - 1, z.Rank(rng)) : newest) *
          bytes;
      return;
    case 'E':
      io.read = u < 0.95;
      if (io.read) {  // a scan of 1 to 100 records from a Zipfian key
        io.offset = z.Key(rng) * bytes;
        io.bytes = bytes * static_cast<uint32_t>(1 + rng() % 100);
      } else {
        io.offset = newest * bytes;
      }
      return;
    case 'F':
      io.read = true;
      io.rmw = u >= 0.5;
      io.offset = z.Key(rng) * bytes;
      return;
    default:
      io.read = u * 100 < flow.read_percent();
      io.offset = z.Key(rng) * bytes;
  }
}

Io Workload::SlotIo(uint32_t flow, uint32_t host, uint32_t slot, uint32_t seq,
                    uint64_t at_ns) const {
  const proto::SimFlow& f = layout_.scenario.flows(static_cast<int>(flow));
  std::mt19937_64 rng(
      Mix(layout_.scenario.seed() ^ Mix((uint64_t{slot} << 32) | seq)));
  Io io;
  io.arrival_ns = at_ns;
  io.flow = flow;
  io.host = host;
  io.slot = slot;
  io.seq = seq;
  io.key = (uint64_t{1} << 62) | (uint64_t{slot} << 32) | seq;
  const uint64_t slots =
      uint64_t{f.closed_loop_depth()} * layout_.flow_hosts[flow].size();
  DrawMix(flow, seq * slots + (slot - slots_of_flow_[flow]), rng, io);
  return io;
}

std::optional<Io> Workload::Next(const Io& io, uint64_t end_ns) const {
  const proto::SimScenario& s = layout_.scenario;
  const uint64_t run_ns = static_cast<uint64_t>(s.duration_s() * 1e9);
  if (io.rmw) {
    Io write = io;
    write.read = false;
    write.rmw = false;
    write.arrival_ns = end_ns;
    write.key = io.key | (uint64_t{1} << 63);
    if (write.arrival_ns >= run_ns) return std::nullopt;
    return write;
  }
  if (io.slot == Io::kNone) return std::nullopt;
  const proto::SimFlow& flow = s.flows(static_cast<int>(io.flow));
  const uint64_t at =
      end_ns + static_cast<uint64_t>(std::llround(flow.think_us() * 1e3));
  if (at >= run_ns || io.seq == UINT32_MAX) return std::nullopt;
  return SlotIo(io.flow, io.host, io.slot, io.seq + 1, at);
}

std::vector<Io> DrawIos(const Layout& layout) {
  return Workload(layout).fixed();
}

// Where a page that a write took away is now: the server and its file.
struct AwayPlace {
  uint32_t server;
  std::string file;
};

// A host's rules as the timeline changed them, and the pages of its files
// that writes took away (file -> page -> where).
struct Routing::HostRoutes {
  std::vector<SimRule> rules;
  std::shared_ptr<const Router> router;
  absl::flat_hash_map<std::string, std::map<uint64_t, AwayPlace>> away;
};

namespace {

absl::Status Apply(const RuleChange& c,
                   const std::vector<std::string>& server_names,
                   const std::vector<std::string>& stage_names,
                   Routing::HostRoutes& h) {
  if (!c.insert.empty() || !c.remove.empty()) {
    std::erase_if(h.rules, [&](const SimRule& r) {
      return std::find(c.remove.begin(), c.remove.end(), r.cid) !=
             c.remove.end();
    });
    h.rules.insert(h.rules.end(), c.insert.begin(), c.insert.end());
    auto router = Router::Create(h.rules, server_names, stage_names);
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

Routing::Routing(const Layout& layout, const std::vector<RuleChange>& timeline,
                 std::vector<AwayEvent>* away)
    : layout_(layout), timeline_(timeline), away_(away) {
  std::map<std::string, uint64_t> pages_of;  // per preset: a model each
  for (const Layout::Server& server : layout.servers) {
    auto [it, made] = pages_of.try_emplace(server.preset, 0);
    if (made) it->second = DevicePages(server.preset);
    // The files' pages land among those that hold data.
    pages_.push_back(
        server.warm_fill > 0
            ? std::max<uint64_t>(
                  1, static_cast<uint64_t>(server.warm_fill *
                                           static_cast<double>(it->second)))
            : it->second);
    server_names_.push_back(server.name);
  }
  for (const Layout::ReplicaSet& set : layout.replica_sets) {
    stage_names_.push_back(set.name);
  }
  gc_redirects_.assign(layout.replica_sets.size(), 0);
  for (size_t i = 0; i < layout.hosts.size(); ++i) {
    hosts_.push_back(std::make_unique<HostRoutes>());
    hosts_.back()->rules = layout.rules;
    hosts_.back()->router = layout.router;
  }
}

Routing::~Routing() = default;

void Routing::PlaceOn(Request& r, uint32_t server, uint64_t file,
                      uint64_t offset) const {
  // A piece of `bytes` at `offset` of `file` (a hash of it when routed, of
  // the flow's number when placed by hash) on `server`: its device and its
  // page there, by the 1 MiB stripe and the offset.
  const uint64_t stripe = Mix(file * 0x100000001b3ull + offset / kStripe);
  r.server = server;
  r.device =
      static_cast<uint32_t>((stripe >> 20) % layout_.servers[server].devices);
  const uint64_t span = std::max<uint64_t>(1, r.bytes / kSimPageBytes);
  const uint64_t slots = std::max<uint64_t>(1, pages_[server] / span);
  r.page = (Mix(stripe ^ offset) % slots) * span;
}

std::string Routing::MemberFile(uint32_t server,
                                const std::string& file) const {
  const size_t path = file.find('/', 2);
  return StrCat("//", layout_.servers[server].name,
                path == std::string::npos ? "/" : file.substr(path));
}

bool Routing::PlaceRead(Request& r, uint32_t set_index, const std::string& file,
                        uint64_t offset, uint64_t at_ns, uint32_t except) {
  const Layout::ReplicaSet& set = layout_.replica_sets[set_index];
  // The members up, each with the request placed on it; with GC
  // redirection, those whose device does not collect if there are any.
  std::vector<Request> up, calm;
  std::vector<bool> collecting;  // per member up
  for (uint32_t m : set.members) {
    if (m == except || (state_ != nullptr && !state_->Up(m, at_ns))) continue;
    Request on = r;
    PlaceOn(on, m, Mix(std::hash<std::string>()(MemberFile(m, file))), offset);
    up.push_back(on);
    collecting.push_back(set.gc_redirect && state_ != nullptr &&
                         state_->Collecting(m, on.device, at_ns));
    if (set.gc_redirect && !collecting.back()) calm.push_back(on);
  }
  if (up.empty()) return false;
  // The set's policy among `from`.
  auto pick = [&](const std::vector<Request>& from) -> size_t {
    switch (set.read) {
      case Layout::ReplicaSet::Read::kPrimary:
        return 0;
      case Layout::ReplicaSet::Read::kRandom:
        return Mix(r.io * 0x9e3779b97f4a7c15ull + offset) % from.size();
      case Layout::ReplicaSet::Read::kLeastLoaded:
        break;
    }
    size_t least_at = 0;
    uint32_t least = UINT32_MAX;
    for (size_t i = 0; i < from.size(); ++i) {
      const uint32_t n =
          state_ == nullptr ? 0 : state_->ReadsUnderWay(from[i].server, at_ns);
      if (n < least) {
        least = n;
        least_at = i;
      }
    }
    return least_at;
  };
  if (calm.empty() || calm.size() == up.size()) {
    r = up[pick(up)];
    return true;
  }
  // Redirected: the policy's choice among every member up collects.
  if (collecting[pick(up)]) ++gc_redirects_[set_index];
  r = calm[pick(calm)];
  return true;
}

bool Routing::RetryRead(size_t failed_index, uint64_t at_ns,
                        std::vector<Request>* out) {
  auto it = set_reads_.find(failed_index);
  if (it == set_reads_.end()) return false;
  const std::pair<std::string, uint64_t> where = it->second;
  Request retry = (*out)[failed_index];
  if (!PlaceRead(retry, retry.set, where.first, where.second, at_ns,
                 (*out)[failed_index].server)) {
    return false;
  }
  set_reads_[out->size()] = where;
  out->push_back(retry);
  return true;
}

absl::Status Routing::AdvanceTo(uint64_t at_ns) {
  for (; next_change_ < timeline_.size() &&
         timeline_[next_change_].at_ns <= at_ns;
       ++next_change_) {
    const RuleChange& c = timeline_[next_change_];
    if (absl::Status st =
            Apply(c, server_names_, stage_names_, *hosts_[c.host]);
        !st.ok()) {
      return absl::InvalidArgumentError(
          StrCat("a change by ", c.app, " at ", c.at_ns * 1e-9, " s on ",
                 layout_.hosts[c.host], ": ", st.message()));
    }
  }
  return absl::OkStatus();
}

std::vector<Routing::CopyChunk> Routing::AwayChunks(
    uint32_t host, const std::string& prefix, uint32_t chunk_bytes) const {
  const uint32_t most = std::max<uint32_t>(1, chunk_bytes / kSimPageBytes);
  std::vector<CopyChunk> out;
  std::vector<std::string> files;
  for (const auto& [file, pages] : hosts_[host]->away) {
    if (file.starts_with(prefix) && !pages.empty()) files.push_back(file);
  }
  std::sort(files.begin(), files.end());
  for (const std::string& file : files) {
    const std::map<uint64_t, AwayPlace>& pages = hosts_[host]->away.at(file);
    const AwayPlace* at = nullptr;
    for (const auto& [page, place] : pages) {
      CopyChunk* last = out.empty() ? nullptr : &out.back();
      if (last != nullptr && at != nullptr && last->file == file &&
          last->page + last->pages == page && last->pages < most &&
          at->server == place.server && at->file == place.file) {
        ++last->pages;
      } else {
        out.push_back({file, page, 1});
      }
      at = &place;
    }
  }
  return out;
}

Request Routing::NewRequest(const Io& io, uint64_t index) {
  Request r;
  r.arrival_ns = io.arrival_ns;
  r.io = index;
  r.rule = 0;
  r.flow = io.flow;
  r.host = io.host;
  r.bytes = io.bytes;
  r.read = io.read;
  return r;
}

absl::Status Routing::RouteCopy(const Io& io, const CopyChunk& chunk,
                                uint64_t index, uint64_t at_ns,
                                std::vector<Request>* out) {
  if (absl::Status st = AdvanceTo(at_ns); !st.ok()) return st;
  Request r = NewRequest(io, index);
  r.bytes = chunk.pages * static_cast<uint32_t>(kSimPageBytes);
  IoHeader h;
  h.source = "sroute-reclaim";
  h.file = chunk.file;
  h.op = io.read ? Op::kRead : Op::kWrite;
  h.offset = chunk.page * kSimPageBytes;
  h.length = r.bytes;
  return RouteHeader(io, h, r, at_ns, out);
}

absl::Status Routing::Route(const Io& io, uint64_t index, uint64_t at_ns,
                            std::vector<Request>* out) {
  const proto::SimScenario& s = layout_.scenario;
  if (absl::Status st = AdvanceTo(at_ns); !st.ok()) return st;
  const proto::SimFlow& flow = s.flows(static_cast<int>(io.flow));
  Request r = NewRequest(io, index);
  const Layout::TraceIo* line =
      io.trace == Io::kNone ? nullptr : &layout_.trace[io.trace];
  const std::string& file = line != nullptr ? line->file : flow.file();
  if (file.empty()) {
    const std::vector<uint32_t>& servers = layout_.flow_servers[io.flow];
    const uint64_t stripe =
        Mix(io.flow * 0x100000001b3ull + io.offset / kStripe);
    PlaceOn(r, servers[stripe % servers.size()], io.flow, io.offset);
    out->push_back(r);
    return absl::OkStatus();
  }
  IoHeader h;
  h.source = line != nullptr ? line->source : flow.name();
  h.file = file;
  h.op = io.read ? Op::kRead : Op::kWrite;
  h.offset = io.offset;
  h.length = io.bytes;
  return RouteHeader(io, h, r, at_ns, out);
}

absl::Status Routing::RouteHeader(const Io& io, const IoHeader& h, Request r,
                                  uint64_t at_ns, std::vector<Request>* out) {
  HostRoutes& routes = *hosts_[io.host];
  places_.clear();
  if (absl::Status st = routes.router->Route(h, &places_); !st.ok()) {
    return absl::InvalidArgumentError(
        StrCat("flows[", io.flow, "]: ", st.message()));
  }
  auto emit = [&](uint32_t server, const std::string& to, uint64_t offset,
                  uint64_t length, uint64_t rule) {
    Request piece = r;
    piece.rule = rule;
    piece.bytes = static_cast<uint32_t>(length);
    PlaceOn(piece, server, Mix(std::hash<std::string>()(to)), offset);
    out->push_back(piece);
  };
  for (const sim::Place& p : places_) {
    if (p.stage != sim::Place::kNoStage) {
      // Through a replica set: a read to one member, a write to each, the
      // IO done at the set's ack.
      const Layout::ReplicaSet& set = layout_.replica_sets[p.stage];
      Request piece = r;
      piece.rule = p.rule;
      piece.bytes = static_cast<uint32_t>(p.length);
      piece.set = static_cast<uint16_t>(p.stage);
      if (io.read) {
        piece.need = 1;
        if (!PlaceRead(piece, p.stage, p.file, p.offset, at_ns, UINT32_MAX)) {
          // No member up: the read fails on the primary.
          PlaceOn(
              piece, set.members[0],
              Mix(std::hash<std::string>()(MemberFile(set.members[0], p.file))),
              p.offset);
        }
        set_reads_[out->size()] = {p.file, p.offset};
        out->push_back(piece);
        continue;
      }
      uint32_t up = 0;
      for (uint32_t m : set.members) {
        up += state_ == nullptr || state_->Up(m, at_ns);
      }
      piece.need = static_cast<uint8_t>(std::min<uint32_t>(
          255, set.ack == 0 ? std::max<uint32_t>(1, up) : set.ack));
      for (uint32_t m : set.members) {
        Request copy = piece;
        PlaceOn(copy, m, Mix(std::hash<std::string>()(MemberFile(m, p.file))),
                p.offset);
        out->push_back(copy);
      }
      continue;
    }
    const uint64_t first = p.offset / kSimPageBytes;
    const uint64_t last =
        (p.offset + p.length + kSimPageBytes - 1) / kSimPageBytes;  // exclusive
    if (!io.read) {
      if (p.track != Track::kNone) {
        auto& file_away = routes.away[h.file];
        for (uint64_t pg = first; pg < last; ++pg) {
          if (p.track == Track::kAway) {
            file_away[pg] = AwayPlace{p.server, p.file};
          } else {
            file_away.erase(pg);
          }
          if (away_ != nullptr) {
            away_->push_back(
                {at_ns, io.host, p.track == Track::kAway, h.file, pg});
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
  return absl::OkStatus();
}

absl::StatusOr<std::vector<Request>> RouteIos(
    const Layout& layout, const std::vector<Io>& ios,
    const std::vector<RuleChange>& timeline, std::vector<AwayEvent>* away) {
  Routing routing(layout, timeline, away);
  std::vector<Request> out;
  out.reserve(ios.size());
  for (size_t i = 0; i < ios.size(); ++i) {
    if (absl::Status st = routing.Route(ios[i], i, ios[i].arrival_ns, &out);
        !st.ok()) {
      return st;
    }
  }
  return out;
}

absl::StatusOr<std::vector<Request>> DrawRequests(const Layout& layout) {
  return RouteIos(layout, DrawIos(layout), {}, nullptr);
}

}  // namespace sroute::sim
