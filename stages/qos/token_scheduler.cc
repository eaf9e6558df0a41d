// SPDX-License-Identifier: Apache-2.0
#include "stages/qos/token_scheduler.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <deque>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace sroute {
namespace {

constexpr uint64_t kPageBytes = 4096;
// The dispatched reads and writes that make the read ratio "recent".
constexpr int kReadOnlyWindow = 64;
constexpr absl::Duration kDefaultRound = absl::Milliseconds(1);
constexpr absl::Duration kMinRound = absl::Microseconds(1);
// Rates times durations round: balances within this of a cost afford it.
constexpr double kEps = 1e-9;

// The map's heterogeneous lookup takes absl::string_view, which is not
// std::string_view in Debian's build of absl.
absl::string_view Key(std::string_view s) { return {s.data(), s.size()}; }

int64_t FloorDiv(absl::Time t, absl::Duration unit) {
  return static_cast<int64_t>(
      std::floor(absl::FDivDuration(t - absl::UnixEpoch(), unit)));
}

// Completions per second over the last second: ten slots of 100 ms.
class RateWindow {
 public:
  void Add(absl::Time now) {
    const int64_t tick = FloorDiv(now, kSlot);
    Slot& s = slots_[Index(tick)];
    if (s.tick != tick) s = {tick, 0};
    ++s.count;
  }
  double PerSecond(absl::Time now) const {
    const int64_t tick = FloorDiv(now, kSlot);
    uint64_t sum = 0;
    for (const Slot& s : slots_) {
      if (s.tick <= tick && s.tick > tick - kSlots) sum += s.count;
    }
    // The current slot has only run part of its length.
    const absl::Duration span =
        (kSlots - 1) * kSlot + (now - (absl::UnixEpoch() + tick * kSlot));
    return sum / absl::ToDoubleSeconds(span);
  }

 private:
  static constexpr int kSlots = 10;
  static constexpr absl::Duration kSlot = absl::Milliseconds(100);
  struct Slot {
    int64_t tick = INT64_MIN;
    uint64_t count = 0;
  };
  static size_t Index(int64_t tick) {
    return static_cast<size_t>(((tick % kSlots) + kSlots) % kSlots);
  }
  std::array<Slot, kSlots> slots_;
};

// Latencies over the last 5 to 10 s: two histograms of 5 s windows, each of
// 8 buckets per octave of nanoseconds up to 2^37 ns (2.3 minutes).
class LatencyWindows {
 public:
  void Add(absl::Time now, absl::Duration latency) {
    const int64_t w = FloorDiv(now, kWindow);
    Window& h = windows_[w & 1];
    if (h.id != w) {
      h.id = w;
      h.counts.fill(0);
    }
    ++h.counts[Bucket(latency)];
  }
  // The upper edge of the bucket holding the q-quantile; zero if empty.
  absl::Duration Percentile(absl::Time now, double q) const {
    const int64_t w = FloorDiv(now, kWindow);
    uint64_t total = 0;
    std::array<uint64_t, kBuckets> sum{};
    for (const Window& h : windows_) {
      if (h.id != w && h.id != w - 1) continue;
      for (size_t i = 0; i < kBuckets; ++i) {
        sum[i] += h.counts[i];
        total += h.counts[i];
      }
    }
    if (total == 0) return absl::ZeroDuration();
    const uint64_t rank = std::max<uint64_t>(
        1, static_cast<uint64_t>(std::ceil(q * static_cast<double>(total))));
    uint64_t seen = 0;
    for (size_t i = 0; i < kBuckets; ++i) {
      seen += sum[i];
      if (seen >= rank) return absl::Nanoseconds(UpperEdge(i));
    }
    return absl::Nanoseconds(UpperEdge(kBuckets - 1));
  }

