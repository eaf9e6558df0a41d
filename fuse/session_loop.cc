// SPDX-License-Identifier: Apache-2.0
#include "fuse/session_loop.h"

#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdlib>
#include <list>
#include <memory>
#include <thread>
#include <vector>

#include "fuse/uring_queues.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/mutex.h"
#include "util/strings.h"

namespace sroute {
namespace {

void InstallWakeHandler() {
  struct sigaction sa {};
  sa.sa_handler = [](int) {};
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;
  sigaction(kFuseWakeSignal, &sa, nullptr);
}

sigset_t StopSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGHUP);
  return set;
}

// The INIT exchange: the request's unique (the custom writev patches the
// reply with that unique), whether io_uring is wanted, whether the kernel
// offered it and shared mmap of direct-IO files, whether the reply asked
// for io_uring, and the largest payload the kernel may then send (from the
// reply).
std::atomic<uint64_t> init_unique{0};
std::atomic<bool> uring_wanted{false};
std::atomic<bool> uring_offered{false};
std::atomic<bool> mmap_offered{false};
std::atomic<bool> killpriv_v2_offered{false};
std::atomic<bool> uring_agreed{false};
std::atomic<bool> passthrough_wanted{false};
std::atomic<bool> passthrough_offered{false};
std::atomic<bool> passthrough_agreed{false};

// FUSE_PASSTHROUGH (protocol 7.40, Linux 6.9): opens the kernel serves from
// a backing file itself (fuse/passthrough.h). The reply says how deep file
// systems may stack under the volume: 1, a backing file on a file system
// that stacks on nothing (ext4, xfs, tmpfs, a FUSE volume without it).
constexpr uint64_t kFusePassthrough = uint64_t{1} << 37;
constexpr uint32_t kMaxStackDepth = 1;
std::atomic<size_t> uring_max_payload{0};

// FUSE_DIRECT_IO_ALLOW_MMAP (protocol 7.39, Linux 6.6): shared mappings of
// files opened with FOPEN_DIRECT_IO, which libfuse 3.14 cannot ask for.
// Every file a rule may route, and every file with --kernel-cache=off, is
// opened so; without it their MAP_SHARED mmap fails with ENODEV (SQLite's
// WAL index, for one). The kernel then keeps such a file's mapped pages in
// its page cache while the mapping lives, writes them back through the
// daemon (msync, munmap, memory pressure), and drops cached pages a direct
// write or read of the same range would make stale.
constexpr uint64_t kFuseDirectIoAllowMmap = uint64_t{1} << 36;

constexpr uint16_t kMaxBackground = 256;

// Adds what libfuse 3.14 cannot ask for to its INIT reply.
void PatchInitReply(iovec* iov, int count) {
  if (count < 2 ||
      iov[1].iov_len < offsetof(fuse_init_out, flags2) + sizeof(uint32_t)) {
    return;
  }
  auto* out = static_cast<fuse_init_out*>(iov[1].iov_base);
  // Asynchronous requests (direct IO from libaio or io_uring callers,
  // readahead) in flight at once: the kernel's default of 12 for the whole
  // volume let 12 IOs reach the router, whatever the callers' queue depths
  // (a device behind a qos stage saw 3 000 of its 6 000 reads/s, and the
  // requests a stage held back kept every other tenant's from coming).
  out->max_background = kMaxBackground;
  out->congestion_threshold = kMaxBackground * 3 / 4;
  // FUSE_HANDLE_KILLPRIV_V2 (protocol 7.33, Linux 5.11): the kernel tells
  // which writes, truncates, chowns and O_TRUNC opens must clear the
  // set-user-ID and set-group-ID bits (the caller lacks CAP_FSETID) instead
  // of sending a chmod of its own as the caller, which a caller who may
  // write but does not own the file is refused (fuse/kill_setid.h).
  // libfuse 3.14 wants FUSE_HANDLE_KILLPRIV (v1) but never sends it.
  if (killpriv_v2_offered.load()) out->flags |= FUSE_HANDLE_KILLPRIV_V2;
  if (mmap_offered.load()) {
    out->flags |= FUSE_INIT_EXT;
    out->flags2 |= static_cast<uint32_t>(kFuseDirectIoAllowMmap >> 32);
  }
  if (passthrough_wanted.load() && passthrough_offered.load()) {
    out->flags |= FUSE_INIT_EXT;
    out->flags2 |= static_cast<uint32_t>(kFusePassthrough >> 32);
    out->unused[0] = kMaxStackDepth;  // max_stack_depth since 7.40
    passthrough_agreed.store(true);
  }
  if (!uring_wanted.load() || !uring_offered.load()) return;
  out->flags |= FUSE_INIT_EXT;
  out->flags2 |= static_cast<uint32_t>(kFuseOverIoUring >> 32);
  const size_t pages = out->flags & FUSE_MAX_PAGES ? out->max_pages : 32;
  uring_max_payload.store(
      std::max<size_t>({8192, out->max_write, pages * 4096}));
  uring_agreed.store(true);
}

