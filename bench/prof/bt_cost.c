/*
 * bt_cost.c - the cost per backtrace and the depth found by strata's unwinder
 * (strata_backtrace: .eh_frame rules cached per return address), libgcc's
 * _Unwind_Backtrace (.eh_frame, interpreted for every frame) and a frame-pointer walk, at
 * the end of a 24-deep call chain built with frame pointers and of the same chain built
 * without them (Debian's default for -O2 code). Linked with libstrata.a. Prints JSON;
 * `bt_cost count CHAIN UNWINDER N` takes N backtraces (after one to warm the cache), for
 * callgrind's instruction counts (run_prof_figures.py: N = 0 and N = 1000).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unwind.h>

/* libstrata.a's (hidden) strata_backtrace with the unwinder chosen: 0 strata's, 1 libgcc. */
unsigned strata_backtrace_mode(uintptr_t *frames, unsigned max, int mode);

#define DEPTH 24
#define MAXF 64

typedef struct {
  uintptr_t *f;
  int n;
} st_t;
static _Unwind_Reason_Code cb(struct _Unwind_Context *c, void *a) {
  st_t *s = a;
  if (s->n >= MAXF) return _URC_END_OF_STACK;
  s->f[s->n++] = _Unwind_GetIP(c);
  return _URC_NO_REASON;
}
static __attribute__((noinline)) int bt_libgcc(uintptr_t *f) {
  st_t s = {f, 0};
  _Unwind_Backtrace(cb, &s);
  return s.n;
}
/* Frame-pointer walk with the usual sanity checks (upward, aligned, bounded steps). */
static __attribute__((noinline, optimize("no-omit-frame-pointer"))) int bt_fp(uintptr_t *f) {
  uintptr_t *fp = __builtin_frame_address(0);
  int n = 0;
  while (fp && n < MAXF) {
    uintptr_t *next = (uintptr_t *)fp[0];
    uintptr_t ret = fp[1];
    if (ret == 0) break;
    f[n++] = ret;
    if (next <= fp || (uintptr_t)next - (uintptr_t)fp > (1 << 20) || ((uintptr_t)next & 7)) break;
    fp = next;
  }
  return n;
}

static __attribute__((noinline)) int bt_strata(uintptr_t *f) { return (int)strata_backtrace_mode(f, MAXF, 0); }
static __attribute__((noinline)) int bt_strata_libgcc(uintptr_t *f) { return (int)strata_backtrace_mode(f, MAXF, 1); }

static volatile int sink;
typedef int (*bt_fn)(uintptr_t *);
#define CHAIN(attr, name)                                                 \
  static attr int name(int d, bt_fn fn, uintptr_t *f) {                   \
    if (d == 0) return fn(f);                                             \
    int r = name(d - 1, fn, f);                                           \
    sink += r;                                                            \
    return r;                                                             \
  }
CHAIN(__attribute__((noinline, optimize("no-omit-frame-pointer"))), chain_fp)
CHAIN(__attribute__((noinline, optimize("omit-frame-pointer"))), chain_nofp)

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static void measure(const char *chain, int (*c)(int, bt_fn, uintptr_t *), const char *how, bt_fn fn, int last) {
  uintptr_t f[MAXF];
  int depth = c(DEPTH, fn, f);
  int iters = 20000;
  double t0 = now();
  for (int i = 0; i < iters; i++) c(DEPTH, fn, f);
  double ns = (now() - t0) / iters * 1e9;
  printf("  {\"chain\": \"%s\", \"unwinder\": \"%s\", \"frames_found\": %d, \"frames_expected_min\": %d, "
         "\"ns_per_backtrace\": %.0f}%s\n", chain, how, depth, DEPTH + 2, ns, last ? "" : ",");
}

typedef struct {
  const char *name;
  int (*chain)(int, bt_fn, uintptr_t *);
} chain_t;
static const chain_t chains[] = {{"frame_pointers", chain_fp}, {"no_frame_pointers", chain_nofp}};
typedef struct {
  const char *name;
  bt_fn fn;
} unw_t;
static const unw_t unws[] = {{"strata", bt_strata}, {"strata_libgcc", bt_strata_libgcc},
                             {"libgcc", bt_libgcc}, {"fp_walk", bt_fp}};
#define N(a) (sizeof(a) / sizeof((a)[0]))

int main(int argc, char **argv) {
  if (argc == 5 && strcmp(argv[1], "count") == 0) {
    const chain_t *c = NULL;
    const unw_t *u = NULL;
    for (size_t i = 0; i < N(chains); i++) if (strcmp(argv[2], chains[i].name) == 0) c = &chains[i];
    for (size_t i = 0; i < N(unws); i++) if (strcmp(argv[3], unws[i].name) == 0) u = &unws[i];
    if (c == NULL || u == NULL) {
      fprintf(stderr, "bt_cost count: CHAIN is frame_pointers or no_frame_pointers, UNWINDER strata, strata_libgcc, libgcc or fp_walk\n");
      return 2;
    }
    uintptr_t f[MAXF];
    long n = atol(argv[4]);
    c->chain(DEPTH, u->fn, f);
    for (long i = 0; i < n; i++) c->chain(DEPTH, u->fn, f);
    return 0;
  }
  printf("[\n");
  for (size_t i = 0; i < N(chains); i++)
    for (size_t j = 0; j < N(unws); j++)
      measure(chains[i].name, chains[i].chain, unws[j].name, unws[j].fn, i + 1 == N(chains) && j + 1 == N(unws));
  printf("]\n");
  return 0;
}
