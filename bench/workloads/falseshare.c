/*
 * wl_falseshare - allocator-induced false sharing, Hoard's cache-thrash ("active": each
 * thread allocates and writes its own 8-byte objects) and cache-scratch ("passive": the
 * main thread allocates one adjacent object per thread, each frees it, then does the
 * same loop; an allocator that hands the freed object back puts threads on one line).
 */
#include "common.h"

#include <pthread.h>
#include <stdlib.h>

#define OBJ_SIZE 8 /* Hoard's default object size */

typedef struct worker {
  int id;
  uint64_t iters, reps, done;
  uint64_t deadline_ns; /* stop early past this: false sharing can cost 100x */
  void *given;          /* passive: the object allocated by the main thread */
  bool passive;
  pthread_barrier_t *bar;
  uint64_t t0, t1;
} worker_t;

/* malloc, write every byte `reps` times, check, free: once per iteration. */
static void thrash(worker_t *w) {
  for (uint64_t it = 0; it < w->iters; it++, w->done++) {
    if ((it & 15) == 0 && wl_now_ns() > w->deadline_ns) break;
    volatile unsigned char *p = malloc(OBJ_SIZE);
    if (!p) wl_oom(OBJ_SIZE);
    for (int k = 0; k < OBJ_SIZE; k++) p[k] = (unsigned char)(k + w->id);
    for (uint64_t r = 0; r < w->reps; r++)
      for (int k = 0; k < OBJ_SIZE; k++) p[k]++;
    for (int k = 0; k < OBJ_SIZE; k++)
      if (p[k] != (unsigned char)(k + w->id + w->reps))
        wl_die("object %p byte %d is %u, expected %u: shared with another thread?", (void *)p, k, p[k],
               (unsigned char)(k + w->id + w->reps));
    free((void *)p);
  }
}

static void *worker_main(void *arg) {
  worker_t *w = arg;
  pthread_barrier_wait(w->bar);
  if (w->id == 0) w->t0 = wl_now_ns();
  if (w->passive) free(w->given);
  thrash(w);
  pthread_barrier_wait(w->bar);
  if (w->id == 0) w->t1 = wl_now_ns();
  return NULL;
}

/* Runs one variant; returns its wall time in ns and the iterations done in *done. */
static uint64_t run_variant(const wl_args_t *a, bool passive, uint64_t iters, uint64_t reps, uint64_t cap_ns,
                            uint64_t *done) {
  pthread_barrier_t bar;
  pthread_barrier_init(&bar, NULL, (unsigned)a->threads);
  worker_t *w = calloc((size_t)a->threads, sizeof(*w));
  if (!w) wl_oom(sizeof(*w));
  for (int i = 0; i < a->threads; i++) {
    w[i] = (worker_t){.id = i, .iters = iters, .reps = reps, .passive = passive, .bar = &bar};
    /* Allocated back to back by one thread: the cache-scratch set-up. */
    if (passive) w[i].given = wl_malloc(OBJ_SIZE);
  }
  uint64_t deadline = wl_now_ns() + cap_ns;
  for (int i = 0; i < a->threads; i++) w[i].deadline_ns = deadline;
  wl_run(a->threads, worker_main, w, sizeof(*w));
  uint64_t ns = w[0].t1 - w[0].t0;
  *done = 0;
  for (int i = 0; i < a->threads; i++) *done += w[i].done;
  free(w);
  pthread_barrier_destroy(&bar);
  return ns;
}

static void emit_variant(wl_json_t *j, const char *name, uint64_t ops, uint64_t writes, uint64_t ns,
                         bool capped) {
  double sec = (double)ns / 1e9;
  wl_json_obj(j, name);
  wl_json_int(j, "ops", (int64_t)ops);
  wl_json_str(j, "stopped_by", capped ? "time cap" : "op count");
  wl_json_int(j, "writes", (int64_t)writes);
  wl_json_num(j, "seconds", sec);
  wl_json_num(j, "ops_per_sec", (double)ops / sec);
  wl_json_num(j, "writes_per_sec", (double)writes / sec);
  wl_json_obj_end(j);
}

int main(int argc, char **argv) {
  static const int threads[3] = {2, 4, 4};
  wl_args_t a;
  wl_parse_args(&a, "falseshare", argc, argv, threads);
  /* Per thread: iterations (malloc/free pairs) and writes of each byte per iteration. */
  uint64_t iters = WL_PICK(&a, 4000, 60000, 400000);
  uint64_t reps = 1000; /* Hoard runs 1,000s of writes per object: the write loop dominates */

  /* Each variant stops at this wall time even if unfinished (ops_per_sec stays valid). */
  uint64_t cap_ns = WL_PICK(&a, 400, 5000, 15000) * 1000000ULL;

  uint64_t ops_passive, ops_active, planned = iters * (uint64_t)a.threads;
  uint64_t ns_passive = run_variant(&a, true, iters, reps, cap_ns, &ops_passive);
  uint64_t ns_active = run_variant(&a, false, iters, reps, cap_ns, &ops_active);
  wl_info("passive %.3f s, active %.3f s%s", (double)ns_passive / 1e9, (double)ns_active / 1e9,
          ops_passive < planned || ops_active < planned ? " (stopped by the time cap)" : "");

  wl_json_t *j = wl_result_begin(&a, ops_passive + ops_active, (double)(ns_passive + ns_active) / 1e9);
  wl_json_int(j, "object_size", OBJ_SIZE);
  wl_json_int(j, "reps_per_object", (int64_t)reps);
  wl_json_obj(j, "phases");
  emit_variant(j, "passive", ops_passive, ops_passive * reps * OBJ_SIZE, ns_passive, ops_passive < planned);
  emit_variant(j, "active", ops_active, ops_active * reps * OBJ_SIZE, ns_active, ops_active < planned);
  wl_json_obj_end(j);
  wl_result_end(j);
  return 0;
}
