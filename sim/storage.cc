// SPDX-License-Identifier: Apache-2.0
#include "sim/storage.h"

#include <algorithm>
#include <numeric>

#include "stages/flash/flash_endpoint.h"

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
      remote_timeout_ns_(layout.host_remote_timeout_ns) {
  // One warmed model per preset, copied to each device of it.
  std::vector<std::pair<std::string, FlashModel>> warmed;
  for (const Layout::Server& server : layout.servers) {
    auto it = std::find_if(warmed.begin(), warmed.end(), [&](const auto& w) {
      return w.first == server.preset;
    });
    if (it == warmed.end()) {
      FlashModel model(*DeviceOptions(server.preset));
      uint64_t t = 0;
      for (uint64_t lpn = 0; lpn < model.logical_pages(); ++lpn) {
        t = std::max(t, model.Write(lpn, t).done_ns);
      }
      model.ForgetTime();
      warmed.emplace_back(server.preset, std::move(model));
      it = std::prev(warmed.end());
    }
    first_device_.push_back(warm_.size());
    for (uint32_t d = 0; d < server.devices; ++d) warm_.push_back(it->second);
    const FlashOptions options = *DeviceOptions(server.preset);
    model_bytes_ +=
        server.devices *
        (it->second.logical_pages() * (sizeof(uint32_t) + sizeof(uint64_t)) +
         options.geometry.raw_pages() * sizeof(uint32_t));
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
    : storage_(storage), devices_(storage.warm_) {}

void StorageSim::Pass::BeginSpells(uint64_t at_ns) {
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
                                      std::vector<uint8_t>* failed) const {
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
  return done;
}

}  // namespace sroute::sim
