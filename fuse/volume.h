// Volume: the FUSE front end of a host. Every FUSE request becomes an Io
// whose header names the file as //HOME/PATH and the caller's tenant; the
// sSwitch routes it, and the completion replies to the kernel, so a parked
// (quiesced) IO never holds a FUSE worker thread.
//
// Thread safety: the ops run on libfuse's worker threads concurrently; the
// Volume's state is the (thread-safe) inode table and the sSwitch.
#ifndef SROUTE_FUSE_VOLUME_H_
#define SROUTE_FUSE_VOLUME_H_

#define FUSE_USE_VERSION 34
#include <fuse_lowlevel.h>

#include <string>

#include "fuse/inode_table.h"
#include "fuse/tenant_map.h"
#include "sswitch/sswitch.h"

namespace sroute {

struct VolumeOptions {
  // The endpoint that holds the volume's namespace (--backing).
  std::string home = "home";
  // off: every read and write reaches the sSwitch (FUSE direct IO, no
  // attribute caching). auto: the kernel may cache pages and attributes.
  enum class KernelCache { kOff, kAuto };
  KernelCache kernel_cache = KernelCache::kAuto;
  double attr_timeout = 1.0;   // seconds, for kAuto
  double entry_timeout = 1.0;  // seconds, for kAuto
  TenantMap tenants;
};

class Volume {
 public:
  // REQUIRES: `sw` outlives the volume and has an endpoint named
  // options.home.
  Volume(SSwitch* sw, VolumeOptions options);

  const fuse_lowlevel_ops& ops() const { return ops_; }

  // Drops the kernel's cached attributes and pages of every inode the volume
  // knows (after the rules changed, the bytes may live elsewhere).
  void InvalidateAll(fuse_session* se);

  // --- For the op implementations (fuse/ops_*.cc).
  SSwitch& sswitch() { return *sw_; }
  InodeTable& inodes() { return inodes_; }
  const VolumeOptions& options() const { return options_; }
  // "//HOME/PATH".
  std::string FileName(const std::string& path) const;
  double attr_timeout() const;
  double entry_timeout() const;

 private:
  SSwitch* const sw_;
  const VolumeOptions options_;
  InodeTable inodes_;
  fuse_lowlevel_ops ops_{};
};

// The reserved folder for files sroute creates: hidden from listings and
// closed to tenants.
inline constexpr char kReservedDir[] = ".sroute";

}  // namespace sroute

#endif  // SROUTE_FUSE_VOLUME_H_
