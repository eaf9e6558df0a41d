// SPDX-License-Identifier: Apache-2.0
// Metadata benchmark for bench/fuse_fio.sh: in DIR, creates N empty files,
// stats each, then unlinks each. Prints "OPS_PER_S P50_US P99_US" over the
// 3*N operations (each one a syscall timed on its own).
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int cmp(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: metaops DIR N\n");
    return 2;
  }
  const char* dir = argv[1];
  const int n = atoi(argv[2]);
  double* lat = malloc(sizeof(double) * 3 * n);
  char path[4096];
  int k = 0;
  const double start = now_us();
  for (int phase = 0; phase < 3; ++phase) {
    for (int i = 0; i < n; ++i) {
      snprintf(path, sizeof(path), "%s/m%d", dir, i);
      const double t0 = now_us();
      int rc = 0;
      if (phase == 0) {
        const int fd = open(path, O_CREAT | O_WRONLY | O_EXCL, 0644);
        rc = fd < 0 ? -1 : close(fd);
      } else if (phase == 1) {
        struct stat st;
        rc = stat(path, &st);
      } else {
        rc = unlink(path);
      }
      if (rc != 0) {
        perror(path);
        return 1;
      }
      lat[k++] = now_us() - t0;
    }
  }
  const double secs = (now_us() - start) / 1e6;
  qsort(lat, k, sizeof(double), cmp);
  printf("%.0f %.1f %.1f\n", k / secs, lat[k / 2], lat[(int)(k * 0.99)]);
  return 0;
}
