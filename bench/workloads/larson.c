/*
 * wl_larson - Larson and Krishnan's server benchmark: each thread owns an array of
 * blocks (8..1000 B) and replaces random ones; when a thread has done its share it
 * ends and a new thread inherits its array, so blocks are freed by a thread that did
 * not allocate them, and the initial blocks come from the main thread.
 */
#include "common.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define MIN_SIZE 16
#define MAX_SIZE 1000
#define CHUNKS 5000 /* blocks per thread, as in mimalloc-bench's larson run */

typedef struct worker {
  int id;
  uint64_t gen, ops, seed;
  void *blk[CHUNKS];
} worker_t;

static void *worker_main(void *arg) {
  worker_t *w = arg;
  wl_rng_t r;
  wl_rng_init(&r, w->seed, w->gen * 1024 + (uint64_t)w->id);
  uint64_t tag = (w->gen << 40) | ((uint64_t)w->id << 32);
  for (uint64_t i = 0; i < w->ops; i++) {
    void **b = &w->blk[wl_below(&r, CHUNKS)];
    wl_hdr_check(*b, MAX_SIZE, "larson block");
    free(*b);
    size_t size = (size_t)wl_range(&r, MIN_SIZE, MAX_SIZE);
    if (!(*b = malloc(size))) wl_oom(size);
    wl_hdr_stamp(*b, size, ++tag);
  }
  return NULL;
}

int main(int argc, char **argv) {
  static const int threads[3] = {4, 4, 4};
  wl_args_t a;
  wl_parse_args(&a, "larson", argc, argv, threads);
  uint64_t gens = WL_PICK(&a, 5, 20, 200), per_gen = WL_PICK(&a, 20000, 20000, 50000);
  worker_t *w = wl_map(sizeof(worker_t) * (size_t)a.threads);
  wl_rng_t r;
  wl_rng_init(&r, a.seed, 1u << 30);
  for (int i = 0; i < a.threads; i++) {
    w[i].id = i;
    w[i].seed = a.seed;
    w[i].ops = per_gen;
    for (int k = 0; k < CHUNKS; k++) {
      size_t size = (size_t)wl_range(&r, MIN_SIZE, MAX_SIZE);
      if (!(w[i].blk[k] = malloc(size))) wl_oom(size);
      wl_hdr_stamp(w[i].blk[k], size, ((uint64_t)i << 32) | (uint64_t)k);
    }
  }
  pthread_t tids[1024];
  uint64_t t0 = wl_now_ns();
  for (uint64_t g = 0; g < gens; g++) {
    for (int i = 0; i < a.threads; i++) {
      w[i].gen = g + 1;
      int err = pthread_create(&tids[i], NULL, worker_main, &w[i]);
      if (err) wl_die("pthread_create: %s", strerror(err));
    }
    for (int i = 0; i < a.threads; i++) pthread_join(tids[i], NULL);
  }
  double sec = (double)(wl_now_ns() - t0) / 1e9;
  for (int i = 0; i < a.threads; i++)
    for (int k = 0; k < CHUNKS; k++) {
      wl_hdr_check(w[i].blk[k], MAX_SIZE, "larson block at end");
      free(w[i].blk[k]);
    }
  wl_json_t *j = wl_result_begin(&a, gens * per_gen * (uint64_t)a.threads, sec);
  wl_result_end(j);
  return 0;
}
