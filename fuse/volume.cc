#include "fuse/volume.h"

#include <errno.h>

#include <cstring>
#include <iostream>

#include "fuse/ops.h"
#include "util/errno_status.h"
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
}

std::string Volume::FileName(const std::string& path) const {
  return StrCat("//", options_.home, "/", path);
}

void Volume::InvalidateAll(fuse_session* se) {
  if (se == nullptr) return;
  for (uint64_t ino : inodes_.Inodes()) {
    const int rc = fuse_lowlevel_notify_inval_inode(se, ino, 0, 0);
    // -ENOENT: the kernel forgot the inode already.
    if (rc != 0 && rc != -ENOENT) {
      std::cerr << "sroute-fuse: cannot invalidate inode " << ino << ": "
                << ErrnoText(-rc) << "\n";
    }
  }
}

double Volume::attr_timeout() const {
  return options_.kernel_cache == VolumeOptions::KernelCache::kOff
             ? 0.0
             : options_.attr_timeout;
}

double Volume::entry_timeout() const {
  return options_.kernel_cache == VolumeOptions::KernelCache::kOff
             ? 0.0
             : options_.entry_timeout;
}

}  // namespace sroute
