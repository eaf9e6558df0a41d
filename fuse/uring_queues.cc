// SPDX-License-Identifier: Apache-2.0
#include "fuse/uring_queues.h"

#include <fcntl.h>
#include <linux/fuse.h>
#include <linux/io_uring.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/sysinfo.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <thread>
#include <vector>

#include "util/clock.h"
#include "util/helper_pool.h"
#include "util/log.h"
#include "util/mutex.h"

// GCC says __SANITIZE_THREAD__, clang __has_feature(thread_sanitizer).
#if defined(__SANITIZE_THREAD__)
#define SROUTE_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define SROUTE_TSAN 1
#endif
#endif
#ifdef SROUTE_TSAN
extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
#endif

namespace sroute {
namespace {

#ifdef SROUTE_TSAN
char kernel_hand_off;  // the address TSan's happens-before edges use
#endif

// The kernel's FUSE-over-io_uring ABI (7.42), which Debian 12's
// linux/fuse.h predates.
struct UringEntryInOut {
  uint64_t flags;
  uint64_t commit_id;  // the request's unique, echoed by the commit
  uint32_t payload_sz;
  uint32_t padding;
  uint64_t reserved;
};
struct UringRequestHeader {
  char in_out[128];  // fuse_in_header on fetch, fuse_out_header on commit
  char op_in[128];   // the op's first argument (fuse_read_in, ...)
  UringEntryInOut entry;
};
static_assert(sizeof(UringRequestHeader) == 288);
struct UringCommand {  // in the SQE's command area
  uint64_t flags;
  uint64_t commit_id;
  uint16_t qid;
  uint8_t padding[6];
};
constexpr uint32_t kRegister = 1;
constexpr uint32_t kCommitAndFetch = 2;

// An entry's buffer: its header, then (a page in) the payload. A request's
// fuse_in_header and first argument are copied to just below the payload,
// so that it lies in one piece as read from /dev/fuse, without copying a
// write's data.
constexpr size_t kPayloadOffset = 4096;

// Entries a thread registers at first, keeps free, and at most (see
// KeepSpareEntries).
constexpr int kFirstEntries = 8;
constexpr long kSpareEntries = 4;
constexpr size_t kMaxEntriesPerThread = 64;
// Submission slots: a registration and a commit per entry, the eventfd.
constexpr unsigned kRingSize = 256;
// The user_data of the eventfd's read (entries use their address).
constexpr uint64_t kEventFdTag = 1;

struct Entry;

// What a thread does with its entries, and the answers given on other
// threads for it to commit.
struct EntryOwner {
  int eventfd = -1;  // written when `answered` gains an entry
  // Guards answered. A leaf (the eventfd is written after it is released).
  Mutex mu;
  std::vector<Entry*> answered ABSL_GUARDED_BY(mu);
};

// Where an entry's request is (Entry::state).
enum EntryState : int {
  kInKernel,  // registered or committed: waiting for a request
  kServing,   // its owner is serving the request
  kDetached,  // the handler returned unanswered: the answer comes later
  kAnswered,  // answered, to be committed
};

struct Entry {
  char* buffer = nullptr;
  size_t payload_size = 0;
  EntryOwner* owner = nullptr;
  uint16_t qid = 0;
  UringRequestHeader* header() {
    return reinterpret_cast<UringRequestHeader*>(buffer);
  }
  char* payload() { return buffer + kPayloadOffset; }
  // The unique of the request being served, until its reply is stored
  // (then 0): whoever swaps it to 0 writes the reply.
  std::atomic<uint64_t> serving{0};
  std::atomic<int> state{kInKernel};
};

// Every entry of the process's queues, for replies given on other threads.
// Entries and their buffers are never freed: a reply given after its queue
// thread ended may still read or write one (a process has one set of
// queues, and at most kMaxEntries entries).
constexpr int kMaxEntries = 4096;
std::atomic<Entry*> registry[kMaxEntries];
std::atomic<int> registered{0};

thread_local Entry* current_entry = nullptr;

Entry* FindServing(uint64_t unique) {
  Entry* e = current_entry;
  if (e != nullptr && e->serving.load(std::memory_order_acquire) == unique) {
    return e;
  }
  const int n =
      std::min(registered.load(std::memory_order_acquire), kMaxEntries);
  for (int i = 0; i < n; ++i) {
    e = registry[i].load(std::memory_order_acquire);
    if (e != nullptr && e->serving.load(std::memory_order_acquire) == unique)
      return e;
  }
  return nullptr;
}

// A minimal io_uring: 128-byte SQEs (the FUSE command needs them), one
// submitter.
class Ring {
 public:
  ~Ring() {
    if (sq_ != MAP_FAILED) munmap(sq_, sq_size_);
    if (cq_ != MAP_FAILED && cq_ != sq_) munmap(cq_, cq_size_);
    if (sqes_ != MAP_FAILED) munmap(sqes_, sqes_size_);
    if (fd_ >= 0) close(fd_);
  }

