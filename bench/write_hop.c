// SPDX-License-Identifier: Apache-2.0
// What a 4 KiB buffered write costs when the thread that must not block
// (a FUSE io_uring queue thread, fuse/uring_queues.h) does not make it
// itself: one thread pinned to CPU 0 writes random 4 KiB blocks of a 1 GiB
// file in DIR (a) with pwrite(2) itself, (b) as IORING_OP_WRITE on its own
// io_uring (SINGLE_ISSUER | DEFER_TASKRUN, as the queue threads' rings),
// submitting one and waiting for it, and (c) handed to a helper thread
// pinned to the same CPU (a condition variable there, an eventfd back: the
// shape of util/helper_pool.h). It also says whether the filesystem takes
// RWF_NOWAIT buffered writes: where it does not (ext4), io_uring hands
// every such write to one of its io-wq workers, which is the same hop as
// (c). Issue 51 asked whether the ring beats the helper: see
// bench/RESULTS.md "Writes on the queue's own ring".
//
//   cc -O2 -pthread -o write_hop bench/write_hop.c && ./write_hop DIR [ROUNDS]
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/io_uring.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

enum { kBlock = 4096, kBlocks = 1 << 18 };  // 1 GiB
static int file_fd;
static char* block;
static long rounds = 200000;
static uint64_t rng = 88172645463325252ull;

static off_t NextOffset(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (off_t)(rng % kBlocks) * kBlock;
}

