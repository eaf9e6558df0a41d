#include "stages/replica_set/replica_set_stage.h"

#include <fcntl.h>

#include <algorithm>
#include <atomic>
#include <deque>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "rules/io_header.h"
#include "sswitch/sswitch.h"
#include "util/clock.h"
#include "util/errno_status.h"
#include "util/log.h"
#include "util/mutex.h"
#include "util/strings.h"

namespace sroute {
namespace {

// Whether `io` changes what a member holds: it goes to every member.
bool IsChange(const Io& io) {
  return io.header.op_class() != kOpClassRead || ChangesFileBytes(io);
}

// A member's failure (it is taken out of the set), as opposed to the op's
// own answer (ENOENT, EEXIST, ...), which every member would give.
bool IsMemberFailure(const absl::Status& s) {
  if (s.ok()) return false;
  if (absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s) ||
      absl::IsCancelled(s) || absl::IsInternal(s)) {
    return true;
  }
  const int err = ErrnoOf(s);
  return err == EIO || err == ETIMEDOUT || err == ENOSPC || err == EROFS;
}

class ReplicaSetStage : public HostStage {
 public:
  ReplicaSetStage(proto::StageConfig config, SSwitch* sw)
      : sw_(sw), config_(std::move(config)) {
    Apply(config_, /*initial=*/true);
  }

  void Submit(Io* io, const Forward&) override {
    const std::vector<int> live = Live();
    if (live.empty()) {
      io->Complete(ErrnoStatus(
          EIO, StrCat("replica set ", name_, ": no member left in the set")));
      return;
    }
    if (IsChange(*io)) {
      changes_.fetch_add(1, std::memory_order_relaxed);
      Order(io);
    } else {
      reads_.fetch_add(1, std::memory_order_relaxed);
      auto state = std::make_shared<Read>();
      state->parent = io;
      ReadFrom(state);
    }
  }

  proto::StageConfig config() const override {
    MutexLock l(&mu_);
    return config_;
  }

  absl::Status Reconfigure(const proto::StageConfig& next) override {
    if (absl::Status s = Check(next); !s.ok()) return s;
    MutexLock l(&mu_);
    config_ = next;
    Apply(next, /*initial=*/false);
    return absl::OkStatus();
  }

  void Report(proto::StageStats* out) const override {
    auto& c = *out->mutable_counters();
    c["reads"] = static_cast<int64_t>(reads_.load());
    c["changes"] = static_cast<int64_t>(changes_.load());
    c["failovers"] = static_cast<int64_t>(failovers_.load());
    MutexLock l(&mu_);
    int in = 0;
    for (size_t i = 0; i < members_.size(); ++i) {
      const bool is_in = !out_[i];
      c[StrCat("member.", members_[i], ".in")] = is_in ? 1 : 0;
      c[StrCat("member.", members_[i], ".reads")] =
          static_cast<int64_t>(load_[i]->reads.load());
      c[StrCat("member.", members_[i], ".read_us")] =
          static_cast<int64_t>(load_[i]->ewma_ns.load() / 1000);
      in += is_in;
    }
    c["members_in"] = in;
  }

  static absl::Status Check(const proto::StageConfig& c) {
    const proto::ReplicaSetOptions& o = c.replica_set();
    if (o.member().empty()) {
      return absl::InvalidArgumentError(
          "replica_set: give at least one member");
    }
    for (int i = 0; i < o.member_size(); ++i) {
      if (o.member(i).empty() || o.member(i).find('/') != std::string::npos) {
        return absl::InvalidArgumentError(StrCat(
            "replica_set: member '", o.member(i), "' is not an endpoint name"));
      }
      for (int j = 0; j < i; ++j) {
        if (o.member(i) == o.member(j)) {
          return absl::InvalidArgumentError(
              StrCat("replica_set: member ", o.member(i), " is named twice"));
        }
      }
    }
    if (!o.primary().empty() && std::find(o.member().begin(), o.member().end(),
                                          o.primary()) == o.member().end()) {
      return absl::InvalidArgumentError(
          StrCat("replica_set: primary ", o.primary(), " is not a member"));
    }
    if (!o.read().empty() && o.read() != "primary" && o.read() != "random" &&
        o.read() != "least_loaded" && o.read() != "weighted") {
      return absl::InvalidArgumentError(
          StrCat("replica_set: read '", o.read(),
                 "' is not primary, random, least_loaded or weighted"));
    }
    if (o.read() == "weighted" && o.weight_size() != o.member_size()) {
      return absl::InvalidArgumentError(
          StrCat("replica_set: read weighted needs a weight for each of the ",
                 o.member_size(), " members, not ", o.weight_size()));
    }
    if (!o.ack().empty() && o.ack() != "all" && o.ack() != "quorum") {
      return absl::InvalidArgumentError(
          StrCat("replica_set: ack '", o.ack(), "' is not all or quorum"));
    }
    return absl::OkStatus();
  }

