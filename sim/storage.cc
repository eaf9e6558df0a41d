// SPDX-License-Identifier: Apache-2.0
#include "sim/storage.h"

#include <algorithm>
#include <numeric>

#include "endpoints/flash_endpoint.h"
#include "stages/replica_set/gc_grants.h"

namespace sroute::sim {

absl::StatusOr<FlashOptions> DeviceOptions(const std::string& preset) {
  if (preset.find('=') == std::string::npos) {
    return FlashModel::Preset(preset);
  }
  auto spec = ParseFlashSpec("sim," + preset);
  if (!spec.ok()) return spec.status();
  if (spec->vssds != 1) {
    return absl::InvalidArgumentError(
        "vssds: a simulated server's devices are whole");
  }
  if (absl::Status s = FlashModel::Check(spec->options.model); !s.ok()) {
    return s;
  }
  return spec->options.model;
}

StorageSim::StorageSim(const Layout& layout)
    : gc_(layout.gc),
      down_(layout.down),
      remote_timeout_ns_(layout.host_remote_timeout_ns),
      sets_(layout.replica_sets.size()) {
  // One warmed model per preset, copied to each device of it; a device
  // with a history of its own is warmed alone.
  std::vector<std::pair<std::string, FlashModel>> warmed;
  for (const Layout::Server& server : layout.servers) {
    first_device_.push_back(warm_.size());
    const FlashOptions options = *DeviceOptions(server.preset);
    // A device's mapping (a page's place and its time) and its pages'
    // owners.
    model_bytes_ +=
        server.devices * (options.geometry.logical_pages() *
                              (sizeof(uint32_t) + sizeof(uint64_t)) +
                          options.geometry.raw_pages() * sizeof(uint32_t));
    if (server.own_history()) {
      for (uint32_t d = 0; d < server.devices; ++d) {
        FlashModel model(options);
        const double fill = server.warm_fill > 0 ? server.warm_fill : 1.0;
        std::vector<uint32_t> lpns(static_cast<size_t>(
            fill * static_cast<double>(model.logical_pages())));
        std::iota(lpns.begin(), lpns.end(), 0);
        model.Warm(lpns, server.warm_overwrites,
                   layout.scenario.seed() + 1 + warm_.size());
        warm_.push_back(std::move(model));
      }
      continue;
    }
    auto it = std::find_if(warmed.begin(), warmed.end(), [&](const auto& w) {
      return w.first == server.preset;
    });
    if (it == warmed.end()) {
      FlashModel model(options);
      uint64_t t = 0;
      for (uint64_t lpn = 0; lpn < model.logical_pages(); ++lpn) {
        t = std::max(t, model.Write(lpn, t).done_ns);
      }
      model.ForgetTime();
      warmed.emplace_back(server.preset, std::move(model));
      it = std::prev(warmed.end());
    }
    for (uint32_t d = 0; d < server.devices; ++d) warm_.push_back(it->second);
  }
  for (size_t i = 0; i < layout.replica_sets.size(); ++i) {
    const Layout::ReplicaSet& set = layout.replica_sets[i];
    if (set.gc_grants == Layout::ReplicaSet::Grants::kNone) continue;
    uint32_t devices = UINT32_MAX;
    for (uint32_t m : set.members) {
      devices = std::min(devices, layout.servers[m].devices);
    }
    for (uint32_t d = 0; d < devices; ++d) {
      Coordinated c{i,
                    {},
                    set.gc_grants == Layout::ReplicaSet::Grants::kBackground,
                    set.gc_poll_ns};
      for (uint32_t m : set.members) c.devices.push_back(first_device_[m] + d);
      coordinated_.push_back(std::move(c));
    }
  }
}

bool StorageSim::Down(uint32_t server, uint64_t at_ns) const {
  return DownSpellAt(server, at_ns) != nullptr;
}

const Layout::DownSpell* StorageSim::DownSpellAt(uint32_t server,
                                                 uint64_t at_ns) const {
  for (const Layout::DownSpell& d : down_) {
    if (d.server == server && d.from_ns <= at_ns && at_ns < d.until_ns) {
      return &d;
    }
  }
  return nullptr;
}

StorageSim::Pass::Pass(const StorageSim& storage)
    : storage_(storage),
      devices_(storage.warm_),
      next_poll_ns_(storage.coordinated_.size(), 0),
      grants_(storage.sets_) {
  for (const Coordinated& c : storage.coordinated_) {
    soft_waiting_.emplace_back(c.devices.size(), false);
  }
}

void StorageSim::Pass::Poll(size_t group, uint64_t at_ns) {
  const Coordinated& c = storage_.coordinated_[group];
  std::vector<GcMember> members(c.devices.size());
  for (size_t i = 0; i < members.size(); ++i) {
    const FlashState st = devices_[c.devices[i]].State(at_ns, /*wear=*/false);
    members[i].need = st.need;
    members[i].collecting = st.gc_active;
    members[i].bg_ok = st.bg_ok;
    members[i].until_ns = st.gc_active ? st.gc_until_ns : 0;
  }
  Counts::Grants& counts = grants_[c.set];
  std::vector<bool>& waiting = soft_waiting_[group];
  auto grant = [&](size_t i, GcGrant kind) -> std::optional<uint64_t> {
    FlashModel& device = devices_[c.devices[i]];
    device.StartGc(at_ns, kind == GcGrant::kBackground
                              ? at_ns + device.predicted_idle_ns()
                              : UINT64_MAX);
    (kind == GcGrant::kRegular ? counts.regular
     : kind == GcGrant::kSoft  ? counts.soft
                               : counts.bg)++;
    waiting[i] = false;
    return device.State(at_ns, /*wear=*/false).gc_until_ns;
  };
  auto delayed = [&](size_t i) {
    if (!waiting[i]) ++counts.soft_delayed;
    waiting[i] = true;
  };
  auto no_need = [&](size_t i) { waiting[i] = false; };
  DecideGc(c.background, at_ns, members, {grant, delayed, no_need});
}

StorageSim::Counts StorageSim::Pass::counts() const {
  Counts out;
  for (const FlashModel& d : devices_) {
    out.devices.push_back(d.State(0, /*wear=*/false));
  }
  out.sets = grants_;
  return out;
}

void StorageSim::Pass::BeginSpells(uint64_t at_ns) {
  for (size_t g = 0; g < next_poll_ns_.size(); ++g) {
    for (; next_poll_ns_[g] <= at_ns;
         next_poll_ns_[g] += storage_.coordinated_[g].poll_ns) {
      Poll(g, next_poll_ns_[g]);
    }
  }
  for (; next_gc_ < storage_.gc_.size() &&
         storage_.gc_[next_gc_].from_ns <= at_ns;
       ++next_gc_) {
    const Layout::GcSpell& g = storage_.gc_[next_gc_];
    devices_[storage_.first_device_[g.server] + g.device].HoldForGc(g.from_ns,
                                                                    g.until_ns);
  }
}

StorageSim::Served StorageSim::Pass::Serve(const Request& r,
                                           uint64_t arrival_ns) {
  BeginSpells(arrival_ns);
  const uint64_t timed_out = arrival_ns + storage_.remote_timeout_ns_[r.host];
  if (const Layout::DownSpell* d = storage_.DownSpellAt(r.server, arrival_ns)) {
    if (d->hang) return {timed_out, true, true, d->from_ns};
    return {arrival_ns, true};
  }
  FlashModel& device = devices_[storage_.first_device_[r.server] + r.device];
  uint64_t end = arrival_ns;
  for (uint64_t p = 0; p < r.bytes / kSimPageBytes; ++p) {
    const uint64_t lpn = (r.page + p) % device.logical_pages();
    end = std::max(end, (r.read ? device.Read(lpn, arrival_ns)
                                : device.Write(lpn, arrival_ns))
                            .done_ns);
  }
  // Its server died under it: the issuer learns it then.
  for (const Layout::DownSpell& d : storage_.down_) {
    if (d.server == r.server && d.from_ns > arrival_ns && d.from_ns < end) {
      if (d.hang)
        return {std::max(d.from_ns, timed_out), true, true, d.from_ns};
      return {d.from_ns, true};
    }
  }
  return {end, false};
}

bool StorageSim::Pass::Collecting(uint32_t server, uint32_t device,
                                  uint64_t at_ns) {
  BeginSpells(at_ns);
  return devices_[storage_.first_device_[server] + device].InGc(at_ns);
}

std::vector<uint64_t> StorageSim::Run(const std::vector<Request>& requests,
                                      const std::vector<uint64_t>& arrival_ns,
                                      std::vector<uint8_t>* failed,
                                      Counts* counts) const {
  // In order of arrival at storage (ties in the requests' order): each
  // model sees time go forward.
  std::vector<uint32_t> order(requests.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    return arrival_ns[a] < arrival_ns[b];
  });
  Pass pass(*this);
  std::vector<uint64_t> done(requests.size());
  if (failed != nullptr) failed->assign(requests.size(), 0);
  for (uint32_t i : order) {
    const Served s = pass.Serve(requests[i], arrival_ns[i]);
    done[i] = s.done_ns;
    if (failed != nullptr) (*failed)[i] = s.failed;
  }
  if (counts != nullptr) *counts = pass.counts();
  return done;
}

}  // namespace sroute::sim