static double NowUs(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static void Pin(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

static void Check(long got, const char* what) {
  if (got == kBlock) return;
  fprintf(stderr, "%s: %ld (%s)\n", what, got, strerror(got < 0 ? -got : 0));
  exit(1);
}

// (b) A minimal io_uring with one submitter.
struct Ring {
  int fd;
  unsigned *sq_tail, sq_mask, *sq_array, *cq_head, *cq_tail, cq_mask;
  struct io_uring_sqe* sqes;
  struct io_uring_cqe* cqes;
};

static void RingInit(struct Ring* r) {
  struct io_uring_params p;
  memset(&p, 0, sizeof(p));
  p.flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN;
  r->fd = (int)syscall(__NR_io_uring_setup, 64, &p);
  if (r->fd < 0) {
    perror("io_uring_setup");
    exit(1);
  }
  size_t sq = p.sq_off.array + p.sq_entries * sizeof(unsigned);
  size_t cq = p.cq_off.cqes + p.cq_entries * sizeof(struct io_uring_cqe);
  size_t size = sq > cq ? sq : cq;  // IORING_FEAT_SINGLE_MMAP (5.4+)
  char* q = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE,
                 r->fd, IORING_OFF_SQ_RING);
  r->sqes = mmap(NULL, p.sq_entries * sizeof(struct io_uring_sqe),
                 PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, r->fd,
                 IORING_OFF_SQES);
  if (q == MAP_FAILED || r->sqes == MAP_FAILED) {
    perror("mmap");
    exit(1);
  }
  r->sq_tail = (unsigned*)(q + p.sq_off.tail);
  r->sq_mask = *(unsigned*)(q + p.sq_off.ring_mask);
  r->sq_array = (unsigned*)(q + p.sq_off.array);
  r->cq_head = (unsigned*)(q + p.cq_off.head);
  r->cq_tail = (unsigned*)(q + p.cq_off.tail);
  r->cq_mask = *(unsigned*)(q + p.cq_off.ring_mask);
  r->cqes = (struct io_uring_cqe*)(q + p.cq_off.cqes);
}

static long RingWrite(struct Ring* r, off_t offset) {
  const unsigned tail = *r->sq_tail, index = tail & r->sq_mask;
  struct io_uring_sqe* sqe = &r->sqes[index];
  memset(sqe, 0, sizeof(*sqe));
  sqe->opcode = IORING_OP_WRITE;
  sqe->fd = file_fd;
  sqe->addr = (uint64_t)(uintptr_t)block;
  sqe->len = kBlock;
  sqe->off = (uint64_t)offset;
  r->sq_array[index] = index;
  __atomic_store_n(r->sq_tail, tail + 1, __ATOMIC_RELEASE);
  unsigned submit = 1;
  const unsigned head = *r->cq_head;
  while (head == __atomic_load_n(r->cq_tail, __ATOMIC_ACQUIRE)) {
    syscall(__NR_io_uring_enter, r->fd, submit, 1, IORING_ENTER_GETEVENTS, NULL,
            0);
    submit = 0;
  }
  const long res = r->cqes[head & r->cq_mask].res;
  __atomic_store_n(r->cq_head, head + 1, __ATOMIC_RELEASE);
  return res;
}

// (c) A helper on the same CPU.
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int posted, stopping, done_fd;
static off_t posted_offset;

static void* Helper(void* unused) {
  (void)unused;
  Pin(0);
  for (;;) {
    pthread_mutex_lock(&mu);
    while (!posted && !stopping) pthread_cond_wait(&cv, &mu);
    if (stopping) {
      pthread_mutex_unlock(&mu);
      return NULL;
    }
    posted = 0;
    const off_t offset = posted_offset;
    pthread_mutex_unlock(&mu);
    Check(pwrite(file_fd, block, kBlock, offset), "helper pwrite");
    const uint64_t one = 1;
    if (write(done_fd, &one, sizeof(one)) != sizeof(one)) exit(1);
  }
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s DIR [ROUNDS]\n", argv[0]);
    return 2;
  }
  if (argc > 2) rounds = atol(argv[2]);
  char path[4096];
  snprintf(path, sizeof(path), "%s/write_hop.%d", argv[1], (int)getpid());
  file_fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
  if (file_fd < 0 || ftruncate(file_fd, (off_t)kBlock * kBlocks) != 0) {
    perror(path);
    return 1;
  }
  unlink(path);
  block = aligned_alloc(kBlock, kBlock);
  memset(block, 7, kBlock);
  Pin(0);

  struct iovec iov = {block, kBlock};
  const long nowait = pwritev2(file_fd, &iov, 1, 0, RWF_NOWAIT);
  printf("RWF_NOWAIT buffered write: %s\n",
         nowait == kBlock ? "taken" : strerror(errno));
  for (long i = 0; i < rounds; i++)
    Check(pwrite(file_fd, block, kBlock, NextOffset()), "warm-up");

  double t = NowUs();
  for (long i = 0; i < rounds; i++) {
    Check(pwrite(file_fd, block, kBlock, NextOffset()), "pwrite");
  }
  const double inline_us = (NowUs() - t) / rounds;

  struct Ring ring;
  RingInit(&ring);
  t = NowUs();
  for (long i = 0; i < rounds; i++)
    Check(RingWrite(&ring, NextOffset()), "ring");
  const double ring_us = (NowUs() - t) / rounds;

  done_fd = eventfd(0, EFD_CLOEXEC);
  pthread_t helper;
  pthread_create(&helper, NULL, Helper, NULL);
  t = NowUs();
  for (long i = 0; i < rounds; i++) {
    pthread_mutex_lock(&mu);
    posted = 1;
    posted_offset = NextOffset();
    pthread_cond_signal(&cv);
    pthread_mutex_unlock(&mu);
    uint64_t n;
    if (read(done_fd, &n, sizeof(n)) != sizeof(n)) return 1;
  }
  const double helper_us = (NowUs() - t) / rounds;
  pthread_mutex_lock(&mu);
  stopping = 1;
  pthread_cond_signal(&cv);
  pthread_mutex_unlock(&mu);
  pthread_join(helper, NULL);

  printf(
      "per 4 KiB write, %ld rounds: itself %.2f us, own ring %.2f us "
      "(%.2fx), helper %.2f us (%.2fx); ring / helper %.2f\n",
      rounds, inline_us, ring_us, ring_us / inline_us, helper_us,
      helper_us / inline_us, ring_us / helper_us);
  return 0;
}
