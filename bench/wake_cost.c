// SPDX-License-Identifier: Apache-2.0
// What waking a sleeping thread costs on this machine: two threads pass a
// byte back and forth over two pipes, each sleeping in read(2) until the
// other writes, first both pinned to CPU 0, then on CPUs 0 and 1, then
// wherever the scheduler puts them. Where an idle CPU halts (a VM without
// guest halt polling) the second case costs tens of microseconds more per
// round trip: what a FUSE reply pays to wake a caller on another CPU, and
// why sroute-fuse's workers do not poll by default (bench/RESULTS.md).
//
//   cc -O2 -pthread -o wake_cost bench/wake_cost.c && ./wake_cost [ROUNDS]
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static int to_peer[2], to_main[2];
static long rounds = 100000;
// The CPUs this process may run on at start, restored after each case.
static cpu_set_t start_cpus;

static void Pin(int cpu) {
  if (cpu < 0) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

static void* Peer(void* cpu) {
  Pin((int)(long)cpu);
  char c;
  for (long i = 0; i < rounds; i++) {
    if (read(to_peer[0], &c, 1) != 1 || write(to_main[1], &c, 1) != 1) break;
  }
  return NULL;
}

// Microseconds per round trip between a thread on `main_cpu` and one on
// `peer_cpu` (-1: not pinned).
static double RoundTripUs(int main_cpu, int peer_cpu) {
  if (pipe(to_peer) != 0 || pipe(to_main) != 0) {
    perror("pipe");
    exit(1);
  }
  pthread_t peer;
  pthread_create(&peer, NULL, Peer, (void*)(long)peer_cpu);
  Pin(main_cpu);
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  char c = 1;
  for (long i = 0; i < rounds; i++) {
    if (write(to_peer[1], &c, 1) != 1 || read(to_main[0], &c, 1) != 1) break;
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  pthread_join(peer, NULL);
  for (int i = 0; i < 2; i++) {
    close(to_peer[i]);
    close(to_main[i]);
  }
  pthread_setaffinity_np(pthread_self(), sizeof(start_cpus), &start_cpus);
  return ((t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec)) / rounds /
         1e3;
}

int main(int argc, char** argv) {
  if (argc > 1) rounds = atol(argv[1]);
  if (rounds <= 0) {
    fprintf(stderr, "usage: %s [ROUNDS]\n", argv[0]);
    return 2;
  }
  pthread_getaffinity_np(pthread_self(), sizeof(start_cpus), &start_cpus);
  printf("one CPU (0, 0):        %7.2f us per round trip\n", RoundTripUs(0, 0));
  if (sysconf(_SC_NPROCESSORS_ONLN) > 1) {
    printf("two CPUs (0, 1):       %7.2f us per round trip\n",
           RoundTripUs(0, 1));
  }
  printf("not pinned:            %7.2f us per round trip\n",
         RoundTripUs(-1, -1));
  return 0;
}