 private:
  // The stage's first members are all in the set (they hold the files:
  // the operator says so by naming them). Set again, a member keeps its
  // place, and one new to the set starts out: it holds nothing yet, and
  // nothing brings it up to date until resync exists.
  // REQUIRES: mu_ held, or construction.
  void Apply(const proto::StageConfig& c,
             bool initial) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    const proto::ReplicaSetOptions& o = c.replica_set();
    name_ = c.name();
    std::vector<std::string> old_members = std::move(members_);
    std::vector<bool> old_out = std::move(out_);
    members_.assign(o.member().begin(), o.member().end());
    out_.assign(members_.size(), !initial);
    for (size_t i = 0; i < members_.size() && !initial; ++i) {
      auto it = std::find(old_members.begin(), old_members.end(), members_[i]);
      if (it != old_members.end()) out_[i] = old_out[it - old_members.begin()];
    }
    primary_ = 0;
    for (size_t i = 0; i < members_.size(); ++i) {
      if (members_[i] == o.primary()) primary_ = static_cast<int>(i);
    }
    read_ = o.read() == "random"         ? ReadPolicy::kRandom
            : o.read() == "least_loaded" ? ReadPolicy::kLeastLoaded
            : o.read() == "weighted"     ? ReadPolicy::kWeighted
                                         : ReadPolicy::kPrimary;
    weights_.assign(o.weight().begin(), o.weight().end());
    quorum_ = o.ack() == "quorum";
    load_.clear();
    for (size_t i = 0; i < members_.size(); ++i) {
      load_.push_back(std::make_unique<Load>());
    }
  }

  // A member's reads now and lately, for least_loaded.
  struct Load {
    std::atomic<int64_t> in_flight{0};
    std::atomic<uint64_t> ewma_ns{0};  // of its read times, weight 1/5
    std::atomic<uint64_t> reads{0};
  };
  // The member least loaded: fewest reads in flight, weighed by how long
  // its reads took lately (a member never read yet goes first).
  int LeastLoaded(const std::vector<int>& live) const {
    int best = live.front();
    double best_score = 0;
    for (int m : live) {
      const Load& l = *load_[m];
      const double score =
          static_cast<double>(l.in_flight.load(std::memory_order_relaxed) + 1) *
          static_cast<double>(
              std::max<uint64_t>(l.ewma_ns.load(std::memory_order_relaxed), 1));
      if (m == live.front() || score < best_score) {
        best = m;
        best_score = score;
      }
    }
    return best;
  }

  // Members in the set, the one to read first first.
  std::vector<int> Live() {
    MutexLock l(&mu_);
    std::vector<int> live;
    for (size_t i = 0; i < members_.size(); ++i) {
      if (!out_[i]) live.push_back(static_cast<int>(i));
    }
    auto first = std::find(live.begin(), live.end(), primary_);
    if (read_ == ReadPolicy::kRandom && !live.empty()) {
      thread_local std::minstd_rand rng(std::random_device{}());
      first = live.begin() + static_cast<long>(rng() % live.size());
    } else if (read_ == ReadPolicy::kLeastLoaded && !live.empty()) {
      first = std::find(live.begin(), live.end(), LeastLoaded(live));
    } else if (read_ == ReadPolicy::kWeighted && !live.empty()) {
      uint64_t total = 0;
      for (int m : live) total += weights_[m];
      if (total != 0) {
        thread_local std::minstd_rand rng(std::random_device{}());
        uint64_t pick = rng() % total;
        for (auto it = live.begin(); it != live.end(); ++it) {
          if (pick < weights_[*it]) {
            first = it;
            break;
          }
          pick -= weights_[*it];
        }
      }
    }
    if (first != live.end()) std::rotate(live.begin(), first, live.end());
    return live;
  }

  void TakeOut(int member, const absl::Status& why) {
    MutexLock l(&mu_);
    if (out_[member]) return;
    out_[member] = true;
    LogWarning("replica set ", name_, ": member ", members_[member],
               " leaves the set: ", why.message());
  }

  std::string MemberName(int member) {
    MutexLock l(&mu_);
    return members_[member];
  }

  // //HOST/PATH as //MEMBER/PATH ("" if `file` is not a file name).
  static std::string OnMember(const std::string& member,
                              const std::string& file) {
    FileName name;
    if (!SplitFileName(file, &name)) return "";
    return StrCat("//", member, "/", name.path);
  }