size_t TotalLength(const iovec* iov, int count) {
  size_t n = 0;
  for (int i = 0; i < count; ++i) n += iov[i].iov_len;
  return n;
}

// libfuse's replies: to the ring entry holding the request (io_uring),
// else to /dev/fuse; the INIT reply patched on the way.
ssize_t HookedWritev(int fd, iovec* iov, int count, void*) {
  KernelHandOffRelease();
  if (count > 0 && iov[0].iov_len >= sizeof(fuse_out_header)) {
    const auto* out = static_cast<const fuse_out_header*>(iov[0].iov_base);
    if (UringReply(out->unique, iov, count)) {
      return static_cast<ssize_t>(TotalLength(iov, count));
    }
    if (out->unique != 0 && out->unique == init_unique.load()) {
      PatchInitReply(iov, count);
    }
  }
  return writev(fd, iov, count);
}

ssize_t PlainRead(int fd, void* buf, size_t len, void*) {
  return read(fd, buf, len);
}

// The buffer the calling worker received its current request into (null
// outside a request, and on other threads).
thread_local fuse_buf* current_request_buffer = nullptr;
// The request the calling thread is serving (either transport).
thread_local const fuse_in_header* current_request = nullptr;

// Receive buffers taken by requests and given back, for workers whose own
// was taken. All were allocated by libfuse for this process's session,
// whose buffer size never grows, so each is large enough for any request.
class BufferPool {
 public:
  void* Get() {
    MutexLock l(&mu_);
    if (free_.empty()) return nullptr;  // libfuse allocates one
    void* b = free_.back();
    free_.pop_back();
    return b;
  }
  void Put(void* b) {
    {
      MutexLock l(&mu_);
      if (free_.size() < kKeep) {
        free_.push_back(b);
        return;
      }
    }
    std::free(b);
  }

 private:
  // About the writes a volume has in flight past routing (to storage
  // servers, parked): each buffer is ~1 MiB of address space, of which only
  // the pages requests wrote to are resident.
  static constexpr size_t kKeep = 64;
  // Guards free_. A leaf.
  Mutex mu_;
  std::vector<void*> free_ ABSL_GUARDED_BY(mu_);
};

BufferPool& Pool() {
  static auto* pool = new BufferPool;  // never destroyed: workers may outlive
  return *pool;
}

class Loop {
 public:
  Loop(fuse_session* se, const SessionLoopOptions& o) : se_(se), o_(o) {}

