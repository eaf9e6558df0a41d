// SPDX-License-Identifier: Apache-2.0
// The qos stage's token scheduler (stages/qos/token_scheduler.h) against a
// scripted clock: the cost model, LC reservations, the deficit floor, the
// surplus cap and donation, BE fairness and the rotating start, no hoarding,
// the bucket's reset, work conservation, live changes, NextWake, counters,
// and ReFlex's scenarios 1 and 2 in simulation (an instant device).
#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "stages/qos/token_scheduler.h"

namespace sroute {
namespace {

constexpr uint64_t k4K = 4096;
const absl::Time kStart = absl::UnixEpoch() + absl::Hours(1);

QosTenantSpec Lc(const std::string& name, double iops, double read_fraction,
                 absl::Duration slo = absl::Milliseconds(10)) {
  return {.name = name,
          .cls = QosClass::kLatencyCritical,
          .reserved_iops = iops,
          .read_fraction = read_fraction,
          .p95_slo = slo};
}

QosTenantSpec Be(const std::string& name) {
  return {.name = name, .cls = QosClass::kBestEffort};
}

// Drives a scheduler with tenants that keep requests queued (saturating)
// or offer a steady rate, advancing a scripted clock in fixed steps. The
// device is instant: a dispatched request completes in the same step.
class Sim {
 public:
  static constexpr uint64_t kSimTag = uint64_t{1} << 63;  // its cookies

  explicit Sim(TokenScheduler* s, absl::Time start = kStart)
      : s_(s), now_(start) {}

  // 4 KiB requests, reads at `read_fraction` spread evenly.
  void Saturate(const std::string& name, double read_fraction, int depth = 32) {
    loads_.push_back({name, read_fraction, depth, 0, now_});
  }
  void Offer(const std::string& name, double read_fraction, double iops) {
    loads_.push_back({name, read_fraction, 0, iops, now_});
  }
  void Stop(const std::string& name) {
    for (Load& l : loads_) {
      if (l.name == name) l.stopped = true;
    }
  }

  void Run(absl::Duration length,
           absl::Duration step = absl::Microseconds(100)) {
    const absl::Time end = now_ + length;
    std::vector<QosRequest> out;
    for (; now_ < end; now_ += step) {
      for (size_t i = 0; i < loads_.size(); ++i) {
        Load& l = loads_[i];
        if (l.stopped) continue;
        if (l.iops > 0) {
          while (l.next_offer <= now_) {
            Enqueue(i);
            l.next_offer += absl::Seconds(1 / l.iops);
          }
        } else {
          while (l.queued < l.depth) Enqueue(i);
        }
      }
      out.clear();
      s_->Schedule(now_, &out);
      for (const QosRequest& r : out) {
        if ((r.cookie & kSimTag) == 0) continue;  // the test's own
        Load& l = loads_[(r.cookie & ~kSimTag) >> 40];
        --l.queued;
        ++l.dispatched;
        s_->Complete(l.name, r.op, r.length, absl::Microseconds(100), now_);
      }
    }
  }

  uint64_t dispatched(const std::string& name) const {
    for (const Load& l : loads_) {
      if (l.name == name) return l.dispatched;
    }
    return 0;
  }
  double spent(const std::string& name) const {
    return s_->Stats(name, now_)->tokens_spent;
  }
  absl::Time now() const { return now_; }

 private:
  struct Load {
    std::string name;
    double read_fraction;
    int depth;
    double iops;
    absl::Time next_offer;
    int queued = 0;
    uint64_t offered = 0;
    uint64_t writes = 0;
    uint64_t dispatched = 0;
    bool stopped = false;
  };

  void Enqueue(size_t i) {
    Load& l = loads_[i];
    ++l.offered;
    // The n-th request writes when the writes so far fall short of
    // (1 - read_fraction) x n: the exact mix, evenly spread.
    QosOp op = QosOp::kRead;
    if (static_cast<double>(l.writes + 1) <=
        (1 - l.read_fraction) * static_cast<double>(l.offered) + 1e-9) {
      op = QosOp::kWrite;
      ++l.writes;
    }
    s_->Enqueue(l.name,
                {.cookie = kSimTag | (uint64_t{i} << 40) | l.offered,
                 .op = op,
                 .length = k4K},
                now_);
    ++l.queued;
  }