  // Sends `child` (for `member`) on; a rename's or link's other name
  // too.
  void SendTo(Io* child, int member) {
    const std::string m = MemberName(member);
    if (!child->args.second_file.empty() &&
        (child->header.op == Op::kRenameFrom ||
         child->header.op == Op::kRenameTo || child->header.op == Op::kLink)) {
      child->args.second_file = OnMember(m, child->args.second_file);
    }
    sw_->SubmitDirect(child, OnMember(m, child->header.file));
  }

  // --- Order: overlapping changes to a file, one at a time, in arrival
  // order, so that every member applies them in the same order (two
  // writes of one range racing to three members could otherwise land in
  // different orders). Writes and fallocates hold their byte range; any
  // other change holds the whole file. (Renames are ordered by their first
  // name only.)
  struct Ordered {
    uint64_t id;
    Io* io;
    uint64_t begin, end;
  };
  struct FileOrder {
    std::vector<Ordered> running;
    std::deque<Ordered> waiting;
  };
  static bool Overlap(const Ordered& a, const Ordered& b) {
    return a.begin < b.end && b.begin < a.end;
  }
  template <typename Range>
  static bool OverlapsAny(const Ordered& o, const Range& others) {
    return std::any_of(others.begin(), others.end(),
                       [&](const Ordered& x) { return Overlap(o, x); });
  }

  void Order(Io* io) {
    Ordered o{0, io, 0, UINT64_MAX};
    if (io->header.op == Op::kWrite || io->header.op == Op::kFallocate) {
      o.begin = io->header.offset;
      o.end = io->header.offset + std::max<uint64_t>(io->header.length, 1);
    }
    {
      MutexLock l(&order_mu_);
      o.id = ++next_order_id_;
      FileOrder& f = order_[io->header.file];
      if (OverlapsAny(o, f.running) || OverlapsAny(o, f.waiting)) {
        f.waiting.push_back(o);
        return;
      }
      f.running.push_back(o);
    }
    Start(io, o.id);
  }

  // Ends change `id` of `file`; starts the waiting ones it held back.
  void Release(const std::string& file, uint64_t id) {
    std::vector<Ordered> start;
    {
      MutexLock l(&order_mu_);
      auto it = order_.find(file);
      if (it == order_.end()) return;
      FileOrder& f = it->second;
      std::erase_if(f.running, [&](const Ordered& o) { return o.id == id; });
      std::deque<Ordered> still;
      for (const Ordered& w : f.waiting) {
        if (OverlapsAny(w, f.running) || OverlapsAny(w, still)) {
          still.push_back(w);
        } else {
          f.running.push_back(w);
          start.push_back(w);
        }
      }
      f.waiting.swap(still);
      if (f.running.empty() && f.waiting.empty()) order_.erase(it);
    }
    for (const Ordered& o : start) Start(o.io, o.id);
  }

  void Start(Io* io, uint64_t id) {
    const std::vector<int> live = Live();
    if (live.empty()) {
      const std::string file = io->header.file;
      io->Complete(ErrnoStatus(
          EIO, StrCat("replica set ", name_, ": no member left in the set")));
      Release(file, id);
      return;
    }
    Change(io, live, id);
  }

  struct ChangeJoin {
    Io* parent = nullptr;
    std::string file;
    uint64_t order_id = 0;
    std::vector<int> members;
    std::vector<std::unique_ptr<Io>> children;
    Mutex mu;
    size_t answered ABSL_GUARDED_BY(mu) = 0;
  };

  // Every member in the set gets the change; the parent completes when all
  // answered (the caller's buffers stay in use until then).
  void Change(Io* io, const std::vector<int>& live, uint64_t order_id) {
    auto join = std::make_shared<ChangeJoin>();
    join->parent = io;
    join->file = io->header.file;
    join->order_id = order_id;
    join->members = live;
    for (size_t i = 0; i < live.size(); ++i) {
      join->children.push_back(sw_->NewChild(*io));
    }
    for (size_t i = 0; i < live.size(); ++i) {
      join->children[i]->set_completion([this, join](Io&) {
        {
          MutexLock l(&join->mu);
          if (++join->answered < join->children.size()) return;
        }
        FinishChange(*join);
        Release(join->file, join->order_id);
      });
    }
    for (size_t i = 0; i < live.size(); ++i) {
      SendTo(join->children[i].get(), live[i]);
    }
  }