  // Returns 0 or an errno.
  int Init(unsigned entries) {
    io_uring_params p{};
    // Completions run when this thread asks for them, on this thread.
    p.flags = IORING_SETUP_SQE128 | IORING_SETUP_SINGLE_ISSUER |
              IORING_SETUP_DEFER_TASKRUN;
    fd_ = static_cast<int>(syscall(__NR_io_uring_setup, entries, &p));
    if (fd_ < 0 && errno == EINVAL) {
      p = io_uring_params{};
      p.flags = IORING_SETUP_SQE128;
      fd_ = static_cast<int>(syscall(__NR_io_uring_setup, entries, &p));
    }
    if (fd_ < 0) return errno;
    sq_size_ = p.sq_off.array + p.sq_entries * sizeof(unsigned);
    cq_size_ = p.cq_off.cqes + p.cq_entries * sizeof(io_uring_cqe);
    if (p.features & IORING_FEAT_SINGLE_MMAP) {
      sq_size_ = cq_size_ = std::max(sq_size_, cq_size_);
    }
    sq_ = mmap(nullptr, sq_size_, PROT_READ | PROT_WRITE,
               MAP_SHARED | MAP_POPULATE, fd_, IORING_OFF_SQ_RING);
    if (sq_ == MAP_FAILED) return errno;
    cq_ = sq_;
    if (!(p.features & IORING_FEAT_SINGLE_MMAP)) {
      cq_ = mmap(nullptr, cq_size_, PROT_READ | PROT_WRITE,
                 MAP_SHARED | MAP_POPULATE, fd_, IORING_OFF_CQ_RING);
      if (cq_ == MAP_FAILED) return errno;
    }
    sqes_size_ = p.sq_entries * 2 * sizeof(io_uring_sqe);  // SQE128
    sqes_ = mmap(nullptr, sqes_size_, PROT_READ | PROT_WRITE,
                 MAP_SHARED | MAP_POPULATE, fd_, IORING_OFF_SQES);
    if (sqes_ == MAP_FAILED) return errno;
    auto* sq = static_cast<char*>(sq_);
    auto* cq = static_cast<char*>(cq_);
    sq_tail_ = reinterpret_cast<unsigned*>(sq + p.sq_off.tail);
    sq_mask_ = *reinterpret_cast<unsigned*>(sq + p.sq_off.ring_mask);
    sq_array_ = reinterpret_cast<unsigned*>(sq + p.sq_off.array);
    cq_head_ = reinterpret_cast<unsigned*>(cq + p.cq_off.head);
    cq_tail_ = reinterpret_cast<unsigned*>(cq + p.cq_off.tail);
    cq_mask_ = *reinterpret_cast<unsigned*>(cq + p.cq_off.ring_mask);
    cqes_ = reinterpret_cast<io_uring_cqe*>(cq + p.cq_off.cqes);
    return 0;
  }

