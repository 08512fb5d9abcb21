/*
 * wl_frag - long-run fragmentation: rounds allocate blocks of a size shrinking from
 * 64 KiB to 64 B and free every other one (alternating halves), leaving holes only
 * cross-size reuse can fill. Samples RSS after each round; reports live bytes and RSS
 * per live byte. --threads N splits each round over N threads.
 */
#include "common.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>

#define MAX_ROUNDS 64
#define START_SIZE 65536.0
#define END_SIZE 64.0

typedef struct worker {
  int id;
  uint64_t seed;
  int rounds;
  size_t round_bytes; /* this thread's share of each round */
  double *round_size; /* upper size of round r (shared) */
  pthread_barrier_t *bar;
  struct worker *all;
  int nthreads;
  void **ptr; /* live blocks, compacted after each round (bookkeeping: wl_map) */
  uint32_t *size;
  uint64_t *tag;
  size_t cap, live, hw; /* entries: capacity, live now, high-water mark */
  size_t live_bytes;
  uint64_t mallocs;
} worker_t;

typedef struct sample {
  uint64_t t_ns;
  long rss_kb;
  size_t live_bytes;
} sample_t;

static void one_round(worker_t *w, wl_rng_t *rng, int r) {
  size_t hi = (size_t)w->round_size[r], lo = hi * 3 / 4, first = w->live, made = 0;
  uint64_t tag = ((uint64_t)w->id << 48) + w->mallocs;
  while (made < w->round_bytes) {
    size_t s = (size_t)wl_range(rng, lo, hi);
    if (w->live == w->cap) wl_die("bookkeeping full (%zu entries)", w->cap);
    void *p = malloc(s);
    if (!p) wl_oom(s);
    wl_stamp(p, s, ++tag);
    w->ptr[w->live] = p;
    w->size[w->live] = (uint32_t)s;
    w->tag[w->live] = tag;
    w->live++;
    w->live_bytes += s;
    made += s;
    w->mallocs++;
  }
  if (w->live > w->hw) w->hw = w->live;
  /* Free the odd half on even rounds and the even half on odd rounds; compact. */
  size_t keep = first;
  for (size_t i = first; i < w->live; i++) {
    if (((i - first) & 1) == (size_t)(r & 1)) {
      w->ptr[keep] = w->ptr[i];
      w->size[keep] = w->size[i];
      w->tag[keep] = w->tag[i];
      keep++;
    } else {
      wl_check(w->ptr[i], w->size[i], w->tag[i], "round free");
      free(w->ptr[i]);
      w->live_bytes -= w->size[i];
    }
  }
  w->live = keep;
}

static sample_t samples[MAX_ROUNDS + 1];
static uint64_t t_start;

static void *worker_main(void *arg) {
  worker_t *w = arg;
  wl_rng_t rng;
  wl_rng_init(&rng, w->seed, (uint64_t)w->id);
  pthread_barrier_wait(w->bar);
  if (w->id == 0) t_start = wl_now_ns();
  for (int r = 0; r < w->rounds; r++) {
    one_round(w, &rng, r);
    pthread_barrier_wait(w->bar);
    if (w->id == 0) {
      samples[r].t_ns = wl_now_ns() - t_start;
      samples[r].rss_kb = wl_rss_kb();
      samples[r].live_bytes = 0;
      for (int i = 0; i < w->nthreads; i++) samples[r].live_bytes += w->all[i].live_bytes;
    }
    /* Keep the others out of round r+1 until the sample is taken. */
    pthread_barrier_wait(w->bar);
  }
  return NULL;
}

