// SPDX-License-Identifier: Apache-2.0
// Where IOs go: endpoints (bytes live there), stages (a hop that does
// something and hands the IO back), and the controller sink.
#ifndef SROUTE_SSWITCH_ENDPOINT_H_
#define SROUTE_SSWITCH_ENDPOINT_H_

#include <string>
#include <string_view>

#include "absl/functional/any_invocable.h"
#include "absl/functional/function_ref.h"
#include "rules/io_header.h"
#include "sswitch/io.h"

namespace sroute {

// Every endpoint's reserved folder (docs/design.md §6), beneath its root: files
// the router makes for its own use (detours' temporary files, files a
// volume keeps while unlinked and open in "unlinked/", a server's state
// store) live there, hidden from the volume's listing and closed to
// tenants.
inline constexpr char kReservedDir[] = ".sroute";
// The names a volume gives files unlinked while open that live away from
// its reserved folder (in their own folder), hidden from listings.
inline constexpr std::string_view kHiddenPrefix = ".sroute-unlinked-";

// Whether `path` (beneath an endpoint's root, no leading '/') lies in the
// reserved folder.
inline bool InReservedDir(std::string_view path) {
  constexpr std::string_view dir = kReservedDir;
  return path.starts_with(dir) &&
         (path.size() == dir.size() || path[dir.size()] == '/');
}

class Endpoint {
 public:
  virtual ~Endpoint() = default;
  // Performs `io` on `path` (relative to the endpoint's root, no leading
  // '/'), using io->header.op, offset, length and io->args, and completes it
  // exactly once, possibly before Submit returns.
  // Thread-safe: called from many threads at once.
  virtual void Submit(Io* io, std::string_view path) = 0;
  // stage://HOST/NAME: performs `io` on `path` through stage `stage` of the
  // host behind this endpoint (a storage server's). Endpoints without
  // stages fail it.
  virtual void SubmitToStage(Io* io, std::string_view path,
                             std::string_view stage);
  // Where the endpoint's bytes are, for people: a directory, a server's
  // address ("" if nothing useful).
  virtual std::string Describe() const { return ""; }
  // Numbers that describe the endpoint's state now, for stats (a flash
  // device's free blocks and GC): add(key, value) for each, keys naming
  // the endpoint (`name` is the host's name for it). Most have none.
  // Thread-safe.
  virtual void Gauges(std::string_view name,
                      const absl::FunctionRef<void(std::string key,
                                                   int64_t value)>& add) const {
    (void)name;
    (void)add;
  }
};

// Watches the IOs sent to one endpoint (SSwitch::WatchEndpoint): a host's
// congestion detector (stages/steering/watch.h) times them against the
// device's profile and marks the replies (Io::congested).
// Thread-safe: called from many threads at once.
class EndpointWatch {
 public:
  virtual ~EndpointWatch() = default;
  // `io` goes to the endpoint now; the watch may add a response hook.
  virtual void Sending(Io* io) = 0;
  // Its numbers for stats, as Endpoint::Gauges.
  virtual void Gauges(
      std::string_view name,
      const absl::FunctionRef<void(std::string key, int64_t value)>& add)
      const = 0;
};

class Stage {
 public:
  // Hands an IO back to the sSwitch, which routes it on with source
  // "stage:NAME" (the tenant in the header is kept).
  using Forward = absl::AnyInvocable<void(Io*) const>;
  virtual ~Stage() = default;
  // Either completes `io` (e.g. a cache hit) or calls forward(io). To act on
  // the response path, add a response hook before forwarding.
  // Thread-safe.
  virtual void Submit(Io* io, const Forward& forward) = 0;
  // Whether the stage places the files it is given itself (a replica set
  // on its members) instead of handing their IOs back: then a name moves
  // into or out of its flow only through it (a rename or link of names the
  // rules send to different places fails with EXDEV, as across endpoints).
  virtual bool KeepsNames() const { return false; }
};

// Receives controller-bound detours. Thread-safe.
class ControllerSink {
 public:
  virtual ~ControllerSink() = default;
  // <IOHeader, controller>: a copy of the header.
  virtual void OnHeader(const IoHeader& header, uint64_t rule_id) = 0;
  // <F, controller>: a delegate's emitted value.
  virtual void OnValue(const IoHeader& header, uint64_t rule_id,
                       const std::string& value) = 0;
  // <IO, controller>: the controller serializes the IO and sends it on; it
  // must complete it.
  virtual void OnIo(Io* io, uint64_t rule_id) = 0;
};

}  // namespace sroute

#endif  // SROUTE_SSWITCH_ENDPOINT_H_
