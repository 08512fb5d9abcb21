/*
 * wl_drift - a long server run, compressed: each thread keeps a fixed volume of live
 * objects in a table and visits a random slot per operation (frees what it holds and
 * refills it while under the volume). Objects belong to
 * "types" whose sizes differ; one new type appears per epoch and each lives 8 epochs,
 * its share of new objects rising and falling along a sine, so the size mix drifts
 * slowly through the run. 2% of the live bytes are long-lived (replaced ~100x less often):
 * those objects outlive their type and pin its memory, as sessions and caches do.
 * Samples RSS and live bytes 100 times; reports fragmentation (RSS / live) over the run.
 */
#include "common.h"

#include <math.h>
#include <stdlib.h>

#define NSAMPLES 100
#define TYPE_LIFE 8        /* epochs a type lives */
#define MAX_TYPES 1024
#define COLD_PERCENT 2     /* share of the live bytes that is long-lived */
#define COLD_PICK 5000     /* 1 op in this many visits the long-lived pool: its objects live ~100x longer */

/* Live objects, dense (a free swaps the last entry into the hole). Bookkeeping arrays
 * are wl_map'ed outside the allocator and touched only up to the high-water mark. */
typedef struct pool {
  void **ptr;
  uint32_t *size;
  uint64_t *tag;
  size_t n, cap, hw;
  size_t live_bytes; /* atomic: read by the sampling thread */
  size_t target;     /* live bytes the pool is refilled to */
} pool_t;

typedef struct worker {
  int id;
  uint64_t seed;
  uint64_t ops;
  int epochs;
  const uint32_t *type_size; /* base size per type (shared, read-only) */
  pool_t pool[2];            /* hot, cold (long-lived) */
  uint64_t mallocs;
} worker_t;

typedef struct sample {
  double t;
  long rss_kb;
  size_t live_bytes;
} sample_t;

static sample_t samples[NSAMPLES];
static int nsamples;
static worker_t *workers;
static int nworkers;
static uint64_t t0;

/* Weight of type k at epoch position e (fractional): a sine hump over its life. */
static double type_weight(int k, double e) {
  double age = e - (double)(k - TYPE_LIFE + 1);
  if (age <= 0 || age >= TYPE_LIFE) return 0;
  return sin(M_PI * age / TYPE_LIFE);
}

static size_t draw_size(wl_rng_t *rng, const uint32_t *type_size, double e) {
  double w[TYPE_LIFE], total = 0;
  int first = (int)floor(e);
  for (int i = 0; i < TYPE_LIFE; i++) total += (w[i] = type_weight(first + i, e));
  double x = wl_unit(rng) * total;
  int k = first + TYPE_LIFE - 1;
  for (int i = 0; i < TYPE_LIFE; i++) {
    if ((x -= w[i]) < 0) {
      k = first + i;
      break;
    }
  }
  uint32_t base = type_size[k];
  return (size_t)wl_range(rng, base * 3 / 4, base + base / 4);
}

/* One operation on a pool: frees a random object, then refills the pool to its target
 * from the current mix, so the live volume stays level while the size mix drifts. */
static void visit(worker_t *w, pool_t *p, wl_rng_t *rng, double e, uint64_t *tag) {
  if (p->n) {
    size_t i = wl_below(rng, p->n);
    wl_check(p->ptr[i], p->size[i], p->tag[i], "replace");
    free(p->ptr[i]);
    __atomic_store_n(&p->live_bytes, p->live_bytes - p->size[i], __ATOMIC_RELAXED);
    p->n--;
    p->ptr[i] = p->ptr[p->n];
    p->size[i] = p->size[p->n];
    p->tag[i] = p->tag[p->n];
  }
  while (p->live_bytes < p->target) {
    if (p->n == p->cap) wl_die("bookkeeping full (%zu entries)", p->cap);
    size_t s = draw_size(rng, w->type_size, e);
    void *q = malloc(s);
    if (!q) wl_oom(s);
    wl_stamp(q, s, ++*tag);
    p->ptr[p->n] = q;
    p->size[p->n] = (uint32_t)s;
    p->tag[p->n] = *tag;
    p->n++;
    __atomic_store_n(&p->live_bytes, p->live_bytes + s, __ATOMIC_RELAXED);
    w->mallocs++;
  }
  if (p->n > p->hw) p->hw = p->n;
}

static void take_sample(void) {
  if (nsamples >= NSAMPLES) return;
  sample_t *s = &samples[nsamples++];
  s->t = (double)(wl_now_ns() - t0) / 1e9;
  s->rss_kb = wl_rss_kb();
  s->live_bytes = 0;
  for (int i = 0; i < nworkers; i++)
    for (int k = 0; k < 2; k++) s->live_bytes += __atomic_load_n(&workers[i].pool[k].live_bytes, __ATOMIC_RELAXED);
}

static void *worker_main(void *arg) {
  worker_t *w = arg;
  wl_rng_t rng;
  wl_rng_init(&rng, w->seed, (uint64_t)w->id);
  uint64_t tag = (uint64_t)w->id << 48;
  visit(w, &w->pool[1], &rng, 0.0, &tag); /* fill both with the first epoch's mix */
  visit(w, &w->pool[0], &rng, 0.0, &tag);
  uint64_t every = w->ops / NSAMPLES;
  for (uint64_t op = 0; op < w->ops; op++) {
    double e = (double)w->epochs * (double)op / (double)w->ops;
    visit(w, &w->pool[wl_below(&rng, COLD_PICK) == 0], &rng, e, &tag);
    if (w->id == 0 && every && op % every == every - 1) take_sample();
  }
  return NULL;
}

