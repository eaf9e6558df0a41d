// SPDX-License-Identifier: Apache-2.0
#include "fuse/volume.h"

#include <errno.h>

#include <algorithm>
#include <cstring>
#include <optional>

#include "fuse/ops.h"
#include "fuse/request.h"
#include "fuse/session_loop.h"
#include "util/errno_status.h"
#include "util/log.h"
#include "util/strings.h"

namespace sroute {

Volume::Volume(SSwitch* sw, VolumeOptions options)
    : sw_(sw), options_(std::move(options)) {
  using namespace fuse_internal;
  ops_.lookup = Lookup;
  ops_.forget = Forget;
  ops_.forget_multi = ForgetMulti;
  ops_.getattr = Getattr;
  ops_.setattr = Setattr;
  ops_.readlink = Readlink;
  ops_.mknod = Mknod;
  ops_.mkdir = Mkdir;
  ops_.symlink = Symlink;
  ops_.link = Link;
  ops_.unlink = Unlink;
  ops_.rmdir = Rmdir;
  ops_.rename = Rename;
  ops_.open = Open;
  ops_.create = Create;
  ops_.read = Read;
  ops_.write = Write;
  // Flush (a close) reaches the sSwitch only while a stage holds writes (a
  // write-back cache): otherwise writes reached the endpoints before they
  // were acknowledged, and Flush answers at once.
  ops_.flush = Flush;
  ops_.release = Release;
  ops_.fsync = Fsync;
  ops_.fallocate = Fallocate;
  ops_.lseek = Lseek;
  ops_.opendir = Opendir;
  ops_.readdir = Readdir;
  ops_.releasedir = Releasedir;
  ops_.fsyncdir = Fsyncdir;
  ops_.statfs = Statfs;
  ops_.setxattr = Setxattr;
  ops_.getxattr = Getxattr;
  ops_.listxattr = Listxattr;
  ops_.removexattr = Removexattr;
  sw_->SetRouteObserver(
      [this](const std::vector<HeaderPattern>& c) { RoutesChanged(c); });
}

bool Volume::ServeRaw(fuse_session* se, const RawRequest& request) {
  switch (request.header->opcode) {
    case FUSE_READ:
      return fuse_internal::ServeRawRead(*this, se, request);
    case FUSE_WRITE:
      return fuse_internal::ServeRawWrite(*this, se, request);
    default:
      return false;
  }
}

Volume::~Volume() {
  sw_->SetRouteObserver(nullptr);
  if (passthrough_ != nullptr) {
    passthrough_ready_.store(nullptr, std::memory_order_release);
    sw_->SetBypassGuard(nullptr, absl::Seconds(0));
  }
  StopInvalidating();
}

fuse_internal::OpenFile* Volume::NewOpenFile() {
  auto file = std::make_unique<fuse_internal::OpenFile>();
  fuse_internal::OpenFile* raw = file.get();
  MutexLock l(&open_files_mu_);
  open_files_.emplace(raw, std::move(file));
  return raw;
}

void Volume::DeleteOpenFile(fuse_internal::OpenFile* file) {
  std::unique_ptr<fuse_internal::OpenFile> owned;  // freed after the lock
  MutexLock l(&open_files_mu_);
  auto it = open_files_.find(file);
  if (it == open_files_.end()) return;
  owned = std::move(it->second);
  open_files_.erase(it);
}

std::string Volume::FileName(const std::string& path) const {
  return StrCat("//", options_.home, "/", path);
}

PassthroughFiles* Volume::passthrough() const {
  PassthroughFiles* pt = passthrough_ready_.load(std::memory_order_acquire);
  return pt != nullptr && PassthroughAgreed() ? pt : nullptr;
}

int Volume::OpenBackingFile(const std::string& file) const {
  sroute::FileName name;
  if (local_home_ == nullptr || !SplitFileName(file, &name) ||
      name.host != options_.home) {
    return -EINVAL;
  }
  return local_home_->OpenRegularForPassthrough(name.path);
}

void Volume::StartInvalidating(fuse_session* se) {
  if (options_.passthrough && passthrough_ == nullptr) {
    for (auto& [name, endpoint] : sw_->Endpoints()) {
      if (name == options_.home) {
        local_home_ = std::dynamic_pointer_cast<LocalEndpoint>(endpoint);
      }
    }
    if (local_home_ == nullptr) {
      LogInfo("no kernel passthrough: the volume's home is not a local ",
              "directory");
    } else {
      passthrough_ = std::make_shared<PassthroughFiles>(fuse_session_fd(se));
      sw_->SetBypassGuard(passthrough_, options_.passthrough_wait);
      passthrough_ready_.store(passthrough_.get(), std::memory_order_release);
    }
  }
  MutexLock l(&inval_mu_);
  if (invalidator_.joinable()) return;
  inval_session_ = se;
  inval_stop_ = false;
  invalidator_ = std::thread([this] { InvalidateLoop(); });
}

void Volume::StopInvalidating() {
  {
    MutexLock l(&inval_mu_);
    if (!invalidator_.joinable()) return;
    inval_stop_ = true;
  }
  inval_cv_.SignalAll();
  invalidator_.join();
  MutexLock l(&inval_mu_);
  inval_session_ = nullptr;
}

size_t Volume::pending_invalidations() const {
  MutexLock l(&inval_mu_);
  return inval_pending_.size();
}

void Volume::RoutesChanged(const std::vector<HeaderPattern>& changed) {
  // A file may now live where it has other xattrs.
  XattrsChanged();
  {
    MutexLock l(&inval_mu_);
    inval_pending_.insert(inval_pending_.end(), changed.begin(), changed.end());
  }
  inval_cv_.SignalAll();
}

void Volume::InvalidateLoop() {
  ReleasableMutexLock l(&inval_mu_);
  while (true) {
    while (!inval_stop_ && inval_pending_.empty()) inval_cv_.Wait(&inval_mu_);
    if (inval_stop_) return;
    fuse_session* se = inval_session_;
    const size_t taken = inval_pending_.size();
    std::vector<PatternMatcher> matchers;
    for (HeaderPattern p : inval_pending_) {
      // Whoever accesses the file and however: the kernel's cache is shared.
      p.source = SourcePattern{};
      p.ops = kAllOpClasses;
      p.file.range.reset();
      if (auto m = PatternMatcher::Create(p); m.ok()) {
        matchers.push_back(*std::move(m));
      }
    }
    l.Unlock();
    IoHeader h;
    h.op = Op::kGetattr;
    for (uint64_t ino : inodes_.Inodes()) {
      std::optional<std::string> path = inodes_.Path(ino);
      if (!path) continue;
      h.file = FileName(*path);
      if (std::none_of(matchers.begin(), matchers.end(),
                       [&](const PatternMatcher& m) { return m.Matches(h); })) {
        continue;
      }
      const int rc = fuse_lowlevel_notify_inval_inode(se, ino, 0, 0);
      // -ENOENT: the kernel forgot the inode already.
      if (rc != 0 && rc != -ENOENT) {
        LogWarning("cannot invalidate inode ", ino, ": ", ErrnoText(-rc));
      }
    }
    l.Lock();
    // Only now: pending_invalidations() == 0 means the kernel has dropped
    // what the changes so far made stale.
    inval_pending_.erase(inval_pending_.begin(),
                         inval_pending_.begin() + taken);
  }
}

double Volume::attr_timeout() const { return options_.attr_timeout; }

double Volume::entry_timeout() const { return options_.entry_timeout; }

}  // namespace sroute
