// SPDX-License-Identifier: Apache-2.0
// GC coordination with members on emulated flash (RackBlox §3.4-3.5): the
// replica set is where every read and write of its members passes, as
// RackBlox's top-of-rack switch is, so it holds the tables RackBlox keeps
// there: for each member (a vSSD) its replicas (the other members) and its
// GC status (Load::gc_until_ns). A read's choice of member reads that
// status in the data path, with no controller round trip; the status comes
// from the devices themselves, asked every gc_poll_us through the
// kFlashStateXattr control (so a device behind a storage server is asked
// like a local one), and from the grants the stage makes.
//
// Modes (ReplicaSetOptions.gc): redirect (reads avoid collecting members),
// delay (the stage grants GC: regular at once, soft only while no other
// member collects: two replicas of one vSSD never collect at once unless
// one must), background (also GC in a device's predicted idle gap).
#include <algorithm>
#include <chrono>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "endpoints/flash_xattrs.h"
#include "sswitch/sswitch.h"
#include "stages/replica_set/gc_grants.h"
#include "stages/replica_set/replica_set_impl.h"
#include "util/clock.h"
#include "util/errno_status.h"
#include "util/log.h"
#include "util/strings.h"

namespace sroute {
namespace {

constexpr size_t kMaxGcEvents = 256;
constexpr uint64_t kIdleTurnNs = 100'000'000;  // mode off: look again then

}  // namespace

void ReplicaSetStage::AvoidCollecting(std::vector<int>& live) {
  if (live.size() < 2 ||
      gc_mode_.load(std::memory_order_relaxed) == GcMode::kOff) {
    return;
  }
  const uint64_t now = MonotonicNanos();
  auto collecting = [&](int m) {
    return load_[m]->gc_until_ns.load(std::memory_order_relaxed) > now;
  };
  const bool first_collects = collecting(live.front());
  if (!first_collects && std::none_of(live.begin(), live.end(), collecting)) {
    return;
  }
  // Collecting members to the back, in order (stable, without the buffer
  // std::stable_partition would allocate: a set has few members).
  auto end = live.end();
  for (auto it = live.begin(); it != end;) {
    if (collecting(*it)) {
      std::rotate(it, it + 1, live.end());
      --end;
    } else {
      ++it;
    }
  }
  if (first_collects && !collecting(live.front())) {
    gc_redirects_.fetch_add(1, std::memory_order_relaxed);
  }
}

absl::StatusOr<ReplicaSetStage::DeviceState> ReplicaSetStage::AskDevice(
    const std::string& member) {
  Io io;
  io.header.op = Op::kGetxattr;
  io.args.xattr_name = kFlashStateXattr;
  if (absl::Status s = Call(io, StrCat("//", member, "/")); !s.ok()) return s;
  DeviceState st;
  for (absl::string_view word : absl::StrSplit(io.data, ' ')) {
    const size_t eq = word.find('=');
    if (eq == absl::string_view::npos) continue;
    const absl::string_view key = word.substr(0, eq);
    const absl::string_view value = word.substr(eq + 1);
    uint64_t n = 0;
    const bool number = absl::SimpleAtoi(value, &n);
    if (key == "free_permille" && number) {
      st.free_permille = static_cast<int>(n);
    } else if (key == "need") {
      st.need = std::string(value);
    } else if (key == "gc") {
      st.gc = value == "1";
    } else if (key == "gc_left_us" && number) {
      st.gc_left_us = n;
    } else if (key == "bg_ok") {
      st.bg_ok = value == "1";
    }
  }
  return st;
}

absl::Status ReplicaSetStage::GrantGc(const std::string& member,
                                      const std::string& kind) {
  Io io;
  io.header.op = Op::kSetxattr;
  io.args.xattr_name = kFlashGcXattr;
  io.write_data = std::span<const char>(kind.data(), kind.size());
  return Call(io, StrCat("//", member, "/"));
}

void ReplicaSetStage::NoteGc(const std::string& member, const std::string& kind,
                             uint64_t until) {
  const uint64_t now = MonotonicNanos();
  // A pass seen again while it is under way, ending as predicted (give
  // or take the time an answer takes), is the same pass; its end is the
  // latest seen. Seen ending later, the device went on collecting on its
  // own (a die with no free block left): that is a pass of the device's
  // from the predicted end.
  // One seen after the end is another of the device's (a pass the stage
  // grants is noted when granted).
  constexpr uint64_t kJitterNs = 500'000;
  uint64_t start = now;
  MutexLock l(&gc_mu_);
  for (auto it = gc_events_.rbegin(); it != gc_events_.rend(); ++it) {
    if (it->member != member) continue;
    if (now <= it->end_mono_ns + kJitterNs) {
      // The same pass: its end as the stage now sees it (the view its
      // decisions use, so that the timeline shows what they saw).
      if (until <= it->end_mono_ns + kJitterNs || it->kind == kind) {
        it->end_mono_ns = std::max(until, it->start_mono_ns);
        return;
      }
      start = it->end_mono_ns;
    }
    break;
  }
  if (kind == "device") gc_device_passes_.fetch_add(1);
  gc_events_.push_back(GcPass{member, kind, start, std::max(until, start)});
  while (gc_events_.size() > kMaxGcEvents) gc_events_.pop_front();
}

uint64_t ReplicaSetStage::CoordinateGc() {
  const GcMode mode = gc_mode_.load(std::memory_order_relaxed);
  const uint64_t turn =
      uint64_t{gc_poll_us_.load(std::memory_order_relaxed)} * 1000;
  if (mode == GcMode::kOff) return kIdleTurnNs;
  std::vector<std::string> in;
  {
    MutexLock l(&mu_);
    for (size_t i = 0; i < members_.size(); ++i) {
      if (!out_[i]) in.push_back(members_[i]);
    }
  }
  struct Seen {
    std::string member;
    DeviceState state;
    uint64_t until = 0;  // MonotonicNanos until which it collects
  };
  std::vector<Seen> seen;
  for (const std::string& m : in) {
    auto st = AskDevice(m);
    if (!st.ok()) {
      // Not a flash device; or one that did not answer this time: it
      // keeps what was known of its GC (a partner must not start
      // collecting because one answer was lost).
      MutexLock l(&mu_);
      auto it = std::find(members_.begin(), members_.end(), m);
      if (it == members_.end()) continue;
      const Load& load = *load_[static_cast<size_t>(it - members_.begin())];
      if (!load.flash.load(std::memory_order_relaxed)) continue;
      Seen& s = seen.emplace_back();
      s.member = m;
      s.state.need = "none";
      s.until = load.gc_until_ns.load(std::memory_order_relaxed);
      continue;
    }
    Seen& s = seen.emplace_back();
    s.member = m;
    s.state = *std::move(st);
    if (s.state.gc) {
      s.until = MonotonicNanos() + s.state.gc_left_us * 1000;
      NoteGc(m, "device", s.until);
    }
  }
  if (mode == GcMode::kDelay || mode == GcMode::kBackground) {
    std::vector<GcMember> members(seen.size());
    for (size_t i = 0; i < seen.size(); ++i) {
      const DeviceState& st = seen[i].state;
      members[i].need = st.need == "regular" ? GcNeed::kRegular
                        : st.need == "soft"  ? GcNeed::kSoft
                                             : GcNeed::kNone;
      members[i].collecting = st.gc;
      members[i].bg_ok = st.bg_ok;
      members[i].until_ns = seen[i].until;
    }
    auto grant = [&](size_t i, GcGrant kind) -> std::optional<uint64_t> {
      Seen& s = seen[i];
      const std::string name = GcGrantName(kind);
      if (absl::Status g = GrantGc(s.member, name); !g.ok()) {
        LogWarning("replica set ", name_, ": GC of ", s.member, ": ",
                   g.message());
        return std::nullopt;
      }
      auto after = AskDevice(s.member);
      s.until = MonotonicNanos() + (after.ok() ? after->gc_left_us * 1000 : 0);
      NoteGc(s.member, name, s.until);
      (kind == GcGrant::kRegular ? gc_granted_regular_
       : kind == GcGrant::kSoft  ? gc_granted_soft_
                                 : gc_granted_bg_)
          .fetch_add(1, std::memory_order_relaxed);
      MutexLock l(&gc_mu_);
      soft_waiting_[s.member] = false;
      return s.until;
    };
    auto delayed = [&](size_t i) {
      MutexLock l(&gc_mu_);
      bool& waiting = soft_waiting_[seen[i].member];
      if (!waiting) gc_soft_delayed_.fetch_add(1);
      waiting = true;
    };
    auto no_need = [&](size_t i) {
      MutexLock l(&gc_mu_);
      soft_waiting_[seen[i].member] = false;  // a later soft request is new
    };
    DecideGc(mode == GcMode::kBackground, MonotonicNanos(), members,
             {grant, delayed, no_need});
  }
  // The data path's view: who collects, until when.
  {
    MutexLock l(&mu_);
    for (size_t i = 0; i < members_.size(); ++i) {
      const Seen* found = nullptr;
      for (const Seen& s : seen) {
        if (s.member == members_[i]) found = &s;
      }
      load_[i]->flash.store(found != nullptr, std::memory_order_relaxed);
      load_[i]->gc_until_ns.store(found != nullptr ? found->until : 0,
                                  std::memory_order_relaxed);
    }
  }
  return turn;
}

void ReplicaSetStage::GcLoop() {
  for (;;) {
    const uint64_t wait_ns = CoordinateGc();
    MutexLock l(&bg_mu_);
    if (stopping_) return;
    gc_cv_.WaitFor(&bg_mu_, std::chrono::nanoseconds(wait_ns));
    if (stopping_) return;
  }
}

}  // namespace sroute
