/*
 * wl_threadwave - thread-per-request servers and pools that resize: waves of
 * short-lived threads. Each thread allocates blocks (16 B..2 KiB, log-uniform), swaps
 * half of them into a shared exchange array (freeing the block it takes out, which
 * another, maybe exited, thread allocated), frees the rest and exits; the next wave
 * starts when it ends. Stresses thread start and exit and blocks outliving their thread.
 */
#include "common.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define MIN_SIZE 16
#define MAX_SIZE 2048
#define XSLOTS 4096 /* shared exchange array */
#define KEEP 256    /* blocks a thread holds at once */

static _Atomic(void *) xchg[XSLOTS];

typedef struct worker {
  uint64_t id, seed, ops;
} worker_t;

static uint64_t per_thread;

static void *thread_main(void *arg) {
  worker_t *w = arg;
  wl_rng_t r;
  wl_rng_init(&r, w->seed, w->id);
  void *held[KEEP];
  memset(held, 0, sizeof(held));
  uint64_t tag = w->id << 32;
  for (uint64_t i = 0; i < per_thread; i++) {
    size_t size = (size_t)wl_log_range(&r, MIN_SIZE, MAX_SIZE);
    void *p = malloc(size);
    if (!p) wl_oom(size);
    wl_hdr_stamp(p, size, ++tag);
    if (i & 1) {
      void *old = atomic_exchange_explicit(&xchg[wl_below(&r, XSLOTS)], p, memory_order_acq_rel);
      if (old) {
        wl_hdr_check(old, MAX_SIZE, "handed over");
        free(old);
      }
    } else {
      void **h = &held[wl_below(&r, KEEP)];
      if (*h) {
        wl_hdr_check(*h, MAX_SIZE, "held");
        free(*h);
      }
      *h = p;
    }
  }
  for (int i = 0; i < KEEP; i++) {
    if (!held[i]) continue;
    wl_hdr_check(held[i], MAX_SIZE, "held at exit");
    free(held[i]);
  }
  w->ops = per_thread;
  return NULL;
}

int main(int argc, char **argv) {
  static const int threads[3] = {8, 8, 8};
  wl_args_t a;
  wl_parse_args(&a, "threadwave", argc, argv, threads);
  uint64_t waves = WL_PICK(&a, 40, 150, 1500);
  per_thread = WL_PICK(&a, 1000, 1000, 1000);
  worker_t *w = wl_map(sizeof(worker_t) * (size_t)a.threads);
  pthread_t tids[1024];
  uint64_t ops = 0, t0 = wl_now_ns();
  for (uint64_t v = 0; v < waves; v++) {
    for (int i = 0; i < a.threads; i++) {
      w[i] = (worker_t){.id = v * (uint64_t)a.threads + (uint64_t)i + 1, .seed = a.seed};
      int err = pthread_create(&tids[i], NULL, thread_main, &w[i]);
      if (err) wl_die("pthread_create: %s", strerror(err));
    }
    for (int i = 0; i < a.threads; i++) {
      pthread_join(tids[i], NULL);
      ops += w[i].ops;
    }
  }
  for (int i = 0; i < XSLOTS; i++) {
    void *p = atomic_exchange(&xchg[i], NULL);
    if (!p) continue;
    wl_hdr_check(p, MAX_SIZE, "exchange at end");
    free(p);
  }
  double sec = (double)(wl_now_ns() - t0) / 1e9;
  wl_info("%llu waves of %d threads, %.3f s", (unsigned long long)waves, a.threads, sec);
  wl_json_t *j = wl_result_begin(&a, ops, sec);
  wl_json_int(j, "waves", (int64_t)waves);
  wl_result_end(j);
  return 0;
}
