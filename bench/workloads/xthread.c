/*
 * wl_xthread - many threads, random sizes up to 16 KiB, blocks passed between them:
 * each thread allocates a block, puts it in a random slot of a shared array and frees
 * the block it takes out, which any thread may have allocated. Almost every free is
 * remote; peak RSS shows what an allocator keeps on the way back to the owner.
 */
#include "common.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#define MIN_SIZE 16
#define MAX_SIZE 16384
#define SLOTS_PER_THREAD 512

typedef struct worker {
  int id;
  uint64_t ops, seed;
  pthread_barrier_t *bar;
} worker_t;

static _Atomic(void *) *slots;
static uint64_t nslots;

static void *worker_main(void *arg) {
  worker_t *w = arg;
  wl_rng_t r;
  wl_rng_init(&r, w->seed, (uint64_t)w->id);
  uint64_t tag = (uint64_t)w->id << 40;
  pthread_barrier_wait(w->bar);
  for (uint64_t i = 0; i < w->ops; i++) {
    size_t size = (size_t)wl_range(&r, MIN_SIZE, MAX_SIZE);
    void *p = malloc(size);
    if (!p) wl_oom(size);
    wl_hdr_stamp(p, size, ++tag);
    void *old = atomic_exchange_explicit(&slots[wl_below(&r, nslots)], p, memory_order_acq_rel);
    if (old) {
      wl_hdr_check(old, MAX_SIZE, "passed block");
      free(old);
    }
  }
  return NULL;
}

int main(int argc, char **argv) {
  static const int threads[3] = {16, 16, 16};
  wl_args_t a;
  wl_parse_args(&a, "xthread", argc, argv, threads);
  uint64_t ops = WL_PICK(&a, 5000, 20000, 200000); /* per thread */
  nslots = SLOTS_PER_THREAD * (uint64_t)a.threads;
  slots = wl_map(sizeof(*slots) * nslots);
  pthread_barrier_t bar;
  pthread_barrier_init(&bar, NULL, (unsigned)a.threads);
  worker_t *w = wl_map(sizeof(worker_t) * (size_t)a.threads);
  for (int i = 0; i < a.threads; i++) w[i] = (worker_t){.id = i, .ops = ops, .seed = a.seed, .bar = &bar};
  uint64_t t0 = wl_now_ns();
  wl_run(a.threads, worker_main, w, sizeof(*w));
  double sec = (double)(wl_now_ns() - t0) / 1e9;
  for (uint64_t i = 0; i < nslots; i++) {
    void *p = atomic_load(&slots[i]);
    if (!p) continue;
    wl_hdr_check(p, MAX_SIZE, "passed block at end");
    free(p);
  }
  wl_json_t *j = wl_result_begin(&a, ops * (uint64_t)a.threads, sec);
  wl_result_end(j);
  return 0;
}
