/*
 * wl_server - a server's heap: N threads each replace random blocks of a working set
 * (90% 8..512 B, 9% to 8 KiB, 1% to 64 KiB); 10% of the replaced blocks are freed by
 * another thread ("bleeding", as in Larson), in batches through lock-free inboxes.
 * Stresses thread caches and remote frees; reports the latency of one operation.
 */
#include "common.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#define SLOTS 4096       /* per thread: ~3.5 MiB at the mean size below */
#define BLEED_PERCENT 10 /* share of replaced blocks freed by another thread */
#define BATCH 64         /* remote frees travel in batches, as real queues amortise locks */
#define DRAIN_EVERY 64   /* ops between inbox checks */
/*
 * Batches an inbox may hold (32,768 blocks, ~30 ms of others' hand-offs at 2 cores):
 * past it, the sender frees the batch itself ("backlog_frees"). Without a bound, a
 * descheduled thread (more threads than cores) piles up others' blocks, and peak RSS
 * measures the scheduler rather than the allocator.
 */
#define MAX_PENDING 512

typedef struct item {
  void *p;
  uint32_t size;
  uint64_t tag;
} item_t;

typedef struct batch {
  struct batch *next;
  uint32_t n;
  item_t e[BATCH];
} batch_t;

typedef struct worker {
  int id, nthreads;
  uint64_t ops, seed;
  uint64_t remote_frees;  /* blocks this thread freed on behalf of others */
  uint64_t backlog_frees; /* blocks it freed itself because the receiver was backlogged */
  struct worker *all;
  pthread_barrier_t *bar;
  uint64_t t0, t1; /* taken by worker 0 */
  _Alignas(64) _Atomic(batch_t *) inbox;
  atomic_uint pending; /* batches in inbox */
  _Alignas(64) wl_sampler_t lat;
  batch_t **outbox; /* one partial batch per destination thread */
  item_t slots[SLOTS];
} worker_t;

static uint32_t draw_size(wl_rng_t *r) {
  uint64_t u = wl_below(r, 100);
  if (u < 90) return (uint32_t)wl_range(r, 8, 512);
  if (u < 99) return (uint32_t)wl_log_range(r, 513, 8192);
  return (uint32_t)wl_log_range(r, 8193, 65536);
}

static void push_batch(worker_t *dst, batch_t *b) {
  batch_t *head = atomic_load_explicit(&dst->inbox, memory_order_relaxed);
  do {
    b->next = head;
  } while (!atomic_compare_exchange_weak_explicit(&dst->inbox, &head, b, memory_order_release,
                                                  memory_order_relaxed));
  atomic_fetch_add_explicit(&dst->pending, 1, memory_order_relaxed);
}

/* The consumer takes the whole list at once, so the Treiber stack has no ABA problem. */
static void drain(worker_t *w) {
  batch_t *b = atomic_exchange_explicit(&w->inbox, NULL, memory_order_acquire);
  unsigned taken = 0;
  for (; b; taken++) {
    batch_t *next = b->next;
    for (uint32_t i = 0; i < b->n; i++) {
      wl_check(b->e[i].p, b->e[i].size, b->e[i].tag, "remote free");
      free(b->e[i].p);
    }
    w->remote_frees += b->n;
    free(b);
    b = next;
  }
  if (taken) atomic_fetch_sub_explicit(&w->pending, taken, memory_order_relaxed);
}

static void hand_off(worker_t *w, wl_rng_t *rng, item_t it) {
  int d = (int)wl_below(rng, (uint64_t)w->nthreads - 1);
  if (d >= w->id) d++;
  batch_t *b = w->outbox[d];
  if (!b) {
    b = w->outbox[d] = wl_malloc(sizeof(batch_t));
    b->n = 0;
  }
  b->e[b->n++] = it;
  if (b->n < BATCH) return;
  if (atomic_load_explicit(&w->all[d].pending, memory_order_relaxed) < MAX_PENDING) {
    push_batch(&w->all[d], b);
    w->outbox[d] = NULL;
    return;
  }
  for (uint32_t i = 0; i < b->n; i++) {
    wl_check(b->e[i].p, b->e[i].size, b->e[i].tag, "backlog free");
    free(b->e[i].p);
  }
  w->backlog_frees += b->n;
  b->n = 0;
}

