/*
 * wl_churn - one thread churns small blocks (8..1024 B) in two phases: "lifo" (batches
 * freed in reverse order) and "random" (a fixed working set, random frees). Stresses
 * the fast path; reports both phases and malloc+free latency. --threads N: N copies.
 */
#include "common.h"

#include <pthread.h>
#include <stdlib.h>

#define MIN_SIZE 8
#define MAX_SIZE 1024
#define LIFO_MAX_DEPTH 256 /* batch depth drawn in 1..256: stacks of a request's temporaries */
#define RANDOM_SLOTS 2048  /* ~1 MiB working set at the mean size of 516 B: beyond L2 */
#define NO_SAMPLE UINT32_MAX

typedef struct slot {
  void *p;
  uint32_t size;
  uint32_t mlat; /* malloc latency of a sampled block, NO_SAMPLE otherwise */
  uint64_t tag;
} slot_t;

typedef struct worker {
  int id;
  uint64_t pairs; /* per phase */
  uint64_t seed;
  pthread_barrier_t *bar;
  uint64_t t[3]; /* phase boundaries, taken by worker 0 */
  wl_sampler_t lifo, rnd;
  slot_t slots[LIFO_MAX_DEPTH > RANDOM_SLOTS ? LIFO_MAX_DEPTH : RANDOM_SLOTS];
} worker_t;

static void phase_lifo(worker_t *w, wl_rng_t *rng) {
  uint64_t tag = (uint64_t)w->id << 48, done = 0;
  while (done < w->pairs) {
    uint64_t depth = 1 + wl_below(rng, LIFO_MAX_DEPTH);
    if (depth > w->pairs - done) depth = w->pairs - done;
    for (uint64_t i = 0; i < depth; i++) {
      slot_t *s = &w->slots[i];
      s->size = (uint32_t)wl_range(rng, MIN_SIZE, MAX_SIZE);
      s->tag = ++tag;
      if (wl_sample_now(&w->lifo)) {
        uint64_t t0 = wl_now_ns();
        s->p = malloc(s->size);
        s->mlat = (uint32_t)(wl_now_ns() - t0);
      } else {
        s->p = malloc(s->size);
        s->mlat = NO_SAMPLE;
      }
      if (!s->p) wl_oom(s->size);
      wl_stamp(s->p, s->size, s->tag);
    }
    for (uint64_t i = depth; i-- > 0;) {
      slot_t *s = &w->slots[i];
      wl_check(s->p, s->size, s->tag, "lifo");
      if (s->mlat != NO_SAMPLE) {
        uint64_t t0 = wl_now_ns();
        free(s->p);
        /* Both halves carry one timer overhead; wl_sample_record removes one. */
        uint64_t ns = s->mlat + (wl_now_ns() - t0);
        wl_sample_record(&w->lifo, ns > wl_timer_overhead_ns ? ns - wl_timer_overhead_ns : 0);
      } else {
        free(s->p);
      }
    }
    done += depth;
  }
}

static void phase_random(worker_t *w, wl_rng_t *rng) {
  uint64_t tag = ((uint64_t)w->id << 48) | (1ULL << 47);
  for (int i = 0; i < RANDOM_SLOTS; i++) w->slots[i].p = NULL;
  for (uint64_t n = 0; n < w->pairs; n++) {
    slot_t *s = &w->slots[wl_below(rng, RANDOM_SLOTS)];
    uint32_t size = (uint32_t)wl_range(rng, MIN_SIZE, MAX_SIZE);
    void *old = s->p;
    if (old) wl_check(old, s->size, s->tag, "random");
    if (wl_sample_now(&w->rnd)) {
      uint64_t t0 = wl_now_ns();
      free(old);
      s->p = malloc(size);
      wl_sample_record(&w->rnd, wl_now_ns() - t0);
    } else {
      free(old);
      s->p = malloc(size);
    }
    if (!s->p) wl_oom(size);
    s->size = size;
    s->tag = ++tag;
    wl_stamp(s->p, size, s->tag);
  }
  for (int i = 0; i < RANDOM_SLOTS; i++) {
    slot_t *s = &w->slots[i];
    if (!s->p) continue;
    wl_check(s->p, s->size, s->tag, "random");
    free(s->p);
  }
}

static void *worker_main(void *arg) {
  worker_t *w = arg;
  wl_rng_t rng;
  wl_rng_init(&rng, w->seed, (uint64_t)w->id);
  pthread_barrier_wait(w->bar);
  if (w->id == 0) w->t[0] = wl_now_ns();
  phase_lifo(w, &rng);
  pthread_barrier_wait(w->bar);
  if (w->id == 0) w->t[1] = wl_now_ns();
  phase_random(w, &rng);
  pthread_barrier_wait(w->bar);
  if (w->id == 0) w->t[2] = wl_now_ns();
  return NULL;
}

static void emit_phase(wl_json_t *j, const char *name, uint64_t ops, uint64_t ns, const wl_hist_t *h) {
  double sec = (double)ns / 1e9;
  wl_json_obj(j, name);
  wl_json_int(j, "ops", (int64_t)ops);
  wl_json_num(j, "seconds", sec);
  wl_json_num(j, "ops_per_sec", (double)ops / sec);
  wl_json_latency(j, "latency_ns", h);
  wl_json_obj_end(j);
}

int main(int argc, char **argv) {
  static const int threads[3] = {1, 1, 1};
  wl_args_t a;
  wl_parse_args(&a, "churn", argc, argv, threads);
  uint64_t pairs = WL_PICK(&a, 3000000, 40000000, 300000000); /* per phase, per thread */

  pthread_barrier_t bar;
  pthread_barrier_init(&bar, NULL, (unsigned)a.threads);
  worker_t *w = calloc((size_t)a.threads, sizeof(*w));
  if (!w) wl_oom(sizeof(*w));
  for (int i = 0; i < a.threads; i++) {
    w[i].id = i;
    w[i].pairs = pairs;
    w[i].seed = a.seed;
    w[i].bar = &bar;
    wl_sampler_init(&w[i].lifo, a.seed, 2 * (uint64_t)i);
    wl_sampler_init(&w[i].rnd, a.seed, 2 * (uint64_t)i + 1);
  }
  wl_run(a.threads, worker_main, w, sizeof(*w));
  pthread_barrier_destroy(&bar);

  wl_hist_t lifo, rnd, all;
  wl_hist_init(&lifo);
  wl_hist_init(&rnd);
  wl_hist_init(&all);
  for (int i = 0; i < a.threads; i++) {
    wl_hist_merge(&lifo, &w[i].lifo.hist);
    wl_hist_merge(&rnd, &w[i].rnd.hist);
  }
  wl_hist_merge(&all, &lifo);
  wl_hist_merge(&all, &rnd);
  uint64_t phase_ops = pairs * (uint64_t)a.threads;
  uint64_t ns_lifo = w[0].t[1] - w[0].t[0], ns_rnd = w[0].t[2] - w[0].t[1];
  free(w);
  wl_info("lifo %.3f s, random %.3f s", (double)ns_lifo / 1e9, (double)ns_rnd / 1e9);

  wl_json_t *j = wl_result_begin(&a, 2 * phase_ops, (double)(ns_lifo + ns_rnd) / 1e9);
  wl_json_latency(j, "latency_ns", &all);
  wl_json_latency_hist(j, "latency_hist", &all);
  wl_json_obj(j, "phases");
  emit_phase(j, "lifo", phase_ops, ns_lifo, &lifo);
  emit_phase(j, "random", phase_ops, ns_rnd, &rnd);
  wl_json_obj_end(j);
  wl_result_end(j);
  return 0;
}
