// SPDX-License-Identifier: Apache-2.0
// The replica_set stage's steering (issue 49; replica_set_impl.h): the
// read policies' options taken live, the weighted pick of a read's member
// (weight times AIMD), and with placement anywhere the members a write of
// whole regions goes to.
#include <algorithm>
#include <random>

#include "stages/replica_set/replica_set_impl.h"

namespace sroute {

void ReplicaSetStage::ApplySteering(const proto::ReplicaSetOptions& o) {
  weights_.assign(o.weight().begin(), o.weight().end());
  steer_ = o.steer();
  read_ = PolicyOf(o.read(), ReadPolicy::kPrimary);
  if (steer_ == "fds") read_ = ReadPolicy::kHash;
  if (steer_ == "reflex" || steer_ == "gimbal" || steer_ == "swan" ||
      steer_ == "sandook") {
    read_ = ReadPolicy::kWeighted;
  }
  const double floor =
      (o.has_aimd_floor_percent() ? o.aimd_floor_percent() : 5) / 100.0;
  for (auto& load : load_) load->aimd.set_floor(floor);
  copies_ =
      o.copies() == 0 ? std::min<uint32_t>(2, members_.size()) : o.copies();
  write_weight_.assign(members_.size(), 0);
  write_mode_ = 0;
  for (int j = 0; j < o.write_member_size(); ++j) {
    for (size_t i = 0; i < members_.size(); ++i) {
      if (members_[i] != o.write_member(j)) continue;
      write_weight_[i] = o.write_weight_size() == 0
                             ? 1
                             : std::max<uint32_t>(1, o.write_weight(j));
      write_mode_ |= bits_.at(members_[i]);
    }
  }
  even_weights_ = steer_ == "gimbal" || steer_ == "swan";
  write_mode_now_.store(write_mode_, std::memory_order_relaxed);
  const bool aimd = steer_ == "gimbal" || steer_ == "sandook";
  if (!aimd) {
    for (auto& load : load_) load->aimd.Reset();
  }
  aimd_.store(aimd);
}

std::vector<int>::iterator ReplicaSetStage::PickWeighted(
    std::vector<int>& live) {
  // gimbal weighs members evenly; the others by `weight` (even without).
  const bool even = weights_.empty() || even_weights_;
  const bool aimd = aimd_.load(std::memory_order_relaxed);
  double weight[64];
  double total = 0;
  for (size_t j = 0; j < live.size() && j < 64; ++j) {
    const int m = live[j];
    double w = even ? 1.0 : static_cast<double>(weights_[m]);
    if (aimd) w *= load_[m]->aimd.multiplier();
    weight[j] = w;
    total += w;
  }
  if (total <= 0) return live.end();  // no weight anywhere: the primary
  thread_local std::minstd_rand rng(std::random_device{}());
  double pick = std::uniform_real_distribution<double>(0, total)(rng);
  for (size_t j = 0; j < live.size() && j < 64; ++j) {
    if (pick < weight[j]) return live.begin() + static_cast<long>(j);
    pick -= weight[j];
  }
  return live.begin() +
         static_cast<long>(std::min<size_t>(live.size(), 64) - 1);
}

bool ReplicaSetStage::MarkIsCommonMode(int member, uint64_t now) const {
  // (The latest reply, not marks within a time: a caller preempted between
  // its reads must not see the others' marks as old. A member out of the
  // set has no recent reply: then it is not common mode.)
  constexpr uint64_t kRecent = 1'000'000'000;
  if (load_.size() < 2) return false;
  for (size_t i = 0; i < load_.size(); ++i) {
    if (static_cast<int>(i) == member) continue;
    const Load& other = *load_[i];
    const uint64_t at = other.last_reply_ns.load(std::memory_order_relaxed);
    if (!other.last_reply_marked.load(std::memory_order_relaxed) || at == 0 ||
        at + kRecent < now) {
      return false;
    }
  }
  return true;
}

uint64_t ReplicaSetStage::WriteMode() {
  return write_mode_now_.load(std::memory_order_relaxed);
}

std::vector<int> ReplicaSetStage::ChooseWriters(const std::vector<int>& live) {
  MutexLock l(&mu_);
  // Write-mode members by weight, without putting one back; then, if too
  // few of them are in the set, the others at random.
  thread_local std::minstd_rand rng(std::random_device{}());
  std::vector<int> pool = live, out;
  while (out.size() < copies_ && !pool.empty()) {
    double total = 0;
    for (int m : pool) total += write_weight_[m];
    size_t pick = 0;
    if (total > 0) {
      double x = std::uniform_real_distribution<double>(0, total)(rng);
      for (; pick + 1 < pool.size(); ++pick) {
        if (x < write_weight_[pool[pick]]) break;
        x -= write_weight_[pool[pick]];
      }
      if (write_weight_[pool[pick]] == 0) pick = 0;  // (rounding)
    } else {
      pick = rng() % pool.size();
    }
    out.push_back(pool[pick]);
    pool.erase(pool.begin() + static_cast<long>(pick));
    bool window_left = false;
    for (int m : pool) window_left = window_left || write_weight_[m] > 0;
    if (total > 0 && !window_left) {
      // The window is used up: the rest at random among the others.
      std::shuffle(pool.begin(), pool.end(), rng);
    }
  }
  return out;
}

}  // namespace sroute