int main(int argc, char **argv) {
  static const int threads[3] = {2, 2, 2};
  wl_args_t a;
  wl_parse_args(&a, "drift", argc, argv, threads);
  size_t live_target = WL_PICK(&a, (size_t)4 << 20, (size_t)32 << 20, (size_t)256 << 20);
  uint64_t ops = WL_PICK(&a, 200000ull, 3000000ull, 60000000ull);
  int epochs = WL_PICK(&a, 16, 48, 96);

  /* Type sizes: log-uniform 16 B..8 KiB, one type in 16 larger (8..64 KiB). */
  static uint32_t type_size[MAX_TYPES];
  wl_rng_t trng;
  wl_rng_init(&trng, a.seed, 999);
  for (int k = 0; k < epochs + 2 * TYPE_LIFE && k < MAX_TYPES; k++)
    type_size[k] = (uint32_t)(wl_below(&trng, 16) == 0 ? wl_log_range(&trng, 8192, 65536)
                                                        : wl_log_range(&trng, 16, 8192));
  workers = calloc((size_t)a.threads, sizeof(*workers));
  if (!workers) wl_oom(sizeof(*workers));
  nworkers = a.threads;
  /* Room for each pool's target in 8-byte objects: mapped, touched only as used. */
  size_t per_thread = live_target / (size_t)a.threads;
  for (int i = 0; i < a.threads; i++) {
    worker_t *w = &workers[i];
    w->id = i;
    w->seed = a.seed;
    w->ops = ops / (uint64_t)a.threads;
    w->epochs = epochs;
    w->type_size = type_size;
    for (int k = 0; k < 2; k++) {
      pool_t *p = &w->pool[k];
      p->target = k ? per_thread * COLD_PERCENT / 100 : per_thread - per_thread * COLD_PERCENT / 100;
      p->cap = p->target / 8 + 16;
      p->ptr = wl_map(p->cap * sizeof(void *));
      p->size = wl_map(p->cap * sizeof(uint32_t));
      p->tag = wl_map(p->cap * sizeof(uint64_t));
    }
  }
  const size_t entry = sizeof(void *) + sizeof(uint32_t) + sizeof(uint64_t);
  long rss_before = wl_rss_kb();
  t0 = wl_now_ns();
  wl_run(a.threads, worker_main, workers, sizeof(*workers));
  double sec = (double)(wl_now_ns() - t0) / 1e9;

  uint64_t mallocs = 0;
  size_t live = 0, hw = 0;
  for (int i = 0; i < a.threads; i++) {
    mallocs += workers[i].mallocs;
    for (int k = 0; k < 2; k++) {
      live += workers[i].pool[k].live_bytes;
      hw += workers[i].pool[k].hw;
    }
  }
  size_t book_kb = hw * entry / 1024; /* bookkeeping pages touched (high-water) */
  long rss_end = wl_rss_kb();
  /* Fragmentation: heap RSS (RSS less the process's start and the bookkeeping) / live. */
  double frag_end = ((double)(rss_end - rss_before) - (double)book_kb) * 1024.0 / (double)live;
  double sum2 = 0, max2 = 0;
  int n2 = 0;
  for (int k = nsamples / 2; k < nsamples; k++) {
    double f = ((double)(samples[k].rss_kb - rss_before) - (double)book_kb) * 1024.0 / (double)samples[k].live_bytes;
    sum2 += f;
    n2++;
    if (f > max2) max2 = f;
  }
  wl_info("%d epochs, %d threads, %.1f MiB live, %llu mallocs: heap RSS/live %.3f at the end", epochs, a.threads,
          (double)live / 1048576.0, (unsigned long long)mallocs, frag_end);

  wl_json_t *j = wl_result_begin(&a, ops, sec);
  wl_json_int(j, "mallocs", (int64_t)mallocs);
  wl_json_int(j, "epochs", epochs);
  wl_json_int(j, "live_bytes", (int64_t)live);
  wl_json_int(j, "rss_before_kb", rss_before);
  wl_json_int(j, "bookkeeping_kb", (int64_t)book_kb);
  wl_json_num(j, "heap_per_live", frag_end);
  wl_json_num(j, "frag_mean_2nd_half", n2 ? sum2 / n2 : NAN);
  wl_json_num(j, "frag_max_2nd_half", max2);
  wl_json_arr(j, "rss_series");
  for (int k = 0; k < nsamples; k++) wl_json_pair(j, samples[k].t, (double)samples[k].rss_kb);
  wl_json_arr_end(j);
  wl_json_arr(j, "frag_series");
  for (int k = 0; k < nsamples; k++)
    wl_json_pair(j, samples[k].t,
                 ((double)(samples[k].rss_kb - rss_before) - (double)book_kb) * 1024.0 / (double)samples[k].live_bytes);
  wl_json_arr_end(j);
  wl_json_arr(j, "live_kb_series");
  for (int k = 0; k < nsamples; k++) wl_json_int(j, NULL, (int64_t)(samples[k].live_bytes / 1024));
  wl_json_arr_end(j);

  for (int i = 0; i < a.threads; i++) {
    for (int k = 0; k < 2; k++) {
      pool_t *p = &workers[i].pool[k];
      for (size_t x = 0; x < p->n; x++) {
        wl_check(p->ptr[x], p->size[x], p->tag[x], "survivor");
        free(p->ptr[x]);
      }
      wl_unmap(p->ptr, p->cap * sizeof(void *));
      wl_unmap(p->size, p->cap * sizeof(uint32_t));
      wl_unmap(p->tag, p->cap * sizeof(uint64_t));
    }
  }
  free(workers);
  wl_result_end(j);
  return 0;
}
