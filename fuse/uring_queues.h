// SPDX-License-Identifier: Apache-2.0
// FUSE over io_uring (Linux 6.14+): the kernel queues each request on a
// ring of the CPU its caller runs on, and a thread of ours pinned to that
// CPU takes it, answers it and fetches the next one in one system call.
// Caller and server then stay on one CPU: no request or reply wakes a
// thread on another (an idle CPU of a VM may be halted, and waking it costs
// tens of microseconds), and the reply and the next fetch cost one system
// call instead of a write and a read.
//
// The kernel sends every request but forgets and interrupts this way once
// every CPU's queue has registered an entry; those two still come through
// /dev/fuse, which the session loop keeps reading. Notifications go to
// /dev/fuse as before.
//
// A queue thread serves one request at a time and never blocks in a call
// that may take long: its local endpoints hand such calls (every one but a
// read the page cache holds) to a helper pool, whose helpers run on the
// queue's CPU (util/helper_pool.h). A request answered later, on another
// thread (by a helper, parked by a quiesce, sent to a storage server),
// keeps its ring entry but not the thread. A thread starts with 8 entries and
// registers more as its requests start to wait, keeping 4 free (up to 64):
// the kernel hands a request that finds no free entry of its CPU only to
// an entry that commits, so a request arriving while every entry of its
// CPU waits for an answer waits for one of those answers. Were a queue
// thread to block, the requests its other entries took would wait with it:
// hence the helpers. Each CPU has `threads_per_cpu` threads.
//
// Queue threads run as SCHED_IDLE, so that the kernel runs a caller woken
// by a reply on their CPU; a watchdog runs one at normal priority while
// other work on its CPU keeps it from running.
#ifndef SROUTE_FUSE_URING_QUEUES_H_
#define SROUTE_FUSE_URING_QUEUES_H_

#include <sys/uio.h>

#include <atomic>
#include <csignal>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "fuse/volume.h"  // libfuse, at the API version the volume uses

namespace sroute {

// Interrupts a thread blocked reading /dev/fuse (a session loop's worker)
// or in io_uring_enter (a queue thread) when the loop or the queues stop:
// the call fails with EINTR (the handler RunSessionLoop installs does
// nothing and leaves SA_RESTART off) and the thread sees it must end.
inline constexpr int kFuseWakeSignal = SIGUSR2;

// Bits of the INIT exchange (include/uapi/linux/fuse.h, 7.42).
inline constexpr uint64_t kFuseOverIoUring = uint64_t{1} << 41;

// Path of the kernel's switch for FUSE over io_uring.
inline constexpr const char* kUringSwitch =
    "/sys/module/fuse/parameters/enable_uring";

// "" if this kernel serves FUSE over io_uring now; else why not, and how to
// turn it on.
std::string UringUnavailableReason();

// What the queues did, for the volume's stats.
struct UringStats {
  std::atomic<uint64_t> requests{0};  // served
  // Times the watchdog ran a starved queue thread at normal priority.
  std::atomic<uint64_t> boosts{0};
  // Calls handed to helpers, helpers alive and helpers in a call (updated
  // by the watchdog: every 10 ms while requests flow, 160 ms when idle).
  std::atomic<uint64_t> helper_calls{0};
  std::atomic<uint64_t> helper_threads{0};
  std::atomic<uint64_t> helper_busy{0};
};

// Serves one request: `size` bytes of `buf`, laid out as read from
// /dev/fuse. Its reply goes through fuse_session's custom writev or
// SendRawReply, which hand it to UringReply.
using UringServe = std::function<void(fuse_buf& buf, size_t size)>;

class UringQueues {
 public:
  // Starts `threads_per_cpu` threads for each possible CPU, each with its
  // own ring registering entries for that CPU's queue, with room for
  // requests of `max_payload` bytes, and a pool of up to `max_helpers`
  // helpers for the calls they must not make themselves. Returns null and sets
  // `error` if a ring cannot be set up; requests then keep coming through
  // /dev/fuse. Counts in `*stats` if set. REQUIRES: the INIT reply, with
  // kFuseOverIoUring, was sent.
  static std::unique_ptr<UringQueues> Start(fuse_session* se, UringServe serve,
                                            int threads_per_cpu,
                                            int max_helpers, size_t max_payload,
                                            UringStats* stats,
                                            std::string* error);
  // Stops and joins the threads (each after the request it is serving).
  ~UringQueues();

  UringQueues(const UringQueues&) = delete;
  UringQueues& operator=(const UringQueues&) = delete;

 private:
  struct Impl;
  explicit UringQueues(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// If a queue thread holds request `unique`, stores the reply in `iov` (its
// first element a fuse_out_header) for it to commit, and returns true;
// false if no queue thread holds it (the reply goes to /dev/fuse).
// Thread-safe.
bool UringReply(uint64_t unique, const iovec* iov, int count);

// For ThreadSanitizer, which cannot see the kernel order requests: the
// caller of a request handled on one thread waited for the reply to an
// earlier one given on another (a release after a write). Call
// KernelHandOffRelease before handing the kernel anything (a reply, a
// commit) and KernelHandOffAcquire after taking anything from it (a
// request); both do nothing in other builds.
void KernelHandOffRelease();
void KernelHandOffAcquire();

// For request handlers: true if `payload` lies in the ring entry the
// calling thread serves, which stays the request's until it is answered.
bool InUringEntry(const void* payload);

}  // namespace sroute

#endif  // SROUTE_FUSE_URING_QUEUES_H_