 private:
  static constexpr absl::Duration kWindow = absl::Seconds(5);
  static constexpr int kMaxOctave = 36;
  // Values below 8 ns exactly, then 8 buckets for each octave 3..36.
  static constexpr size_t kBuckets = 8 + 8 * (kMaxOctave - 2);
  struct Window {
    int64_t id = INT64_MIN;
    std::array<uint32_t, kBuckets> counts{};
  };
  static size_t Bucket(absl::Duration latency) {
    const int64_t ns = absl::ToInt64Nanoseconds(latency);
    const uint64_t v =
        std::clamp<int64_t>(ns, 0, (int64_t{2} << kMaxOctave) - 1);
    if (v < 8) return v;
    const int octave = static_cast<int>(std::bit_width(v)) - 1;
    const uint64_t sub = (v >> (octave - 3)) & 7;
    return 8 + 8 * (octave - 3) + sub;
  }
  static uint64_t UpperEdge(size_t bucket) {
    if (bucket < 8) return bucket;
    const int octave = static_cast<int>((bucket - 8) / 8) + 3;
    const uint64_t sub = (bucket - 8) % 8;
    return (8 + sub + 1) << (octave - 3);
  }
  std::array<Window, 2> windows_;
};

// Heap orders: the earliest first, ties in the order they were pushed.
constexpr auto kLater = [](const auto& a, const auto& b) {
  return a.at != b.at ? a.at > b.at : a.seq > b.seq;
};

}  // namespace

struct TokenScheduler::Tenant {
  // An LC tenant's state: queued (in lc_heap_), or idle and filling up to
  // its cap (in fill_heap_), or idle at the cap (donating), or idle while
  // nothing is limited.
  enum class Lc : uint8_t { kIdle, kFilling, kDonating, kQueued };

  bool lc() const { return spec.cls == QosClass::kLatencyCritical; }

  QosTenantSpec spec;
  std::deque<QosRequest> queue;
  double balance = 0;

  double rate = 0;  // LC: reserved tokens/s
  double cap = 0;   // LC: surplus cap
  absl::Time settled;
  Lc lc_state = Lc::kIdle;
  uint64_t fill_seq = 0;

  double vstamp = 0;       // BE: be_vtime_ when its balance was brought up
  Tenant* prev = nullptr;  // BE: the ring, while queued
  Tenant* next = nullptr;

  double spent = 0;
  uint64_t floor_hits = 0;
  uint64_t enqueued = 0;
  uint64_t dispatched = 0;
  uint64_t completed = 0;
  uint64_t bytes_read = 0;
  uint64_t bytes_written = 0;
  RateWindow completions;
  LatencyWindows latency;
};

TokenScheduler::TokenScheduler() : round_(kDefaultRound) {}
TokenScheduler::~TokenScheduler() = default;

absl::Status TokenScheduler::CheckTenant(const QosTenantSpec& spec) {
  if (spec.name.empty()) {
    return absl::InvalidArgumentError("qos: a tenant needs a name");
  }
  auto bad = [&](auto... what) {
    return absl::InvalidArgumentError(
        absl::StrCat("qos tenant '", spec.name, "': ", what...));
  };
  if (!(spec.read_fraction >= 0 && spec.read_fraction <= 1)) {
    return bad("read_fraction (", spec.read_fraction,
               ") must be within [0, 1]");
  }
  if (!(spec.reserved_iops >= 0) || !std::isfinite(spec.reserved_iops)) {
    return bad("reserved_iops (", spec.reserved_iops,
               ") must be a number >= 0");
  }
  if (spec.cls == QosClass::kLatencyCritical && spec.reserved_iops == 0) {
    return bad("a latency-critical tenant needs reserved_iops above 0");
  }
  if (spec.p95_slo < absl::ZeroDuration() ||
      spec.p95_slo == absl::InfiniteDuration()) {
    return bad("p95_slo (", absl::FormatDuration(spec.p95_slo),
               ") must be finite and >= 0");
  }
  return absl::OkStatus();
}