static void *worker_main(void *arg) {
  worker_t *w = arg;
  wl_rng_t rng;
  wl_rng_init(&rng, w->seed, (uint64_t)w->id);
  uint64_t tag = (uint64_t)w->id << 48;
  bool bleed = w->nthreads > 1;
  w->outbox = calloc((size_t)w->nthreads, sizeof(batch_t *));
  if (!w->outbox) wl_oom(sizeof(batch_t *));

  pthread_barrier_wait(w->bar);
  if (w->id == 0) w->t0 = wl_now_ns();
  for (uint64_t n = 0; n < w->ops; n++) {
    item_t *s = &w->slots[wl_below(&rng, SLOTS)];
    uint32_t size = draw_size(&rng);
    bool remote = false;
    if (s->p) {
      wl_check(s->p, s->size, s->tag, "local free");
      remote = bleed && wl_below(&rng, 100) < BLEED_PERCENT;
      if (remote) hand_off(w, &rng, *s);
    }
    if (wl_sample_now(&w->lat)) {
      uint64_t t0 = wl_now_ns();
      if (!remote) free(s->p);
      s->p = malloc(size);
      wl_sample_record(&w->lat, wl_now_ns() - t0);
    } else {
      if (!remote) free(s->p);
      s->p = malloc(size);
    }
    if (!s->p) wl_oom(size);
    s->size = size;
    s->tag = ++tag;
    wl_stamp(s->p, size, s->tag);
    if (n % DRAIN_EVERY == 0) drain(w);
  }
  /* Shut down: send partial batches, wait until everyone has, take what is left. */
  for (int d = 0; d < w->nthreads; d++)
    if (w->outbox[d]) push_batch(&w->all[d], w->outbox[d]);
  pthread_barrier_wait(w->bar);
  drain(w);
  for (int i = 0; i < SLOTS; i++) {
    item_t *s = &w->slots[i];
    if (!s->p) continue;
    wl_check(s->p, s->size, s->tag, "final free");
    free(s->p);
  }
  pthread_barrier_wait(w->bar);
  if (w->id == 0) w->t1 = wl_now_ns();
  free(w->outbox);
  return NULL;
}

int main(int argc, char **argv) {
  static const int threads[3] = {2, 4, 4};
  wl_args_t a;
  wl_parse_args(&a, "server", argc, argv, threads);
  uint64_t ops = WL_PICK(&a, 500000, 12000000, 80000000); /* per thread */

  pthread_barrier_t bar;
  pthread_barrier_init(&bar, NULL, (unsigned)a.threads);
  /* 64-byte alignment keeps each inbox on its own cache line (calloc gives 16). */
  worker_t *w;
  if (posix_memalign((void **)&w, 64, (size_t)a.threads * sizeof(*w))) wl_oom(sizeof(*w));
  memset(w, 0, (size_t)a.threads * sizeof(*w));
  for (int i = 0; i < a.threads; i++) {
    w[i].id = i;
    w[i].nthreads = a.threads;
    w[i].ops = ops;
    w[i].seed = a.seed;
    w[i].all = w;
    w[i].bar = &bar;
    atomic_init(&w[i].inbox, NULL);
    atomic_init(&w[i].pending, 0);
    wl_sampler_init(&w[i].lat, a.seed, (uint64_t)i);
  }
  wl_run(a.threads, worker_main, w, sizeof(*w));
  pthread_barrier_destroy(&bar);

  wl_hist_t h;
  wl_hist_init(&h);
  uint64_t remote = 0, backlog = 0;
  for (int i = 0; i < a.threads; i++) {
    wl_hist_merge(&h, &w[i].lat.hist);
    remote += w[i].remote_frees;
    backlog += w[i].backlog_frees;
  }
  double sec = (double)(w[0].t1 - w[0].t0) / 1e9;
  free(w);
  uint64_t total = ops * (uint64_t)a.threads;
  wl_info("%.3f s, %llu ops, %llu remote frees, %llu freed by the sender (backlog)", sec,
          (unsigned long long)total, (unsigned long long)remote, (unsigned long long)backlog);

  wl_json_t *j = wl_result_begin(&a, total, sec);
  wl_json_latency(j, "latency_ns", &h);
  wl_json_latency_hist(j, "latency_hist", &h);
  wl_json_int(j, "remote_frees", (int64_t)remote);
  wl_json_int(j, "backlog_frees", (int64_t)backlog);
  wl_json_int(j, "bleed_percent", a.threads > 1 ? BLEED_PERCENT : 0);
  wl_json_int(j, "slots_per_thread", SLOTS);
  wl_result_end(j);
  return 0;
}