  int Run() {
    InstallWakeHandler();
    uring_wanted.store(o_.io_uring);
    passthrough_wanted.store(o_.passthrough);
    {
      // Replies of libfuse's own handlers (not the raw ones) pass here.
      fuse_custom_io io{};
      io.writev = HookedWritev;
      io.read = PlainRead;
      const int rc = fuse_session_custom_io(se_, &io, fuse_session_fd(se_));
      if (rc != 0) return rc < 0 ? rc : -EINVAL;
    }
    if (polling()) {
      // Workers then read without blocking and sleep in epoll_wait.
      const int fd = fuse_session_fd(se_);
      if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) != 0)
        return -errno;
    }
    {
      MutexLock l(&mu_);
      for (int i = 0; i < std::max(1, o_.workers); ++i) StartLocked(false);
    }
    ReleasableMutexLock l(&mu_);
    const auto tick = std::max(std::chrono::milliseconds(1), o_.stuck_after);
    auto last_tick = std::chrono::steady_clock::now();
    while (!fuse_session_exited(se_) && !ended_) {
      // An idle volume wakes this thread four times a second; a busy one
      // every tick, to see whether all workers are stuck. (Waking it from
      // the workers instead would cost a system call on many requests.)
      cv_.WaitFor(&mu_,
                  AnyBusyLocked() ? tick : std::chrono::milliseconds(250));
      if (TakeStopSignal()) break;
      ReapLocked();
      // Early wake-ups (a worker ended) do not count as a tick.
      const auto now = std::chrono::steady_clock::now();
      if (now - last_tick < tick) continue;
      last_tick = now;
      if (AllStuckLocked() &&
          static_cast<int>(workers_.size()) < o_.max_workers) {
        StartLocked(true);
      }
    }
    fuse_session_exit(se_);
    // Wake every worker still blocked in read(2), again until it is gone: a
    // signal that lands just before the read would be lost.
    while (!workers_.empty()) {
      for (auto& w : workers_) {
        if (!w->done.load())
          pthread_kill(w->thread.native_handle(), kFuseWakeSignal);
      }
      cv_.WaitFor(&mu_, std::chrono::milliseconds(10));
      ReapLocked();
    }
    const int error = error_;
    l.Unlock();
    // The queues' threads are joined without the lock.
    std::unique_ptr<UringQueues> uring;
    {
      MutexLock ul(&uring_mu_);
      uring = std::move(uring_);
    }
    uring.reset();
    return error;
  }

 private:
  // `requests` has a cache line of its own: its worker writes it twice per
  // request, and should not slow the others down doing it (the supervisor
  // only reads it, once a tick).
  struct Worker {
    // Odd while on a request; the supervisor calls a worker stuck when it
    // sees the same odd value a tick later. (No clock read per request.)
    alignas(64) std::atomic<uint64_t> requests{0};
    alignas(64) std::thread thread;
    bool helper = false;
    std::atomic<bool> done{false};
    uint64_t seen_at_last_tick = 0;  // guarded by Loop::mu_
  };

  void StartLocked(bool helper) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto w = std::make_unique<Worker>();
    w->helper = helper;
    Worker* raw = w.get();
    // Workers take no signal but the wake signal (a new thread inherits the
    // mask), so that any other signal with a handler runs on a thread that
    // is not blocked reading /dev/fuse. (The stop signals are blocked in
    // every thread anyway: the supervisor takes them, see TakeStopSignal.)
    sigset_t all, old;
    sigfillset(&all);
    sigdelset(&all, kFuseWakeSignal);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    raw->thread = std::thread([this, raw] { Work(raw); });
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
    workers_.push_back(std::move(w));
  }

  bool polling() const { return o_.poll_window.count() > 0; }

  // Polling mode: returns once the queue may hold a request (or a signal
  // came). Spins while this worker holds the single spinner role, the
  // window since its last request lasts and its CPU has nothing else to
  // run; else sleeps.
  void AwaitRequest(int epoll_fd, int64_t* spin_until) {
    if (*spin_until == kWindowFromNextWait)
      *spin_until = static_cast<int64_t>(MonotonicNanos()) + poll_ns_;
    if (SpinOnceMore(*spin_until)) {
      sched_yield();
      return;
    }
    if (this_spins_) {
      this_spins_ = false;
      spinning_.store(false);
    }
    epoll_event ev;
    // Bounded, so that a worker sees the session end even if the wake
    // signal is lost (a sanitizer may hold a signal back until its next
    // interceptor): it looks again once a second.
    epoll_wait(epoll_fd, &ev, 1, 1000);
    *spin_until = static_cast<int64_t>(MonotonicNanos()) + poll_ns_;
  }

  // True if the calling worker should ask for a request once more instead
  // of sleeping: it holds (or takes) the spinner role, the window lasts,
  // and no pause is on.
  bool SpinOnceMore(int64_t spin_until) {
    const int64_t now = static_cast<int64_t>(MonotonicNanos());
    if (now >= spin_until ||
        now < spin_paused_until_.load(std::memory_order_relaxed)) {
      return false;
    }
    if (!this_spins_) {
      bool expected = false;
      if (!spinning_.compare_exchange_strong(expected, true)) return false;
      this_spins_ = true;
      this_switches_ = InvoluntarySwitches();
      this_last_turn_ = now;
      return true;
    }
    const bool was_away = now - this_last_turn_ > kAwayNs;
    this_last_turn_ = now;
    return !was_away || !CpuWanted(now);
  }

  // Called by the spinner when its last turn took long enough for another
  // thread to have had a time slice (kAwayNs): true if one did run on its
  // CPU meanwhile (the spinner was preempted, or its yield let one run). The
  // CPU then has other work, which spinning would slow down (callers
  // outnumbering the CPUs; a scheduler that picks the yielding thread again, as
  // CFS does for a thread at nice -10), so no worker spins for a while: longer
  // each time it repeats, back to short once a check finds the CPU free.
  bool CpuWanted(int64_t now) {
    const int64_t switches = InvoluntarySwitches();
    int64_t pause = spin_pause_ns_.load(std::memory_order_relaxed);
    if (switches == this_switches_) {
      if (pause != kSpinPauseMinNs) {
        spin_pause_ns_.store(kSpinPauseMinNs, std::memory_order_relaxed);
      }
      return false;
    }
    this_switches_ = switches;
    spin_paused_until_.store(now + pause, std::memory_order_relaxed);
    spin_pause_ns_.store(std::min(pause * 2, kSpinPauseMaxNs),
                         std::memory_order_relaxed);
    return true;
  }

  // Times the calling thread was switched out while it could have run.
  static int64_t InvoluntarySwitches() {
    rusage ru{};
    getrusage(RUSAGE_THREAD, &ru);
    return ru.ru_nivcsw;
  }

  void Work(Worker* w) {
    pthread_setname_np(pthread_self(),
                       w->helper ? "fuse-helper" : "fuse-worker");
    fuse_buf buf{};
    // Polling: a wake-up for one sleeper per request (EPOLLEXCLUSIVE).
    int epoll_fd = -1;
    if (polling()) {
      epoll_fd = epoll_create1(EPOLL_CLOEXEC);
      epoll_event ev{};
      ev.events = EPOLLIN | EPOLLEXCLUSIVE;
      if (epoll_fd < 0 ||
          epoll_ctl(epoll_fd, EPOLL_CTL_ADD, fuse_session_fd(se_), &ev) != 0) {
        End(-errno);
      }
    }
    int64_t spin_until = 0;
    uint64_t requests = 0;
    while (!fuse_session_exited(se_)) {
      if (buf.mem == nullptr) buf.mem = Pool().Get();  // the last was taken
      const int res = fuse_session_receive_buf(se_, &buf);
      if (res == -EAGAIN && polling()) {
        AwaitRequest(epoll_fd, &spin_until);
        continue;
      }
      if (res == -EINTR || res == -EAGAIN) continue;
      if (res <= 0) {
        End(res);
        break;
      }
      w->requests.store(++requests, std::memory_order_relaxed);
      KernelHandOffAcquire();
      current_request_buffer = &buf;
      const bool init = NoteInit(buf, static_cast<size_t>(res));
      Serve(buf, static_cast<size_t>(res));
      current_request_buffer = nullptr;
      if (init) AfterInit();
      w->requests.store(++requests, std::memory_order_relaxed);
      // The window starts when the queue is next found empty (AwaitRequest):
      // no clock read per request while requests are queued.
      spin_until = kWindowFromNextWait;
      // A helper is needed only while the others are stuck.
      if (w->helper && AnyOtherIdle(w)) break;
    }
    std::free(buf.mem);
    if (this_spins_) spinning_.store(false);
    if (epoll_fd >= 0) close(epoll_fd);
    MutexLock l(&mu_);
    w->done.store(true);
    cv_.SignalAll();
  }

  // True if `buf` holds the INIT request; notes what the kernel offered.
  static bool NoteInit(const fuse_buf& buf, size_t size) {
    if ((buf.flags & FUSE_BUF_IS_FD) ||
        size < sizeof(fuse_in_header) + sizeof(fuse_init_in)) {
      return false;
    }
    const auto* in = static_cast<const fuse_in_header*>(buf.mem);
    if (in->opcode != FUSE_INIT) return false;
    const auto* arg = reinterpret_cast<const fuse_init_in*>(in + 1);
    const bool ext = (arg->flags & FUSE_INIT_EXT) != 0;
    uring_offered.store(ext && (arg->flags2 & (kFuseOverIoUring >> 32)) != 0);
    mmap_offered.store(ext &&
                       (arg->flags2 & (kFuseDirectIoAllowMmap >> 32)) != 0);
    killpriv_v2_offered.store((arg->flags & FUSE_HANDLE_KILLPRIV_V2) != 0);
    passthrough_offered.store(ext &&
                              (arg->flags2 & (kFusePassthrough >> 32)) != 0);
    init_unique.store(in->unique);
    return true;
  }

  // After INIT: says what shared mmap of direct-IO files will do, and
  // starts the io_uring queues if asked for and the kernel agreed.
  void AfterInit() {
    init_unique.store(0);
    if (!mmap_offered.load()) {
      LogError("this kernel cannot map direct-IO files shared (Linux 6.6+ ",
               "can): MAP_SHARED mmap of routed files, and of every file with ",
               "--kernel-cache=off, fails with ENODEV");
    }
    if (o_.passthrough && !passthrough_agreed.load()) {
      LogInfo("kernel passthrough not offered by this kernel (Linux 6.9+ ",
              "with CONFIG_FUSE_PASSTHROUGH): every IO goes through the ",
              "daemon");
    }
    if (o_.io_uring) {
      StartUring();
    } else {
      LogInfo("FUSE requests through /dev/fuse");
    }
  }

  void StartUring() {
    std::string error;
    if (!uring_agreed.load()) {
      const std::string why = UringUnavailableReason();
      error = StrCat("the kernel did not offer FUSE over io_uring (",
                     why.empty() ? "its protocol is older" : why, ")");
    }
    std::unique_ptr<UringQueues> queues;
    if (error.empty()) {
      queues = UringQueues::Start(
          se_, [this](fuse_buf& buf, size_t size) { Serve(buf, size); },
          o_.uring_threads_per_cpu, o_.max_workers, uring_max_payload.load(),
          o_.uring_stats, &error);
    }
    if (queues == nullptr) {
      if (o_.io_uring_required) {
        LogError("--io-uring=on: ", error, "; the volume ends");
        End(-EOPNOTSUPP);
      } else {
        LogError("io_uring: ", error, "; serving through /dev/fuse");
      }
      return;
    }
    LogInfo("FUSE requests on per-CPU io_uring queues (",
            o_.uring_threads_per_cpu,
            " threads a CPU; calls that may block on up to ", o_.max_workers,
            " helpers)");
    MutexLock l(&uring_mu_);
    uring_ = std::move(queues);
  }

  // Serves the `size` bytes received in `buf`: the raw handler, else
  // libfuse.
  void Serve(fuse_buf& buf, size_t size) {
    if (o_.request_counts != nullptr && !(buf.flags & FUSE_BUF_IS_FD) &&
        size >= sizeof(fuse_in_header)) {
      o_.request_counts->Add(
          FuseOpSlot(static_cast<const fuse_in_header*>(buf.mem)->opcode));
    }
    const fuse_in_header* outer = current_request;
    current_request =
        !(buf.flags & FUSE_BUF_IS_FD) && size >= sizeof(fuse_in_header)
            ? static_cast<const fuse_in_header*>(buf.mem)
            : nullptr;
    if (!ServeRaw(buf, size)) fuse_session_process_buf(se_, &buf);
    current_request = outer;
  }

  // Offers the `size` bytes received in `buf` to the raw handler; true if
  // it (or the loop, for an interrupt) answers them.
  bool ServeRaw(const fuse_buf& buf, size_t size) {
    if (!o_.raw_handler || (buf.flags & FUSE_BUF_IS_FD) ||
        size < sizeof(fuse_in_header)) {
      return false;
    }
    const auto* in = static_cast<const fuse_in_header*>(buf.mem);
    if (in->len != size) return false;  // libfuse reports it
    if (in->opcode == FUSE_INTERRUPT) {
      if (o_.interrupts_refused != nullptr) {
        o_.interrupts_refused->fetch_add(1, std::memory_order_relaxed);
      }
      SendRawReply(se_, in->unique, ENOSYS);
      return true;
    }
    const RawRequest request{in, reinterpret_cast<const char*>(in + 1),
                             size - sizeof(fuse_in_header)};
    return o_.raw_handler(se_, request);
  }

  void End(int res) {
    MutexLock l(&mu_);
    if (res < 0 && error_ == 0) error_ = res;
    ended_ = true;
    fuse_session_exit(se_);
    cv_.SignalAll();
  }

  static bool OnRequest(const Worker& w) {
    return w.requests.load(std::memory_order_relaxed) % 2 == 1;
  }

  bool AnyBusyLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (const auto& w : workers_) {
      if (OnRequest(*w)) return true;
    }
    return false;
  }

  // True if a worker other than `self` is between requests.
  bool AnyOtherIdle(const Worker* self) {
    MutexLock l(&mu_);
    for (const auto& w : workers_) {
      if (w.get() != self && !w->done.load() && !OnRequest(*w)) return true;
    }
    return false;
  }

  // True if every worker is on the same request as at the last tick, so
  // has been on it for at least a tick (stuck_after). Called once a tick.
  bool AllStuckLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    bool all = true;
    for (auto& w : workers_) {
      const uint64_t now = w->requests.load(std::memory_order_relaxed);
      if (!w->done.load() && (now % 2 == 0 || now != w->seen_at_last_tick)) {
        all = false;
      }
      w->seen_at_last_tick = now;
    }
    return all;
  }

  // Joins the workers that are done (returning from Work: a short wait).
  void ReapLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (auto it = workers_.begin(); it != workers_.end();) {
      if ((*it)->done.load()) {
        (*it)->thread.join();
        it = workers_.erase(it);
      } else {
        ++it;
      }
    }
  }

  fuse_session* const se_;
  const SessionLoopOptions o_;
  // Guards the workers, error_ and ended_. A leaf: never held with
  // uring_mu_.
  mutable Mutex mu_;
  CondVar cv_;  // a worker ended, or the session did
  std::list<std::unique_ptr<Worker>> workers_ ABSL_GUARDED_BY(mu_);
  // Guards uring_. A leaf: never held with mu_.
  Mutex uring_mu_;
  std::unique_ptr<UringQueues> uring_ ABSL_GUARDED_BY(uring_mu_);
  const int64_t poll_ns_ =
      std::chrono::duration_cast<std::chrono::nanoseconds>(o_.poll_window)
          .count();
  std::atomic<bool> spinning_{false};    // a worker holds the spinner role
  static thread_local bool this_spins_;  // it is this thread
  // The spinner's involuntary switches at its last check, and when its last
  // turn (a read and a yield: short when it has its CPU to itself) began.
  static thread_local int64_t this_switches_;
  static thread_local int64_t this_last_turn_;
  // A turn that took longer gave another thread a time slice, not just the
  // moment a caller needs to send its next request.
  static constexpr int64_t kAwayNs = 200'000;
  // A spin_until meaning: the window opens at the next AwaitRequest.
  static constexpr int64_t kWindowFromNextWait = -1;
  // No spinning before then (CpuWanted).
  std::atomic<int64_t> spin_paused_until_{0};
  static constexpr int64_t kSpinPauseMinNs = 50'000;
  static constexpr int64_t kSpinPauseMaxNs = 5'000'000;
  std::atomic<int64_t> spin_pause_ns_{kSpinPauseMinNs};  // the next pause
  int error_ ABSL_GUARDED_BY(mu_) = 0;
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
};