absl::Status TokenScheduler::CheckDevice(const QosDeviceParams& d) {
  auto bad = [](auto... what) {
    return absl::InvalidArgumentError(absl::StrCat("qos device: ", what...));
  };
  if (!(d.tokens_per_s >= 0) || !std::isfinite(d.tokens_per_s)) {
    return bad("tokens_per_s (", d.tokens_per_s, ") must be a number >= 0");
  }
  if (!(d.write_cost > 0) || !std::isfinite(d.write_cost)) {
    return bad("write_cost (", d.write_cost, ") must be a number above 0");
  }
  if (!(d.read_only_read_cost > 0 && d.read_only_read_cost <= 1)) {
    return bad("read_only_read_cost (", d.read_only_read_cost,
               ") must be within (0, 1]");
  }
  if (!(d.deficit_floor <= 0) || !std::isfinite(d.deficit_floor)) {
    return bad("deficit_floor (", d.deficit_floor, ") must be a number <= 0");
  }
  if (d.surplus_rounds < 0) {
    return bad("surplus_rounds (", d.surplus_rounds, ") must be >= 0");
  }
  if (!(d.donate_fraction >= 0 && d.donate_fraction <= 1)) {
    return bad("donate_fraction (", d.donate_fraction,
               ") must be within [0, 1]");
  }
  return absl::OkStatus();
}

double TokenScheduler::LcTokenRate(const QosTenantSpec& spec,
                                   double write_cost) {
  if (spec.cls != QosClass::kLatencyCritical) return 0;
  return spec.reserved_iops *
         (spec.read_fraction + (1 - spec.read_fraction) * write_cost);
}

bool TokenScheduler::Limited() const {
  return device_.tokens_per_s > 0 && lc_count_ > 0;
}

double TokenScheduler::ReadCost() const {
  return device_.read_only_discount && reads_in_a_row_ >= kReadOnlyWindow
             ? device_.read_only_read_cost
             : 1;
}

double TokenScheduler::RequestCost(QosOp op, uint64_t length) const {
  if (op == QosOp::kOther) return 1;
  const uint64_t pages =
      length <= kPageBytes ? 1 : (length + kPageBytes - 1) / kPageBytes;
  return static_cast<double>(pages) *
         (op == QosOp::kWrite ? device_.write_cost : ReadCost());
}

absl::Status TokenScheduler::SetDevice(const QosDeviceParams& device,
                                       absl::Time now) {
  if (absl::Status s = CheckDevice(device); !s.ok()) return s;
  now = AdvanceTo(now);
  FreezeLc(now);
  device_ = device;
  RebuildLc(now);
  return absl::OkStatus();
}

absl::Status TokenScheduler::SetTenant(const QosTenantSpec& spec,
                                       absl::Time now) {
  if (absl::Status s = CheckTenant(spec); !s.ok()) return s;
  now = AdvanceTo(now);
  const bool lc = spec.cls == QosClass::kLatencyCritical;
  auto it = tenants_.find(spec.name);
  if (it == tenants_.end()) {
    auto t = std::make_unique<Tenant>();
    t->spec = spec;
    t->settled = now;
    if (lc) FreezeLc(now);
    tenants_.emplace(spec.name, std::move(t));
    if (lc) RebuildLc(now);
    return absl::OkStatus();
  }
  Tenant* t = it->second.get();
  if (!t->lc() && !lc) {
    t->spec = spec;
    return absl::OkStatus();
  }
  const bool was_lc = t->lc();
  if (!was_lc && t->next != nullptr) RingRemove(t, /*in_its_turn=*/false);
  FreezeLc(now);
  t->spec = spec;
  if (was_lc != lc) {  // a new class starts from nothing
    t->balance = 0;
    t->settled = now;
    t->lc_state = Tenant::Lc::kIdle;
  }
  RebuildLc(now);
  if (!lc && !t->queue.empty()) RingInsert(t);
  return absl::OkStatus();
}

