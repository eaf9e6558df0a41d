// SPDX-License-Identifier: Apache-2.0
// An emulated flash device as an endpoint (docs/design.md §8, issue 24): the
// files and their bytes live in a real directory (a LocalEndpoint: what is
// written reads back exactly), and every IO's time comes from a FlashModel.
// Each page of a file gets one of the device's logical pages when it is
// first written (writes to pages a file has already written overwrite its
// logical pages, out of place in the model); unlink and truncate trim them.
// A device whose logical pages are all taken fails writes of new pages with
// ENOSPC, as a full disk does.
//
// Time: model time runs `dilation` times slower than wall time (dilation
// 10: a modelled 80 us read takes 800 us), so that a machine with few cores
// can keep up with the model's parallelism; an IO completes, on the
// endpoint's timer thread, when the model says it ends.
//
//   FlashEndpoint::Options o;
//   o.model = *FlashModel::Preset("rackblox");
//   auto ssd = FlashEndpoint::Open("/srv/ssd0", o);
//
// Thread-safe.
#ifndef SROUTE_ENDPOINTS_FLASH_ENDPOINT_H_
#define SROUTE_ENDPOINTS_FLASH_ENDPOINT_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "endpoints/flash_model.h"
#include "endpoints/flash_xattrs.h"
#include "sswitch/endpoint.h"
#include "util/mutex.h"

namespace sroute {

// `--endpoint NAME=flash:DIR[,key=value...]`: the directory, then the
// model's preset (`preset=rackblox`, the default, `small`, or the pool's
// `worn`, `healthy`, `fast`) and any of its numbers: dilation, mode
// (auto|self|coordinated), channels, dies_per_channel, blocks_per_die,
// pages_per_block, page_bytes, spare, read_us, program_us, erase_us,
// buffer_us, buffer_pages, suspend_us, soft_threshold,
// gc_threshold, gc_target, bg_idle_ms, gc_yields (1 or 0); vssds=N splits it
// into N vSSDs by channel (FlashEndpointSpec::Parts). Errors name the key.
struct FlashEndpointSpec;

absl::StatusOr<FlashEndpointSpec> ParseFlashSpec(std::string_view spec);

class FlashEndpoint : public Endpoint {
 public:
  struct Options {
    FlashOptions model;
    double dilation = 1.0;  // wall ns per model ns, at least 1
  };
  // Fails if `dir` is not an accessible directory or the options do not
  // pass FlashModel::Check (InvalidArgument naming the field).
  static absl::StatusOr<std::shared_ptr<FlashEndpoint>> Open(
      const std::string& dir, const Options& options);
  ~FlashEndpoint() override;

  void Submit(Io* io, std::string_view path) override;

  std::string Describe() const override;
  // flash.NAME.KEY: free_permille (free blocks per mille), gc_active (0 or
  // 1), gc_need (0 none, 1 soft, 2 regular), predicted_idle_us,
  // used_pages, logical_pages, the counters of FlashState (reads, writes,
  // trims, reads_behind_gc, writes_waited, gc_passes, forced_gc,
  // pages_copied, erases) and wear (erase_min, erase_max,
  // erase_mean_milli, erase_variance_milli: erases per block x 1000).
  void Gauges(
      std::string_view name,
      const absl::FunctionRef<void(std::string, int64_t)>& add) const override;

  // The model's state now.
  FlashState State() const;
  // State() as kFlashStateXattr's words.
  std::string StateText() const;
  // Starts a GC pass now (a coordinator granted it); returns its end in
  // model time.
  uint64_t StartGc();
  // A GC spell of `model_ns` from now (FlashModel::HoldForGc): for
  // benchmarks of what steering does about a collecting device. Returns its
  // end in model time.
  uint64_t HoldForGc(uint64_t model_ns);
  // Warms the device up as if it had been in use: file `path` (made if
  // missing) becomes `bytes` long (zeros where nothing was written), each
  // of its pages is mapped to a logical page and written, then
  // `overwrites` times as many random pages of it are written again (the
  // blocks fill with garbage, GC has work) and a GC pass runs, all at no
  // time: the model then forgets time (FlashModel::ForgetTime).
  // ResourceExhausted if the device has too few free pages. For benchmarks:
  // REQUIRES no IO in flight.
  absl::Status Warm(const std::string& path, uint64_t bytes, double overwrites,
                    uint64_t seed);
  // The model's clock now (ns).
  uint64_t ModelNow() const;
  // Logical pages files hold.
  uint64_t used_pages() const;

 private:
  FlashEndpoint(std::string dir, std::shared_ptr<Endpoint> inner,
                const Options& options);
  struct Due;
  // The model's time for `io` on `path`; the pages it touches are mapped
  // (writes) or looked up (reads), trimmed (unlink, truncate) or moved
  // (rename). ResourceExhausted when a write needs pages and none is free.
  absl::StatusOr<uint64_t> Model(const Io& io, std::string_view path)
      ABSL_LOCKS_EXCLUDED(mu_);
  void TrimFromLocked(std::vector<uint32_t>& pages, uint64_t first_page,
                      uint64_t now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FollowNamespace(const Io& done, const std::string& path)
      ABSL_LOCKS_EXCLUDED(mu_);
  void CompleteAt(Io* io, std::unique_ptr<Io> done, uint64_t model_ns);
  // kFlashStateXattr and kFlashGcXattr.
  void Control(Io* io);
  void TimerLoop();

  const std::string dir_;
  const std::shared_ptr<Endpoint> inner_;
  const double dilation_;
  const uint64_t epoch_ns_;  // wall time at model time 0
  const uint32_t page_bytes_;

  // Guards the model and the page maps. A leaf.
  mutable Mutex mu_;
  FlashModel model_ ABSL_GUARDED_BY(mu_);
  // A file's logical pages by page index (kNoPage where never written).
  absl::flat_hash_map<std::string, std::vector<uint32_t>> files_
      ABSL_GUARDED_BY(mu_);
  std::vector<uint32_t> free_pages_ ABSL_GUARDED_BY(mu_);  // a stack
  // GC passes granted, by kind (soft, regular, bg).
  uint64_t granted_[3] ABSL_GUARDED_BY(mu_) = {0, 0, 0};

  // IOs done in the directory, waiting for their model time.
  Mutex timer_mu_;
  CondVar timer_cv_;
  std::multimap<uint64_t, std::unique_ptr<Due>> due_ ABSL_GUARDED_BY(timer_mu_);
  bool stop_ ABSL_GUARDED_BY(timer_mu_) = false;
  std::thread timer_;  // last: starts after everything above
};

struct FlashEndpointSpec {
  std::string dir;
  FlashEndpoint::Options options;
  // Split into this many vSSDs (RackBlox §3.2): each its own channels
  // (channels / vssds of them, so no die is shared), write buffer
  // (buffer_pages / vssds) and directory (DIR/vI), endpoint NAME.vI.
  uint32_t vssds = 1;
  // The vSSDs' names, directories and options (NAME alone if not split).
  struct Part {
    std::string name, dir;
    FlashEndpoint::Options options;
  };
  std::vector<Part> Parts(const std::string& name) const;
};

}  // namespace sroute

#endif  // SROUTE_ENDPOINTS_FLASH_ENDPOINT_H_