thread_local bool Loop::this_spins_ = false;
thread_local int64_t Loop::this_switches_ = 0;
thread_local int64_t Loop::this_last_turn_ = 0;

}  // namespace

void SendRawReply(fuse_session* se, uint64_t unique, int error,
                  const void* data, size_t size) {
  fuse_out_header out{};
  out.unique = unique;
  out.error = -error;
  iovec iov[2] = {{&out, sizeof(out)}, {const_cast<void*>(data), size}};
  const int count = error == 0 && size > 0 ? 2 : 1;
  out.len = static_cast<uint32_t>(sizeof(out) + (count == 2 ? size : 0));
  KernelHandOffRelease();
  if (UringReply(unique, iov, count)) return;
  // ENOENT: the kernel dropped the request (its caller was killed).
  // Anything else means the session is gone; the loop sees that itself.
  (void)!writev(fuse_session_fd(se), iov, count);
}

const fuse_in_header* CurrentRawRequest() { return current_request; }

bool KillPrivV2() { return killpriv_v2_offered.load(); }

bool PassthroughAgreed() { return passthrough_agreed.load(); }

bool InRequestBuffer(const void* payload) {
  // A ring entry stays the request's until it is answered.
  if (InUringEntry(payload)) return true;
  const fuse_buf* b = current_request_buffer;
  if (b == nullptr || b->mem == nullptr || (b->flags & FUSE_BUF_IS_FD)) {
    return false;
  }
  const auto* mem = static_cast<const char*>(b->mem);
  const auto* p = static_cast<const char*>(payload);
  return p >= mem && p < mem + b->size;
}