bool TokenScheduler::RemoveTenant(std::string_view name, absl::Time now,
                                  std::vector<QosRequest>* orphaned) {
  auto it = tenants_.find(Key(name));
  if (it == tenants_.end()) return false;
  now = AdvanceTo(now);
  std::unique_ptr<Tenant> t = std::move(it->second);
  tenants_.erase(it);
  const bool lc = t->lc();
  if (lc) {
    FreezeLc(now);  // empties the heaps: nothing points at `t` after
  } else if (t->next != nullptr) {
    RingRemove(t.get(), /*in_its_turn=*/false);
  }
  queued_ -= t->queue.size();
  if (orphaned != nullptr) {
    orphaned->insert(orphaned->end(), t->queue.begin(), t->queue.end());
  }
  if (lc) RebuildLc(now);
  return true;
}

TokenScheduler::Tenant* TokenScheduler::FindOrAdd(std::string_view name,
                                                  absl::Time now) {
  auto it = tenants_.find(Key(name));
  if (it != tenants_.end()) return it->second.get();
  auto t = std::make_unique<Tenant>();
  t->spec.name = std::string(name);
  t->settled = now;
  Tenant* raw = t.get();
  tenants_.emplace(std::string(name), std::move(t));
  return raw;
}

void TokenScheduler::Enqueue(std::string_view tenant, const QosRequest& request,
                             absl::Time now) {
  now = AdvanceTo(now);
  Tenant* t = FindOrAdd(tenant, now);
  t->queue.push_back(request);
  ++t->enqueued;
  ++queued_;
  if (t->queue.size() > 1) return;  // already waiting its turn
  if (t->lc()) {
    WakeLc(t, now);
    QueueLc(t, now, /*count_hit=*/true);
  } else {
    RingInsert(t);
  }
}

void TokenScheduler::Schedule(absl::Time now,
                              std::vector<QosRequest>* dispatch) {
  now = AdvanceTo(now);
  if (!Limited()) {
    DrainAll(dispatch);
    return;
  }
  // LC tenants first, each as far as its own tokens go.
  while (!lc_heap_.empty() && lc_heap_.front().at <= now) {
    std::pop_heap(lc_heap_.begin(), lc_heap_.end(), kLater);
    Tenant* t = lc_heap_.back().tenant;
    lc_heap_.pop_back();
    SettleLc(t, now);
    while (!t->queue.empty()) {
      const QosRequest& r = t->queue.front();
      const double cost = RequestCost(r.op, r.length);
      if (t->balance + kEps < LcNeed(cost)) break;
      Dispatch(t, cost, /*charge=*/true, dispatch);
    }
    if (t->queue.empty()) {
      IdleLc(t);
    } else {
      QueueLc(t, now, /*count_hit=*/true);
    }
  }
  ServeBe(dispatch);
  if (ring_size_ == 0) {
    // No BE tenant wants the spare: LC tenants at their floor may have it,
    // and what they leave ends with this round.
    ServeLcFromBucket(now, dispatch);
    bucket_reset_ += bucket_;
    bucket_ = 0;
  }
}

absl::Time TokenScheduler::NextWake(absl::Time now) const {
  if (queued_ == 0) return absl::InfiniteFuture();
  if (!Limited()) return now;
  absl::Time wake = now + round_;
  if (!lc_heap_.empty()) {
    wake = std::min(wake, std::max(now, lc_heap_.front().at));
  }
  if (cursor_ != nullptr && unreserved_ > 0) {
    double vtime = be_vtime_;
    if (now > advanced_) {
      vtime += unreserved_ * absl::ToDoubleSeconds(now - advanced_) /
               static_cast<double>(ring_size_);
    }
    const QosRequest& r = cursor_->queue.front();
    const double shortfall = RequestCost(r.op, r.length) -
                             (cursor_->balance + vtime - cursor_->vstamp);
    if (shortfall <= kEps) return now;
    wake = std::min(
        wake, now +
                  absl::Seconds(shortfall * static_cast<double>(ring_size_) /
                                unreserved_) +
                  absl::Nanoseconds(1));
  }
  return wake;
}