  TokenScheduler* s_;
  absl::Time now_;
  std::vector<Load> loads_;
};

std::vector<uint64_t> Cookies(const std::vector<QosRequest>& rs) {
  std::vector<uint64_t> c;
  for (const QosRequest& r : rs) c.push_back(r.cookie);
  return c;
}

TEST(QosSchedulerTest, CostModel) {
  TokenScheduler s;
  EXPECT_EQ(s.RequestCost(QosOp::kRead, k4K), 1);
  EXPECT_EQ(s.RequestCost(QosOp::kRead, 1), 1);  // 4 KiB and less: 1 page
  EXPECT_EQ(s.RequestCost(QosOp::kRead, 0), 1);
  EXPECT_EQ(s.RequestCost(QosOp::kRead, k4K + 1), 2);
  EXPECT_EQ(s.RequestCost(QosOp::kRead, 32 * 1024), 8);
  EXPECT_EQ(s.RequestCost(QosOp::kWrite, k4K), 10);
  EXPECT_EQ(s.RequestCost(QosOp::kWrite, 2 * k4K), 20);
  EXPECT_EQ(s.RequestCost(QosOp::kOther, 1 << 20), 1);
  ASSERT_TRUE(s.SetDevice({.write_cost = 16}, kStart).ok());
  EXPECT_EQ(s.RequestCost(QosOp::kWrite, 2 * k4K), 32);

  // Without the discount, reads cost 1 however many go in a row.
  std::vector<QosRequest> out;
  for (int i = 0; i < 200; ++i) s.Enqueue("c", {.op = QosOp::kRead}, kStart);
  s.Schedule(kStart, &out);  // nothing limits: all go
  EXPECT_EQ(out.size(), 200u);
  EXPECT_EQ(s.RequestCost(QosOp::kRead, k4K), 1);
  EXPECT_FALSE(s.DeviceStats().read_only);

  // With it, reads cost 0.5 once the last 64 reads and writes were reads.
  ASSERT_TRUE(
      s.SetDevice({.write_cost = 16, .read_only_discount = true}, kStart).ok());
  s.Enqueue("c", {.op = QosOp::kWrite, .length = k4K}, kStart);
  for (int i = 0; i < 63; ++i) s.Enqueue("c", {.op = QosOp::kRead}, kStart);
  s.Enqueue("c", {.op = QosOp::kOther}, kStart);  // no say in the ratio
  s.Schedule(kStart, &out);
  EXPECT_EQ(s.RequestCost(QosOp::kRead, k4K), 1) << "63 reads: not yet";
  s.Enqueue("c", {.op = QosOp::kRead}, kStart);
  s.Schedule(kStart, &out);
  EXPECT_EQ(s.RequestCost(QosOp::kRead, k4K), 0.5);
  EXPECT_EQ(s.RequestCost(QosOp::kRead, 2 * k4K), 1);
  EXPECT_EQ(s.RequestCost(QosOp::kWrite, k4K), 16);  // writes never
  EXPECT_TRUE(s.DeviceStats().read_only);
  s.Enqueue("c", {.op = QosOp::kWrite}, kStart);
  s.Schedule(kStart, &out);
  EXPECT_EQ(s.RequestCost(QosOp::kRead, k4K), 1) << "one write ends it";

  EXPECT_DOUBLE_EQ(TokenScheduler::LcTokenRate(Lc("b", 100'000, 0.8), 10),
                   280'000);  // ReFlex §3.2.2's example
  EXPECT_EQ(TokenScheduler::LcTokenRate(Be("c"), 10), 0);
}

TEST(QosSchedulerTest, ParametersAreChecked) {
  TokenScheduler s;
  absl::Status st = s.SetTenant(Lc("a", 100, 1.5), kStart);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("read_fraction (1.5)"), std::string::npos) << st;
  EXPECT_FALSE(s.SetTenant(Lc("a", 0, 1), kStart).ok());
  EXPECT_FALSE(s.SetTenant(Lc("", 10, 1), kStart).ok());
  EXPECT_FALSE(s.SetTenant(Lc("a", 10, 1, -absl::Seconds(1)), kStart).ok());
  EXPECT_FALSE(s.SetDevice({.tokens_per_s = -1}, kStart).ok());
  EXPECT_FALSE(s.SetDevice({.write_cost = 0}, kStart).ok());
  st = s.SetDevice({.deficit_floor = 5}, kStart);
  EXPECT_NE(st.message().find("deficit_floor (5)"), std::string::npos) << st;
  EXPECT_FALSE(s.SetDevice({.donate_fraction = 1.1}, kStart).ok());
  EXPECT_FALSE(s.SetDevice({.read_only_read_cost = 0}, kStart).ok());
  EXPECT_FALSE(s.SetDevice({.surplus_rounds = -1}, kStart).ok());
  EXPECT_TRUE(s.AllStats(kStart).empty()) << "refused changes change nothing";
}

TEST(QosSchedulerTest, LcTenantGetsItsReservationWhileBeFloods) {
  TokenScheduler s;
  ASSERT_TRUE(s.SetDevice({.tokens_per_s = 4000}, kStart).ok());
  ASSERT_TRUE(s.SetTenant(Lc("a", 2000, 1), kStart).ok());
  Sim sim(&s);
  sim.Saturate("a", 1);
  sim.Saturate("c", 0);  // unregistered: best effort, writes only
  sim.Run(absl::Seconds(10));
  EXPECT_GE(sim.dispatched("a"), 0.99 * 20'000);
  // Beyond the reservation only by the floor's burst and the cap.
  EXPECT_LE(sim.dispatched("a"), 20'000 + 50 + 1);
  EXPECT_NEAR(sim.spent("c"), 2000 * 10, 0.02 * 20'000);
  EXPECT_EQ(s.Stats("c", sim.now())->cls, QosClass::kBestEffort);
}

TEST(QosSchedulerTest, DeficitFloorIsRespectedAndCounted) {
  TokenScheduler s;
  // All the device's tokens reserved: no spare to lend a beyond its own.
  ASSERT_TRUE(s.SetDevice({.tokens_per_s = 100}, kStart).ok());
  ASSERT_TRUE(s.SetTenant(Lc("a", 10, 0), kStart).ok());  // 100 tokens/s
  std::vector<QosRequest> out;
  for (uint64_t i = 0; i < 20; ++i) {
    s.Enqueue("a", {.cookie = i, .op = QosOp::kWrite, .length = k4K}, kStart);
  }
  s.Schedule(kStart, &out);
  EXPECT_EQ(out.size(), 5u) << "0 -> -50 in writes of 10 tokens";
  EXPECT_DOUBLE_EQ(s.Stats("a", kStart)->tokens, -50);
  EXPECT_EQ(s.Stats("a", kStart)->deficit_floor_hits, 1u);
  absl::Time now = kStart;
  for (int i = 0; i < 1050; ++i) {
    now += absl::Milliseconds(1);
    s.Schedule(now, &out);
    ASSERT_GE(s.Stats("a", now)->tokens, -50 - 1e-6) << "at step " << i;
  }
  // Then 100 tokens/s: a write every 100 ms (each a step late).
  EXPECT_EQ(out.size(), 15u);
  EXPECT_GE(s.Stats("a", now)->deficit_floor_hits, 10u);
  EXPECT_EQ(s.Stats("a", now)->queued, 5u);
}

TEST(QosSchedulerTest, RequestTooBigForTheFloorWaitsForZero) {
  // A write bigger than the floor's room (256 KiB: 640 tokens) could never
  // keep the balance above -50: it waits for a balance of 0, then
  // overshoots by itself alone.
  TokenScheduler s;
  ASSERT_TRUE(s.SetDevice({.tokens_per_s = 100}, kStart).ok());
  ASSERT_TRUE(s.SetTenant(Lc("b", 10, 0), kStart).ok());  // 100 tokens/s
  std::vector<QosRequest> out;
  for (uint64_t i = 1; i <= 2; ++i) {
    s.Enqueue("b", {.cookie = i, .op = QosOp::kWrite, .length = 64 * k4K},
              kStart);
  }
  s.Schedule(kStart, &out);
  EXPECT_EQ(Cookies(out), std::vector<uint64_t>{1});
  EXPECT_DOUBLE_EQ(s.Stats("b", kStart)->tokens, -640);
  s.Schedule(kStart + absl::Seconds(6.3), &out);
  EXPECT_EQ(Cookies(out), std::vector<uint64_t>{1});
  s.Schedule(kStart + absl::Seconds(6.41), &out);
  EXPECT_EQ(Cookies(out), (std::vector<uint64_t>{1, 2}));
}

TEST(QosSchedulerTest, SurplusIsCappedAndMostlyDonated) {
  TokenScheduler s;
  ASSERT_TRUE(s.SetDevice({.tokens_per_s = 3000}, kStart).ok());
  // 1000 tokens/s; a round is 5 % of 10 ms, so the cap is 3 x 0.5 ms of
  // tokens: 1.5.
  ASSERT_TRUE(s.SetTenant(Lc("a", 1000, 1), kStart).ok());
  EXPECT_EQ(s.RoundPeriod(), absl::Microseconds(500));
  Sim sim(&s);
  sim.Saturate("c", 1);
  sim.Run(absl::Seconds(1));
  EXPECT_DOUBLE_EQ(s.Stats("a", sim.now())->tokens, 1.5);
  // c has the unreserved 2000 tokens/s and 90 % of a's idle 1000.
  EXPECT_NEAR(sim.spent("c"), 2000 + 900, 0.01 * 2900);
  const QosDeviceStats d = s.DeviceStats();
  EXPECT_NEAR(d.lc_donated, 0.9 * (1000 - 1.5), 2);
  EXPECT_NEAR(d.lc_donated / (d.lc_donated + d.lc_dropped), 0.9, 1e-9);
  EXPECT_LT(d.bucket_reset, 2) << "c took what was donated";

  // After a second idle, a burst goes only as far as cap + floor allow.
  std::vector<QosRequest> out;
  for (uint64_t i = 0; i < 1000; ++i) {
    s.Enqueue("a", {.cookie = i, .op = QosOp::kRead, .length = k4K}, sim.now());
  }
  s.Schedule(sim.now(), &out);
  size_t a_out = 0;
  for (const QosRequest& r : out) a_out += r.cookie < 1000;
  EXPECT_EQ(a_out, 51u) << "from 1.5 down to -49.5, one token a read";
}

TEST(QosSchedulerTest, BeTenantsWithEqualBacklogGetEqualTokens) {
  TokenScheduler s;
  ASSERT_TRUE(s.SetDevice({.tokens_per_s = 5000}, kStart).ok());
  ASSERT_TRUE(s.SetTenant(Lc("a", 1000, 1), kStart).ok());
  ASSERT_TRUE(s.SetTenant(Be("c"), kStart).ok());
  ASSERT_TRUE(s.SetTenant(Be("d"), kStart).ok());
  Sim sim(&s);
  sim.Saturate("a", 1);
  sim.Saturate("c", 1);  // reads: 1 token each
  sim.Saturate("d", 0);  // writes: 10 tokens each
  sim.Run(absl::Seconds(10));
  const double c = sim.spent("c"), d = sim.spent("d");
  EXPECT_NEAR(c, d, 0.02 * c);
  EXPECT_NEAR(c + d, 4000 * 10, 0.01 * 40'000);
  EXPECT_NEAR(s.Stats("c", sim.now())->token_rate, 2000, 1e-6);
}

TEST(QosSchedulerTest, BeRoundsStartOneTenantFurtherEachTime) {
  TokenScheduler s;
  ASSERT_TRUE(s.SetDevice({.tokens_per_s = 1100}, kStart).ok());
  ASSERT_TRUE(s.SetTenant(Lc("a", 100, 1), kStart).ok());
  std::vector<QosRequest> out;
  // a is kept at its floor so that it never donates: c and d have 500
  // tokens/s each, one read per 2 ms step.
  for (uint64_t i = 0; i < 1000; ++i) {
    s.Enqueue("a", {.cookie = 0, .length = k4K}, kStart);
    s.Enqueue("c", {.cookie = 1, .length = k4K}, kStart);
    s.Enqueue("d", {.cookie = 2, .length = k4K}, kStart);
  }
  s.Schedule(kStart, &out);
  std::string firsts;
  for (int step = 1; step <= 20; ++step) {
    out.clear();
    s.Schedule(kStart + step * absl::Milliseconds(2), &out);
    std::vector<uint64_t> be;
    for (uint64_t c : Cookies(out)) {
      if (c != 0) be.push_back(c);
    }
    ASSERT_EQ(be.size(), 2u) << "step " << step;
    firsts += be[0] == 1 ? 'c' : 'd';
  }
  EXPECT_EQ(firsts, "cdcdcdcdcdcdcdcdcdcd");
  EXPECT_EQ(s.DeviceStats().be_rounds, 20u);
}

TEST(QosSchedulerTest, IdleBeTenantAccumulatesNothing) {
  TokenScheduler s;
  ASSERT_TRUE(s.SetDevice({.tokens_per_s = 2000}, kStart).ok());
  ASSERT_TRUE(s.SetTenant(Lc("a", 1000, 1), kStart).ok());
  ASSERT_TRUE(s.SetTenant(Be("c"), kStart).ok());
  Sim sim(&s);
  sim.Saturate("a", 1);
  sim.Saturate("d", 1);
  sim.Run(absl::Seconds(1));
  EXPECT_EQ(s.Stats("c", sim.now())->tokens, 0) << "idle for a second";
  for (uint64_t i = 0; i < 100; ++i) {
    s.Enqueue("c", {.cookie = 1ull << 50, .length = k4K}, sim.now());
  }
  std::vector<QosRequest> out;
  s.Schedule(sim.now(), &out);
  const std::vector<uint64_t> cookies = Cookies(out);
  EXPECT_EQ(std::count(cookies.begin(), cookies.end(), 1ull << 50), 0)
      << "no tokens saved up from the idle second";
  // Queued, it earns half the unreserved 1000 tokens/s.
  EXPECT_NEAR(s.Stats("c", sim.now() + absl::Milliseconds(10))->tokens, 5,
              1e-6);
  // 100 reads take 0.2 s; then it is idle again and holds nothing.
  sim.Run(absl::Milliseconds(500));
  EXPECT_EQ(s.Stats("c", sim.now())->dispatched, 100u);
  EXPECT_EQ(s.Stats("c", sim.now())->tokens, 0);
}

TEST(QosSchedulerTest, BucketIsResetWhenARoundEnds) {
  TokenScheduler s;
  ASSERT_TRUE(s.SetDevice({.tokens_per_s = 2000}, kStart).ok());
  // Idle from the start: 1000 tokens/s, a round of 5 ms, a cap of 15.
  ASSERT_TRUE(
      s.SetTenant(Lc("a", 1000, 1, absl::Milliseconds(100)), kStart).ok());
  ASSERT_TRUE(s.SetTenant(Be("c"), kStart).ok());
  ASSERT_TRUE(s.SetTenant(Be("d"), kStart).ok());
  // 50 ms on, the bucket holds the last two rounds' income: the 1000
  // unreserved tokens/s nobody used and 90 % of a's 1000: 19 tokens.
  const absl::Time t = kStart + absl::Milliseconds(50);
  s.Enqueue("c", {.cookie = 1, .length = k4K}, t);
  EXPECT_NEAR(s.DeviceStats().bucket, 19, 1e-6);
  s.Enqueue("d", {.cookie = 2, .length = k4K}, t);
  const double reset_before = s.DeviceStats().bucket_reset;
  std::vector<QosRequest> out;
  s.Schedule(t, &out);
  // Each had half the bucket and spent a token of it on its read, then gave
  // the rest back; the round ended with c and d's turns, and the bucket.
  EXPECT_EQ(Cookies(out), (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(s.DeviceStats().be_rounds, 1u);
  EXPECT_EQ(s.DeviceStats().bucket, 0);
  EXPECT_NEAR(s.DeviceStats().bucket_reset - reset_before, 17, 1e-6);
  // So nothing is left for another read at once.
  out.clear();
  s.Enqueue("c", {.cookie = 3, .length = k4K}, t);
  s.Schedule(t, &out);
  EXPECT_TRUE(out.empty());
}

TEST(QosSchedulerTest, SpareGoesToLcTenantsWhenNoBeTenantWaits) {
  TokenScheduler s;
  ASSERT_TRUE(s.SetDevice({.tokens_per_s = 1000}, kStart).ok());
  ASSERT_TRUE(s.SetTenant(Lc("a", 300, 1), kStart).ok());
  ASSERT_TRUE(s.SetTenant(Be("c"), kStart).ok());  // registered, idle
  Sim sim(&s);
  sim.Saturate("a", 1);
  sim.Run(absl::Seconds(10));
  EXPECT_GE(sim.dispatched("a"), 0.98 * 10'000);
  EXPECT_LE(sim.dispatched("a"), 10'000 + 51);
  EXPECT_GT(s.Stats("a", sim.now())->deficit_floor_hits, 0u);
}

TEST(QosSchedulerTest, NothingIsLimitedWithoutLcTenantOrCalibration) {
  TokenScheduler s;
  ASSERT_TRUE(s.SetDevice({.tokens_per_s = 1000}, kStart).ok());
  std::vector<QosRequest> out;
  for (int i = 0; i < 5000; ++i) {
    s.Enqueue("c", {.op = QosOp::kWrite, .length = k4K}, kStart);
    s.Enqueue("d", {.op = QosOp::kRead, .length = k4K}, kStart);
  }
  EXPECT_EQ(s.NextWake(kStart), kStart);
  s.Schedule(kStart, &out);
  EXPECT_EQ(out.size(), 10'000u) << "no LC tenant: no limit";
  EXPECT_EQ(s.NextWake(kStart), absl::InfiniteFuture());
  EXPECT_FALSE(s.DeviceStats().limited);

  // An LC tenant on an uncalibrated device: no limit either.
  TokenScheduler u;
  ASSERT_TRUE(u.SetTenant(Lc("a", 10, 0), kStart).ok());
  out.clear();
  for (int i = 0; i < 1000; ++i) {
    u.Enqueue("a", {.op = QosOp::kWrite, .length = k4K}, kStart);
    u.Enqueue("c", {.op = QosOp::kWrite, .length = k4K}, kStart);
  }
  u.Schedule(kStart, &out);
  EXPECT_EQ(out.size(), 2000u);
  EXPECT_EQ(u.Stats("a", kStart)->deficit_floor_hits, 0u);

  // The first LC tenant on a calibrated device starts the limits.
  ASSERT_TRUE(s.SetTenant(Lc("a", 100, 1), kStart).ok());
  EXPECT_TRUE(s.DeviceStats().limited);
  out.clear();
  for (int i = 0; i < 100; ++i) s.Enqueue("c", {.length = k4K}, kStart);
  s.Schedule(kStart, &out);
  EXPECT_TRUE(out.empty());
}

TEST(QosSchedulerTest, RatesFollowLiveChanges) {
  TokenScheduler s;
  ASSERT_TRUE(s.SetDevice({.tokens_per_s = 5000}, kStart).ok());
  ASSERT_TRUE(s.SetTenant(Lc("a", 1000, 1), kStart).ok());
  Sim sim(&s);
  sim.Saturate("a", 1);
  sim.Saturate("c", 1);
  sim.Run(absl::Seconds(5));
  EXPECT_NEAR(sim.dispatched("a"), 5000, 60);
  EXPECT_NEAR(sim.spent("c"), 4000 * 5, 0.01 * 20'000);

  ASSERT_TRUE(s.SetTenant(Lc("a", 2000, 1), sim.now()).ok());
  EXPECT_EQ(s.LcReservedRate(), 2000);
  uint64_t a0 = sim.dispatched("a");
  double c0 = sim.spent("c");
  sim.Run(absl::Seconds(5));
  EXPECT_NEAR(sim.dispatched("a") - a0, 10'000, 0.01 * 10'000);
  EXPECT_NEAR(sim.spent("c") - c0, 3000 * 5, 0.01 * 15'000);

  // A faster device: the BE share grows by all of it.
  ASSERT_TRUE(s.SetDevice({.tokens_per_s = 6000}, sim.now()).ok());
  a0 = sim.dispatched("a");
  c0 = sim.spent("c");
  sim.Run(absl::Seconds(5));
  EXPECT_NEAR(sim.dispatched("a") - a0, 10'000, 0.01 * 10'000);
  EXPECT_NEAR(sim.spent("c") - c0, 4000 * 5, 0.01 * 20'000);

  // An LC tenant made best effort shares what is left with c.
  ASSERT_TRUE(s.SetTenant(Be("a"), sim.now()).ok());
  ASSERT_TRUE(s.SetTenant(Lc("x", 1000, 1), sim.now()).ok());  // idle
  EXPECT_EQ(s.LcReservedRate(), 1000);
  const double a1 = sim.spent("a");
  c0 = sim.spent("c");
  sim.Run(absl::Seconds(5));
  // 5000 unreserved tokens/s and 90 % of idle x's 1000, shared by two.
  EXPECT_NEAR(sim.spent("a") - a1, 2950 * 5, 0.02 * 2950 * 5);
  EXPECT_NEAR(sim.spent("c") - c0, 2950 * 5, 0.02 * 2950 * 5);
}

TEST(QosSchedulerTest, NextWakeIsWithinFivePercentOfTheStrictestSlo) {
  TokenScheduler s;
  ASSERT_TRUE(s.SetDevice({.tokens_per_s = 1000}, kStart).ok());
  ASSERT_TRUE(s.SetTenant(Lc("a", 1, 1, absl::Milliseconds(10)), kStart).ok());
  ASSERT_TRUE(s.SetTenant(Lc("b", 1, 1, absl::Milliseconds(2)), kStart).ok());
  EXPECT_EQ(s.NextWake(kStart), absl::InfiniteFuture()) << "nothing queued";
  std::vector<QosRequest> out;
  for (int i = 0; i < 60; ++i) s.Enqueue("a", {.length = k4K}, kStart);
  EXPECT_EQ(s.NextWake(kStart), kStart) << "a can go now";
  s.Schedule(kStart, &out);
  EXPECT_EQ(out.size(), 50u);
  // a can go again in a second (1 token/s); wake every 5 % of 2 ms anyway.
  EXPECT_EQ(s.NextWake(kStart), kStart + absl::Microseconds(100));
  ASSERT_TRUE(s.RemoveTenant("b", kStart, nullptr));
  EXPECT_EQ(s.NextWake(kStart), kStart + absl::Microseconds(500));
  // Sooner when a tenant's tokens come sooner.
  ASSERT_TRUE(s.SetTenant(Lc("a", 10'000, 1), kStart).ok());  // 0.1 ms/token
  const absl::Time wake = s.NextWake(kStart);
  EXPECT_GT(wake, kStart);
  EXPECT_LE(wake, kStart + absl::Microseconds(101));
  out.clear();
  s.Schedule(wake, &out);
  EXPECT_EQ(out.size(), 1u);
}

TEST(QosSchedulerTest, AnEarlierTimeCountsAsTheLatestSeen) {
  TokenScheduler s;
  ASSERT_TRUE(s.SetDevice({.tokens_per_s = 100}, kStart).ok());
  ASSERT_TRUE(s.SetTenant(Lc("a", 10, 0), kStart).ok());  // 100 tokens/s
  const absl::Time t = kStart + absl::Seconds(1);
  std::vector<QosRequest> out;
  for (int i = 0; i < 20; ++i) {
    s.Enqueue("a", {.op = QosOp::kWrite, .length = k4K}, t);
  }
  s.Schedule(t, &out);
  EXPECT_EQ(out.size(), 5u);
  const double tokens = s.Stats("a", t)->tokens;
  s.Enqueue("a", {.op = QosOp::kWrite, .length = k4K}, kStart);
  s.Schedule(kStart, &out);  // no tokens from going back in time
  EXPECT_EQ(out.size(), 5u);
  EXPECT_EQ(s.Stats("a", t)->tokens, tokens);
  s.Schedule(t + absl::Milliseconds(101), &out);
  EXPECT_EQ(out.size(), 6u);
}

TEST(QosSchedulerTest, UnknownAndRemovedTenants) {
  TokenScheduler s;
  ASSERT_TRUE(s.SetDevice({.tokens_per_s = 1000}, kStart).ok());
  ASSERT_TRUE(s.SetTenant(Lc("a", 10, 0), kStart).ok());
  std::vector<QosRequest> out;
  for (uint64_t i = 0; i < 10; ++i) {
    s.Enqueue("a", {.cookie = i, .op = QosOp::kWrite, .length = k4K}, kStart);
    s.Enqueue("zed", {.cookie = 100 + i, .length = k4K}, kStart);
  }
  std::optional<QosTenantStats> zed = s.Stats("zed", kStart);
  ASSERT_TRUE(zed.has_value());
  EXPECT_EQ(zed->cls, QosClass::kBestEffort);
  EXPECT_EQ(zed->queued, 10u);
  s.Schedule(kStart, &out);
  EXPECT_EQ(out.size(), 5u);  // a to its floor; zed has no tokens yet
  EXPECT_EQ(s.queued(), 15u);

  std::vector<QosRequest> orphaned;
  ASSERT_TRUE(s.RemoveTenant("a", kStart, &orphaned));
  EXPECT_EQ(Cookies(orphaned), (std::vector<uint64_t>{5, 6, 7, 8, 9}));
  EXPECT_FALSE(s.Stats("a", kStart).has_value());
  EXPECT_EQ(s.LcReservedRate(), 0);
  EXPECT_FALSE(s.RemoveTenant("a", kStart, &orphaned));
  // No LC tenant left: zed's requests go.
  out.clear();
  s.Schedule(kStart, &out);
  EXPECT_EQ(out.size(), 10u);
  EXPECT_EQ(s.queued(), 0u);
  s.Complete("a", QosOp::kRead, k4K, absl::Milliseconds(1), kStart);  // ok
}

TEST(QosSchedulerTest, CountersAndLatencyPercentiles) {
  TokenScheduler s;
  absl::Time now = kStart;
  std::vector<QosRequest> out;
  for (int i = 1; i <= 1000; ++i) {
    s.Enqueue("c",
              {.op = i % 4 == 0 ? QosOp::kWrite : QosOp::kRead, .length = k4K},
              now);
    s.Schedule(now, &out);
    s.Complete("c", out.back().op, k4K, absl::Microseconds(i), now);
    now += absl::Milliseconds(1);
  }
  const QosTenantStats st = *s.Stats("c", now);
  EXPECT_EQ(st.dispatched, 1000u);
  EXPECT_EQ(st.completed, 1000u);
  EXPECT_EQ(st.bytes_written, 250 * k4K);
  EXPECT_EQ(st.bytes_read, 750 * k4K);
  EXPECT_EQ(st.tokens_spent, 750 + 250 * 10);
  EXPECT_NEAR(st.iops, 1000, 20);
  // Upper bucket edges: never below the truth, at most 12.5 % above.
  EXPECT_GE(st.p50, absl::Microseconds(500));
  EXPECT_LE(st.p50, absl::Microseconds(500) * 1.125);
  EXPECT_GE(st.p95, absl::Microseconds(950));
  EXPECT_LE(st.p95, absl::Microseconds(950) * 1.125);
  EXPECT_GE(st.p99, absl::Microseconds(990));
  EXPECT_LE(st.p99, absl::Microseconds(990) * 1.125);
  // Both fade out: a second on, no IOPS; 10 s on, no percentiles.
  EXPECT_EQ(s.Stats("c", now + absl::Seconds(1))->iops, 0);
  EXPECT_EQ(s.Stats("c", now + absl::Seconds(11))->p95, absl::ZeroDuration());
}

TEST(QosSchedulerTest, AThousandBeTenantsShareEqually) {
  TokenScheduler s;
  ASSERT_TRUE(s.SetDevice({.tokens_per_s = 11'000}, kStart).ok());
  ASSERT_TRUE(s.SetTenant(Lc("a", 1000, 1), kStart).ok());
  Sim sim(&s);
  sim.Saturate("a", 1);
  for (int i = 0; i < 1000; ++i) sim.Saturate(absl::StrCat("be", i), 1, 4);
  sim.Run(absl::Seconds(2), absl::Milliseconds(1));
  // 10 tokens/s each: 20 reads in 2 s, give or take a turn.
  double lo = 1e9, hi = 0;
  for (int i = 0; i < 1000; ++i) {
    const double spent = sim.spent(absl::StrCat("be", i));
    lo = std::min(lo, spent);
    hi = std::max(hi, spent);
  }
  EXPECT_GE(lo, 18);
  EXPECT_LE(hi, 21);
  EXPECT_NEAR(sim.dispatched("a"), 2000, 60);
}

// ReFlex's scenario 1 at dilation 50 (issue 48): a device of 8400 tokens/s,
// writes 10 tokens; LC A 2400 IOPS of reads, LC B 1400 IOPS at 80 % reads;
// BE C at 95 % and BE D at 25 % reads. Everyone saturates, unless B offers
// `b_offered` of its reservation.
struct Scenario {
  double a_iops, b_iops, b_spent, c_spent, d_spent;
  uint64_t c_ops, d_ops;
};

Scenario RunReflex(double b_offered) {
  TokenScheduler s;
  EXPECT_TRUE(
      s.SetDevice({.tokens_per_s = 8400, .write_cost = 10}, kStart).ok());
  EXPECT_TRUE(
      s.SetTenant(Lc("A", 2400, 1, absl::Milliseconds(25)), kStart).ok());
  EXPECT_TRUE(
      s.SetTenant(Lc("B", 1400, 0.8, absl::Milliseconds(25)), kStart).ok());
  EXPECT_TRUE(s.SetTenant(Be("C"), kStart).ok());
  EXPECT_TRUE(s.SetTenant(Be("D"), kStart).ok());
  EXPECT_NEAR(s.LcReservedRate(), 2400 + 1400 * 2.8, 1e-6);
  Sim sim(&s);
  sim.Saturate("A", 1);
  if (b_offered < 1) {
    sim.Offer("B", 0.8, 1400 * b_offered);
  } else {
    sim.Saturate("B", 0.8);
  }
  sim.Saturate("C", 0.95);
  sim.Saturate("D", 0.25);
  sim.Run(absl::Seconds(10));
  return {sim.dispatched("A") / 10.0,
          sim.dispatched("B") / 10.0,
          sim.spent("B"),
          sim.spent("C"),
          sim.spent("D"),
          sim.dispatched("C"),
          sim.dispatched("D")};
}

TEST(QosSchedulerTest, ReflexScenario1) {
  const Scenario r = RunReflex(1);
  EXPECT_GE(r.a_iops, 0.99 * 2400);
  EXPECT_GE(r.b_iops, 0.99 * 1400);
  EXPECT_LE(r.a_iops, 2400 + 10);  // no more than reserved (and the burst)
  EXPECT_LE(r.b_iops, 1400 + 10);
  // C and D share the 2080 unreserved tokens/s: ~717 and ~134 IOPS.
  EXPECT_NEAR(r.c_spent, r.d_spent, 0.15 * r.c_spent);
  EXPECT_NEAR(r.c_spent + r.d_spent, 2080 * 10, 0.02 * 20'800);
  EXPECT_NEAR(r.c_ops / 10.0, 717, 0.05 * 717);
  EXPECT_NEAR(r.d_ops / 10.0, 134, 0.05 * 134);
}

TEST(QosSchedulerTest, ReflexScenario2) {
  const Scenario full = RunReflex(1);
  const Scenario part = RunReflex(0.65);
  EXPECT_GE(part.a_iops, 0.99 * 2400);
  EXPECT_GE(part.b_iops, 0.99 * 0.65 * 1400) << "B gets all it asks for";
  const double b_unused = 1400 * 2.8 * 10 - part.b_spent;
  EXPECT_GT(b_unused, 0.3 * 39'200);
  const double be_gain =
      (part.c_spent + part.d_spent) - (full.c_spent + full.d_spent);
  EXPECT_GE(be_gain, 0.8 * b_unused);
  EXPECT_NEAR(part.c_spent, part.d_spent, 0.15 * part.c_spent);
}

}  // namespace
}  // namespace sroute