void* TakeRequestBuffer(const void* payload) {
  if (InUringEntry(payload) || !InRequestBuffer(payload)) return nullptr;
  fuse_buf* b = current_request_buffer;
  void* taken = b->mem;
  b->mem = nullptr;
  b->size = 0;
  return taken;
}

void ReturnRequestBuffer(void* buffer) {
  if (buffer != nullptr) Pool().Put(buffer);
}

bool TakeStopSignal() {
  const sigset_t stop = StopSignals();
  const timespec now{};
  return sigtimedwait(&stop, nullptr, &now) > 0;
}

void BlockStopSignals() {
  const sigset_t stop = StopSignals();
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
}

int RunSessionLoop(fuse_session* se, const SessionLoopOptions& options) {
  Loop loop(se, options);
  return loop.Run();
}

namespace {

// By the kernel's numbering (linux/fuse.h); gaps are opcodes no kernel
// sends.
constexpr std::string_view kFuseOpNames[] = {"",
                                             "lookup",
                                             "forget",
                                             "getattr",
                                             "setattr",
                                             "readlink",
                                             "symlink",
                                             "",
                                             "mknod",
                                             "mkdir",
                                             "unlink",
                                             "rmdir",
                                             "rename",
                                             "link",
                                             "open",
                                             "read",
                                             "write",
                                             "statfs",
                                             "release",
                                             "",
                                             "fsync",
                                             "setxattr",
                                             "getxattr",
                                             "listxattr",
                                             "removexattr",
                                             "flush",
                                             "init",
                                             "opendir",
                                             "readdir",
                                             "releasedir",
                                             "fsyncdir",
                                             "getlk",
                                             "setlk",
                                             "setlkw",
                                             "access",
                                             "create",
                                             "interrupt",
                                             "bmap",
                                             "destroy",
                                             "ioctl",
                                             "poll",
                                             "notify_reply",
                                             "batch_forget",
                                             "fallocate",
                                             "readdirplus",
                                             "rename2",
                                             "lseek",
                                             "copy_file_range",
                                             "setupmapping",
                                             "removemapping",
                                             "syncfs",
                                             "tmpfile",
                                             "statx"};

}  // namespace

size_t FuseOpSlot(uint32_t opcode) {
  return opcode < kFuseOpSlots - 1 ? opcode : kFuseOpSlots - 1;
}

std::string_view FuseOpSlotName(size_t slot) {
  if (slot == kFuseOpSlots - 1) return "other";
  return slot < std::size(kFuseOpNames) ? kFuseOpNames[slot] : "";
}

}  // namespace sroute
