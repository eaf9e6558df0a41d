// SPDX-License-Identifier: Apache-2.0
#include "sswitch/io.h"

#include <fcntl.h>

#include "rules/rule_table.h"
#include "sswitch/sswitch.h"

namespace sroute {

std::atomic<uint64_t> Io::extra_completions{0};

Io::~Io() = default;

bool ChangesFileBytes(const Io& io) {
  switch (io.header.op) {
    case Op::kWrite:
    case Op::kTruncate:
    case Op::kFallocate:
    case Op::kUnlink:
    case Op::kRenameFrom:
    case Op::kRenameTo:
      return true;
    case Op::kSetattr:
      return (io.args.to_set & kSetSize) != 0;
    case Op::kOpen:
    case Op::kCreate:
      return (io.args.open_flags & O_TRUNC) != 0;
    default:
      return false;
  }
}

void Io::AdoptResults(const Io& child) {
  bytes = child.bytes;
  attr = child.attr;
  data = child.data;
  entries = child.entries;
  target = child.target;
  change_stamp = child.change_stamp;
  congested = child.congested;
  congested_window = child.congested_window;
}

void Io::AddResponseHook(ResponseHook hook) {
  Frame f;
  f.hook = std::move(hook);
  frames_.push_back(std::move(f));
}

void Io::Complete(absl::Status s) {
  if (completed_) {
    extra_completions.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  status = std::move(s);
  // Unwind the response path: newest frame first.
  while (!frames_.empty()) {
    Frame f = std::move(frames_.back());
    frames_.pop_back();
    if (f.hook) {
      f.hook(*this);
    } else if (router_ != nullptr) {
      router_->FinishRuleFrame(*this, f);
    }
  }
  completed_ = true;
  absl::InlinedVector<std::shared_ptr<DrainWaiter>, 1> waiters;
  if (router_ != nullptr) router_->Unregister(this, &waiters);
  // The completion may destroy this Io: move it out first.
  Completion done = std::move(done_);
  if (done) done(*this);
  // Drain() waits for the completion itself, so signal only now.
  for (auto& w : waiters) SSwitch::SignalDrained(*w);
}

uint64_t Io::routed_version() const {
  return snapshot_ ? SnapshotVersion(*snapshot_) : 0;
}

uint64_t Io::rule_id() const {
  for (auto it = frames_.rbegin(); it != frames_.rend(); ++it) {
    if (it->rule != nullptr) return it->rule->id();
  }
  return 0;
}

}  // namespace sroute
