// SPDX-License-Identifier: Apache-2.0
#include "fuse/passthrough.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "util/log.h"
#include "util/strings.h"

namespace sroute {

namespace {
// The kernel's ABI (include/uapi/linux/fuse.h, 7.40), which Debian 12's
// header lacks.
struct FuseBackingMap {
  int32_t fd;
  uint32_t flags;
  uint64_t padding;
};
constexpr unsigned long kBackingOpen = _IOW(229, 1, FuseBackingMap);
constexpr unsigned long kBackingClose = _IOW(229, 2, uint32_t);

std::string WhyNoBackingFile(int err) {
  switch (err) {
    case EPERM:
      return "set-ID bits (a write past the daemon would keep them)";
    case EINVAL:
      return "not a regular file";
    default:
      return StrCat("its backing file could not be opened (",
                    std::strerror(err), ")");
  }
}

std::string WhyKernelRefused(int err) {
  switch (err) {
    case EPERM:
      return "the kernel refused a backing file (needs CAP_SYS_ADMIN)";
    case ELOOP:
      return "the backing file is on a stacked file system";
    default:
      return StrCat("the kernel refused a backing file (", std::strerror(err),
                    ")");
  }
}
}  // namespace

PassthroughFiles::~PassthroughFiles() {
  MutexLock l(&mu_);
  for (auto& [ino, b] : backing_) {
    uint32_t id = static_cast<uint32_t>(b.id);
    (void)ioctl(fuse_fd_, kBackingClose, &id);
  }
}

PassthroughFiles::Decision PassthroughFiles::Decide(
    uint64_t ino, const std::string& file, uid_t opener, bool writes,
    bool wants_cache, const std::function<bool()>& leaves_alone,
    const std::function<int()>& open_backing,
    const std::function<absl::AnyInvocable<void() &&>()>& park) {
  using Kind = Decision::Kind;
  MutexLock l(&mu_);
  const bool held = std::any_of(holds_.begin(), holds_.end(),
                                [&](const auto& h) { return h.second(file); });
  if (auto b = backing_.find(ino); b != backing_.end()) {
    if (held) {
      parked_[ino].push_back(park());
      return {Kind::kParked};
    }
    if (!leaves_alone()) return {Kind::kBusy};
    ++b->second.opens;
    if (writes) b->second.writers.insert(opener);
    ++opens_;
    return {Kind::kPast, b->second.id};
  }
  auto through_daemon = [&](const std::string& why)
                            ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
                              NotPast(why);
                              if (wants_cache) ++cached_[ino];
                              return Decision{Kind::kDaemon, 0, wants_cache};
                            };
  if (held) return through_daemon("a change naming it was waiting");
  if (cached_.contains(ino)) {
    return through_daemon("open through the page cache elsewhere");
  }
  if (!leaves_alone()) {
    return through_daemon("routed, tapped, quiesced or watched");
  }
  const int fd = open_backing();
  if (fd < 0) return through_daemon(WhyNoBackingFile(-fd));
  FuseBackingMap map{fd, 0, 0};
  const int id = ioctl(fuse_fd_, kBackingOpen, &map);
  const int err = errno;
  ::close(fd);
  if (id <= 0) return through_daemon(WhyKernelRefused(id < 0 ? err : EINVAL));
  Backing& b = backing_[ino];
  b.id = id;
  b.opens = 1;
  b.files = {file};
  if (writes) b.writers.insert(opener);
  ++opens_;
  return {Kind::kPast, id};
}

void PassthroughFiles::Closed(uint64_t ino, uid_t opener, bool writes) {
  ReleasableMutexLock l(&mu_);
  auto b = backing_.find(ino);
  if (b == backing_.end()) return;
  if (writes) {
    auto w = b->second.writers.find(opener);
    if (w != b->second.writers.end()) b->second.writers.erase(w);
  }
  if (--b->second.opens > 0) return;
  uint32_t id = static_cast<uint32_t>(b->second.id);
  if (ioctl(fuse_fd_, kBackingClose, &id) != 0) {
    LogWarning("closing the passthrough backing file of ", b->second.files[0],
               ": ", std::strerror(errno));
  }
  backing_.erase(b);
  closed_.SignalAll();
  auto parked = parked_.extract(ino);
  l.Unlock();
  if (!parked.empty()) {
    for (auto& again : parked.mapped()) std::move(again)();
  }
}

void PassthroughFiles::CachedReleased(uint64_t ino) {
  MutexLock l(&mu_);
  auto c = cached_.find(ino);
  if (c != cached_.end() && --c->second == 0) cached_.erase(c);
}

bool PassthroughFiles::AddName(uint64_t ino, const std::string& file,
                               const std::function<bool()>& leaves_alone) {
  MutexLock l(&mu_);
  auto b = backing_.find(ino);
  if (b == backing_.end()) return true;
  for (const auto& [ticket, names] : holds_) {
    if (names(file)) return false;
  }
  if (!leaves_alone()) return false;
  b->second.files.push_back(file);
  return true;
}

void PassthroughFiles::DropName(uint64_t ino, const std::string& file) {
  MutexLock l(&mu_);
  auto b = backing_.find(ino);
  if (b == backing_.end() || b->second.files.size() < 2) return;
  auto& files = b->second.files;
  auto it = std::find(files.begin(), files.end(), file);
  if (it != files.end()) files.erase(it);
}

bool PassthroughFiles::WrittenPastByUser(uint64_t ino) const {
  MutexLock l(&mu_);
  auto b = backing_.find(ino);
  if (b == backing_.end()) return false;
  return std::any_of(b->second.writers.begin(), b->second.writers.end(),
                     [](uid_t w) { return w != 0; });
}

PassthroughFiles::Counters PassthroughFiles::counters() const {
  MutexLock l(&mu_);
  Counters c;
  c.opens = opens_;
  c.files_open = backing_.size();
  c.not_why = not_why_;
  return c;
}

uint64_t PassthroughFiles::Hold(Names names) {
  MutexLock l(&mu_);
  const uint64_t ticket = next_hold_++;
  holds_[ticket] = std::move(names);
  return ticket;
}

std::vector<std::string> PassthroughFiles::WaitClosed(uint64_t ticket,
                                                      absl::Time deadline) {
  MutexLock l(&mu_);
  const Names& names = holds_.at(ticket);
  for (;;) {
    std::vector<std::string> open;
    for (const auto& [ino, b] : backing_) {
      for (const std::string& f : b.files) {
        if (names(f)) {
          open.push_back(f);
          break;
        }
      }
    }
    if (open.empty()) return open;
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) return open;
    closed_.WaitFor(&mu_, absl::ToChronoNanoseconds(left));
  }
}

void PassthroughFiles::Unhold(uint64_t ticket) {
  decltype(parked_) parked;
  {
    MutexLock l(&mu_);
    holds_.erase(ticket);
    parked.swap(parked_);
  }
  // Each decides again (one still held parks again).
  for (auto& [ino, list] : parked) {
    for (auto& again : list) std::move(again)();
  }
}

}  // namespace sroute