  // A zeroed SQE, queued for the next Enter.
  io_uring_sqe* NextSqe() {
    const unsigned tail = *sq_tail_ + pending_;
    const unsigned index = tail & sq_mask_;
    auto* sqe = reinterpret_cast<io_uring_sqe*>(
        static_cast<char*>(sqes_) + index * 2 * sizeof(io_uring_sqe));
    std::memset(sqe, 0, 2 * sizeof(io_uring_sqe));
    sq_array_[index] = index;
    ++pending_;
    return sqe;
  }

  // Submits the queued SQEs and, if `wait`, waits for a completion.
  // Returns 0 or an errno (EINTR: a signal came).
  int Enter(bool wait) {
    KernelHandOffRelease();
    __atomic_store_n(sq_tail_, *sq_tail_ + pending_, __ATOMIC_RELEASE);
    const unsigned to_submit = pending_;
    pending_ = 0;
    const long res = syscall(__NR_io_uring_enter, fd_, to_submit, wait ? 1 : 0,
                             wait ? IORING_ENTER_GETEVENTS : 0, nullptr, 0);
    const int err = res < 0 ? errno : 0;
    KernelHandOffAcquire();
    return err;
  }

  // The next completion, or null; Seen() consumes it. (A completion can
  // arrive after Enter returned: it is taken from the kernel here.)
  io_uring_cqe* Peek() {
    const unsigned head = *cq_head_;
    if (head == __atomic_load_n(cq_tail_, __ATOMIC_ACQUIRE)) return nullptr;
    KernelHandOffAcquire();
    return &cqes_[head & cq_mask_];
  }
  void Seen() { __atomic_store_n(cq_head_, *cq_head_ + 1, __ATOMIC_RELEASE); }

