// SPDX-License-Identifier: Apache-2.0
#include "rpc/controller_channels.h"

#include <algorithm>

#include "rpc/leader.h"
#include "util/strings.h"

namespace sroute {

absl::StatusOr<std::unique_ptr<ControllerChannels>> ControllerChannels::Create(
    IoThreads* threads, std::string_view addresses,
    const RpcChannel::Options& base) {
  std::unique_ptr<ControllerChannels> out(
      new ControllerChannels(threads, base));
  MutexLock l(&out->mu_);
  for (std::string_view a : StrSplit(addresses, ',')) {
    if (a.empty()) continue;
    if (absl::Status s = out->Add(a); !s.ok()) return s;
  }
  if (out->channels_.empty()) {
    return absl::InvalidArgumentError("no controller address");
  }
  return out;
}

absl::Status ControllerChannels::Add(std::string_view address) {
  RpcChannel::Options o = base_;
  o.address = std::string(address);
  auto channel = RpcChannel::Create(threads_, std::move(o));
  if (!channel.ok()) {
    return absl::Status(
        channel.status().code(),
        StrCat("controller ", address, ": ", channel.status().message()));
  }
  addresses_.emplace_back(address);
  channels_.push_back(*std::move(channel));
  return absl::OkStatus();
}

size_t ControllerChannels::size() const {
  MutexLock l(&mu_);
  return channels_.size();
}

RpcChannel& ControllerChannels::at(size_t i) {
  MutexLock l(&mu_);
  return *channels_[i];
}

std::string ControllerChannels::address(size_t i) const {
  MutexLock l(&mu_);
  return addresses_[i];
}

std::vector<RpcChannel*> ControllerChannels::All() const {
  MutexLock l(&mu_);
  std::vector<RpcChannel*> out;
  for (const auto& c : channels_) out.push_back(c.get());
  return out;
}

std::optional<size_t> ControllerChannels::Follow(size_t from,
                                                 const absl::Status& why) {
  MutexLock l(&mu_);
  size_t to = (from + 1) % channels_.size();
  if (IsNotLeader(why)) {
    const std::string leader = LeaderOf(why);
    if (leader.empty()) return std::nullopt;  // an election is under way
    auto it = std::find(addresses_.begin(), addresses_.end(), leader);
    if (it != addresses_.end()) {
      to = it - addresses_.begin();
    } else if (Add(leader).ok()) {
      to = channels_.size() - 1;
    } else {
      return std::nullopt;
    }
  } else if (!absl::IsUnavailable(why) && !absl::IsDeadlineExceeded(why)) {
    return std::nullopt;  // an answer, not an absence
  }
  size_t expected = from;
  if (to != from) current_.compare_exchange_strong(expected, to);
  const size_t now = current_.load();
  if (now == from) return std::nullopt;
  return now;
}

}  // namespace sroute
