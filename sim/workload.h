// SPDX-License-Identifier: Apache-2.0
// The requests a scenario's flows issue, drawn from its seed: open-loop
// Poisson arrivals per host (times the bursts' factors), closed-loop slots
// that issue an IO when the one before ends, or a trace's lines; reads and
// writes by the flow's mix (read_percent, or a YCSB workload's), addresses
// uniform or Zipfian over the flow's file.
// A flow that names a file is routed by its host's rules (sim/routing.h):
// the scenario's, changed over time by the apps (a timeline of changes);
// otherwise an address's 1 MiB stripe picks its server among the flow's by
// hash. The stripe then picks the device, and the offset the page.
//
//   absl::StatusOr<std::vector<sim::Io>> ios = sim::DrawIos(layout);
//   absl::StatusOr<std::vector<sim::Request>> r =
//       sim::RouteIos(layout, *ios, timeline, &away_log);
//
// Thread-safe (no state).
#ifndef SROUTE_SIM_WORKLOAD_H_
#define SROUTE_SIM_WORKLOAD_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "sim/scenario.h"
#include "util/zipfian.h"

namespace sroute::sim {

// The devices' page: requests are whole pages.
inline constexpr uint64_t kSimPageBytes = 4096;

// An IO a flow's host issues.
struct Io {
  static constexpr uint32_t kNone = UINT32_MAX;
  uint64_t arrival_ns;
  uint64_t offset;  // in the flow's file
  // Who it is from one pass to the next, when its time may move (a
  // closed-loop slot's IOs, a read-modify-write's write).
  uint64_t key;
  uint32_t flow;
  uint32_t host;
  uint32_t bytes;
  uint32_t trace = kNone;  // its line in Layout::trace
  // A closed-loop slot's IO: the slot (Workload numbers them) and its
  // place in the slot's sequence.
  uint32_t slot = kNone;
  uint32_t seq = 0;
  // A reclaim's copy (the index of its start in the pass's timeline);
  // `seq` is then its chunk.
  uint32_t copy = kNone;
  bool read;
  bool rmw = false;  // a read whose write follows when it ends (YCSB F)
};

// The IOs of a scenario's flows, from its seed. Those of open-loop and
// trace flows have fixed times and are drawn at once; a closed-loop slot's
// next IO, and a read-modify-write's write, are issued when the IO before
// ends, so a pass draws them as it runs (Next).
class Workload {
 public:
  explicit Workload(const Layout& layout);

  // The IOs with fixed times, in order of arrival (ties by flow, then
  // host); each closed-loop slot's first IO among them.
  const std::vector<Io>& fixed() const { return fixed_; }
  // Whether some IO's time depends on another's end.
  bool dynamic() const { return dynamic_; }
  // Lets the fixed IOs go, once routed for good.
  // REQUIRES: !dynamic().
  void ReleaseFixed() { std::vector<Io>().swap(fixed_); }
  // The IO issued when `io` ends at `end_ns` (after the flow's think
  // time), if any before the run's end: a read-modify-write's write, or
  // the slot's next IO.
  std::optional<Io> Next(const Io& io, uint64_t end_ns) const;

 private:
  // A flow's op, offset and bytes for one IO, by its mix.
  void DrawMix(uint32_t flow, uint64_t unique, std::mt19937_64& rng,
               Io& io) const;
  Io SlotIo(uint32_t flow, uint32_t host, uint32_t slot, uint32_t seq,
            uint64_t at_ns) const;

  const Layout& layout_;
  std::vector<Zipfian> addresses_;       // per flow, over its records
  std::vector<uint32_t> slots_of_flow_;  // closed-loop slots before a flow's
  std::vector<Io> fixed_;
  bool dynamic_ = false;
};

// A change of one host's rules at a time: an app's update (rules inserted,
// cids removed), the start of a reclaim (the host copies what writes took
// away of files named `reclaiming...` home, a chunk at a time at its
// rate), or its end (those bytes are home again).
struct RuleChange {
  uint64_t at_ns;
  uint32_t host;
  std::string app;
  std::vector<SimRule> insert;
  std::vector<uint64_t> remove;
  std::string reclaimed;
  std::string reclaiming = {};
  uint64_t rate_bytes_per_s = 0;  // 0: as fast as the copy goes
  uint32_t chunk_bytes = 0;
  bool operator==(const RuleChange& o) const;
};

// The writes that took pages of routed files away (track_writes) or
// brought them home, in order of time: what a reclaim has to move.
struct AwayEvent {
  uint64_t at_ns;
  uint32_t host;
  bool away;  // false: home
  std::string file;
  uint64_t page;  // 4 KiB page of the file
};

struct Request {
  static constexpr uint16_t kNoSet = UINT16_MAX;
  uint64_t arrival_ns;  // A(r): when the host issues it
  // The IO it is part of (its index in DrawIos's): a routed IO split by
  // byte-ranged rules, or a write scattered to several targets, is several
  // requests; the IO ends when its last one does, or when `need` of them
  // did (a replica set's write at its ack, its read at its one member).
  uint64_t io;
  uint64_t rule;  // the cid of the rule that routed it (0: none)
  uint64_t page;  // its first 4 KiB page on the device
  uint32_t flow;
  uint32_t host;    // index in Layout::hosts
  uint32_t server;  // index in Layout::servers
  uint32_t device;  // on the server
  uint32_t bytes;
  bool read;
  uint8_t need = 0;       // 0: every request of the IO
  uint16_t set = kNoSet;  // the replica set it went through
};

// What a replica set's choices see of the servers and devices at a time:
// the pass's state (sim/simulate.cc's RunFollowing).
class ServerState {
 public:
  virtual ~ServerState() = default;
  virtual bool Up(uint32_t server, uint64_t at_ns) const = 0;
  // Whether a device collects garbage.
  virtual bool Collecting(uint32_t server, uint32_t device,
                          uint64_t at_ns) const = 0;
  // The reads on `server` under way (sent, not ended).
  virtual uint32_t ReadsUnderWay(uint32_t server, uint64_t at_ns) const = 0;
};

// The pages each device of `preset` holds (4 KiB each).
uint64_t DevicePages(const std::string& preset);

// Routes IOs one by one, in order of arrival, into requests: each host's
// IOs by its rules as `timeline` (in order of time) changes them; `away`,
// if not null, gets the pages writes took away and brought home.
class Routing {
 public:
  Routing(const Layout& layout, const std::vector<RuleChange>& timeline,
          std::vector<AwayEvent>* away);
  ~Routing();