 private:
  int fd_ = -1;
  void* sq_ = MAP_FAILED;
  void* cq_ = MAP_FAILED;
  void* sqes_ = MAP_FAILED;
  size_t sq_size_ = 0, cq_size_ = 0, sqes_size_ = 0;
  unsigned* sq_tail_ = nullptr;
  unsigned sq_mask_ = 0;
  unsigned* sq_array_ = nullptr;
  unsigned* cq_head_ = nullptr;
  unsigned* cq_tail_ = nullptr;
  unsigned cq_mask_ = 0;
  io_uring_cqe* cqes_ = nullptr;
  unsigned pending_ = 0;
};

void AddCommand(Ring& ring, int fuse_fd, uint32_t op, uint16_t qid,
                uint64_t commit_id, const iovec* iov, uint64_t user_data) {
  io_uring_sqe* sqe = ring.NextSqe();
  sqe->user_data = user_data;
  sqe->opcode = IORING_OP_URING_CMD;
  sqe->fd = fuse_fd;
  sqe->cmd_op = op;
  if (iov != nullptr) {
    sqe->addr = reinterpret_cast<uint64_t>(iov);
    sqe->len = 2;
  }
  UringCommand cmd{};
  cmd.commit_id = commit_id;
  cmd.qid = qid;
  std::memcpy(sqe->cmd, &cmd, sizeof(cmd));
}

// Queue threads run as SCHED_IDLE: the kernel then counts their CPU as
// idle when the reply wakes the caller, so the caller runs there (right
// away, preempting the queue thread, which has nothing left to do but
// wait for the caller's next request) instead of on another CPU that must
// be woken. Everything stays on one CPU. A normal-priority thread would
// push the woken caller to any idle CPU.
bool SetIdlePolicy(pid_t tid, bool idle) {
  sched_param param{};
  return sched_setscheduler(tid, idle ? SCHED_IDLE : SCHED_OTHER, &param) == 0;
}

// True if a thread of this process may go back from SCHED_IDLE to normal
// scheduling, as the watchdog needs (it takes CAP_SYS_NICE or an
// RLIMIT_NICE that allows the thread's nice value).
bool CanLeaveIdlePolicy() {
  bool ok = false;
  std::thread([&ok] {
    ok = SetIdlePolicy(0, true) && SetIdlePolicy(0, false);
  }).join();
  return ok;
}

// The watchdog's period, its longest while no queue thread ran or waited
// to run (an idle volume then wakes it a few times a second only), and the
// first and longest boost.
constexpr int kWatchMs = 10;
constexpr int kIdleWatchMs = 160;
constexpr uint64_t kFirstBoostNs = 100'000'000;
constexpr uint64_t kMaxBoostNs = 10'000'000'000;

// Time thread `tid` of this process ran and waited to run, from
// /proc/self/task/TID/schedstat, opened once into `*fd` (read again from
// the start each time: a path lookup in /proc costs more than the read).
bool ReadSchedStat(pid_t tid, int* fd, int64_t* exec_ns, int64_t* wait_ns) {
  if (*fd < 0) {
    char path[64];
    std::snprintf(path, sizeof(path), "/proc/self/task/%d/schedstat",
                  static_cast<int>(tid));
    *fd = open(path, O_RDONLY | O_CLOEXEC);
    if (*fd < 0) return false;
  }
  char text[96];
  const ssize_t n = pread(*fd, text, sizeof(text) - 1, 0);
  if (n <= 0) return false;
  text[n] = '\0';
  long long exec = 0, wait = 0;
  if (std::sscanf(text, "%lld %lld", &exec, &wait) != 2) return false;
  *exec_ns = exec;
  *wait_ns = wait;
  return true;
}

// The kernel keeps a queue per possible CPU (0..N-1).
int PossibleCpus() {
  std::ifstream in("/sys/devices/system/cpu/possible");
  std::string text;
  if (in >> text) {
    const size_t dash = text.find_last_of("-,");
    const int last =
        std::atoi(text.c_str() + (dash == std::string::npos ? 0 : dash + 1));
    if (last >= 0) return last + 1;
  }
  return get_nprocs_conf();
}

}  // namespace

std::string UringUnavailableReason() {
  std::ifstream in(kUringSwitch);
  char on = 0;
  if (!(in >> on)) {
    return std::string("this kernel has no FUSE over io_uring (no ") +
           kUringSwitch + "; it needs Linux 6.14 with CONFIG_FUSE_IO_URING)";
  }
  if (on != 'Y' && on != 'y' && on != '1') {
    return std::string(
               "FUSE over io_uring is off in this kernel; as root: "
               "echo Y > ") +
           kUringSwitch;
  }
  return "";
}

struct UringQueues::Impl {
  fuse_session* se = nullptr;
  UringServe serve;
  size_t payload_size = 0;
  std::atomic<bool> stop{false};
  UringStats* stats = nullptr;
  bool idle_policy = false;  // queue threads run as SCHED_IDLE
  struct Thread {
    std::thread thread;
    std::atomic<bool> done{false};
    // Never freed, as the entries are not: an answer given after the thread
    // ended (by a helper, a storage server's, a released quiesce's) may
    // still reach it.
    EntryOwner* const owner = new EntryOwner;
    std::vector<Entry*> entries;  // the thread's own
    std::atomic<pid_t> tid{0};
    // Set by the watchdog when it lifted the thread out of SCHED_IDLE;
    // the thread goes back to it once `boost_until` (MonotonicNanos) has
    // passed. `boost_ns` is the next boost's length (watchdog only).
    std::atomic<bool> boosted{false};
    std::atomic<uint64_t> boost_until{0};
    uint64_t boost_ns = kFirstBoostNs;
    int64_t last_exec_ns = 0, last_wait_ns = 0;  // watchdog only
    int schedstat_fd = -1;                       // watchdog only
    ~Thread() {
      if (schedstat_fd >= 0) close(schedstat_fd);
    }
  };
  // Calls the queue threads must not make themselves. Destroyed last, after
  // the threads ended: an answer a helper gives then goes to /dev/fuse.
  std::unique_ptr<HelperPool> helpers;
  std::vector<std::unique_ptr<Thread>> threads;
  std::thread watchdog;
  // Guards the setup's progress (error, ready); the watchdog sleeps on it.
  // A leaf.
  Mutex mu;
  CondVar cv;                             // setup progress
  CondVar stop_cv;                        // the watchdog's sleep
  std::string error ABSL_GUARDED_BY(mu);  // the first setup error
  int ready ABSL_GUARDED_BY(mu) = 0;      // threads whose ring is set up

