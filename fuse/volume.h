// SPDX-License-Identifier: Apache-2.0
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

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "endpoints/local_endpoint.h"
#include "fuse/inode_table.h"
#include "fuse/passthrough.h"
#include "fuse/tenant_map.h"
#include "sswitch/sswitch.h"
#include "util/helper_pool.h"
#include "util/mutex.h"

namespace sroute {

namespace fuse_internal {
class OpenFile;
}
struct RawRequest;

struct VolumeOptions {
  // The endpoint that holds the volume's namespace (--backing).
  std::string home = "home";
  // off: every read and write reaches the sSwitch (FUSE direct IO). auto:
  // the kernel also keeps the pages of files no rule can route
  // (SSwitch::MayRoute); files some rule matches when opened get direct IO.
  // In both, the kernel keeps attributes and names for a second (they live
  // at the file's home whatever the route, docs/design.md §3), and a rule
  // change drops the kernel's pages, attributes and names of the files it
  // matches.
  enum class KernelCache { kOff, kAuto };
  KernelCache kernel_cache = KernelCache::kAuto;
  double attr_timeout = 1.0;   // seconds
  double entry_timeout = 1.0;  // seconds
  TenantMap tenants;
  // Open files no rule, tap, quiesce or watch can see past the daemon
  // (kernel passthrough, fuse/passthrough.h) when the kernel agrees; a
  // change that would see one waits up to `passthrough_wait` for it to
  // close.
  bool passthrough = false;
  absl::Duration passthrough_wait = absl::Seconds(5);
};

class Volume {
 public:
  // REQUIRES: `sw` outlives the volume and has an endpoint named
  // options.home.
  // Observes the sSwitch's rule changes (SSwitch::SetRouteObserver).
  Volume(SSwitch* sw, VolumeOptions options);
  ~Volume();
  Volume(const Volume&) = delete;
  Volume& operator=(const Volume&) = delete;

  const fuse_lowlevel_ops& ops() const { return ops_; }
  // Serves the requests whose ops have a path past libfuse (reads and
  // writes), for RunSessionLoop's raw handler; false for the others.
  bool ServeRaw(fuse_session* se, const RawRequest& request);

  // Starts dropping the kernel's cached pages and attributes of files whose
  // route changed, on a thread of its own: the kernel may wait for replies
  // to IOs that a quiesce holds, so the control path must not wait for it.
  // REQUIRES: StopInvalidating() before `se` is unmounted or destroyed.
  // Also starts kernel passthrough, if asked for (options.passthrough).
  void StartInvalidating(fuse_session* se);
  void StopInvalidating();
  // Rule changes observed and not yet applied to the kernel's caches.
  size_t pending_invalidations() const;

  // --- For the op implementations (fuse/ops_*.cc).
  SSwitch& sswitch() { return *sw_; }
  InodeTable& inodes() { return inodes_; }
  // The files open past the daemon; null when passthrough was not asked
  // for or the kernel did not agree at INIT.
  PassthroughFiles* passthrough() const;
  // The backing file of `file` ("//HOME/PATH") for passthrough: a
  // descriptor, or -errno (LocalEndpoint::OpenRegularForPassthrough).
  int OpenBackingFile(const std::string& file) const;
  const VolumeOptions& options() const { return options_; }
  // "//HOME/PATH".
  std::string FileName(const std::string& path) const;
  double attr_timeout() const;
  double entry_timeout() const;
  // Counts changes that may add an xattr to a file the kernel caches (xattrs
  // set or removed through the volume, rule changes): an answer that a file
  // has none holds only while this stands (InodeTable::NoCapability).
  uint64_t xattr_generation() const {
    return xattr_generation_.load(std::memory_order_acquire);
  }
  void XattrsChanged() {
    xattr_generation_.fetch_add(1, std::memory_order_acq_rel);
  }
  // Changes whenever a chmod or setxattr through the volume may have given
  // a file set-ID bits or capabilities: an open file known to have none
  // (fuse/kill_setid.h) is known so only while this stands.
  uint64_t setid_generation() const {
    return setid_generation_.load(std::memory_order_acquire);
  }
  void SetidMayHaveChanged() {
    setid_generation_.fetch_add(1, std::memory_order_acq_rel);
  }
  // The state of an open regular file (fuse_file_info::fh). Handles the
  // kernel has not released when the volume ends (a daemon stopped by a
  // signal while files were open, or before the kernel's asynchronous
  // releases arrived) are freed with the volume.
  fuse_internal::OpenFile* NewOpenFile();
  void DeleteOpenFile(fuse_internal::OpenFile* file);
  // Runs `work` on a helper thread that may block: for what follows an IO
  // the volume made of its own (the clearing of set-ID bits before a
  // write), whose completion may run on a thread that must not (an RPC
  // connection's, which a write-back cache waiting for room would stall).
  void Continue(absl::AnyInvocable<void() &&> work) {
    continuations_.Post(0, std::move(work));
  }

 private:
  SSwitch* const sw_;
  const VolumeOptions options_;
  // Made by StartInvalidating, which control requests (stats) may race:
  // published through passthrough_ready_.
  std::shared_ptr<PassthroughFiles> passthrough_;
  std::shared_ptr<LocalEndpoint> local_home_;  // with passthrough_
  std::atomic<PassthroughFiles*> passthrough_ready_{nullptr};
  InodeTable inodes_;
  fuse_lowlevel_ops ops_{};
  std::atomic<uint64_t> xattr_generation_{1};
  std::atomic<uint64_t> setid_generation_{1};
  HelperPool continuations_{{.lanes = 1, .max_threads = 16, .pin = false}};
  // Guards open_files_. A leaf (files are freed after it is released).
  Mutex open_files_mu_;
  std::unordered_map<fuse_internal::OpenFile*,
                     std::unique_ptr<fuse_internal::OpenFile>>
      open_files_ ABSL_GUARDED_BY(open_files_mu_);

  // The sSwitch's route observer: runs with SSwitch::control_mu_ held.
  void RoutesChanged(const std::vector<HeaderPattern>& changed)
      ABSL_LOCKS_EXCLUDED(inval_mu_);
  void InvalidateLoop() ABSL_LOCKS_EXCLUDED(inval_mu_);
  // Guards the invalidator's queue and session (below). Order: after
  // SSwitch::control_mu_ (RoutesChanged); a leaf: the kernel is notified
  // without it.
  mutable Mutex inval_mu_;
  CondVar inval_cv_;  // inval_pending_ grew, or inval_stop_
  std::vector<HeaderPattern> inval_pending_ ABSL_GUARDED_BY(inval_mu_);
  fuse_session* inval_session_ ABSL_GUARDED_BY(inval_mu_) = nullptr;
  bool inval_stop_ ABSL_GUARDED_BY(inval_mu_) = false;
  // Started under inval_mu_; joined by StopInvalidating without it.
  std::thread invalidator_;
};

}  // namespace sroute

#endif  // SROUTE_FUSE_VOLUME_H_
