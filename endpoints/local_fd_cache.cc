// SPDX-License-Identifier: Apache-2.0
// LocalEndpoint: the descriptor cache (endpoints/local_endpoint_impl.h).
#include <algorithm>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "endpoints/local_endpoint_impl.h"

namespace sroute {

void LocalEndpoint::Impl::EraseLocked(EntryList::iterator it,
                                      std::vector<Handle>* dropped) {
  auto ref = inode_refs.find(it->handle->inode);
  if (ref != inode_refs.end() && --ref->second <= 0) inode_refs.erase(ref);
  auto bp = by_path.find(std::string_view(it->path));
  if (bp != by_path.end() && bp->second == it) by_path.erase(bp);
  dropped->push_back(std::move(it->handle));
  lru.erase(it);
}

bool LocalEndpoint::Impl::FrontHit(std::string_view path, bool need_write,
                                   Handle* out) {
  if (!use_fronts) return false;
  Front& f = fronts[ThreadShard()];
  MutexLock l(&f.mu);
  if (f.handle == nullptr || f.path != path ||
      f.generation != generation.load(std::memory_order_acquire) ||
      (need_write && !f.handle->writable)) {
    return false;
  }
  *out = f.handle;
  return true;
}

void LocalEndpoint::Impl::SetFront(std::string_view path, const Handle& h,
                                   uint64_t gen) {
  if (!use_fronts) return;
  Handle front = ShardLocalRef(h);
  Front& f = fronts[ThreadShard()];
  MutexLock l(&f.mu);
  f.path.assign(path);
  f.generation = gen;
  f.handle.swap(front);  // the old one is released after the lock
}

void LocalEndpoint::Impl::ClearFronts() {
  for (Front& f : fronts) {
    Handle old;  // released after the lock
    MutexLock l(&f.mu);
    old.swap(f.handle);
  }
}

absl::Status LocalEndpoint::Impl::GetHandle(Op op, std::string_view path,
                                            bool need_write, Handle* out) {
  uint64_t gen;
  if (CachedHandle(path, need_write, out, &gen)) return absl::OkStatus();
  bool writable = true;
  int fd = OpenBeneath(root_fd, path, O_RDWR);
  if (fd < 0 && !need_write && IsAccessError(errno)) {
    writable = false;
    fd = OpenBeneath(root_fd, path, O_RDONLY);
  }
  if (fd < 0) return ResolveFail(errno, op, path);
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return Fail(err, op, path);
  }
  auto h = std::make_shared<FdHandle>(fd, writable, KeyOf(st), &live);
  Insert(path, h, gen);
  SetFront(path, h, gen);
  *out = std::move(h);
  return absl::OkStatus();
}

bool LocalEndpoint::Impl::CachedHandle(std::string_view path, bool need_write,
                                       Handle* out, uint64_t* gen) {
  out->reset();
  if (FrontHit(path, need_write, out)) return true;
  {
    MutexLock l(&mu);
    *gen = generation;
    auto it = by_path.find(path);
    if (it == by_path.end() || (need_write && !it->second->handle->writable)) {
      return false;
    }
    lru.splice(lru.begin(), lru, it->second);
    *out = it->second->handle;
  }
  SetFront(path, *out, *gen);
  return true;
}

void LocalEndpoint::Impl::Insert(std::string_view path, Handle h,
                                 uint64_t gen) {
  if (max_open == 0) return;
  std::vector<Handle> dropped;  // closed after the lock is released
  MutexLock l(&mu);
  if (generation != gen) return;  // a namespace change raced with the open
  auto it = by_path.find(path);
  if (it != by_path.end()) EraseLocked(it->second, &dropped);
  const InodeKey inode = h->inode;
  lru.push_front(Entry{std::string(path), std::move(h)});
  by_path.emplace(lru.front().path, lru.begin());
  ++inode_refs[inode];
  while (lru.size() > lru_capacity) {
    EraseLocked(std::prev(lru.end()), &dropped);
  }
}

void LocalEndpoint::Impl::Invalidate(const Invalidation& inv) {
  InvalidateShared(inv);
  ClearFronts();
}

void LocalEndpoint::Impl::InvalidateShared(const Invalidation& inv) {
  std::vector<Handle> dropped;  // closed after the lock is released
  MutexLock l(&mu);
  ++generation;
  if (inv.all) {
    for (Entry& e : lru) dropped.push_back(std::move(e.handle));
    lru.clear();
    by_path.clear();
    inode_refs.clear();
    return;
  }
  for (std::string_view name : inv.names) {
    auto it = by_path.find(name);
    if (it != by_path.end()) EraseLocked(it->second, &dropped);
  }
  bool scan = inv.beneath && !lru.empty();
  for (const InodeKey& k : inv.inodes) {
    if (inode_refs.count(k) != 0) scan = true;
  }
  if (!scan) return;
  auto beneath = [&](const std::string& p) {
    if (!inv.beneath) return false;
    for (std::string_view name : inv.names) {
      if (name.empty()) return true;
      if (p.size() > name.size() && p[name.size()] == '/' &&
          std::string_view(p).substr(0, name.size()) == name) {
        return true;
      }
    }
    return false;
  };
  for (auto it = lru.begin(); it != lru.end();) {
    auto next = std::next(it);
    if (beneath(it->path) || std::find(inv.inodes.begin(), inv.inodes.end(),
                                       it->handle->inode) != inv.inodes.end()) {
      EraseLocked(it, &dropped);
    }
    it = next;
  }
}

void LocalEndpoint::Impl::InvalidateIfOther(std::string_view path,
                                            InodeKey inode) {
  {
    std::vector<Handle> dropped;  // closed after the lock is released
    MutexLock l(&mu);
    auto it = by_path.find(path);
    if (it == by_path.end() || it->second->handle->inode == inode) return;
    ++generation;
    EraseLocked(it->second, &dropped);
  }
  ClearFronts();
}

}  // namespace sroute
