/*
 * wl_prodcons - producer/consumer: half the threads only allocate (log-uniform 16 B..
 * 4 KiB), half only free; blocks travel in batches of 64 through bounded queues
 * (mutex + condition variables, 16 batches deep). Every block is freed by a thread
 * that never allocates: stresses remote frees and the return path to the owning arena.
 */
#include "common.h"

#include <pthread.h>
#include <stdlib.h>

#define BATCH 64
#define QUEUE_DEPTH 16 /* batches: bounds the blocks in flight (and so the memory) */
#define MIN_SIZE 16
#define MAX_SIZE 4096

typedef struct batch {
  uint32_t n; /* 0: end of stream from one producer */
  void *p[BATCH];
  uint32_t size[BATCH];
  uint64_t tag[BATCH];
} batch_t;

typedef struct queue {
  pthread_mutex_t mu;
  pthread_cond_t not_full, not_empty;
  unsigned head, count;
  batch_t ring[QUEUE_DEPTH];
} queue_t;

typedef struct role {
  int id;
  bool producer;
  int producers; /* feeding this consumer */
  uint64_t batches, seed, done;
  queue_t *q;
  pthread_barrier_t *bar;
  uint64_t t0, t1;
} role_t;

static void queue_put(queue_t *q, const batch_t *b) {
  pthread_mutex_lock(&q->mu);
  while (q->count == QUEUE_DEPTH) pthread_cond_wait(&q->not_full, &q->mu);
  q->ring[(q->head + q->count) % QUEUE_DEPTH] = *b;
  q->count++;
  pthread_cond_signal(&q->not_empty);
  pthread_mutex_unlock(&q->mu);
}

static void queue_take(queue_t *q, batch_t *b) {
  pthread_mutex_lock(&q->mu);
  while (q->count == 0) pthread_cond_wait(&q->not_empty, &q->mu);
  *b = q->ring[q->head];
  q->head = (q->head + 1) % QUEUE_DEPTH;
  q->count--;
  pthread_cond_signal(&q->not_full);
  pthread_mutex_unlock(&q->mu);
}

static void produce(role_t *r) {
  wl_rng_t rng;
  wl_rng_init(&rng, r->seed, (uint64_t)r->id);
  uint64_t tag = (uint64_t)r->id << 48;
  batch_t b;
  for (uint64_t k = 0; k < r->batches; k++) {
    b.n = BATCH;
    for (int i = 0; i < BATCH; i++) {
      uint32_t size = (uint32_t)wl_log_range(&rng, MIN_SIZE, MAX_SIZE);
      void *p = malloc(size);
      if (!p) wl_oom(size);
      b.p[i] = p;
      b.size[i] = size;
      b.tag[i] = ++tag;
      wl_stamp(p, size, b.tag[i]);
    }
    queue_put(r->q, &b);
    r->done += BATCH;
  }
  b.n = 0;
  queue_put(r->q, &b);
}

static void consume(role_t *r) {
  batch_t b;
  int open = r->producers;
  while (open > 0) {
    queue_take(r->q, &b);
    if (b.n == 0) {
      open--;
      continue;
    }
    for (uint32_t i = 0; i < b.n; i++) {
      wl_check(b.p[i], b.size[i], b.tag[i], "consumer");
      free(b.p[i]);
    }
    r->done += b.n;
  }
}

static void *role_main(void *arg) {
  role_t *r = arg;
  pthread_barrier_wait(r->bar);
  if (r->id == 0) r->t0 = wl_now_ns();
  if (r->producer)
    produce(r);
  else
    consume(r);
  pthread_barrier_wait(r->bar);
  if (r->id == 0) r->t1 = wl_now_ns();
  return NULL;
}

int main(int argc, char **argv) {
  static const int threads[3] = {2, 4, 4};
  wl_args_t a;
  wl_parse_args(&a, "prodcons", argc, argv, threads);
  if (a.threads < 2) {
    wl_info("needs at least one producer and one consumer: using 2 threads");
    a.threads = 2;
  }
  int nc = a.threads / 2, np = a.threads - nc; /* np >= nc: every consumer is fed */
  uint64_t per_producer = WL_PICK(&a, 1000000, 24000000, 200000000) / (uint64_t)np;
  uint64_t batches = per_producer / BATCH;

  pthread_barrier_t bar;
  pthread_barrier_init(&bar, NULL, (unsigned)a.threads);
  queue_t *q = calloc((size_t)nc, sizeof(*q));
  role_t *r = calloc((size_t)a.threads, sizeof(*r));
  if (!q || !r) wl_oom(sizeof(*q));
  for (int c = 0; c < nc; c++) {
    pthread_mutex_init(&q[c].mu, NULL);
    pthread_cond_init(&q[c].not_full, NULL);
    pthread_cond_init(&q[c].not_empty, NULL);
  }
  /* Thread 0 (the main thread) produces; producer i feeds consumer i % nc. */
  for (int i = 0; i < a.threads; i++) {
    r[i].id = i;
    r[i].producer = i < np;
    r[i].q = &q[r[i].producer ? i % nc : i - np];
    r[i].batches = batches;
    r[i].seed = a.seed;
    r[i].bar = &bar;
  }
  for (int i = 0; i < np; i++) r[np + i % nc].producers++;
  wl_run(a.threads, role_main, r, sizeof(*r));

  uint64_t made = 0, freed = 0;
  for (int i = 0; i < a.threads; i++) {
    if (r[i].producer)
      made += r[i].done;
    else
      freed += r[i].done;
  }
  if (made != freed)
    wl_die("%llu blocks produced but %llu consumed", (unsigned long long)made, (unsigned long long)freed);
  double sec = (double)(r[0].t1 - r[0].t0) / 1e9;
  for (int c = 0; c < nc; c++) {
    pthread_mutex_destroy(&q[c].mu);
    pthread_cond_destroy(&q[c].not_full);
    pthread_cond_destroy(&q[c].not_empty);
  }
  free(q);
  free(r);
  pthread_barrier_destroy(&bar);
  wl_info("%.3f s, %llu blocks, %d producers, %d consumers", sec, (unsigned long long)made, np, nc);

  wl_json_t *j = wl_result_begin(&a, made, sec);
  wl_json_int(j, "producers", np);
  wl_json_int(j, "consumers", nc);
  wl_json_int(j, "batch", BATCH);
  wl_json_int(j, "queue_depth", QUEUE_DEPTH);
  wl_result_end(j);
  return 0;
}