void TokenScheduler::Complete(std::string_view tenant, QosOp op, uint64_t bytes,
                              absl::Duration latency, absl::Time now) {
  auto it = tenants_.find(Key(tenant));
  if (it == tenants_.end()) return;
  Tenant* t = it->second.get();
  ++t->completed;
  if (op == QosOp::kRead) t->bytes_read += bytes;
  if (op == QosOp::kWrite) t->bytes_written += bytes;
  t->completions.Add(now);
  t->latency.Add(now, latency);
}

absl::Time TokenScheduler::AdvanceTo(absl::Time now) {
  if (advanced_ == absl::InfinitePast()) advanced_ = now;
  if (now <= advanced_) return advanced_;
  const absl::Time from = advanced_;
  advanced_ = now;
  if (!Limited()) return now;
  if (ring_size_ > 0) {
    be_vtime_ += unreserved_ * absl::ToDoubleSeconds(now - from) /
                 static_cast<double>(ring_size_);
  }
  // The bucket keeps only the last two round periods of income: had the
  // caller run Schedule meanwhile, rounds would have reset the rest.
  const absl::Time kept_from = std::max(from, now - 2 * round_);
  auto income = [&](absl::Time a, absl::Time b, double rate, bool lc) {
    if (b <= a || rate <= 0) return;
    const double all = rate * absl::ToDoubleSeconds(b - a);
    const double kept =
        b > kept_from ? rate * absl::ToDoubleSeconds(b - std::max(a, kept_from))
                      : 0;
    const double share = lc ? device_.donate_fraction : 1;
    if (lc) {
      lc_donated_ += share * all;
      lc_dropped_ += (1 - share) * all;
    }
    bucket_ += share * kept;
    bucket_reset_ += share * (all - kept);
  };
  if (ring_size_ == 0) income(from, now, unreserved_, /*lc=*/false);
  // Idle LC tenants donate what they earn once at their cap.
  absl::Time t = from;
  while (!fill_heap_.empty() && fill_heap_.front().at <= now) {
    std::pop_heap(fill_heap_.begin(), fill_heap_.end(), kLater);
    const FillEntry e = fill_heap_.back();
    fill_heap_.pop_back();
    if (e.tenant->lc_state != Tenant::Lc::kFilling ||
        e.tenant->fill_seq != e.seq) {
      continue;  // it woke up before
    }
    const absl::Time at = std::max(e.at, t);
    income(t, at, donor_rate_, /*lc=*/true);
    t = at;
    e.tenant->lc_state = Tenant::Lc::kDonating;
    donor_rate_ += e.tenant->rate;
    ++donors_;
  }
  income(t, now, donor_rate_, /*lc=*/true);
  return now;
}

void TokenScheduler::Donate(double tokens) {
  lc_donated_ += device_.donate_fraction * tokens;
  lc_dropped_ += (1 - device_.donate_fraction) * tokens;
  bucket_ += device_.donate_fraction * tokens;
}

void TokenScheduler::Dispatch(Tenant* t, double cost, bool charge,
                              std::vector<QosRequest>* dispatch) {
  const QosRequest r = t->queue.front();
  t->queue.pop_front();
  --queued_;
  if (charge) t->balance -= cost;
  t->spent += cost;
  ++t->dispatched;
  if (r.op == QosOp::kRead) {
    reads_in_a_row_ = std::min(reads_in_a_row_ + 1, kReadOnlyWindow);
  } else if (r.op == QosOp::kWrite) {
    reads_in_a_row_ = 0;
  }
  dispatch->push_back(r);
}

void TokenScheduler::DrainAll(std::vector<QosRequest>* dispatch) {
  auto drain = [&](Tenant* t) {
    while (!t->queue.empty()) {
      const QosRequest& r = t->queue.front();
      Dispatch(t, RequestCost(r.op, r.length), /*charge=*/false, dispatch);
    }
  };
  while (!lc_heap_.empty()) {
    std::pop_heap(lc_heap_.begin(), lc_heap_.end(), kLater);
    Tenant* t = lc_heap_.back().tenant;
    lc_heap_.pop_back();
    drain(t);
    IdleLc(t);
  }
  while (cursor_ != nullptr) {
    Tenant* t = cursor_;
    drain(t);
    RingRemove(t, /*in_its_turn=*/true);
  }
  bucket_reset_ += bucket_;  // nothing to keep it for
  bucket_ = 0;
}

