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

StorageSim::StorageSim(const Layout& layout) : gc_(layout.gc) {
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

std::vector<uint64_t> StorageSim::Run(
    const std::vector<Request>& requests,
    const std::vector<uint64_t>& arrival_ns) const {
  std::vector<FlashModel> devices = warm_;
  // In order of arrival at storage (ties in the requests' order): each
  // model sees time go forward.
  std::vector<uint32_t> order(requests.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    return arrival_ns[a] < arrival_ns[b];
  });
  std::vector<uint64_t> done(requests.size());
  size_t next_gc = 0;
  auto collect_until = [&](uint64_t now) {
    for (; next_gc < gc_.size() && gc_[next_gc].from_ns <= now; ++next_gc) {
      const Layout::GcSpell& g = gc_[next_gc];
      devices[first_device_[g.server] + g.device].HoldForGc(g.from_ns,
                                                            g.until_ns);
    }
  };
  for (uint32_t i : order) {
    const Request& r = requests[i];
    FlashModel& device = devices[first_device_[r.server] + r.device];
    const uint64_t now = arrival_ns[i];
    collect_until(now);
    uint64_t end = now;
    for (uint64_t p = 0; p < r.bytes / kSimPageBytes; ++p) {
      const uint64_t lpn = (r.page + p) % device.logical_pages();
      end = std::max(
          end,
          (r.read ? device.Read(lpn, now) : device.Write(lpn, now)).done_ns);
    }
    done[i] = end;
  }
  return done;
}

}  // namespace sroute::sim
