/*
 * thp_random - what transparent huge pages buy on a large random-access working set:
 * one malloc'd block of SIZE MiB (default 1024), touched, then ACCESSES (default 50 M)
 * dependent random 8-byte read-modify-writes over it. Prints one JSON line: the access
 * time and AnonHugePages from /proc/self/smaps_rollup (huge pages backing the process).
 * Run it under an allocator with and without its THP option on a kernel whose THP mode
 * is "madvise" (bench/memory_return.py --only thp).
 *
 *   thp_random [SIZE_MIB [ACCESSES_MILLIONS]]
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static long smaps_kb(const char *key) {
  FILE *f = fopen("/proc/self/smaps_rollup", "r");
  char line[256];
  long v = -1;
  size_t n = strlen(key);
  while (f && fgets(line, sizeof line, f)) {
    if (strncmp(line, key, n) == 0 && line[n] == ':') v = atol(line + n + 1);
  }
  if (f) fclose(f);
  return v;
}

int main(int argc, char **argv) {
  size_t mib = argc > 1 ? strtoul(argv[1], NULL, 10) : 1024;
  uint64_t accesses = (argc > 2 ? strtoull(argv[2], NULL, 10) : 50) * 1000000ull;
  size_t words = (mib << 20) / sizeof(uint64_t);
  uint64_t *a = malloc(words * sizeof(uint64_t));
  if (a == NULL || words == 0) {
    fprintf(stderr, "thp_random: malloc(%zu MiB) failed\n", mib);
    return 1;
  }
  double t0 = now_s();
  for (size_t i = 0; i < words; i++) a[i] = i * 0x9e3779b97f4a7c15ull;
  double t1 = now_s();
  uint64_t x = 88172645463325252ull, sum = 0;
  for (uint64_t k = 0; k < accesses; k++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    size_t i = (size_t)((x ^ sum) % words); /* depends on the last read: no prefetching */
    sum += a[i];
    a[i] = sum;
  }
  double t2 = now_s();
  printf("{\"size_mib\":%zu,\"accesses\":%llu,\"touch_seconds\":%.4f,\"access_seconds\":%.4f,"
         "\"ns_per_access\":%.2f,\"anon_huge_kb\":%ld,\"rss_kb\":%ld,\"checksum\":%llu}\n",
         mib, (unsigned long long)accesses, t1 - t0, t2 - t1, (t2 - t1) * 1e9 / (double)accesses,
         smaps_kb("AnonHugePages"), smaps_kb("Rss"), (unsigned long long)(sum & 0xffff));
  free(a);
  return 0;
}
