// SPDX-License-Identifier: Apache-2.0
// The replica set's background work: asking members that left whether they
// are back, forgetting regions every member holds, and rebuilding the
// regions a member missed from a member current there (resync).
//
// Resync copies one region at a time, the one with the fewest current
// copies first, from a source that is itself current there (and holds the
// name), never from a stale one. Bytes go in 64 KiB chunks, each under the
// file's order for its range, so a foreground write waits at most one
// chunk; names (creates, renames, removals, attributes) go whole under the
// file's order. A member that leaves again mid-way keeps its marks: its
// epoch changed, and what was copied is not cleared.
#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <span>
#include <string>
#include <vector>

#include "sswitch/sswitch.h"
#include "stages/replica_set/replica_set_impl.h"
#include "util/clock.h"
#include "util/errno_status.h"
#include "util/log.h"
#include "util/signal.h"
#include "util/strings.h"

namespace sroute {
namespace {

constexpr uint64_t kChunk = 64 << 10;
constexpr uint64_t kForgetAfterNs = 2'000'000'000;  // clean and idle 2 s
constexpr uint64_t kRetryAfterNs = 1'000'000'000;
constexpr int kMaxDepth = 256;

std::string Child(const std::string& dir, const std::string& name) {
  return dir.empty() ? name : StrCat(dir, "/", name);
}

int Depth(const std::string& path) {
  return path.empty()
             ? 0
             : 1 + static_cast<int>(std::count(path.begin(), path.end(), '/'));
}

bool IsGone(const absl::Status& s) {
  return absl::IsNotFound(s) || ErrnoOf(s) == ENOENT;
}

}  // namespace

void ReplicaSetStage::Background() {
  uint64_t last_probe = 0;
  uint64_t second_start = MonotonicNanos(), bytes_then = 0;
  for (;;) {
    if (const uint64_t t = MonotonicNanos();
        t - second_start >= 1'000'000'000) {
      const uint64_t b = resync_bytes_.load(std::memory_order_relaxed);
      resync_bytes_per_s_.store(
          (b - bytes_then) * 1'000'000'000 / (t - second_start),
          std::memory_order_relaxed);
      second_start = t;
      bytes_then = b;
    }
    {
      MutexLock l(&bg_mu_);
      if (stopping_) return;
    }
    uint32_t probe_ms;
    bool paused;
    {
      MutexLock l(&mu_);
      probe_ms = probe_ms_;
      paused = paused_;
    }
    const uint64_t now = MonotonicNanos();
    if (now - last_probe >= uint64_t{probe_ms} * 1'000'000) {
      Probe();
      last_probe = MonotonicNanos();
    }
    Sweep();
    const bool busy = !paused && ResyncOne();
    if (!busy) {
      MutexLock l(&bg_mu_);
      if (!stopping_) bg_cv_.WaitFor(&bg_mu_, std::chrono::milliseconds(100));
    }
  }
}

absl::Status ReplicaSetStage::Call(Io& io, const std::string& file) {
  io.header.source = StrCat("stage:", name_);
  Signal done;
  io.set_completion([&done](Io&) { done.Notify(); });
  sw_->SubmitOwn(&io, file);
  done.Wait();
  return io.status;
}

// A member out of the set that answers a stat of its root is back: it
// takes changes again at once, and reads wherever it is not stale.
void ReplicaSetStage::Probe() {
  std::vector<std::string> out;
  {
    MutexLock l(&mu_);
    for (size_t i = 0; i < members_.size(); ++i) {
      if (out_[i]) out.push_back(members_[i]);
    }
  }
  for (const std::string& m : out) {
    Io io;
    io.header.op = Op::kGetattr;
    if (!Call(io, StrCat("//", m, "/")).ok()) continue;
    MutexLock l(&mu_);
    auto it = std::find(members_.begin(), members_.end(), m);
    if (it == members_.end()) continue;
    const size_t i = static_cast<size_t>(it - members_.begin());
    if (!out_[i]) continue;
    out_[i] = false;
    LogInfo("replica set ", name_, ": member ", m,
            " is back; resync brings it up to date");
  }
}

// Forgets regions every member holds once idle (unsynced: a region the
// log still names after a crash costs one needless copy, never a byte),
// and logs marks resync cleared.
void ReplicaSetStage::Sweep() {
  const uint64_t now = MonotonicNanos();
  bool queued = false;
  {
    MutexLock g(&log_mu_);
    for (auto f = dirty_.begin(); f != dirty_.end();) {
      FileRegions& file = f->second;
      for (auto r = file.begin(); r != file.end();) {
        Region& reg = r->second;
        if (reg.in_flight == 0 && reg.stale == 0 && !reg.diverged &&
            now - reg.idle_since_ns >= kForgetAfterNs) {
          if (reg.persisted) {
            RegionRecord gone;
            gone.path = f->first;
            gone.region = r->first;
            gone.removed = true;
            queued_.push_back(std::move(gone));
            ++queued_seq_;
          }
          r = file.erase(r);
          continue;
        }
        if (reg.in_flight == 0 && reg.persisted &&
            (reg.persisted_stale != reg.stale ||
             reg.persisted_intent != reg.diverged)) {
          QueueLocked(f->first, r->first, reg);
        }
        ++r;
      }
      if (file.empty()) {
        dirty_.erase(f++);
      } else {
        ++f;
      }
    }
    dirty_files_.store(dirty_.size(), std::memory_order_relaxed);
    queued = !queued_.empty();
  }
  if (queued) {
    if (absl::Status s = Persist(UINT64_MAX); !s.ok()) {
      LogWarning("replica set ", name_, ": ", s.message());
    }
  }
}

bool ReplicaSetStage::ResyncOne() {
  // What the members are now.
  std::vector<std::string> members;
  std::vector<uint64_t> bits, epochs;
  uint64_t in_mask = 0, all = 0;
  int primary;
  {
    MutexLock l(&mu_);
    members = members_;
    epochs = epoch_;
    primary = primary_;
    for (size_t i = 0; i < members_.size(); ++i) {
      bits.push_back(bits_.at(members_[i]));
      all |= bits.back();
      if (!out_[i]) in_mask |= bits.back();
    }
  }
  struct Pick {
    std::string path;
    uint64_t region = 0;
    int target = -1, source = -1;
    int good = 0, named = 0, depth = 0;
  } best;
  const uint64_t now = MonotonicNanos();
  uint32_t copies;
  {
    MutexLock l(&mu_);
    copies = copies_;
  }
  {
    MutexLock g(&log_mu_);
    // A diverged region: one member in the set and current there is the
    // source (the primary if it can be), the others become stale.
    for (auto& [path, file] : dirty_) {
      for (auto& [region, r] : file) {
        if (!r.diverged || r.in_flight != 0) continue;
        const uint64_t sources = all & ~r.stale & in_mask;
        if (sources == 0) continue;
        const uint64_t source = (sources & bits[primary]) != 0
                                    ? bits[primary]
                                    : sources & (~sources + 1);
        r.stale |= all & ~source;
        r.diverged = false;
        ++r.version;
        QueueLocked(path, region, r);
      }
    }
    for (const auto& [path, file] : dirty_) {
      // Members that hold the name: not stale in it or a folder above.
      const uint64_t name_stale = StaleNameLocked(path);
      for (const auto& [region, r] : file) {
        const uint64_t targets = r.stale & in_mask;
        if (targets == 0 || now < r.retry_after_ns) continue;
        const uint64_t current = all & ~r.stale;
        // placement anywhere: a region of bytes needs `copies` holders in
        // the set, not every member (a member that left is replaced).
        if (anywhere_ && region < RegionLog::kFirstNamed &&
            std::popcount(current & in_mask) >= static_cast<int>(copies)) {
          continue;
        }
        const uint64_t sources =
            current & in_mask &
            (region == RegionLog::kWholeName ? ~(name_stale & ~r.stale)
                                             : ~name_stale);
        if (sources == 0) continue;  // no current copy reachable
        Pick p;
        p.good = std::popcount(current);
        p.named = region >= RegionLog::kFirstNamed ? 0 : 1;
        p.depth = Depth(path);
        if (best.target >= 0 &&
            std::tie(p.good, p.named, p.depth) >=
                std::tie(best.good, best.named, best.depth)) {
          continue;
        }
        p.path = path;
        p.region = region;
        for (size_t i = 0; i < members.size(); ++i) {
          if ((targets & bits[i]) != 0 && p.target < 0) {
            p.target = static_cast<int>(i);
          }
          if ((sources & bits[i]) != 0 &&
              (p.source < 0 || static_cast<int>(i) == primary)) {
            p.source = static_cast<int>(i);
          }
        }
        best = std::move(p);
      }
    }
  }
  if (best.target < 0) return false;
  // By name: a Reconfigure may renumber the members meanwhile.
  const absl::Status s = ResyncRegion(
      members[best.target], members[best.source], best.path, best.region);
  MutexLock l(&mu_);
  const bool same_epoch = best.target < static_cast<int>(epoch_.size()) &&
                          members_[best.target] == members[best.target] &&
                          epoch_[best.target] == epochs[best.target] &&
                          !out_[best.target];
  MutexLock g(&log_mu_);
  auto f = dirty_.find(best.path);
  if (f == dirty_.end()) return true;
  auto r = f->second.find(best.region);
  if (r == f->second.end()) return true;
  if (!s.ok()) {
    if (!absl::IsCancelled(s)) {
      LogWarning("replica set ", name_, ": resync of ", best.path, " on ",
                 members[best.target], " from ", members[best.source],
                 " failed (tried again later): ", s.message());
    }
    r->second.retry_after_ns = MonotonicNanos() + kRetryAfterNs;
    return true;
  }
  if (same_epoch) {
    r->second.stale &= ~bits[best.target];
    resync_regions_.fetch_add(1, std::memory_order_relaxed);
    if (r->second.in_flight == 0) r->second.idle_since_ns = MonotonicNanos();
  }
  return true;
}

absl::Status ReplicaSetStage::WithOrder(
    const std::string& path, uint64_t begin, uint64_t end,
    const std::function<absl::Status()>& body) {
  Signal granted;
  uint64_t id = 0;
  Order(path, begin, end, [&](uint64_t i) {
    id = i;
    granted.Notify();
  });
  granted.Wait();
  absl::Status s = body();
  Release(path, id);
  return s;
}

absl::Status ReplicaSetStage::ResyncRegion(const std::string& dst,
                                           const std::string& src,
                                           const std::string& path,
                                           uint64_t region) {
  if (region < RegionLog::kFirstNamed) {
    const uint64_t begin = region * region_size_;
    return CopyBytes(dst, src, path, begin, begin + region_size_,
                     /*ordered=*/false);
  }
  return WithOrder(path, 0, UINT64_MAX, [&] {
    switch (region) {
      case RegionLog::kAttrs:
        return SyncAttrs(dst, src, path);
      case RegionLog::kList:
        return SyncList(dst, src, path, 0, /*whole=*/false);
      default:
        return SyncName(dst, src, path, 0);
    }
  });
}

void ReplicaSetStage::Throttle(uint64_t bytes) {
  uint64_t rate;
  {
    MutexLock l(&mu_);
    rate = resync_rate_;
  }
  if (rate == 0) return;
  // While clients do IO through the stage, resync takes a third of its
  // rate: a recovery must not raise their tail latency (full-rate resync
  // tripled a read's p99 where a third did not: bench/RESULTS.md "Replica
  // sets").
  const uint64_t ios = reads_.load(std::memory_order_relaxed) +
                       changes_.load(std::memory_order_relaxed);
  if (ios != throttle_seen_ios_) rate = std::max<uint64_t>(rate / 3, 1);
  throttle_seen_ios_ = ios;
  const uint64_t now = MonotonicNanos();
  if (throttle_start_ns_ == 0 || now - throttle_start_ns_ > 1'000'000'000) {
    throttle_start_ns_ = now;
    throttle_bytes_ = 0;
  }
  throttle_bytes_ += bytes;
  const uint64_t due = throttle_start_ns_ + throttle_bytes_ * 1'000'000'000 /
                                                std::max<uint64_t>(rate, 1);
  if (due <= now) return;
  MutexLock l(&bg_mu_);
  if (!stopping_) {
    bg_cv_.WaitFor(&bg_mu_, std::chrono::nanoseconds(
                                std::min<uint64_t>(due - now, 1'000'000'000)));
  }
}

absl::Status ReplicaSetStage::CopyBytes(const std::string& dst,
                                        const std::string& src,
                                        const std::string& path, uint64_t begin,
                                        uint64_t end, bool ordered) {
  std::string buf(kChunk, '\0');
  for (uint64_t off = begin; off < end;) {
    {
      MutexLock l(&bg_mu_);
      if (stopping_) return absl::CancelledError("the stage stops");
    }
    const uint64_t n = std::min(kChunk, end - off);
    uint64_t got = 0;
    auto chunk = [&]() -> absl::Status {
      Io r;
      r.header.op = Op::kRead;
      r.header.offset = off;
      r.header.length = static_cast<uint32_t>(n);
      r.read_buffer = std::span<char>(buf.data(), n);
      absl::Status s = Call(r, StrCat("//", src, "/", path));
      if (IsGone(s)) return absl::OkStatus();  // gone: nothing to copy
      if (!s.ok()) return s;
      got = r.bytes;
      if (got == 0) return absl::OkStatus();
      Io w;
      w.header.op = Op::kWrite;
      w.header.offset = off;
      w.header.length = static_cast<uint32_t>(got);
      w.write_data = std::span<const char>(buf.data(), got);
      return Call(w, StrCat("//", dst, "/", path));
    };
    absl::Status s = ordered ? chunk() : WithOrder(path, off, off + n, chunk);
    if (!s.ok()) return s;
    resync_bytes_.fetch_add(got, std::memory_order_relaxed);
    {
      MutexLock l(&mu_);
      resynced_to_[dst] += got;
    }
    Throttle(got);
    if (got < n) break;  // the source's end
    off += n;
  }
  return absl::OkStatus();
}

// Size, mode, owner, times and extended attributes of `path` on `dst` as
// on `src`.
absl::Status ReplicaSetStage::SyncAttrs(const std::string& dst,
                                        const std::string& src,
                                        const std::string& path) {
  Io st;
  st.header.op = Op::kGetattr;
  absl::Status s = Call(st, StrCat("//", src, "/", path));
  if (IsGone(s)) return absl::OkStatus();  // its name's resync removes it
  if (!s.ok()) return s;
  // Before the mode: a folder made read-only still takes them.
  if (s = SyncXattrs(dst, src, path); !s.ok()) return s;
  Io set;
  set.header.op = Op::kSetattr;
  set.args.to_set = kSetMode | kSetUid | kSetGid | kSetAtime | kSetMtime;
  if (S_ISREG(st.attr.st_mode)) set.args.to_set |= kSetSize;
  if (S_ISLNK(st.attr.st_mode)) set.args.to_set &= ~kSetMode;
  set.args.mode = st.attr.st_mode & 07777;
  set.args.uid = st.attr.st_uid;
  set.args.gid = st.attr.st_gid;
  set.args.size = static_cast<uint64_t>(st.attr.st_size);
  set.args.atime = st.attr.st_atim;
  set.args.mtime = st.attr.st_mtim;
  return Call(set, StrCat("//", dst, "/", path));
}

// The extended attributes of `path` on `dst` as on `src`: a setxattr or
// removexattr a member missed logs the name's attributes, as a chmod does.
// A member whose file system has none (ENOTSUP) has nothing to sync.
absl::Status ReplicaSetStage::SyncXattrs(const std::string& dst,
                                         const std::string& src,
                                         const std::string& path) {
  auto names = [&](const std::string& member,
                   std::vector<std::string>* out) -> absl::Status {
    Io list;
    list.header.op = Op::kListxattr;
    absl::Status s = Call(list, StrCat("//", member, "/", path));
    if (ErrnoOf(s) == ENOTSUP || ErrnoOf(s) == EOPNOTSUPP) {
      return absl::OkStatus();
    }
    if (!s.ok()) return s;
    for (size_t at = 0; at < list.data.size();) {
      size_t end = list.data.find('\0', at);
      if (end == std::string::npos) end = list.data.size();
      if (end > at) out->push_back(list.data.substr(at, end - at));
      at = end + 1;
    }
    return absl::OkStatus();
  };
  auto value = [&](const std::string& member, const std::string& name,
                   std::string* out) -> absl::Status {
    Io get;
    get.header.op = Op::kGetxattr;
    get.args.xattr_name = name;
    absl::Status s = Call(get, StrCat("//", member, "/", path));
    if (s.ok()) *out = std::move(get.data);
    return s;
  };
  std::vector<std::string> want, have;
  absl::Status s = names(src, &want);
  if (IsGone(s)) return absl::OkStatus();
  if (!s.ok()) return s;
  if (s = names(dst, &have); !s.ok()) return s;
  for (const std::string& name : have) {
    if (std::find(want.begin(), want.end(), name) != want.end()) continue;
    Io rm;
    rm.header.op = Op::kRemovexattr;
    rm.args.xattr_name = name;
    s = Call(rm, StrCat("//", dst, "/", path));
    if (!s.ok() && ErrnoOf(s) != ENODATA) return s;
  }
  for (const std::string& name : want) {
    std::string v, there;
    s = value(src, name, &v);
    if (ErrnoOf(s) == ENODATA) continue;  // removed meanwhile
    if (!s.ok()) return s;
    if (value(dst, name, &there).ok() && there == v) continue;
    Io set;
    set.header.op = Op::kSetxattr;
    set.args.xattr_name = name;
    set.write_data = std::span<const char>(v.data(), v.size());
    if (s = Call(set, StrCat("//", dst, "/", path)); !s.ok()) return s;
  }
  return absl::OkStatus();
}

// `path` on `dst` as on `src`: removed, made, or copied whole (a folder
// with everything in it).
absl::Status ReplicaSetStage::SyncName(const std::string& dst,
                                       const std::string& src,
                                       const std::string& path, int depth) {
  if (depth > kMaxDepth) {
    return absl::FailedPreconditionError(
        StrCat("replica set ", name_, ": ", path, " lies too deep"));
  }
  if (InReservedDir(path)) return absl::OkStatus();
  Io st;
  st.header.op = Op::kGetattr;
  absl::Status s = Call(st, StrCat("//", src, "/", path));
  if (IsGone(s)) return RemoveTree(dst, path, depth);
  if (!s.ok()) return s;
  const mode_t type = st.attr.st_mode & S_IFMT;
  Io have;
  have.header.op = Op::kGetattr;
  s = Call(have, StrCat("//", dst, "/", path));
  bool exists = s.ok();
  if (!s.ok() && !IsGone(s)) return s;
  if (exists && ((have.attr.st_mode & S_IFMT) != type || type == S_IFLNK)) {
    if (s = RemoveTree(dst, path, depth); !s.ok()) return s;
    exists = false;
  }
  const std::string at = StrCat("//", dst, "/", path);
  if (!exists && !path.empty()) {
    Io make;
    make.args.mode = st.attr.st_mode & 07777;
    if (type == S_IFREG) {
      make.header.op = Op::kCreate;
      make.args.open_flags = O_CREAT | O_WRONLY;
    } else if (type == S_IFDIR) {
      make.header.op = Op::kMkdir;
    } else if (type == S_IFLNK) {
      Io text;
      text.header.op = Op::kReadlink;
      if (s = Call(text, StrCat("//", src, "/", path)); !s.ok()) return s;
      make.header.op = Op::kSymlink;
      make.args.symlink_text = text.data;
    } else {
      make.header.op = Op::kMknod;
      make.args.mode = st.attr.st_mode;
      make.args.rdev = st.attr.st_rdev;
    }
    if (s = Call(make, at); !s.ok()) return s;
  }
  if (type == S_IFREG) {
    if (s = CopyBytes(dst, src, path, 0, static_cast<uint64_t>(st.attr.st_size),
                      /*ordered=*/true);
        !s.ok()) {
      return s;
    }
  }
  if (type == S_IFDIR) {
    if (s = SyncList(dst, src, path, depth, /*whole=*/true); !s.ok()) {
      return s;
    }
  }
  return SyncAttrs(dst, src, path);
}

// The listing of folder `path` on `dst` as on `src`: names it has and
// `src` has not are removed; names only `src` has are copied whole, and
// with `whole` every name is (the folder was made or moved while `dst` was
// away: the names in it were never logged).
absl::Status ReplicaSetStage::SyncList(const std::string& dst,
                                       const std::string& src,
                                       const std::string& path, int depth,
                                       bool whole) {
  Io want;
  want.header.op = Op::kReaddir;
  absl::Status s = Call(want, StrCat("//", src, "/", path));
  if (IsGone(s)) return absl::OkStatus();  // its name's resync
  if (!s.ok()) return s;
  Io have;
  have.header.op = Op::kReaddir;
  s = Call(have, StrCat("//", dst, "/", path));
  if (!s.ok()) return s;
  auto has = [](const Io& io, const std::string& name) {
    return std::any_of(io.entries.begin(), io.entries.end(),
                       [&](const DirEntry& e) { return e.name == name; });
  };
  for (const DirEntry& e : have.entries) {
    if (!has(want, e.name)) {
      if (s = RemoveTree(dst, Child(path, e.name), depth + 1); !s.ok()) {
        return s;
      }
    }
  }
  for (const DirEntry& e : want.entries) {
    const std::string child = Child(path, e.name);
    if (InReservedDir(child)) continue;
    if (!whole && has(have, e.name)) continue;  // logged on its own
    s = WithOrder(child, 0, UINT64_MAX,
                  [&] { return SyncName(dst, src, child, depth + 1); });
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status ReplicaSetStage::RemoveTree(const std::string& dst,
                                         const std::string& path, int depth) {
  if (path.empty() || InReservedDir(path)) return absl::OkStatus();
  if (depth > kMaxDepth) {
    return absl::FailedPreconditionError(
        StrCat("replica set ", name_, ": ", path, " lies too deep"));
  }
  const std::string at = StrCat("//", dst, "/", path);
  Io st;
  st.header.op = Op::kGetattr;
  absl::Status s = Call(st, at);
  if (IsGone(s)) return absl::OkStatus();
  if (!s.ok()) return s;
  if (S_ISDIR(st.attr.st_mode)) {
    Io list;
    list.header.op = Op::kReaddir;
    if (s = Call(list, at); !s.ok()) return s;
    for (const DirEntry& e : list.entries) {
      if (s = RemoveTree(dst, Child(path, e.name), depth + 1); !s.ok()) {
        return s;
      }
    }
  }
  Io rm;
  rm.header.op = S_ISDIR(st.attr.st_mode) ? Op::kRmdir : Op::kUnlink;
  s = Call(rm, at);
  return IsGone(s) ? absl::OkStatus() : s;
}

}  // namespace sroute
