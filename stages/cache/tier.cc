// SPDX-License-Identifier: Apache-2.0
#include "stages/cache/tier.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "util/strings.h"

namespace sroute {

absl::StatusOr<std::unique_ptr<Tier>> Tier::Open(const std::string& dir,
                                                 const std::string& stage,
                                                 uint64_t bytes,
                                                 size_t block_size) {
  const uint64_t slots = bytes / block_size;
  if (slots == 0 || slots > (1ull << 31)) {
    return absl::InvalidArgumentError(
        StrCat("cache: tier_bytes ", bytes, " is not 1..2^31 blocks"));
  }
  // A name of its own (a live change opens the next before closing this).
  static std::atomic<uint64_t> serial{0};
  std::string path = StrCat(dir, "/.sroute-cache-", stage, "-", getpid(), "-",
                            serial.fetch_add(1), ".tier");
  const int fd =
      open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    return absl::InvalidArgumentError(
        StrCat("cache: tier_dir ", dir, ": ", std::strerror(errno)));
  }
  return std::unique_ptr<Tier>(
      new Tier(std::move(path), fd, slots, block_size));
}

Tier::Tier(std::string path, int fd, uint64_t slots, size_t block_size)
    : path_(std::move(path)), fd_(fd), block_size_(block_size), slots_(slots) {}

Tier::~Tier() {
  close(fd_);
  unlink(path_.c_str());
}

void Tier::Free(uint32_t slot) {
  Slot& s = slots_[slot];
  if (s.len == 0) return;
  index_.erase(Key{s.file, s.index});
  auto it = per_file_.find(s.file);
  if (--it->second == 0) per_file_.erase(it);
  used_bytes_ -= s.len;
  s.len = 0;
}

void Tier::Put(uint32_t file, uint64_t index, const char* data, uint32_t len) {
  if (len == 0) return;
  if (auto it = index_.find(Key{file, index}); it != index_.end()) {
    Free(it->second);
  }
  const uint32_t slot = hand_;
  hand_ = static_cast<uint32_t>((hand_ + 1) % slots_.size());
  if (slots_[slot].len != 0) {
    ++evictions_;
    Free(slot);
  }
  const off_t at = static_cast<off_t>(slot) * block_size_;
  if (pwrite(fd_, data, len, at) != static_cast<ssize_t>(len)) return;
  slots_[slot] = Slot{file, len, index};
  index_[Key{file, index}] = slot;
  ++per_file_[file];
  used_bytes_ += len;
}

int64_t Tier::Take(uint32_t file, uint64_t index, char* out) {
  auto it = index_.find(Key{file, index});
  if (it == index_.end()) return -1;
  const uint32_t slot = it->second;
  const uint32_t len = slots_[slot].len;
  const off_t at = static_cast<off_t>(slot) * block_size_;
  const bool ok = pread(fd_, out, len, at) == static_cast<ssize_t>(len);
  Free(slot);
  return ok ? len : -1;
}

void Tier::Drop(uint32_t file, uint64_t first, uint64_t last) {
  auto pf = per_file_.find(file);
  if (pf == per_file_.end() || first > last) return;
  if (last - first < slots_.size()) {  // cheaper than a pass over slots
    for (uint64_t i = first;; ++i) {
      if (auto it = index_.find(Key{file, i}); it != index_.end()) {
        Free(it->second);
      }
      if (i == last) break;
    }
    return;
  }
  for (uint32_t s = 0; s < slots_.size(); ++s) {
    const Slot& slot = slots_[s];
    if (slot.len != 0 && slot.file == file && slot.index >= first &&
        slot.index <= last) {
      Free(s);
    }
  }
}

void Tier::Clear() {
  for (uint32_t s = 0; s < slots_.size(); ++s) Free(s);
  hand_ = 0;
}

}  // namespace sroute
