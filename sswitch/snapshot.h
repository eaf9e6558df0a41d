// SPDX-License-Identifier: Apache-2.0
// What an sSwitch routes with: installed rules and the snapshot of rules,
// endpoints and stages an IO is pinned to (internal to sswitch/).
#ifndef SROUTE_SSWITCH_SNAPSHOT_H_
#define SROUTE_SSWITCH_SNAPSHOT_H_

#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "rules/rule_table.h"
#include "sswitch/delegate.h"
#include "sswitch/endpoint.h"
#include "sswitch/sswitch.h"
#include "sswitch/stats.h"
#include "util/mutex.h"
#include "util/strings.h"
#include "util/thread_shard.h"

namespace sroute {

// An installed rule with its runtime state.
class InstalledRule : public RuleEntry {
 public:
  InstalledRule(uint64_t id, OrderKey order, Rule rule, std::string owner)
      : RuleEntry(id, order, std::move(rule), std::move(owner)) {
    for (const Detour& d : this->rule().detours) {
      if (d.what == Detour::What::kIo) {
        io_detours.push_back(&d);
      } else {
        has_side_detours = true;
      }
    }
  }
  mutable RuleCounters counters;
  std::unique_ptr<Delegate> delegate;
  bool delegate_response = false;
  bool delegate_durable = false;  // the delegate makes durable rules
  // The rule's IO detours, which its IOs take unless a delegate chooses.
  absl::InlinedVector<const Detour*, 4> io_detours;
  bool has_side_detours = false;  // copies of the header or values (H, F)
};

inline const InstalledRule* AsInstalled(const RuleEntry* e) {
  return static_cast<const InstalledRule*>(e);
}

// A stage as the sSwitch holds it: the stage, how it hands IOs back, and
// the gate that parks IOs while the stage changes (SSwitch::ChangeStage).
struct StageEntry {
  std::string name;
  // "stage:NAME", interned (util/interned.h): where an IO inside waits.
  const std::string* where = nullptr;
  std::shared_ptr<Stage> stage;
  Stage::Forward forward;
  std::atomic<uint64_t> ios{0};
  // IOs submitted and not completed. With `gated`, a Dekker pair: an IO
  // counts itself in, then looks at the gate; a change closes the gate,
  // then looks at the count (both sequentially consistent).
  std::atomic<int64_t> inside{0};
  std::atomic<bool> gated{false};
  // Order: a leaf but for InflightRegistry (parked IOs stay in flight).
  Mutex mu;
  bool changing ABSL_GUARDED_BY(mu) = false;
  bool removed ABSL_GUARDED_BY(mu) = false;
  std::deque<Io*> parked ABSL_GUARDED_BY(mu);
  CondVar idle;  // signalled when `inside` reaches 0 while gated
};

struct EndpointEntry {
  std::shared_ptr<Endpoint> endpoint;
  // "endpoint NAME (DESCRIBE)", interned (util/interned.h): where an IO
  // sent there waits (SSwitch::StaleIos).
  const std::string* where = nullptr;
  // IOs sent to the endpoint (SSwitch::EndpointIos); shared by every
  // snapshot that has the endpoint.
  std::shared_ptr<ShardedCounters<1>> ios =
      std::make_shared<ShardedCounters<1>>();
  // Watches its IOs (SSwitch::WatchEndpoint); null: none does.
  std::shared_ptr<EndpointWatch> watch = nullptr;

  // Notes that `io` is sent to the endpoint now.
  void Sent(Io* io) const {
    io->NoteWaitingAt(where);
    ios->Add(0);
    if (watch != nullptr) watch->Sending(io);
  }
};
using EndpointMap =
    absl::flat_hash_map<std::string, EndpointEntry, StringHash, StringEq>;
using StageMap = absl::flat_hash_map<std::string, std::shared_ptr<StageEntry>,
                                     StringHash, StringEq>;

struct QuiesceGate {
  explicit QuiesceGate(PatternMatcher m) : matcher(std::move(m)) {}
  const PatternMatcher matcher;
  // Guards active and parked. Order: after SSwitch::control_mu_, before
  // InflightRegistry::Shard::mu.
  Mutex mu;
  bool active ABSL_GUARDED_BY(mu) = true;
  std::deque<Io*> parked ABSL_GUARDED_BY(mu);
};

struct Snapshot {
  uint64_t version = 0;
  RuleTablePtr table;
  std::shared_ptr<const EndpointMap> endpoints;
  std::shared_ptr<const StageMap> stages;
  std::shared_ptr<ControllerSink> controller;
  std::vector<std::shared_ptr<QuiesceGate>> quiesced;
};

// Whether the read `io` failed only because the file it went to, another
// than its own, does not exist: a place nothing was written to yet, whose
// bytes read as a hole.
bool IsMissingPlace(const Io& io);

// "//HOST/a/b/c" -> "//HOST/a/b"; "" for a file at its endpoint's root or
// a name that is not "//HOST/PATH" (whole_file.cc).
std::string ParentFileOf(const std::string& file);

}  // namespace sroute

#endif  // SROUTE_SSWITCH_SNAPSHOT_H_
