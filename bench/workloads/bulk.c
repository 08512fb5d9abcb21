/*
 * wl_bulk - batch jobs and parsers: a thread allocates thousands to hundreds of
 * thousands of small blocks (8..400 B), then frees them all. Phase "same": the owner
 * frees every block, in allocation order. Phase "cross": threads form a ring and each
 * hands every other block of its batch to the next thread, which frees them while the
 * owner frees the rest. Stresses bulk fills and flushes of the thread cache.
 */
#include "common.h"

#include <pthread.h>
#include <stdlib.h>

#define MIN_SIZE 8
#define MAX_SIZE 400
#define MIN_BATCH 2000
#define MAX_BATCH 200000

typedef struct blk {
  void *p;
  uint64_t tag;
  uint32_t size;
} blk_t;

typedef struct worker {
  int id, n;
  uint64_t blocks, seed, done;
  struct worker *all;
  pthread_barrier_t *bar;
  blk_t *own;   /* this round's batch */
  blk_t *inbox; /* every other block of the previous thread's batch */
  uint64_t ninbox;
  uint64_t t[3];
} worker_t;

static void fill(worker_t *w, wl_rng_t *r, uint64_t k, uint64_t *tag) {
  for (uint64_t i = 0; i < k; i++) {
    blk_t *b = &w->own[i];
    b->size = (uint32_t)wl_range(r, MIN_SIZE, MAX_SIZE);
    b->tag = ++*tag;
    b->p = malloc(b->size);
    if (!b->p) wl_oom(b->size);
    wl_stamp(b->p, b->size, b->tag);
  }
}

static void *worker_main(void *arg) {
  worker_t *w = arg;
  wl_rng_t r;
  wl_rng_init(&r, w->seed, (uint64_t)w->id);
  uint64_t tag = (uint64_t)w->id << 48;
  pthread_barrier_wait(w->bar);
  if (w->id == 0) w->t[0] = wl_now_ns();
  /* same: allocate a batch, free all of it. */
  for (uint64_t left = w->blocks; left;) {
    uint64_t k = wl_log_range(&r, MIN_BATCH, MAX_BATCH);
    if (k > left) k = left;
    fill(w, &r, k, &tag);
    for (uint64_t i = 0; i < k; i++) {
      wl_check(w->own[i].p, w->own[i].size, w->own[i].tag, "same");
      free(w->own[i].p);
    }
    left -= k;
    w->done += k;
  }
  pthread_barrier_wait(w->bar);
  if (w->id == 0) w->t[1] = wl_now_ns();
  /* cross: every thread's batch size is the same per round (shared seed stream). */
  wl_rng_t shared;
  wl_rng_init(&shared, w->seed, 1000003);
  worker_t *next = &w->all[(w->id + 1) % w->n];
  for (uint64_t left = w->blocks; left;) {
    uint64_t k = wl_log_range(&shared, MIN_BATCH, MAX_BATCH);
    if (k > left) k = left;
    fill(w, &r, k, &tag);
    uint64_t m = 0;
    for (uint64_t i = 1; i < k; i += 2) next->inbox[m++] = w->own[i];
    next->ninbox = m;
    pthread_barrier_wait(w->bar);
    for (uint64_t i = 0; i < k; i += 2) {
      wl_check(w->own[i].p, w->own[i].size, w->own[i].tag, "cross own");
      free(w->own[i].p);
    }
    for (uint64_t i = 0; i < w->ninbox; i++) {
      wl_check(w->inbox[i].p, w->inbox[i].size, w->inbox[i].tag, "cross handed");
      free(w->inbox[i].p);
    }
    pthread_barrier_wait(w->bar); /* inboxes are refilled next round */
    left -= k;
    w->done += k;
  }
  pthread_barrier_wait(w->bar);
  if (w->id == 0) w->t[2] = wl_now_ns();
  return NULL;
}

int main(int argc, char **argv) {
  static const int threads[3] = {2, 2, 2};
  wl_args_t a;
  wl_parse_args(&a, "bulk", argc, argv, threads);
  uint64_t blocks = WL_PICK(&a, 200000, 600000, 6000000); /* per thread, per phase */
  pthread_barrier_t bar;
  pthread_barrier_init(&bar, NULL, (unsigned)a.threads);
  worker_t *w = wl_map(sizeof(worker_t) * (size_t)a.threads);
  for (int i = 0; i < a.threads; i++) {
    w[i] = (worker_t){.id = i, .n = a.threads, .blocks = blocks, .seed = a.seed, .all = w, .bar = &bar};
    w[i].own = wl_map(sizeof(blk_t) * MAX_BATCH);
    w[i].inbox = wl_map(sizeof(blk_t) * MAX_BATCH);
  }
  wl_run(a.threads, worker_main, w, sizeof(*w));
  uint64_t ops = 0;
  for (int i = 0; i < a.threads; i++) ops += w[i].done;
  double same = (double)(w[0].t[1] - w[0].t[0]) / 1e9, cross = (double)(w[0].t[2] - w[0].t[1]) / 1e9;
  wl_info("same %.3f s, cross %.3f s", same, cross);
  wl_json_t *j = wl_result_begin(&a, ops, same + cross);
  wl_json_obj(j, "phases");
  wl_json_num(j, "same_seconds", same);
  wl_json_num(j, "cross_seconds", cross);
  wl_json_obj_end(j);
  wl_result_end(j);
  return 0;
}