double TokenScheduler::LcNeed(double cost) const {
  // A request too big for the floor's room would never go: it waits for a
  // balance of 0 instead, so it overshoots by itself only.
  return cost > -device_.deficit_floor ? 0 : device_.deficit_floor + cost;
}

void TokenScheduler::SettleLc(Tenant* t, absl::Time now) {
  if (now > t->settled) {
    t->balance += t->rate * absl::ToDoubleSeconds(now - t->settled);
    t->settled = now;
  }
  if (t->balance > t->cap) {
    if (Limited()) Donate(t->balance - t->cap);
    t->balance = t->cap;
  }
}

void TokenScheduler::WakeLc(Tenant* t, absl::Time now) {
  // Above the cap it has donated already (AdvanceTo ran up to `now`).
  if (now > t->settled) {
    if (t->balance < t->cap) {
      t->balance = std::min(
          t->cap,
          t->balance + t->rate * absl::ToDoubleSeconds(now - t->settled));
    }
    t->settled = now;
  }
  if (t->lc_state == Tenant::Lc::kDonating) {
    donor_rate_ -= t->rate;
    if (--donors_ == 0) donor_rate_ = 0;  // no drift left behind
  }
  t->lc_state = Tenant::Lc::kIdle;
}

void TokenScheduler::IdleLc(Tenant* t) {
  if (!Limited() || t->rate <= 0) {
    t->lc_state = Tenant::Lc::kIdle;
    return;
  }
  if (t->balance >= t->cap - kEps) {
    t->lc_state = Tenant::Lc::kDonating;
    donor_rate_ += t->rate;
    ++donors_;
    return;
  }
  t->lc_state = Tenant::Lc::kFilling;
  t->fill_seq = ++seq_;
  fill_heap_.push_back(
      {t->settled + absl::Seconds((t->cap - t->balance) / t->rate), t->fill_seq,
       t});
  std::push_heap(fill_heap_.begin(), fill_heap_.end(), kLater);
}

// When the read ratio changes a waiting tenant's head cost, its place in the
// heap is not moved: it goes a little late (reads became cheaper) or finds
// itself short and waits again (dearer).
absl::Time TokenScheduler::LcReady(const Tenant* t, absl::Time now) const {
  const QosRequest& r = t->queue.front();
  const double shortfall = LcNeed(RequestCost(r.op, r.length)) - t->balance;
  if (shortfall <= kEps) return now;
  if (t->rate <= 0) return absl::InfiniteFuture();
  return now + absl::Seconds(shortfall / t->rate) + absl::Nanoseconds(1);
}

void TokenScheduler::QueueLc(Tenant* t, absl::Time now, bool count_hit) {
  const absl::Time ready = LcReady(t, now);
  if (count_hit && ready > now && Limited()) ++t->floor_hits;
  t->lc_state = Tenant::Lc::kQueued;
  lc_heap_.push_back({ready, ++seq_, t});
  std::push_heap(lc_heap_.begin(), lc_heap_.end(), kLater);
}

void TokenScheduler::ServeLcFromBucket(absl::Time now,
                                       std::vector<QosRequest>* dispatch) {
  // Earliest-ready first; each tenant either dispatches or empties the
  // bucket, so this stays O(1) per request.
  while (bucket_ > kEps && !lc_heap_.empty()) {
    std::pop_heap(lc_heap_.begin(), lc_heap_.end(), kLater);
    Tenant* t = lc_heap_.back().tenant;
    lc_heap_.pop_back();
    SettleLc(t, now);
    while (!t->queue.empty()) {
      const QosRequest& r = t->queue.front();
      const double cost = RequestCost(r.op, r.length);
      const double need = LcNeed(cost);
      if (t->balance + kEps < need) {
        const double draw = std::min(need - t->balance, bucket_);
        bucket_ -= draw;
        t->balance += draw;
      }
      if (t->balance + kEps < need) break;
      Dispatch(t, cost, /*charge=*/true, dispatch);
    }
    if (t->queue.empty()) {
      IdleLc(t);
    } else {
      QueueLc(t, now, /*count_hit=*/false);  // counted when it stalled
    }
  }
}

