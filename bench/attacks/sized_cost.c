/*
 * sized_cost.c - the cost of the sized-free check: malloc(n) + free(p) against
 * malloc(n) + free_sized(p, n) and sdallocx(p, n, 0), n uniform in 8..264 (fig_pair's
 * sizes), each loop in its own never-inlined function for callgrind:
 *   valgrind --tool=callgrind --toggle-collect='loop_*' env LD_PRELOAD=build/libstrata.so \
 *     build/sized_cost; callgrind_annotate --inclusive=yes callgrind.out.* | grep loop_
 * Instructions per pair = inclusive cost of loop_X / PAIRS (minus the loop's own ~8).
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define PAIRS 1000000
static size_t sizes[4096];
typedef void (*fs_t)(void *, size_t);
typedef void (*sd_t)(void *, size_t, int);

__attribute__((noinline)) static void loop_free(void) {
  for (int i = 0; i < PAIRS; i++) {
    void *p = malloc(sizes[i & 4095]);
    free(p);
  }
}
__attribute__((noinline)) static void loop_free_sized(fs_t fs) {
  for (int i = 0; i < PAIRS; i++) {
    size_t n = sizes[i & 4095];
    void *p = malloc(n);
    fs(p, n);
  }
}
__attribute__((noinline)) static void loop_sdallocx(sd_t sd) {
  for (int i = 0; i < PAIRS; i++) {
    size_t n = sizes[i & 4095];
    void *p = malloc(n);
    sd(p, n, 0);
  }
}

int main(void) {
  uint64_t x = 88172645463325252ull;
  for (int i = 0; i < 4096; i++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    sizes[i] = 8 + x % 257;
  }
  void *live[1000];
  for (int i = 0; i < 1000; i++) live[i] = malloc(sizes[i]);
  fs_t fs = (fs_t)dlsym(RTLD_DEFAULT, "free_sized");
  sd_t sd = (sd_t)dlsym(RTLD_DEFAULT, "sdallocx");
  loop_free();
  if (fs) loop_free_sized(fs);
  if (sd) loop_sdallocx(sd);
  for (int i = 0; i < 1000; i++) free(live[i]);
  printf("free_sized %s, sdallocx %s\n", fs ? "measured" : "absent", sd ? "measured" : "absent");
  return 0;
}
