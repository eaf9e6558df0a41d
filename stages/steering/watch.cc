// SPDX-License-Identifier: Apache-2.0
#include "stages/steering/watch.h"

#include <algorithm>
#include <cmath>

#include "sswitch/trace.h"
#include "util/clock.h"
#include "util/strings.h"

namespace sroute {

CongestionWatch::CongestionWatch(std::string host, std::string endpoint,
                                 std::shared_ptr<const Profile> profile,
                                 CongestionOptions options)
    : host_(std::move(host)),
      endpoint_(std::move(endpoint)),
      profile_(profile),
      options_(options),
      detector_(std::move(profile), options) {}

void CongestionWatch::Sending(Io* io) {
  const Op op = io->header.op;
  if (op != Op::kRead && op != Op::kWrite) return;
  const uint64_t start = MonotonicNanos();
  io->AddResponseHook([self = shared_from_this(), start](Io& done) {
    if (!done.status.ok()) return;
    const uint64_t now = MonotonicNanos();
    const uint32_t pages = static_cast<uint32_t>(
        std::max<uint64_t>(1, (uint64_t{done.header.length} + 4095) / 4096));
    self->detector_.Note(now, done.header.op == Op::kWrite, now - start, pages);
    const uint64_t mark = self->detector_.Mark(now);
    if (mark == 0) return;
    done.congested = true;
    // (wraps after 4 G windows, a year of 10 ms ones: only equality counts)
    done.congested_window = static_cast<uint32_t>(mark);
    self->marked_replies_.fetch_add(1, std::memory_order_relaxed);
    if (done.trace != nullptr) {
      TraceHop hop;
      hop.host = self->host_;
      hop.kind = "congested";
      hop.next = StrCat("endpoint ", self->endpoint_);
      hop.start_ns = start;
      hop.end_ns = now;
      done.trace->Add(std::move(hop));
    }
  });
}

void CongestionWatch::Gauges(
    std::string_view name,
    const absl::FunctionRef<void(std::string, int64_t)>& add) const {
  const CongestionDetector::View v = detector_.view();
  const std::string p = StrCat("steer.", name, ".");
  add(p + "congested", v.congested ? 1 : 0);
  add(p + "latency_us", static_cast<int64_t>(v.latency_us));
  add(p + "expected_us", static_cast<int64_t>(v.expected_us));
  add(p + "baseline_permille", std::llround(v.baseline * 1000));
  add(p + "iops", static_cast<int64_t>(v.iops));
  add(p + "write_permille", static_cast<int64_t>(v.write_fraction * 1000));
  add(p + "marked_windows", static_cast<int64_t>(v.marked_windows));
  add(p + "mode_switches", static_cast<int64_t>(v.mode_switches));
  add(p + "marked_replies",
      static_cast<int64_t>(marked_replies_.load(std::memory_order_relaxed)));
}

}  // namespace sroute
