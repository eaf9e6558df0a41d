// SPDX-License-Identifier: Apache-2.0
#include "fuse/kill_setid.h"

#include <linux/capability.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "util/clock.h"
#include "util/errno_status.h"

namespace sroute::fuse_internal {

// How long a file found with nothing to clear is taken to stay so across
// opens: set-ID bits or capabilities given to it behind the volume's back
// (on its endpoint, through another host) are cleared by a write that
// comes this much later at most; a chmod or setxattr through the volume
// counts at once (Volume::setid_generation).
constexpr uint64_t kWithoutSetidNanos = 1'000'000'000;

bool LacksFsetid(const Caller& caller) {
  if (caller.uid != 0) return true;
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%d/status",
                static_cast<int>(caller.pid));
  FILE* f = std::fopen(path, "re");
  if (f == nullptr) return false;  // gone: it was root
  char line[256];
  bool lacks = false;
  while (std::fgets(line, sizeof(line), f) != nullptr) {
    if (std::strncmp(line, "CapEff:", 7) == 0) {
      const unsigned long long eff = std::strtoull(line + 7, nullptr, 16);
      lacks = (eff & (1ULL << CAP_FSETID)) == 0;
      break;
    }
  }
  std::fclose(f);
  return lacks;
}

void KillSetidThen(
    std::unique_ptr<Request> r, OpenFile* open, const Caller& caller,
    absl::AnyInvocable<void(std::unique_ptr<Request>, const absl::Status&)>
        then) {
  Volume& volume = *r->volume;
  const uint64_t generation = volume.setid_generation();
  if (open != nullptr && open->KnownWithoutSetid(generation)) {
    then(std::move(r), absl::OkStatus());
    return;
  }
  auto kill = NewFileRequest(volume, caller, Op::kSetattr, r->io.header.file);
  kill->io.args.to_set = kKillSetid;
  Submit(std::move(kill), [r = std::move(r), open, generation,
                           then = std::move(then)](Request& k) mutable {
    if (k.io.status.ok()) {
      r->io.attr = k.io.attr;  // the mode as cleared
      if (open != nullptr) {
        open->SetWithoutSetid(generation);
        if (open->ino != 0) {
          k.volume->inodes().SetWithoutSetid(
              open->ino, generation, MonotonicNanos() + kWithoutSetidNanos);
        }
      }
    }
    k.volume->Continue([r = std::move(r), then = std::move(then),
                        status = UnsharedStatus(k.io.status)]() mutable {
      then(std::move(r), status);
    });
  });
}

}  // namespace sroute::fuse_internal
