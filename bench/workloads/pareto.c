/*
 * wl_pareto - Pareto sizes (x_m 16 B, alpha 1.1, capped at 1 MiB) with thread churn:
 * generations of threads are created and joined; each does a burst into a slot table
 * inherited from the previous generation (freeing dead threads' blocks) and passes a
 * quarter of its blocks on. Stresses thread-cache set-up/teardown and the large path.
 */
#include "common.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>

#define SLOTS 2048       /* per thread index; inherited across generations */
#define PARETO_XM 16.0   /* smallest size */
#define PARETO_ALPHA 1.1 /* tail index: P(size > 64 KiB) ~ 1e-4, mean ~120 B */
#define MAX_SIZE (1u << 20)
#define KEEP_PERCENT 25 /* of the occupied slots, handed to the next generation */

typedef struct item {
  void *p;
  uint32_t size;
  uint64_t tag;
} item_t;

typedef struct lane {
  int index, generation;
  uint64_t burst, seed;
  uint64_t mallocs, inherited_frees;
  wl_sampler_t lat;
  item_t *slots; /* SLOTS entries; tables rotate between lanes every generation */
} lane_t;

static uint32_t pareto_size(wl_rng_t *r) {
  double u = 1.0 - wl_unit(r); /* (0, 1] */
  double x = PARETO_XM / pow(u, 1.0 / PARETO_ALPHA);
  return x >= MAX_SIZE ? MAX_SIZE : (uint32_t)x;
}

static void *lane_main(void *arg) {
  lane_t *l = arg;
  wl_rng_t rng;
  wl_rng_init(&rng, l->seed, ((uint64_t)l->generation << 16) | (uint64_t)l->index);
  uint64_t tag = ((uint64_t)l->index << 48) | ((uint64_t)l->generation << 28);
  for (uint64_t n = 0; n < l->burst; n++) {
    item_t *s = &l->slots[wl_below(&rng, SLOTS)];
    uint32_t size = pareto_size(&rng);
    if (s->p) {
      wl_check(s->p, s->size, s->tag, "burst free");
      if ((s->tag >> 28 & 0xfffff) != ((uint64_t)l->generation & 0xfffff)) l->inherited_frees++;
    }
    if (wl_sample_now(&l->lat)) {
      uint64_t t0 = wl_now_ns();
      free(s->p);
      s->p = malloc(size);
      wl_sample_record(&l->lat, wl_now_ns() - t0);
    } else {
      free(s->p);
      s->p = malloc(size);
    }
    if (!s->p) wl_oom(size);
    s->size = size;
    s->tag = ++tag;
    wl_stamp(s->p, size, s->tag);
    l->mallocs++;
  }
  /* Free three quarters of what is held; the rest outlives this thread. */
  for (int i = 0; i < SLOTS; i++) {
    item_t *s = &l->slots[i];
    if (!s->p || wl_below(&rng, 100) < KEEP_PERCENT) continue;
    wl_check(s->p, s->size, s->tag, "end-of-burst free");
    free(s->p);
    s->p = NULL;
  }
  return NULL;
}

int main(int argc, char **argv) {
  static const int threads[3] = {2, 4, 4};
  wl_args_t a;
  wl_parse_args(&a, "pareto", argc, argv, threads);
  int generations = WL_PICK(&a, 40, 1000, 6000);
  uint64_t burst = 10000; /* allocations per thread per generation: ~5 slot turnovers */

  lane_t *lanes = calloc((size_t)a.threads, sizeof(*lanes));
  pthread_t *tid = calloc((size_t)a.threads, sizeof(*tid));
  if (!lanes || !tid) wl_oom(sizeof(*lanes));
  for (int i = 0; i < a.threads; i++) {
    lanes[i].index = i;
    lanes[i].burst = burst;
    lanes[i].seed = a.seed;
    lanes[i].slots = calloc(SLOTS, sizeof(item_t));
    if (!lanes[i].slots) wl_oom(SLOTS * sizeof(item_t));
    wl_sampler_init(&lanes[i].lat, a.seed, (uint64_t)i);
  }
  uint64_t t0 = wl_now_ns();
  for (int g = 0; g < generations; g++) {
    for (int i = 0; i < a.threads; i++) {
      lanes[i].generation = g;
      int err = pthread_create(&tid[i], NULL, lane_main, &lanes[i]);
      if (err) wl_die("pthread_create: %s", strerror(err));
    }
    for (int i = 0; i < a.threads; i++) pthread_join(tid[i], NULL);
    /* Rotate: lane i's leftovers go to a different thread index next generation. */
    item_t *first = lanes[0].slots;
    for (int i = 0; i + 1 < a.threads; i++) lanes[i].slots = lanes[i + 1].slots;
    lanes[a.threads - 1].slots = first;
  }
  /* The main thread frees what the last generation left. */
  size_t leftover = 0;
  for (int i = 0; i < a.threads; i++)
    for (int k = 0; k < SLOTS; k++) {
      item_t *s = &lanes[i].slots[k];
      if (!s->p) continue;
      wl_check(s->p, s->size, s->tag, "leftover free");
      free(s->p);
      leftover++;
    }
  double sec = (double)(wl_now_ns() - t0) / 1e9;

  wl_hist_t h;
  wl_hist_init(&h);
  uint64_t mallocs = 0, inherited = 0;
  for (int i = 0; i < a.threads; i++) {
    wl_hist_merge(&h, &lanes[i].lat.hist);
    mallocs += lanes[i].mallocs;
    inherited += lanes[i].inherited_frees;
    free(lanes[i].slots);
  }
  free(lanes);
  free(tid);
  wl_info("%.3f s: %d generations of %d threads, %llu allocations, %llu frees of inherited "
          "blocks",
          sec, generations, a.threads, (unsigned long long)mallocs, (unsigned long long)inherited);

  wl_json_t *j = wl_result_begin(&a, mallocs, sec);
  wl_json_latency(j, "latency_ns", &h);
  wl_json_latency_hist(j, "latency_hist", &h);
  wl_json_int(j, "generations", generations);
  wl_json_int(j, "threads_created", (int64_t)generations * a.threads);
  wl_json_int(j, "inherited_frees", (int64_t)inherited);
  wl_json_int(j, "leftover_frees", (int64_t)leftover);
  wl_json_num(j, "pareto_alpha", PARETO_ALPHA);
  wl_json_int(j, "max_size", MAX_SIZE);
  wl_result_end(j);
  return 0;
}
