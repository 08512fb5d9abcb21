/*
 * wl_memreturn - memory given back after a peak: allocate 2 GiB (tiny 64 MiB), half small
 * (16 B..1 KiB) and half large (64 KiB..4 MiB) blocks, touch, free all, then stay idle
 * (threads alive) and sample RSS every 50 ms for 15 s (tiny 1 s), with no allocator call. Reports RSS at the
 * peak, after the frees and at the end, and the time RSS took to halve.
 */
#include "common.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

#define SMALL_MIN 16
#define SMALL_MAX 1024
#define LARGE_MIN ((size_t)64 << 10)
#define LARGE_MAX ((size_t)4 << 20)
#define SAMPLE_NS 50000000ULL /* 50 ms: fine enough to see a background thread's decay steps */

typedef struct worker {
  int id;
  uint64_t seed;
  size_t target; /* bytes this thread allocates */
  pthread_barrier_t *bar;
  void **ptr; /* bookkeeping outside the allocator (wl_map) */
  uint32_t *size;
  size_t cap, n, bytes;
  uint64_t t_start, t_peak, t_freed; /* taken by worker 0 */
} worker_t;

static long rss_at_peak;

static void *worker_main(void *arg) {
  worker_t *w = arg;
  wl_rng_t rng;
  wl_rng_init(&rng, w->seed, (uint64_t)w->id);
  uint64_t tag0 = (uint64_t)w->id << 48;
  size_t small = 0, large = 0;
  pthread_barrier_wait(w->bar);
  if (w->id == 0) w->t_start = wl_now_ns();
  /* Interleave the two kinds, each up to half of the target. */
  while (small < w->target / 2 || large < w->target / 2) {
    /* 1 in 2000 draws is large: ~1 MiB mean vs ~520 B, so the halves fill together. */
    bool is_large = large < w->target / 2 && (small >= w->target / 2 || wl_below(&rng, 2000) == 0);
    size_t s = is_large ? (size_t)wl_log_range(&rng, LARGE_MIN, LARGE_MAX)
                        : (size_t)wl_range(&rng, SMALL_MIN, SMALL_MAX);
    if (w->n == w->cap) wl_die("bookkeeping full (%zu entries)", w->cap);
    void *p = malloc(s);
    if (!p) wl_oom(s);
    wl_stamp(p, s, tag0 + w->n);
    w->ptr[w->n] = p;
    w->size[w->n] = (uint32_t)s;
    w->n++;
    w->bytes += s;
    if (is_large)
      large += s;
    else
      small += s;
  }
  pthread_barrier_wait(w->bar);
  if (w->id == 0) {
    w->t_peak = wl_now_ns();
    rss_at_peak = wl_rss_kb();
  }
  pthread_barrier_wait(w->bar);
  for (size_t i = 0; i < w->n; i++) {
    wl_check(w->ptr[i], w->size[i], tag0 + i, "free after peak");
    free(w->ptr[i]);
  }
  pthread_barrier_wait(w->bar);
  if (w->id == 0) w->t_freed = wl_now_ns();
  /* Idle (blocked, not exited) while the main thread samples, then exit. */
  if (w->id != 0) pthread_barrier_wait(w->bar);
  return NULL;
}

static void sleep_until(uint64_t deadline_ns) {
  struct timespec ts = {(time_t)(deadline_ns / 1000000000ULL), (long)(deadline_ns % 1000000000ULL)};
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
  }
}