  // A new entry of `t` for queue `qid`, in the registry.
  Entry* NewEntry(Thread* t, uint16_t qid) {
    const int slot = registered.fetch_add(1);
    if (slot >= kMaxEntries) return nullptr;  // scans stop at kMaxEntries
    auto* e = new Entry;                      // never freed: see registry
    e->payload_size = payload_size;
    e->buffer = static_cast<char*>(::operator new (
        kPayloadOffset + payload_size, std::align_val_t{kPayloadOffset}));
    e->owner = t->owner;
    e->qid = qid;
    registry[slot].store(e);
    t->entries.push_back(e);
    return e;
  }

  void Register(Ring& ring, int fd, Entry* e) {
    // The kernel copies the iovecs while the SQE is submitted; the buffers
    // they describe stay the entry's.
    auto* iov =
        reinterpret_cast<iovec*>(e->buffer + sizeof(UringRequestHeader));
    iov[0] = {e->buffer, sizeof(UringRequestHeader)};
    iov[1] = {e->payload(), e->payload_size};
    AddCommand(ring, fd, kRegister, e->qid, 0, iov,
               reinterpret_cast<uint64_t>(e));
  }

  // A request that waits for its answer keeps its entry. The kernel gives a
  // request that finds no free entry of its CPU to the next entry that
  // commits, not to one registered later: were every entry of a CPU
  // waiting for answers, such a request would wait for one of them (a
  // quiesced range whose release waits on it would never come free). So a
  // thread keeps kSpareEntries free, registering more (up to
  // kMaxEntriesPerThread) as soon as its requests start to wait; it starts
  // with kFirstEntries for bursts that come before it can run (under CPU
  // contention a SCHED_IDLE thread runs late).
  void KeepSpareEntries(Ring& ring, int fd, Thread* t, uint16_t qid) {
    auto free_entries = [t] {
      return std::count_if(t->entries.begin(), t->entries.end(), [](Entry* e) {
        return e->state.load(std::memory_order_relaxed) == kInKernel;
      });
    };
    bool added = false;
    while (free_entries() < kSpareEntries &&
           t->entries.size() < kMaxEntriesPerThread) {
      Entry* e = NewEntry(t, qid);
      if (e == nullptr) break;
      Register(ring, fd, e);
      added = true;
    }
    if (added) ring.Enter(/*wait=*/false);
  }

  void ArmEventFd(Ring& ring, Thread* t, uint64_t* sink) {
    io_uring_sqe* sqe = ring.NextSqe();
    sqe->opcode = IORING_OP_READ;
    sqe->fd = t->owner->eventfd;
    sqe->addr = reinterpret_cast<uint64_t>(sink);
    sqe->len = sizeof(*sink);
    sqe->user_data = kEventFdTag;
  }

  void Commit(Ring& ring, int fd, Entry* e) {
    const uint64_t commit_id = e->header()->entry.commit_id;
    e->state.store(kInKernel, std::memory_order_relaxed);
    AddCommand(ring, fd, kCommitAndFetch, e->qid, commit_id, nullptr,
               reinterpret_cast<uint64_t>(e));
  }

