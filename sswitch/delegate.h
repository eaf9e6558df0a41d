// SPDX-License-Identifier: Apache-2.0
// Delegates: small named functions attached to rules (docs/design.md §5).
//
// A delegate sees the header read-only and never the payload. Through its
// context it may only Insert/Delete/Quiesce/Drain rules on its own sSwitch;
// it keeps its own state in its object, and may emit a value to the rule's
// F detours (or the controller).
#ifndef SROUTE_SSWITCH_DELEGATE_H_
#define SROUTE_SSWITCH_DELEGATE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "rules/rule.h"

namespace sroute {

// What the delegate decided for one IO.
struct Decision {
  // Indices of the rule's IO detours to use; empty means all of them.
  absl::InlinedVector<uint16_t, 2> use;
  // A value for the rule's F detours (or, without any, for the controller).
  std::optional<std::string> emit;
  // Not OK: fail the IO with this status.
  absl::Status reject;
  // Sample the IO for tracing (sswitch/trace.h), if no sSwitch did yet.
  bool trace = false;
};

// The restricted control API a delegate gets. Thread-safe.
class DelegateContext {
 public:
  virtual ~DelegateContext() = default;
  // Inserts rules and deletes rules by id as one atomic update. Inserted rules
  // go just ahead of the rule that owns the delegate. Returns the new ids.
  virtual absl::StatusOr<std::vector<uint64_t>> Update(
      std::vector<Rule> insert, const std::vector<uint64_t>& remove) = 0;
  absl::StatusOr<uint64_t> Insert(Rule rule);
  absl::Status Delete(uint64_t id);
  // Deletes every rule whose pattern equals `pattern`.
  virtual absl::Status Delete(const HeaderPattern& pattern) = 0;
  virtual absl::Status Quiesce(const HeaderPattern& pattern, bool on) = 0;
  // REQUIRES: not called on the request path of an IO that matches `pattern`
  // (it would wait for itself until the deadline).
  virtual absl::Status Drain(const HeaderPattern& pattern,
                             absl::Duration timeout) = 0;
  // The rule this delegate belongs to.
  virtual const Rule& rule() const = 0;
  virtual uint64_t rule_id() const = 0;
  // State shared by every delegate of one kind on this sSwitch (e.g. all
  // track_writes rules), created by `make` on first use.
  virtual std::shared_ptr<void> SharedState(
      const std::string& key, std::function<std::shared_ptr<void>()> make) = 0;
};

// What the IO a delegate decided on came to.
struct IoOutcome {
  const absl::Status& status;
  uint64_t bytes;                           // bytes read or written
  const std::vector<std::string>& targets;  // files the IO was sent to
};

class Delegate {
 public:
  virtual ~Delegate() = default;
  // On the request path. Thread-safe: IOs of one rule arrive concurrently.
  virtual Decision OnRequest(const IoHeader& io, DelegateContext& ctx) = 0;
  // On the response path, when `wants_response()`.
  virtual void OnResponse(const IoHeader& io, const IoOutcome& outcome,
                          DelegateContext& ctx) {
    (void)io, (void)outcome, (void)ctx;
  }
  virtual bool wants_response() const { return false; }

  // On the request path, once the IO's targets are known: the rules this
  // IO will make if it succeeds (e.g. track_writes's read rule for the
  // written range). The sSwitch sends them with the IO as records, and the
  // host that stores the IO stores them too (docs/design.md §5), so they
  // survive a restart of this sSwitch. Only called when
  // `makes_durable_rules()`.
  //
  // A durable rule on one exact file with a byte range states what this
  // delegate's rules say for the whole range once the IO succeeds; it may
  // cover more than the IO (track_writes names the whole run of bytes that
  // follow the same targets), and it supersedes, over that range, older
  // durable rules of the same delegate whose pattern differs only by the
  // range: the host storing it drops what it covers (server/record_store.h),
  // so records stay proportional to distinct ranges.
  virtual std::vector<Rule> DurableRules(
      const IoHeader& io, const std::vector<std::string>& targets,
      DelegateContext& ctx) const {
    (void)io, (void)targets, (void)ctx;
    return {};
  }
  virtual bool makes_durable_rules() const { return false; }

  // A rename of `from` to `to`, whose files holding bytes of `from` move
  // along (`moved`: old place, new place). A delegate whose rules route
  // `from`'s bytes by name (track_writes's read rules) returns the durable
  // rules that route `to`'s the same way and retire those of `from` and of
  // the `to` the rename replaces; the sSwitch sends them with the rename of
  // a place, so that they are stored before the rename is acknowledged.
  // Once the rename succeeded, Renamed changes the installed rules so.
  // An empty `to` means `from` was removed (unlink): its rules retire.
  // `RenameRules` of a delegate with nothing of either name returns nothing.
  using Moves = std::vector<std::pair<std::string, std::string>>;
  virtual std::vector<Rule> RenameRules(const std::string& from,
                                        const std::string& to,
                                        const Moves& moved,
                                        DelegateContext& ctx) const {
    (void)from, (void)to, (void)moved, (void)ctx;
    return {};
  }
  virtual void Renamed(const std::string& from, const std::string& to,
                       const Moves& moved, DelegateContext& ctx) {
    (void)from, (void)to, (void)moved, (void)ctx;
  }

  // Bytes [start, end) of `file` hold nothing (the file ends before them):
  // the rules this delegate keeps that send reads of them elsewhere go
  // (track_writes's read rules for ranges a shrinking truncate left past
  // the end). Not durable: the reclaim that calls it finds such ranges
  // again after a restart.
  // REQUIRES: writes of the range quiesced and drained.
  virtual absl::Status ForgetRange(const std::string& file, uint64_t start,
                                   uint64_t end, DelegateContext& ctx) {
    (void)file, (void)start, (void)end, (void)ctx;
    return absl::OkStatus();
  }

  // Rebuilds what this delegate made in an earlier life of the sSwitch from
  // its durable rules (those DurableRules returned), oldest first, and
  // installs the result through `ctx` (one update for all of them).
  virtual absl::Status Restore(const std::vector<Rule>& made,
                               DelegateContext& ctx) {
    (void)made, (void)ctx;
    return absl::UnimplementedError("this delegate keeps no durable rules");
  }
};

// Creates a delegate from a rule's delegate spec; an error names the bad
// argument.
using DelegateFactory = std::function<absl::StatusOr<std::unique_ptr<Delegate>>(
    const DelegateSpec& spec, const Rule& rule)>;

// Delegate factories by name. The built-ins (track_writes, pick, notify) are
// registered on first use. Thread-safe.
class DelegateRegistry {
 public:
  static DelegateRegistry& Global();
  // Fails if `name` is taken.
  absl::Status Register(const std::string& name, DelegateFactory factory);
  absl::StatusOr<std::unique_ptr<Delegate>> Create(const DelegateSpec& spec,
                                                   const Rule& rule) const;
  std::vector<std::string> Names() const;

 private:
  DelegateRegistry();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace sroute

#endif  // SROUTE_SSWITCH_DELEGATE_H_