  void FinishChange(ChangeJoin& join) {
    size_t total;
    {
      MutexLock l(&mu_);
      total = members_.size();
    }
    const Io* first_ok = nullptr;
    const Io* answer = nullptr;  // the op's own error, if every member gave one
    size_t ok = 0;
    for (size_t i = 0; i < join.children.size(); ++i) {
      const Io& c = *join.children[i];
      if (c.status.ok()) {
        ++ok;
        if (first_ok == nullptr) first_ok = &c;
      } else if (IsMemberFailure(c.status)) {
        TakeOut(join.members[i], c.status);
      } else if (answer == nullptr) {
        answer = &c;
      }
    }
    // Members that applied it while another refused it (not a failure of
    // that one): the others diverged; they leave the set.
    if (first_ok != nullptr && answer != nullptr) {
      for (size_t i = 0; i < join.children.size(); ++i) {
        const Io& c = *join.children[i];
        if (!c.status.ok() && !IsMemberFailure(c.status)) {
          TakeOut(join.members[i], c.status);
        }
      }
    }
    Io* parent = join.parent;
    const size_t needed = quorum_ ? total / 2 + 1 : total;
    if (first_ok != nullptr && ok >= needed) {
      parent->AdoptResults(*first_ok);
      parent->Complete(absl::OkStatus());
      return;
    }
    if (first_ok == nullptr && answer != nullptr) {
      parent->AdoptResults(*answer);
      parent->Complete(answer->status);
      return;
    }
    parent->Complete(ErrnoStatus(
        EIO, StrCat("replica set ", name_, ": ", ok, " of ", total,
                    " members applied the change; ", needed, " needed")));
  }

  struct Read {
    Io* parent = nullptr;
    // Every attempt lives as long as the read: the next one starts inside
    // the completion of the one before.
    std::vector<std::unique_ptr<Io>> attempts;
    std::vector<int> tried;
  };

  // The first member in the set not tried yet; a member's failure takes it
  // out and the read goes to the next.
  void ReadFrom(const std::shared_ptr<Read>& state) {
    int member = -1;
    for (int m : Live()) {
      if (std::find(state->tried.begin(), state->tried.end(), m) ==
          state->tried.end()) {
        member = m;
        break;
      }
    }
    if (member < 0) {
      state->parent->Complete(ErrnoStatus(
          EIO, StrCat("replica set ", name_, ": no member could answer")));
      return;
    }
    state->tried.push_back(member);
    state->attempts.push_back(sw_->NewChild(*state->parent));
    Io* attempt = state->attempts.back().get();
    Load& load = *load_[member];
    load.in_flight.fetch_add(1, std::memory_order_relaxed);
    load.reads.fetch_add(1, std::memory_order_relaxed);
    attempt->set_completion(
        [this, state, member, &load, start = MonotonicNanos()](Io& a) {
          // Racing updates may lose one another's sample: an estimate.
          const uint64_t took = MonotonicNanos() - start;
          const uint64_t old = load.ewma_ns.load(std::memory_order_relaxed);
          load.ewma_ns.store(old == 0 ? took : (old * 4 + took) / 5,
                             std::memory_order_relaxed);
          load.in_flight.fetch_sub(1, std::memory_order_relaxed);
          if (IsMemberFailure(a.status)) {
            TakeOut(member, a.status);
            failovers_.fetch_add(1, std::memory_order_relaxed);
            ReadFrom(state);
            return;
          }
          state->parent->AdoptResults(a);
          state->parent->Complete(a.status);
        });
    SendTo(attempt, member);
  }

  SSwitch* const sw_;
  mutable Mutex mu_;
  proto::StageConfig config_ ABSL_GUARDED_BY(mu_);
  std::string name_;
  std::vector<std::string> members_ ABSL_GUARDED_BY(mu_);
  std::vector<bool> out_ ABSL_GUARDED_BY(mu_);
  int primary_ ABSL_GUARDED_BY(mu_) = 0;
  enum class ReadPolicy { kPrimary, kRandom, kLeastLoaded, kWeighted };
  std::vector<uint32_t> weights_ ABSL_GUARDED_BY(mu_);
  ReadPolicy read_ ABSL_GUARDED_BY(mu_) = ReadPolicy::kPrimary;
  // One per member, made again only with no IO inside (Reconfigure).
  std::vector<std::unique_ptr<Load>> load_;
  std::atomic<bool> quorum_{false};
  // Guards the order of changes per file. A leaf.
  Mutex order_mu_;
  uint64_t next_order_id_ ABSL_GUARDED_BY(order_mu_) = 0;
  absl::flat_hash_map<std::string, FileOrder> order_ ABSL_GUARDED_BY(order_mu_);
  std::atomic<uint64_t> reads_{0}, changes_{0}, failovers_{0};
};

}  // namespace

void RegisterReplicaSetStage(StageRegistry& registry) {
  (void)registry.Register(
      "replica_set",
      [](const proto::StageConfig& config,
         const StageEnv& env) -> absl::StatusOr<std::shared_ptr<HostStage>> {
        if (absl::Status s = ReplicaSetStage::Check(config); !s.ok()) return s;
        if (env.sswitch == nullptr) {
          return absl::InvalidArgumentError("replica_set: needs its sSwitch");
        }
        return std::make_shared<ReplicaSetStage>(config, env.sswitch);
      });
}

}  // namespace sroute