  void Run(Thread* t, int cpu) {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    // A CPU this process may not use gets a thread anyway (unpinned).
    sched_setaffinity(0, sizeof(one), &one);
    pthread_setname_np(pthread_self(), "fuse-uring");
    t->tid.store(static_cast<pid_t>(syscall(SYS_gettid)));
    ScopedBlockingCallTarget to_helpers({helpers.get(), cpu});
    if (idle_policy) SetIdlePolicy(0, true);
    Ring ring;
    const int fd = fuse_session_fd(se);
    const auto qid = static_cast<uint16_t>(cpu);
    uint64_t eventfd_sink = 0;
    int err = ring.Init(kRingSize);
    if (err == 0) {
      t->owner->eventfd = eventfd(0, EFD_CLOEXEC);
      if (t->owner->eventfd < 0) err = errno;
    }
    if (err == 0) {
      for (int i = 0; i < kFirstEntries; ++i) {
        Entry* e = NewEntry(t, qid);
        if (e == nullptr) {
          err = ENOSPC;
          break;
        }
        Register(ring, fd, e);
      }
      ArmEventFd(ring, t, &eventfd_sink);
    }
    {
      MutexLock l(&mu);
      if (err != 0 && error.empty()) {
        error = std::string("io_uring setup: ") + std::strerror(err);
      }
      ++ready;
      cv.SignalAll();
    }
    while (err == 0 && !stop.load()) {
      err = ring.Enter(/*wait=*/true);
      if (err == EINTR) {
        err = 0;
        continue;
      }
      io_uring_cqe* cqe;
      while (err == 0 && (cqe = ring.Peek()) != nullptr) {
        const int res = cqe->res;
        const uint64_t tag = cqe->user_data;
        ring.Seen();
        if (tag == kEventFdTag) {
          // Answers given on other threads.
          std::vector<Entry*> answered;
          {
            MutexLock l(&t->owner->mu);
            answered.swap(t->owner->answered);
          }
          for (Entry* e : answered) Commit(ring, fd, e);
          ArmEventFd(ring, t, &eventfd_sink);
          continue;
        }
        if (res < 0) {
          err = -res;
          break;
        }
        auto* e = reinterpret_cast<Entry*>(tag);
        if (Serve(e)) {
          Commit(ring, fd, e);
        } else {
          KeepSpareEntries(ring, fd, t, qid);
        }
      }
      if (err != 0) break;
      if (t->boosted.load(std::memory_order_relaxed) &&
          MonotonicNanos() >= t->boost_until.load(std::memory_order_relaxed)) {
        t->boosted.store(false);
        SetIdlePolicy(0, true);
      }
    }
    // ENOTCONN, ECONNABORTED: the volume went away.
    if (err != 0 && err != ENOTCONN && err != ECONNABORTED &&
        err != ECANCELED && !stop.load()) {
      LogError("FUSE io_uring queue ", cpu, ": ", std::strerror(err),
               "; its requests wait until the volume ends");
    }
    // Answers that come later find no entry (they go to /dev/fuse, which
    // drops them: the volume is going away).
    for (Entry* e : t->entries) e->serving.store(0);
    t->done.store(true);
  }

  // Watches for a queue thread starved by other work on its CPU: one that
  // spent nearly a whole period waiting to run (SCHED_IDLE yields to every
  // other thread). It runs it at normal priority for a while, longer each
  // time that repeats. Also copies the helpers' counts to the stats. While
  // no queue thread runs or waits to run, the period doubles up to
  // kIdleWatchMs (a thread starved right after such a period is boosted
  // one short period after the long one).
  void Watch() ABSL_LOCKS_EXCLUDED(mu) {
    pthread_setname_np(pthread_self(), "uring-watchdog");
    int period_ms = idle_policy ? kWatchMs : kIdleWatchMs;
    uint64_t last_tick = MonotonicNanos();
    ReleasableMutexLock l(&mu);
    while (!stop_cv.WaitFor(&mu, std::chrono::milliseconds(period_ms),
                            [&] { return stop.load(); })) {
      // Not under mu: /proc reads and scheduler calls (everything below is
      // atomic or the watchdog's own).
      l.Unlock();
      const uint64_t now = MonotonicNanos();
      const auto elapsed = static_cast<int64_t>(now - last_tick);
      last_tick = now;
      bool active = false;
      if (stats != nullptr) {
        const HelperPool::Stats h = helpers->stats();
        stats->helper_calls.store(h.posted, std::memory_order_relaxed);
        stats->helper_threads.store(h.threads, std::memory_order_relaxed);
        stats->helper_busy.store(h.busy, std::memory_order_relaxed);
      }
      for (auto& t : threads) {
        if (!idle_policy) break;
        const pid_t tid = t->tid.load();
        int64_t exec_ns = 0, wait_ns = 0;
        if (tid == 0 ||
            !ReadSchedStat(tid, &t->schedstat_fd, &exec_ns, &wait_ns)) {
          continue;
        }
        const int64_t ran = exec_ns - t->last_exec_ns;
        const int64_t waited = wait_ns - t->last_wait_ns;
        t->last_exec_ns = exec_ns;
        t->last_wait_ns = wait_ns;
        if (ran > 0 || waited > 0) active = true;
        if (t->boosted.load() || waited < elapsed * 9 / 10 ||
            ran > elapsed / 10) {
          continue;
        }
        if (SetIdlePolicy(tid, false)) {
          t->boost_until.store(MonotonicNanos() + t->boost_ns);
          t->boost_ns = std::min(t->boost_ns * 2, kMaxBoostNs);
          t->boosted.store(true);
          if (stats != nullptr) stats->boosts.fetch_add(1);
        }
      }
      if (idle_policy) {
        period_ms = active ? kWatchMs : std::min(period_ms * 2, kIdleWatchMs);
      }
      l.Lock();
    }
  }