int main(int argc, char **argv) {
  static const int threads[3] = {1, 1, 1};
  wl_args_t a;
  wl_parse_args(&a, "memreturn", argc, argv, threads);
  size_t peak = WL_PICK(&a, (size_t)64 << 20, (size_t)2 << 30, (size_t)2 << 30);
  int nsamples = WL_PICK(&a, 20, 300, 300); /* every 50 ms: 1 s / 15 s */

  pthread_barrier_t bar;
  pthread_barrier_init(&bar, NULL, (unsigned)a.threads);
  worker_t *w = calloc((size_t)a.threads, sizeof(*w));
  if (!w) wl_oom(sizeof(*w));
  for (int i = 0; i < a.threads; i++) {
    w[i].id = i;
    w[i].seed = a.seed;
    w[i].target = peak / (size_t)a.threads;
    w[i].bar = &bar;
    /* Small blocks are at least 16 B and fill half: at most target/32 of them, + large. */
    w[i].cap = w[i].target / 2 / SMALL_MIN + w[i].target / 2 / LARGE_MIN + 16;
    w[i].ptr = wl_map(w[i].cap * sizeof(void *));
    w[i].size = wl_map(w[i].cap * sizeof(uint32_t));
  }
  long rss_before = wl_rss_kb();

  /* Worker 0 is the main thread: it returns after the frees and samples; the others wait. */
  pthread_t tid[1024];
  for (int i = 1; i < a.threads; i++) {
    int err = pthread_create(&tid[i], NULL, worker_main, &w[i]);
    if (err) wl_die("pthread_create: %s", strerror(err));
  }
  worker_main(&w[0]);
  uint64_t t_freed = w[0].t_freed;
  size_t blocks = 0, bytes = 0;
  for (int i = 0; i < a.threads; i++) {
    blocks += w[i].n;
    bytes += w[i].bytes;
    /* The bookkeeping is not the allocator's: drop it before sampling. */
    wl_unmap(w[i].ptr, w[i].cap * sizeof(void *));
    wl_unmap(w[i].size, w[i].cap * sizeof(uint32_t));
  }

  static long rss[1024];
  static double t[1024];
  for (int k = 0; k <= nsamples; k++) {
    sleep_until(t_freed + (uint64_t)k * SAMPLE_NS);
    t[k] = (double)(wl_now_ns() - t_freed) / 1e9;
    rss[k] = wl_rss_kb();
  }
  if (a.threads > 1) pthread_barrier_wait(&bar);
  for (int i = 1; i < a.threads; i++) pthread_join(tid[i], NULL);
  pthread_barrier_destroy(&bar);

  double to_half = -1;
  for (int k = 0; k <= nsamples && to_half < 0; k++)
    if (rss[k] < rss_at_peak / 2) to_half = t[k];
  double sec = (double)(t_freed - w[0].t_start) / 1e9;
  wl_info("peak %.1f MiB in %zu blocks, %.3f s; RSS at peak %.1f MiB, after free %.1f MiB, "
          "after %.1f s %.1f MiB",
          (double)bytes / 1048576.0, blocks, sec, (double)rss_at_peak / 1024.0, (double)rss[0] / 1024.0,
          t[nsamples], (double)rss[nsamples] / 1024.0);

  wl_json_t *j = wl_result_begin(&a, blocks, sec);
  wl_json_int(j, "peak_bytes", (int64_t)bytes);
  wl_json_int(j, "live_bytes", 0);
  wl_json_int(j, "rss_before_kb", rss_before);
  /* Part of rss_at_peak_kb; unmapped before the samples, so not in rss_series. */
  wl_json_int(j, "bookkeeping_kb", (int64_t)(blocks * (sizeof(void *) + sizeof(uint32_t)) / 1024));
  wl_json_int(j, "rss_at_peak_kb", rss_at_peak);
  wl_json_int(j, "rss_after_free_kb", rss[0]);
  wl_json_int(j, "rss_end_kb", rss[nsamples]);
  if (to_half >= 0)
    wl_json_num(j, "seconds_to_half", to_half);
  else
    wl_json_null(j, "seconds_to_half");
  wl_json_num(j, "alloc_seconds", (double)(w[0].t_peak - w[0].t_start) / 1e9);
  wl_json_arr(j, "rss_series");
  for (int k = 0; k <= nsamples; k++) wl_json_pair(j, t[k], (double)rss[k]);
  wl_json_arr_end(j);
  free(w);
  wl_result_end(j);
  return 0;
}
