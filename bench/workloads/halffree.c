/*
 * wl_halffree - a buffer of blocks of one size; each round frees every other block
 * (alternating halves) and replaces it with a block of the next size class up (16 B
 * steps to 128 B, then four per doubling, back to 16 B after 4 KiB), so the live set
 * is always two classes wide and every round retires one class for the next.
 */
#include "common.h"

#include <stdlib.h>

#define NBLOCKS 20000

static size_t next_size(size_t s) {
  if (s < 128) return s + 16;
  size_t step = (size_t)1 << (63 - __builtin_clzll(s) - 2);
  s += step;
  return s > 4096 ? 16 : s;
}

int main(int argc, char **argv) {
  static const int threads[3] = {1, 1, 1};
  wl_args_t a;
  wl_parse_args(&a, "halffree", argc, argv, threads);
  uint64_t rounds = WL_PICK(&a, 40, 150, 1500);
  void **p = wl_map(sizeof(void *) * NBLOCKS);
  uint32_t *sz = wl_map(sizeof(uint32_t) * NBLOCKS);
  uint64_t *tag = wl_map(sizeof(uint64_t) * NBLOCKS);
  size_t size = 16;
  uint64_t t = 0, ops = 0;
  for (int i = 0; i < NBLOCKS; i++) {
    sz[i] = (uint32_t)size;
    tag[i] = ++t;
    if (!(p[i] = malloc(size))) wl_oom(size);
    wl_stamp(p[i], size, tag[i]);
  }
  uint64_t t0 = wl_now_ns();
  for (uint64_t r = 0; r < rounds; r++) {
    size = next_size(size);
    for (int i = (int)(r & 1); i < NBLOCKS; i += 2) {
      wl_check(p[i], sz[i], tag[i], "halffree");
      free(p[i]);
      sz[i] = (uint32_t)size;
      tag[i] = ++t;
      if (!(p[i] = malloc(size))) wl_oom(size);
      wl_stamp(p[i], size, tag[i]);
      ops++;
    }
  }
  double sec = (double)(wl_now_ns() - t0) / 1e9;
  for (int i = 0; i < NBLOCKS; i++) {
    wl_check(p[i], sz[i], tag[i], "halffree at end");
    free(p[i]);
  }
  wl_json_t *j = wl_result_begin(&a, ops, sec);
  wl_result_end(j);
  return 0;
}