  // Appends the requests of `io`, the pass's `index`-th IO, to `out`, as
  // the rules route it at `at_ns` (when its host starts it: its arrival,
  // or later when it waited for a free worker). InvalidArgument when a
  // routed IO goes to an endpoint that is no server, or a change's rules
  // do not make a table.
  // REQUIRES: at_ns is at least that of the IO routed before.
  absl::Status Route(const Io& io, uint64_t index, uint64_t at_ns,
                     std::vector<Request>* out);

  // A reclaim's unit: `pages` pages of `file` from `page` on, away in one
  // place.
  struct CopyChunk {
    std::string file;
    uint64_t page;
    uint32_t pages;
  };
  // Applies the timeline's changes up to `at_ns`.
  // REQUIRES: at_ns is at least that of the IO routed before.
  absl::Status AdvanceTo(uint64_t at_ns);
  // The pages of `host`'s files named `prefix...` that are away now, in
  // chunks of at most `chunk_bytes` of one file in one place, in order of
  // file and page.
  std::vector<CopyChunk> AwayChunks(uint32_t host, const std::string& prefix,
                                    uint32_t chunk_bytes) const;
  // Appends the requests of a reclaim's read of `chunk` (from where it
  // is) or write (by `host`'s rules, which bring its pages home): `io`
  // says the host, the flow, the bytes and the op.
  absl::Status RouteCopy(const Io& io, const CopyChunk& chunk, uint64_t index,
                         uint64_t at_ns, std::vector<Request>* out);

  // What replica sets choose by (without: every server up, no device
  // collecting, nothing under way).
  // REQUIRES: `state` outlives the routing.
  void set_state(const ServerState* state) { state_ = state; }
  // A read of a replica set that failed on its member (`out`'s request
  // `failed_index`): the same read on another member up at `at_ns`,
  // appended to `out`; false when there is none.
  bool RetryRead(size_t failed_index, uint64_t at_ns,
                 std::vector<Request>* out);
  // Per replica set, the reads sent away from a member whose device
  // collected, which the set's policy would have chosen.
  const std::vector<uint64_t>& gc_redirects() const { return gc_redirects_; }

  struct HostRoutes;

 private:
  // Routes a header of `io` by its host's rules (the reads of pages writes
  // took away where they went).
  absl::Status RouteHeader(const Io& io, const IoHeader& h, Request r,
                           uint64_t at_ns, std::vector<Request>* out);

  // A request of `io`, the pass's `index`-th IO, yet to be placed.
  static Request NewRequest(const Io& io, uint64_t index);
  void PlaceOn(Request& r, uint32_t server, uint64_t file,
               uint64_t offset) const;
  // The member a read of set `set` at `at_ns` goes to (`r` placed on it),
  // not `except`; false when no member is up.
  bool PlaceRead(Request& r, uint32_t set, const std::string& file,
                 uint64_t offset, uint64_t at_ns, uint32_t except);
  // `file` (//VOLUME/PATH) as member `server` keeps it.
  std::string MemberFile(uint32_t server, const std::string& file) const;

  const Layout& layout_;
  const std::vector<RuleChange>& timeline_;
  std::vector<AwayEvent>* const away_;
  std::vector<uint64_t> pages_;  // per server
  std::vector<std::string> server_names_;
  std::vector<std::unique_ptr<HostRoutes>> hosts_;
  std::vector<Place> places_;
  size_t next_change_ = 0;
  const ServerState* state_ = nullptr;
  // Per request routed through a replica set: its file and offset there
  // (for a retry), by request index in `out`.
  absl::flat_hash_map<uint64_t, std::pair<std::string, uint64_t>> set_reads_;
  std::vector<std::string> stage_names_;
  std::vector<uint64_t> gc_redirects_;
};

// The IOs with fixed times (Workload::fixed()).
std::vector<Io> DrawIos(const Layout& layout);

// The requests of `ios`, in their order, each host's IOs routed by its
// rules as `timeline` (in order of time) changes them; `away`, if not
// null, gets the pages writes took away and brought home. InvalidArgument
// when a routed IO goes to an endpoint that is no server, or a change's
// rules do not make a table.
absl::StatusOr<std::vector<Request>> RouteIos(
    const Layout& layout, const std::vector<Io>& ios,
    const std::vector<RuleChange>& timeline, std::vector<AwayEvent>* away);

// DrawIos routed by the scenario's rules alone.
absl::StatusOr<std::vector<Request>> DrawRequests(const Layout& layout);

}  // namespace sroute::sim

#endif  // SROUTE_SIM_WORKLOAD_H_