  // Serves the request in `e`. Returns true if it is answered (commit it
  // now); false if the answer comes later, on another thread.
  bool Serve(Entry* e) {
    UringRequestHeader* h = e->header();
    fuse_in_header in;
    std::memcpy(&in, h->in_out, sizeof(in));
    const size_t payload = h->entry.payload_sz;
    const size_t args = in.len >= sizeof(in) ? in.len - sizeof(in) : 0;
    e->state.store(kServing, std::memory_order_relaxed);
    e->serving.store(in.unique, std::memory_order_release);
    if (in.len < sizeof(in) || payload > args || payload > e->payload_size ||
        args - payload > sizeof(h->op_in)) {
      LogError("FUSE io_uring: malformed request (opcode ", in.opcode,
               ", length ", in.len, ", payload ", payload, "); answered EIO");
      fuse_out_header out{};
      out.unique = in.unique;
      out.error = -EIO;
      out.len = sizeof(out);
      iovec iov{&out, sizeof(out)};
      UringReply(in.unique, &iov, 1);
    } else {
      const size_t op_size = args - payload;
      char* start = e->payload() - op_size - sizeof(in);
      std::memcpy(start, &in, sizeof(in));
      std::memcpy(start + sizeof(in), h->op_in, op_size);
      fuse_buf buf{};
      buf.mem = start;
      buf.size = in.len;
      current_entry = e;
      serve(buf, in.len);
      current_entry = nullptr;
      if (stats != nullptr) {
        stats->requests.fetch_add(1, std::memory_order_relaxed);
      }
    }
    int expected = kServing;
    return !e->state.compare_exchange_strong(expected, kDetached,
                                             std::memory_order_acq_rel);
  }
};

std::unique_ptr<UringQueues> UringQueues::Start(
    fuse_session* se, UringServe serve, int threads_per_cpu, int max_helpers,
    size_t max_payload, UringStats* stats, std::string* error) {
  auto impl = std::make_unique<Impl>();
  impl->se = se;
  impl->serve = std::move(serve);
  impl->stats = stats;
  impl->payload_size =
      (max_payload + kPayloadOffset - 1) / kPayloadOffset * kPayloadOffset;
  impl->idle_policy = CanLeaveIdlePolicy();
  if (!impl->idle_policy) {
    LogWarning(
        "FUSE io_uring: may not schedule queue threads as SCHED_IDLE "
        "and back (needs CAP_SYS_NICE); a reply may then wake its "
        "caller on another CPU");
  }
  const int cpus = PossibleCpus();
  const int count = cpus * std::max(1, threads_per_cpu);
  impl->helpers = std::make_unique<HelperPool>(HelperPool::Options{
      .lanes = cpus, .max_threads = std::max(cpus, max_helpers)});
  Impl* raw = impl.get();
  for (int i = 0; i < count; ++i) {
    raw->threads.push_back(std::make_unique<Impl::Thread>());
  }
  for (int i = 0; i < count; ++i) {
    Impl::Thread* t = raw->threads[i].get();
    t->thread = std::thread([raw, t, cpu = i % cpus] { raw->Run(t, cpu); });
  }
  raw->watchdog = std::thread([raw] { raw->Watch(); });
  // Named here too: a thread bears its creator's name (a FUSE worker's,
  // after INIT) until it renames itself.
  pthread_setname_np(raw->watchdog.native_handle(), "uring-watchdog");
  {
    ReleasableMutexLock l(&raw->mu);
    while (raw->ready != count) raw->cv.Wait(&raw->mu);
    if (!raw->error.empty()) {
      *error = raw->error;
      l.Unlock();
      UringQueues stopper(std::move(impl));  // stops and joins
      return nullptr;
    }
  }
  return std::unique_ptr<UringQueues>(new UringQueues(std::move(impl)));
}

UringQueues::UringQueues(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

UringQueues::~UringQueues() {
  if (!impl_) return;
  {
    MutexLock l(&impl_->mu);
    impl_->stop.store(true);
  }
  impl_->stop_cv.SignalAll();
  if (impl_->watchdog.joinable()) impl_->watchdog.join();
  for (auto& t : impl_->threads) {
    // Again until it ends: a signal just before io_uring_enter is lost.
    while (t->thread.joinable() && !t->done.load()) {
      pthread_kill(t->thread.native_handle(), kFuseWakeSignal);
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    if (t->thread.joinable()) t->thread.join();
    // The eventfd stays open, as the entries stay: an answer given late
    // (a storage server's, a released quiesce's) may still write to it.
  }
}

bool UringReply(uint64_t unique, const iovec* iov, int count) {
  if (unique == 0) return false;
  if (current_entry == nullptr &&
      registered.load(std::memory_order_relaxed) == 0) {
    return false;
  }
  Entry* e = FindServing(unique);
  if (e == nullptr) return false;
  uint64_t expected = unique;
  if (!e->serving.compare_exchange_strong(expected, 0)) return false;
  UringRequestHeader* h = e->header();
  // The first sizeof(fuse_out_header) bytes go to the header, the rest to
  // the payload.
  size_t header_bytes = 0, payload_bytes = 0;
  bool too_long = false;
  for (int i = 0; i < count; ++i) {
    const char* p = static_cast<const char*>(iov[i].iov_base);
    size_t n = iov[i].iov_len;
    if (header_bytes < sizeof(fuse_out_header)) {
      const size_t take = std::min(n, sizeof(fuse_out_header) - header_bytes);
      std::memcpy(h->in_out + header_bytes, p, take);
      header_bytes += take;
      p += take;
      n -= take;
    }
    if (n == 0) continue;
    if (payload_bytes + n > e->payload_size) {
      too_long = true;
      break;
    }
    std::memcpy(e->payload() + payload_bytes, p, n);
    payload_bytes += n;
  }
  auto* out = reinterpret_cast<fuse_out_header*>(h->in_out);
  if (too_long) {
    out->error = -EIO;
    payload_bytes = 0;
  }
  h->entry.payload_sz = static_cast<uint32_t>(payload_bytes);
  // The owner commits it: after its handler returns, or, if that returned
  // already, when the eventfd wakes it.
  if (e->state.exchange(kAnswered, std::memory_order_acq_rel) == kDetached) {
    EntryOwner* owner = e->owner;
    {
      MutexLock l(&owner->mu);
      owner->answered.push_back(e);
    }
    const uint64_t one = 1;
    (void)!write(owner->eventfd, &one, sizeof(one));
  }
  return true;
}

void KernelHandOffRelease() {
#ifdef SROUTE_TSAN
  __tsan_release(&kernel_hand_off);
#endif
}

void KernelHandOffAcquire() {
#ifdef SROUTE_TSAN
  __tsan_acquire(&kernel_hand_off);
#endif
}

bool InUringEntry(const void* payload) {
  const Entry* e = current_entry;
  if (e == nullptr || e->buffer == nullptr) return false;
  const auto* p = static_cast<const char*>(payload);
  return p >= e->buffer && p < e->buffer + kPayloadOffset + e->payload_size;
}

}  // namespace sroute
