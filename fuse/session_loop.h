// SPDX-License-Identifier: Apache-2.0
// The loop that reads FUSE requests and runs them.
//
// libfuse's multithreaded loop starts a new worker whenever none is idle,
// so a volume under N concurrent callers ends with about N+ workers, and
// every request wakes a sleeping one. Here a small fixed pool (as many as
// there are CPUs) serves the fast path: while a worker is busy, requests
// wait in the kernel's queue and the next free worker takes them without
// sleeping, so a request costs fewer thread switches. A worker can still
// block (fsync on a slow disk, a local endpoint on a hung NFS mount), so a
// supervisor adds a helper when every worker has been busy on one request
// for longer than `stuck_after`; helpers leave when they find others idle.
// The supervisor looks every `stuck_after` while a worker is busy and every
// quarter second otherwise (also for stop signals).
//
// With a poll window, a worker that finds the queue empty keeps asking for
// up to that long (yielding the CPU between tries) before it sleeps, and at
// most one worker does so at a time: a caller's next request is then taken
// without waking anyone, at the cost of an otherwise idle CPU while IO
// flows. When the spinner finds that another thread ran on its CPU during
// a long turn (it was preempted, or its yield let one run), no worker
// spins for a while (50 µs, doubling to 5 ms while that repeats), so
// callers that keep the CPUs busy lose little to it.
#ifndef SROUTE_FUSE_SESSION_LOOP_H_
#define SROUTE_FUSE_SESSION_LOOP_H_

#include <linux/fuse.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string_view>

#include "fuse/uring_queues.h"
#include "fuse/volume.h"
#include "util/thread_shard.h"

namespace sroute {

// A request as read from /dev/fuse, offered to a RawHandler before libfuse
// parses it.
struct RawRequest {
  const fuse_in_header* header;
  const char* arg;  // the op's argument: arg_size bytes after the header
  size_t arg_size;
};

// Serves `request` itself, skipping libfuse's per-request bookkeeping (an
// allocation and two rounds of its session-wide lock, whose cache line
// moves between CPUs on every request): returns true if it took the
// request, which it must then answer exactly once with SendRawReply (on any
// thread, before or after returning); false leaves it to libfuse. Runs on
// the worker that read the request.
using RawHandler = std::function<bool(fuse_session*, const RawRequest&)>;

// Answers request `unique` taken by a RawHandler: `error` (0 or an errno)
// and, on success, `size` bytes of `data`. A request the kernel no longer
// waits for (its caller was killed) is dropped silently.
void SendRawReply(fuse_session* se, uint64_t unique, int error,
                  const void* data = nullptr, size_t size = 0);

// FUSE requests received, by opcode: slot = opcode below kFuseOpSlots - 1,
// else the last slot ("other").
inline constexpr size_t kFuseOpSlots = 64;
using FuseRequestCounts = ShardedCounters<kFuseOpSlots>;
size_t FuseOpSlot(uint32_t opcode);
// The slot's opcode name in lower case ("lookup", "read", ...; "other";
// "" for a number no opcode has).
std::string_view FuseOpSlotName(size_t slot);

struct SessionLoopOptions {
  int workers = 2;       // always reading /dev/fuse; at least 1
  int max_workers = 64;  // workers plus helpers
  std::chrono::milliseconds stuck_after{5};
  std::chrono::microseconds poll_window{0};  // 0: sleep at once
  // If set, offered every request first. The loop then also answers the
  // kernel's interrupts itself, with ENOSYS, so that the kernel sends no
  // more: libfuse would hold an interrupt for a request it never saw and
  // bounce it back on every later request. (The ops never look at
  // interrupts: a caller's request runs to its reply, as the kernel's own
  // handling ensures once interrupts are off; a fatal signal still ends a
  // waiting caller.)
  RawHandler raw_handler;
  // Serve requests on per-CPU io_uring queues (fuse/uring_queues.h) once
  // the kernel agrees at INIT, `uring_threads_per_cpu` threads per CPU; if
  // it does not, through /dev/fuse (logged). What the queues do is counted
  // in `*uring_stats` if set.
  bool io_uring = false;
  // If the queues cannot start, end the session instead (--io-uring=on).
  bool io_uring_required = false;
  int uring_threads_per_cpu = 2;
  // Ask for kernel passthrough at INIT if the kernel offers it
  // (fuse/passthrough.h; PassthroughAgreed() says whether it was agreed).
  bool passthrough = false;
  UringStats* uring_stats = nullptr;
  // If set, counts the interrupts answered with ENOSYS (the kernel sends
  // none after the first: more than one means it did not take the answer).
  std::atomic<uint64_t>* interrupts_refused = nullptr;
  // If set, counts every request received, by opcode (FuseOpSlot).
  FuseRequestCounts* request_counts = nullptr;
};

// Blocks SIGTERM, SIGINT and SIGHUP in the calling thread, and so in every
// thread it starts afterwards. Call it first in main, before any thread
// starts: RunSessionLoop then takes these signals itself (sigtimedwait),
// so they end the volume whichever thread the kernel would have given them
// to and whatever that thread was doing. (A handler runs on one thread of
// the kernel's choosing, and under TSan only once that thread next enters
// the runtime; some SIGTERMs never ended the daemon that way.)
void BlockStopSignals();

// True if one of those signals is pending (it is consumed). For start-up:
// one that came before fuse_daemonize would stay with the parent.
bool TakeStopSignal();

// For a request handler running on a worker of RunSessionLoop: true if
// `payload` lies in the buffer the worker received its request into (a
// write's data does, as libfuse hands it over), or in the io_uring entry a
// queue thread serves.
bool InRequestBuffer(const void* payload);
// The request the calling thread is serving, as the kernel sent it (the
// header, its argument after it), while a libfuse op callback runs; null
// on other threads. For what libfuse 3.14 does not pass on: the
// kill-set-ID flag of OPEN (protocol 7.33).
const fuse_in_header* CurrentRawRequest();
// Whether the kernel offered FUSE_HANDLE_KILLPRIV_V2 at INIT, which the
// loop then accepts: writes, truncates, chowns and O_TRUNC opens then say
// when set-ID bits must be cleared (fuse/kill_setid.h).
bool KillPrivV2();
// Whether the INIT reply agreed to FUSE passthrough (fuse/passthrough.h).
bool PassthroughAgreed();
// Takes that buffer from the worker, which then receives its next request
// into another, and returns it; nullptr (taking nothing) if `payload` does
// not lie in it, or lies in an io_uring entry (uring_queues.h), which stays
// the request's until it is answered. A handler whose request outlives it
// keeps the payload so without copying it. Give the buffer back with
// ReturnRequestBuffer once the payload is no longer used.
// REQUIRES: called by the handler, on the worker serving the request (both
// functions look at the calling thread's request).
void* TakeRequestBuffer(const void* payload);
// Makes a taken buffer available to the workers again (or frees it).
// Thread-safe.
void ReturnRequestBuffer(void* buffer);

// Runs the session until it exits (unmount, fuse_session_exit, one of the
// signals BlockStopSignals blocked). Returns 0, or the negative errno that
// ended it.
// REQUIRES: `se` is mounted; no other loop runs it.
int RunSessionLoop(fuse_session* se, const SessionLoopOptions& options);

}  // namespace sroute

#endif  // SROUTE_FUSE_SESSION_LOOP_H_
