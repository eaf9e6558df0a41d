// SPDX-License-Identifier: Apache-2.0
// How a file's cached pages lie in physical memory: maps the first SIZE
// bytes (default 256 MiB), touches every page (pages not cached are read
// in), then reads /proc/self/pagemap and /proc/kpageflags (root only) and
// prints the share of pages whose frame follows the previous page's frame
// and a histogram of folio sizes. Used to explain cached-read throughput
// differences in bench/RESULTS.md.
//
//   cc -O2 -o cache_contiguity bench/cache_contiguity.c
//   ./cache_contiguity MOUNT/fio.dat [SIZE]
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

static int Order(long pages) {
  int order = 0;
  while ((1L << order) < pages) order++;
  return order;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s FILE [SIZE]\n", argv[0]);
    return 2;
  }
  const size_t size = argc > 2 ? strtoull(argv[2], NULL, 0) : (256UL << 20);
  const int fd = open(argv[1], O_RDONLY);
  if (fd < 0) {
    perror(argv[1]);
    return 1;
  }
  const unsigned char* map = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
  if (map == MAP_FAILED) {
    perror("mmap");
    return 1;
  }
  volatile unsigned sum = 0;
  for (size_t off = 0; off < size; off += 4096) sum += map[off];

  const int pagemap = open("/proc/self/pagemap", O_RDONLY);
  const int kpageflags = open("/proc/kpageflags", O_RDONLY);
  if (pagemap < 0 || kpageflags < 0) {
    perror("/proc/self/pagemap or /proc/kpageflags");
    return 1;
  }
  long folios_by_order[24] = {0};
  long run = 0, absent = 0, contiguous = 0;
  uint64_t previous_frame = 0;
  const size_t pages = size / 4096;
  for (size_t i = 0; i < pages; i++) {
    uint64_t entry = 0, flags = 0;
    if (pread(pagemap, &entry, 8, ((uintptr_t)map / 4096 + i) * 8) != 8 ||
        !(entry >> 63)) {
      absent++;
      continue;
    }
    const uint64_t frame = entry & ((1ULL << 55) - 1);
    if (frame == previous_frame + 1) contiguous++;
    previous_frame = frame;
    if (pread(kpageflags, &flags, 8, frame * 8) != 8) flags = 0;
    if ((flags >> 16) & 1) {  // KPF_COMPOUND_TAIL: same folio as before
      run++;
    } else {
      if (run) folios_by_order[Order(run)]++;
      run = 1;
    }
  }
  if (run) folios_by_order[Order(run)]++;
  printf("pages %zu, not mapped %ld, frame follows previous %.1f%%; folios:",
         pages, absent, 100.0 * contiguous / pages);
  for (int o = 0; o < 24; o++)
    if (folios_by_order[o]) printf(" %ldK x %ld", 4L << o, folios_by_order[o]);
  printf("\n");
  return 0;
}