int main(int argc, char **argv) {
  static const int threads[3] = {1, 1, 1};
  wl_args_t a;
  wl_parse_args(&a, "frag", argc, argv, threads);
  int rounds = WL_PICK(&a, 12, 24, 48);
  size_t round_bytes = WL_PICK(&a, (size_t)4 << 20, (size_t)48 << 20, (size_t)64 << 20);

  double round_size[MAX_ROUNDS];
  double shrink = pow(START_SIZE / END_SIZE, 1.0 / (rounds - 1));
  size_t cap = 0; /* entries, if nothing were freed: reserved, touched only as used */
  for (int r = 0; r < rounds; r++) {
    round_size[r] = START_SIZE / pow(shrink, r);
    cap += (size_t)((double)(round_bytes / (size_t)a.threads) / floor(round_size[r] * 0.75)) + 2;
  }

  pthread_barrier_t bar;
  pthread_barrier_init(&bar, NULL, (unsigned)a.threads);
  worker_t *w = calloc((size_t)a.threads, sizeof(*w));
  if (!w) wl_oom(sizeof(*w));
  /* Bookkeeping lives outside the allocator; it is subtracted from the heap's RSS. */
  for (int i = 0; i < a.threads; i++) {
    w[i].id = i;
    w[i].seed = a.seed;
    w[i].rounds = rounds;
    w[i].round_bytes = round_bytes / (size_t)a.threads;
    w[i].round_size = round_size;
    w[i].bar = &bar;
    w[i].all = w;
    w[i].nthreads = a.threads;
    w[i].cap = cap;
    w[i].ptr = wl_map(w[i].cap * sizeof(void *));
    w[i].size = wl_map(w[i].cap * sizeof(uint32_t));
    w[i].tag = wl_map(w[i].cap * sizeof(uint64_t));
  }
  long rss_before = wl_rss_kb();
  wl_run(a.threads, worker_main, w, sizeof(*w));
  uint64_t t_end = wl_now_ns();
  pthread_barrier_destroy(&bar);

  size_t live_bytes = 0, live_blocks = 0, high = 0;
  uint64_t mallocs = 0;
  for (int i = 0; i < a.threads; i++) {
    live_bytes += w[i].live_bytes;
    live_blocks += w[i].live;
    mallocs += w[i].mallocs;
    high += w[i].hw; /* the bookkeeping pages ever touched stay resident */
  }
  size_t book_bytes = high * (sizeof(void *) + sizeof(uint32_t) + sizeof(uint64_t));
  long rss_end = samples[rounds - 1].rss_kb;
  double sec = (double)(t_end - t_start) / 1e9;
  double rss_per_live = (double)rss_end * 1024.0 / (double)live_bytes;
  double heap_per_live = ((double)(rss_end - rss_before) * 1024.0 - (double)book_bytes) / (double)live_bytes;
  wl_info("%d rounds in %.3f s: %zu live blocks, %.1f MiB live, RSS %.1f MiB, heap/live %.3f", rounds, sec,
          live_blocks, (double)live_bytes / 1048576.0, (double)rss_end / 1024.0, heap_per_live);

  wl_json_t *j = wl_result_begin(&a, mallocs, sec);
  wl_json_int(j, "rounds", rounds);
  wl_json_int(j, "live_bytes", (int64_t)live_bytes);
  wl_json_int(j, "live_blocks", (int64_t)live_blocks);
  wl_json_int(j, "rss_before_kb", rss_before);
  wl_json_int(j, "bookkeeping_kb", (int64_t)(book_bytes / 1024));
  wl_json_num(j, "rss_per_live", rss_per_live);
  wl_json_num(j, "heap_per_live", heap_per_live);
  wl_json_arr(j, "rss_series");
  for (int r = 0; r < rounds; r++) wl_json_pair(j, (double)samples[r].t_ns / 1e9, (double)samples[r].rss_kb);
  wl_json_arr_end(j);
  wl_json_arr(j, "live_kb_series");
  for (int r = 0; r < rounds; r++) wl_json_int(j, NULL, (int64_t)(samples[r].live_bytes / 1024));
  wl_json_arr_end(j);
  wl_json_arr(j, "round_size");
  for (int r = 0; r < rounds; r++) wl_json_num(j, NULL, floor(round_size[r]));
  wl_json_arr_end(j);

  /* Verify and release the survivors (not timed), then report what stayed resident. */
  for (int i = 0; i < a.threads; i++) {
    for (size_t k = 0; k < w[i].live; k++) {
      wl_check(w[i].ptr[k], w[i].size[k], w[i].tag[k], "survivor");
      free(w[i].ptr[k]);
    }
    wl_unmap(w[i].ptr, w[i].cap * sizeof(void *));
    wl_unmap(w[i].size, w[i].cap * sizeof(uint32_t));
    wl_unmap(w[i].tag, w[i].cap * sizeof(uint64_t));
  }
  free(w);
  wl_json_int(j, "rss_after_free_kb", wl_rss_kb());
  wl_result_end(j);
  return 0;
}
