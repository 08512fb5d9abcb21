/*
 * bt_cost.c - why strata's profiler unwinds with libgcc: the cost per backtrace and the
 * depth found by libgcc's _Unwind_Backtrace (.eh_frame) and by a frame-pointer walk, at
 * the end of a 24-deep call chain built with frame pointers and of the same chain built
 * without them (Debian's default for -O2 code). Prints JSON.
 */
#include <stdint.h>
#include <stdio.h>
#include <time.h>
#include <unwind.h>

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

int main(void) {
  printf("[\n");
  measure("frame_pointers", chain_fp, "libgcc", bt_libgcc, 0);
  measure("frame_pointers", chain_fp, "fp_walk", bt_fp, 0);
  measure("no_frame_pointers", chain_nofp, "libgcc", bt_libgcc, 0);
  measure("no_frame_pointers", chain_nofp, "fp_walk", bt_fp, 1);
  printf("]\n");
  return 0;
}
