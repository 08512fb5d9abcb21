/*
 * wl_nativethreads - a C stand-in for a JVM's native memory: 100 threads each churn a
 * small live set of the blocks a JVM asks malloc for: Unsafe.allocateMemory (16 B..4
 * KiB), direct byte buffers (1..128 KiB), and zlib streams (inflate: a 7 KiB state and
 * a 32 KiB window; deflate: a 6 KiB state and four 64 KiB arrays), replaced at random.
 * Thread count is the point: what each thread's cache holds adds up in peak RSS.
 */
#include "common.h"

#include <pthread.h>
#include <stdlib.h>

#define SLOTS 16
#define MAXPARTS 5
#define MAX_SIZE ((size_t)128 << 10)

typedef struct slot {
  void *p[MAXPARTS];
  uint32_t n;
} slot_t;

typedef struct worker {
  int id;
  uint64_t ops, seed;
  pthread_barrier_t *bar;
  slot_t s[SLOTS];
} worker_t;

static void slot_free(slot_t *s) {
  for (uint32_t i = 0; i < s->n; i++) {
    wl_hdr_check(s->p[i], MAX_SIZE, "native block");
    free(s->p[i]);
  }
  s->n = 0;
}

static void slot_add(slot_t *s, size_t size, uint64_t tag) {
  void *p = malloc(size);
  if (!p) wl_oom(size);
  wl_hdr_stamp(p, size, tag);
  s->p[s->n++] = p;
}

static void *worker_main(void *arg) {
  worker_t *w = arg;
  wl_rng_t r;
  wl_rng_init(&r, w->seed, (uint64_t)w->id);
  uint64_t tag = (uint64_t)w->id << 40;
  pthread_barrier_wait(w->bar);
  for (uint64_t i = 0; i < w->ops; i++) {
    slot_t *s = &w->s[wl_below(&r, SLOTS)];
    slot_free(s);
    uint64_t u = wl_below(&r, 100);
    if (u < 60) {
      slot_add(s, (size_t)wl_log_range(&r, 16, 4096), ++tag);
    } else if (u < 85) {
      slot_add(s, (size_t)wl_log_range(&r, 1024, MAX_SIZE), ++tag);
    } else if (u < 97) {
      slot_add(s, 7160, ++tag);
      slot_add(s, 32768, ++tag);
    } else {
      slot_add(s, 5952, ++tag);
      for (int k = 0; k < 4; k++) slot_add(s, 65536, ++tag);
    }
  }
  for (int i = 0; i < SLOTS; i++) slot_free(&w->s[i]);
  return NULL;
}

int main(int argc, char **argv) {
  static const int threads[3] = {100, 100, 100};
  wl_args_t a;
  wl_parse_args(&a, "nativethreads", argc, argv, threads);
  uint64_t ops = WL_PICK(&a, 1000, 3000, 30000); /* per thread */
  pthread_barrier_t bar;
  pthread_barrier_init(&bar, NULL, (unsigned)a.threads);
  worker_t *w = wl_map(sizeof(worker_t) * (size_t)a.threads);
  for (int i = 0; i < a.threads; i++) w[i] = (worker_t){.id = i, .ops = ops, .seed = a.seed, .bar = &bar};
  uint64_t t0 = wl_now_ns();
  wl_run(a.threads, worker_main, w, sizeof(*w));
  double sec = (double)(wl_now_ns() - t0) / 1e9;
  wl_json_t *j = wl_result_begin(&a, ops * (uint64_t)a.threads, sec);
  wl_result_end(j);
  return 0;
}
