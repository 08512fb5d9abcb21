/*
 * wl_hugeblocks - image and column buffers: blocks of 5..25 MiB allocated, written
 * (every page) and freed in a loop, a few alive at once. An allocator that unmaps or
 * purges each freed block faults every page in again on the next one.
 */
#include "common.h"

#include <stdlib.h>

#define MIN_SIZE ((size_t)5 << 20)
#define MAX_SIZE ((size_t)25 << 20)
#define LIVE 4

int main(int argc, char **argv) {
  static const int threads[3] = {1, 1, 1};
  wl_args_t a;
  wl_parse_args(&a, "hugeblocks", argc, argv, threads);
  uint64_t iters = WL_PICK(&a, 30, 100, 1000);
  wl_rng_t r;
  wl_rng_init(&r, a.seed, 0);
  void *p[LIVE] = {0};
  size_t sz[LIVE] = {0};
  uint64_t tag[LIVE] = {0};
  uint64_t t0 = wl_now_ns();
  for (uint64_t i = 0; i < iters; i++) {
    unsigned s = (unsigned)wl_below(&r, LIVE);
    if (p[s]) {
      wl_check(p[s], sz[s], tag[s], "huge");
      free(p[s]);
    }
    sz[s] = (size_t)wl_range(&r, MIN_SIZE, MAX_SIZE);
    tag[s] = i + 1;
    if (!(p[s] = malloc(sz[s]))) wl_oom(sz[s]);
    wl_stamp(p[s], sz[s], tag[s]);
  }
  for (unsigned s = 0; s < LIVE; s++) {
    if (!p[s]) continue;
    wl_check(p[s], sz[s], tag[s], "huge at end");
    free(p[s]);
  }
  double sec = (double)(wl_now_ns() - t0) / 1e9;
  wl_json_t *j = wl_result_begin(&a, iters, sec);
  wl_result_end(j);
  return 0;
}