void TokenScheduler::FreezeLc(absl::Time now) {
  for (auto& [name, t] : tenants_) {
    if (!t->lc()) continue;
    if (t->lc_state == Tenant::Lc::kQueued) {
      SettleLc(t.get(), now);
    } else {
      WakeLc(t.get(), now);
    }
    t->lc_state = Tenant::Lc::kIdle;
  }
  lc_heap_.clear();
  fill_heap_.clear();
  donor_rate_ = 0;
  donors_ = 0;
}

void TokenScheduler::RebuildLc(absl::Time now) {
  lc_count_ = 0;
  lc_rate_sum_ = 0;
  absl::Duration strictest = absl::InfiniteDuration();
  for (auto& [name, t] : tenants_) {
    if (!t->lc()) continue;
    ++lc_count_;
    t->rate = LcTokenRate(t->spec, device_.write_cost);
    lc_rate_sum_ += t->rate;
    if (t->spec.p95_slo > absl::ZeroDuration()) {
      strictest = std::min(strictest, t->spec.p95_slo);
    }
  }
  round_ = strictest == absl::InfiniteDuration()
               ? kDefaultRound
               : std::max(kMinRound, strictest / 20);
  unreserved_ = std::max(0.0, device_.tokens_per_s - lc_rate_sum_);
  if (!Limited()) {
    bucket_reset_ += bucket_;
    bucket_ = 0;
  }
  for (auto& [name, t] : tenants_) {
    if (!t->lc()) continue;
    t->cap = device_.surplus_rounds * t->rate * absl::ToDoubleSeconds(round_);
    // A smaller cap after a change: the excess was never earned under it.
    t->balance = std::min(t->balance, t->cap);
    if (t->queue.empty()) {
      IdleLc(t.get());
    } else {
      QueueLc(t.get(), now, /*count_hit=*/false);
    }
  }
}

void TokenScheduler::RingInsert(Tenant* t) {
  t->balance = 0;
  t->vstamp = be_vtime_;
  if (cursor_ == nullptr) {
    t->prev = t->next = t;
    cursor_ = t;
    round_left_ = 0;  // a round starts with the next turn
  } else {
    // Just behind the cursor: the last to have its turn, after this round.
    t->next = cursor_;
    t->prev = cursor_->prev;
    t->prev->next = t;
    cursor_->prev = t;
  }
  ++ring_size_;
}

void TokenScheduler::RingRemove(Tenant* t, bool in_its_turn) {
  t->balance += be_vtime_ - t->vstamp;
  if (t->balance > 0) bucket_ += t->balance;  // no hoarding while idle
  t->balance = 0;
  bool counted = in_its_turn;
  if (!in_its_turn && round_left_ > 0) {
    // Had it still to have its turn this round?
    const Tenant* p = cursor_;
    for (size_t i = 0; i < round_left_; ++i, p = p->next) {
      if (p == t) {
        counted = true;
        break;
      }
    }
  }
  if (ring_size_ == 1) {
    cursor_ = nullptr;
  } else {
    t->prev->next = t->next;
    t->next->prev = t->prev;
    if (cursor_ == t) cursor_ = t->next;
  }
  t->prev = t->next = nullptr;
  --ring_size_;
  if (counted && round_left_ > 0 && --round_left_ == 0) EndRound();
  if (ring_size_ == 0) round_left_ = 0;
}

