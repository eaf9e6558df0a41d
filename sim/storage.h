// SPDX-License-Identifier: Apache-2.0
// The storage side of a simulation: each device of each server is the
// project's flash timing model (endpoints/flash_model.h), warmed up
// (every page written once, then time forgotten; or, for servers with
// warm_fill or warm_overwrites, each device its own history by
// FlashModel::Warm) so that reads meet mapped pages and writes fill
// blocks as on a used device.
//
//   sim::StorageSim storage(layout);
//   std::vector<uint64_t> done = storage.Run(requests, arrival_ns);
//
// Not thread-safe.
#ifndef SROUTE_SIM_STORAGE_H_
#define SROUTE_SIM_STORAGE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "endpoints/flash_model.h"
#include "sim/scenario.h"
#include "sim/workload.h"

namespace sroute::sim {

// A server group's device: a preset of the flash model (`rackblox`, `worn`,
// `healthy`, `fast`, `small`), or the words a flash endpoint takes after
// its directory ("preset=small,channels=2,read_us=4000,..."; dilation and
// vssds aside). InvalidArgument naming what is wrong.
absl::StatusOr<FlashOptions> DeviceOptions(const std::string& preset);

class StorageSim {
 public:
  explicit StorageSim(const Layout& layout);

  struct Served {
    uint64_t done_ns;
    bool failed;  // its server was down when it came, or died under it
    // It failed on a server that hangs (server_down's hang), whose spell
    // began at hang_from_ns.
    bool hung = false;
    uint64_t hang_from_ns = 0;
  };

  // What a pass's devices did: the flash model's counters per device,
  // and per replica set the GC it granted (its gc "delay", "background").
  struct Counts {
    std::vector<FlashState> devices;
    struct Grants {
      uint64_t soft = 0, soft_delayed = 0, regular = 0, bg = 0;
    };
    std::vector<Grants> sets;
  };

  // One pass over the devices, fed request by request in order of arrival
  // (sim::Simulate's passes whose IOs follow others' ends). Replica sets
  // that grant GC ask their members' devices every gc_poll_ns of the
  // pass's time, and grant as the stage does (stages/replica_set/
  // gc_grants.h).
  class Pass {
   public:
    explicit Pass(const StorageSim& storage);
    // `r` reaches its device at `arrival_ns`. A request of several pages
    // is done when its last page is; one on a server that is down fails
    // then, one under way when its server dies fails at that instant; on
    // a server that hangs, either fails when its host's remote timeout
    // has run from its arrival.
    // REQUIRES: arrival_ns is at least that of the request before.
    Served Serve(const Request& r, uint64_t arrival_ns);
    // Whether `device` of `server` collects garbage at `at_ns` (the
    // scenario's GC spells begun by then included).
    // REQUIRES: at_ns is at most the arrival of every request still to be
    // served.
    bool Collecting(uint32_t server, uint32_t device, uint64_t at_ns);
    Counts counts() const;

   private:
    // Starts the scenario's GC spells that begin by `at_ns`, and runs the
    // replica sets' GC polls due by then.
    void BeginSpells(uint64_t at_ns);
    void Poll(size_t group, uint64_t at_ns);

    const StorageSim& storage_;
    std::vector<FlashModel> devices_;
    size_t next_gc_ = 0;
    // Per group of coordinated devices: its next poll, and which of its
    // members wait with a soft request already counted as delayed.
    std::vector<uint64_t> next_poll_ns_;
    std::vector<std::vector<bool>> soft_waiting_;
    std::vector<Counts::Grants> grants_;  // per replica set
  };

  // Each request reaches its device at `arrival_ns[i]`; returns when each
  // is done there, whether it failed (`failed`, if not null), and what the
  // devices did (`counts`, if not null). Every
  // run starts from the warmed devices (a pass of the iteration does not
  // see the one before), and the scenario's GC spells begin when their
  // time comes.
  // REQUIRES: arrival_ns.size() == requests.size().
  std::vector<uint64_t> Run(const std::vector<Request>& requests,
                            const std::vector<uint64_t>& arrival_ns,
                            std::vector<uint8_t>* failed = nullptr,
                            Counts* counts = nullptr) const;

  // Whether `server` is down at `at_ns` (a server_down event).
  bool Down(uint32_t server, uint64_t at_ns) const;
  // The server_down event `server` is in at `at_ns`, or null.
  const Layout::DownSpell* DownSpellAt(uint32_t server, uint64_t at_ns) const;

  // Devices simulated, and the bytes their models hold.
  size_t devices() const { return warm_.size(); }
  uint64_t model_bytes() const { return model_bytes_; }

 private:
  // Per server, the index of its first device in warm_.
  std::vector<size_t> first_device_;
  std::vector<FlashModel> warm_;
  std::vector<Layout::GcSpell> gc_;
  std::vector<Layout::DownSpell> down_;
  std::vector<uint64_t> remote_timeout_ns_;  // per host
  // The devices a replica set that grants GC coordinates: per device index
  // of its members, those devices (indices in warm_).
  struct Coordinated {
    size_t set;
    std::vector<size_t> devices;
    bool background;
    uint64_t poll_ns;
  };
  std::vector<Coordinated> coordinated_;
  size_t sets_ = 0;
  uint64_t model_bytes_ = 0;
};

}  // namespace sroute::sim

#endif  // SROUTE_SIM_STORAGE_H_