void TokenScheduler::ServeBe(std::vector<QosRequest>* dispatch) {
  // BE tenants short of tokens draw on the bucket through equal shares of
  // it: drawn at the cursor instead, it would go to whoever waits there
  // longest, the tenant with the costliest requests.
  if (ring_size_ > 0 && bucket_ > 0) {
    be_vtime_ += bucket_ / static_cast<double>(ring_size_);
    bucket_ = 0;
  }
  while (cursor_ != nullptr) {
    Tenant* t = cursor_;
    if (round_left_ == 0) round_left_ = ring_size_;
    t->balance += be_vtime_ - t->vstamp;
    t->vstamp = be_vtime_;
    bool served = false;
    while (!t->queue.empty()) {
      const QosRequest& r = t->queue.front();
      const double cost = RequestCost(r.op, r.length);
      if (t->balance + kEps < cost) break;
      Dispatch(t, cost, /*charge=*/true, dispatch);
      served = true;
    }
    if (t->queue.empty()) {
      RingRemove(t, /*in_its_turn=*/true);
    } else if (!served) {
      break;  // it keeps its turn until it can afford its next request
    } else {
      cursor_ = t->next;
      if (--round_left_ == 0) EndRound();
    }
  }
}

void TokenScheduler::EndRound() {
  bucket_reset_ += bucket_;
  bucket_ = 0;
  ++rounds_;
  if (cursor_ != nullptr) cursor_ = cursor_->next;  // rotate the start
}

std::optional<QosTenantStats> TokenScheduler::Stats(std::string_view tenant,
                                                    absl::Time now) const {
  auto it = tenants_.find(Key(tenant));
  if (it == tenants_.end()) return std::nullopt;
  const Tenant& t = *it->second;
  QosTenantStats s;
  s.name = t.spec.name;
  s.cls = t.spec.cls;
  if (t.lc()) {
    s.token_rate = t.rate;
    s.tokens = t.balance;
    if (now > t.settled && t.balance < t.cap) {
      s.tokens = std::min(
          t.cap, t.balance + t.rate * absl::ToDoubleSeconds(now - t.settled));
    }
  } else if (t.next != nullptr) {
    double vtime = be_vtime_;
    if (Limited()) {
      s.token_rate = unreserved_ / static_cast<double>(ring_size_);
      if (now > advanced_) {
        vtime += s.token_rate * absl::ToDoubleSeconds(now - advanced_);
      }
    }
    s.tokens = t.balance + vtime - t.vstamp;
  }
  s.tokens_spent = t.spent;
  s.deficit_floor_hits = t.floor_hits;
  s.queued = t.queue.size();
  s.enqueued = t.enqueued;
  s.dispatched = t.dispatched;
  s.completed = t.completed;
  s.bytes_read = t.bytes_read;
  s.bytes_written = t.bytes_written;
  s.iops = t.completions.PerSecond(now);
  s.p50 = t.latency.Percentile(now, 0.50);
  s.p95 = t.latency.Percentile(now, 0.95);
  s.p99 = t.latency.Percentile(now, 0.99);
  return s;
}

std::vector<QosTenantStats> TokenScheduler::AllStats(absl::Time now) const {
  std::vector<QosTenantStats> all;
  all.reserve(tenants_.size());
  for (const auto& [name, t] : tenants_) all.push_back(*Stats(name, now));
  std::sort(all.begin(), all.end(),
            [](const auto& a, const auto& b) { return a.name < b.name; });
  return all;
}

QosDeviceStats TokenScheduler::DeviceStats() const {
  QosDeviceStats s;
  s.limited = Limited();
  s.tokens_per_s = device_.tokens_per_s;
  s.lc_reserved_rate = lc_rate_sum_;
  s.unreserved_rate = unreserved_;
  s.round_period = round_;
  s.read_only = ReadCost() < 1;
  s.be_queued_tenants = ring_size_;
  s.bucket = bucket_;
  s.lc_donated = lc_donated_;
  s.lc_dropped = lc_dropped_;
  s.bucket_reset = bucket_reset_;
  s.be_rounds = rounds_;
  return s;
}

}  // namespace sroute
