/*
 * test_backtrace.c - strata's fast x86_64 unwinder (src/backtrace.c) gives exactly the
 * frames of libgcc's _Unwind_Backtrace, taken from the same call site: a deep chain in the
 * executable with and without frame pointers, a chain through a dlopened library, a
 * library dlclosed and another dlopened at the same address (the rule cache must be
 * flushed), inside a signal handler (the __restore_rt frame: fall back to libgcc), and
 * many threads at once with signals arriving (under TSan in the prefixed build).
 * Exit 77 (skip) only when not on x86_64 Linux.
 */
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"
#include "unit.h"

HIDDEN unsigned strata_backtrace_mode(uintptr_t *frames, unsigned max, int mode);
HIDDEN extern uint64_t strata_bt_stats[4]; /* computed, fallbacks, flushes, hard */

#define MAXF 128
typedef struct {
  uintptr_t f[2][MAXF];
  unsigned n[2];
} both_t;

static volatile int modes = 2;
/* Both unwinders from one call site: mode 1 (libgcc) first, then 0 (fast). The loop must
 * stay a loop: at -O3 GCC unrolls it into two calls, whose return addresses (frame 2)
 * differ by the distance between them although both unwinders are right. */
static __attribute__((noinline)) int take_both(void *arg) {
  both_t *b = arg;
#pragma GCC unroll 1
  for (int m = modes - 1; m >= 0; m--) b->n[m] = strata_backtrace_mode(b->f[m], MAXF, m);
  return (int)b->n[0];
}

static int same(const both_t *b) {
  if (b->n[0] != b->n[1]) return 0;
  return memcmp(b->f[0], b->f[1], b->n[0] * sizeof(uintptr_t)) == 0;
}

static void dump(const char *what, const both_t *b) {
  printf("%s: fast %u frames, libgcc %u\n", what, b->n[0], b->n[1]);
  for (unsigned i = 0; i < b->n[0] || i < b->n[1]; i++)
    printf("  %2u %#18lx %#18lx\n", i, i < b->n[0] ? (unsigned long)b->f[0][i] : 0UL,
           i < b->n[1] ? (unsigned long)b->f[1][i] : 0UL);
}

static _Thread_local volatile int sink; /* per thread: no race for TSan */
typedef int (*leaf_fn)(void *);
#define CHAIN(attr, name)                                     \
  static attr int name(int d, leaf_fn leaf, void *arg) {      \
    volatile char pad[24 + (d & 3) * 16];                     \
    pad[0] = (char)d;                                         \
    int r = d == 0 ? leaf(arg) : name(d - 1, leaf, arg);      \
    sink += r + pad[0];                                       \
    return r;                                                 \
  }
CHAIN(__attribute__((noinline, optimize("no-omit-frame-pointer"))), chain_fp)
CHAIN(__attribute__((noinline, optimize("omit-frame-pointer"))), chain_nofp)

/* Alternates the two kinds of frame. */
static __attribute__((noinline, optimize("omit-frame-pointer"))) int mixed_b(int d, leaf_fn leaf, void *arg);
static __attribute__((noinline, optimize("no-omit-frame-pointer"))) int mixed_a(int d, leaf_fn leaf, void *arg) {
  int r = d == 0 ? leaf(arg) : mixed_b(d - 1, leaf, arg);
  sink += r;
  return r;
}
static __attribute__((noinline, optimize("omit-frame-pointer"))) int mixed_b(int d, leaf_fn leaf, void *arg) {
  int r = d == 0 ? leaf(arg) : mixed_a(d - 1, leaf, arg);
  sink += r;
  return r;
}

static uintptr_t short_f[2][8];
static unsigned short_n[2];
static __attribute__((noinline)) int take_short(void *arg) {
  (void)arg;
#pragma GCC unroll 1
  for (int m = modes - 1; m >= 0; m--) short_n[m] = strata_backtrace_mode(short_f[m], 8, m);
  return 0;
}

static volatile int rounds = 2;
static void check_chain(const char *name, int (*c)(int, leaf_fn, void *), int depth) {
  both_t b;
  uint64_t fb = strata_bt_stats[1], computed = 0;
  for (int round = 0; round < rounds; round++) {
    /* The second time from the same call site: every rule from the table. */
    if (round == 1) computed = strata_bt_stats[0];
    c(depth, take_both, &b);
    CHECK(b.n[0] >= (unsigned)depth + 3);
    CHECK(same(&b));
    if (!same(&b)) dump(name, &b);
  }
  CHECK_EQ(strata_bt_stats[1], fb); /* no fallback: the fast unwinder did it */
  CHECK_EQ(strata_bt_stats[0], computed);
}

static void test_exe_chains(void) {
  check_chain("frame pointers", chain_fp, 40);
  check_chain("no frame pointers", chain_nofp, 40);
  check_chain("mixed", mixed_a, 41);
  /* Truncated at max, both the same. */
  chain_nofp(20, take_short, NULL);
  CHECK_EQ(short_n[0], 8);
  CHECK_EQ(short_n[1], 8);
  CHECK(memcmp(short_f[0], short_f[1], sizeof short_f[0]) == 0);
}

/* ---------------------------------------------------------------- libraries */
typedef int (*lib_chain_fn)(int, leaf_fn, void *);
static uintptr_t lib_base(void *fn) {
  Dl_info di;
  return dladdr(fn, &di) ? (uintptr_t)di.dli_fbase : 0;
}

static void test_dlopen_chain(void) {
  void *h = dlopen(BT_LIB_A, RTLD_NOW | RTLD_LOCAL);
  CHECK(h != NULL);
  if (h == NULL) { printf("dlopen %s: %s\n", BT_LIB_A, dlerror()); return; }
  lib_chain_fn c = (lib_chain_fn)dlsym(h, "bt_lib_chain");
  both_t b;
  uint64_t fb = strata_bt_stats[1];
  c(30, take_both, &b);
  CHECK(b.n[0] >= 33);
  CHECK(same(&b));
  if (!same(&b)) dump("library", &b);
  CHECK_EQ(strata_bt_stats[1], fb);
  dlclose(h);
}

static both_t lib_a_bt;
static int lib_leaf_nofp(void *arg) { return chain_nofp(5, take_both, arg); }

static void test_dlclose_dlopen_same_address(void) {
  uintptr_t pcs_a[MAXF];
  unsigned na = 0;
  uintptr_t base_a = 0, base_b = 0;
  for (int attempt = 0; attempt < 4; attempt++) {
    void *h = dlopen(BT_LIB_A, RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) { CHECK(h != NULL); return; }
    lib_chain_fn c = (lib_chain_fn)dlsym(h, "bt_lib_chain");
    base_a = lib_base((void *)c);
    c(20, lib_leaf_nofp, &lib_a_bt); /* caches the rules of A's return addresses */
    CHECK(same(&lib_a_bt));
    na = lib_a_bt.n[0];
    memcpy(pcs_a, lib_a_bt.f[0], na * sizeof(uintptr_t));
    dlclose(h);
    void *h2 = dlopen(BT_LIB_B, RTLD_NOW | RTLD_LOCAL);
    if (h2 == NULL) { CHECK(h2 != NULL); return; }
    lib_chain_fn c2 = (lib_chain_fn)dlsym(h2, "bt_lib_chain");
    base_b = lib_base((void *)c2);
    if (base_b == base_a) {
      uint64_t flushes = strata_bt_stats[2];
      both_t b;
      c2(20, lib_leaf_nofp, &b);
      CHECK(same(&b));
      if (!same(&b)) dump("library B at A's address", &b);
      CHECK(strata_bt_stats[2] > flushes);
      /* The test means something only if B's return addresses are A's. */
      unsigned common = 0;
      for (unsigned i = 0; i < b.n[0]; i++)
        for (unsigned j = 0; j < na; j++) common += b.f[0][i] == pcs_a[j];
      CHECK(common >= 20);
      dlclose(h2);
      return;
    }
    dlclose(h2);
  }
  printf("library B never loaded at A's address (%#lx, %#lx)\n", (unsigned long)base_a, (unsigned long)base_b);
  CHECK(base_a == base_b);
}

/* ---------------------------------------------------------------- signals */
static both_t sig_bt;
static volatile sig_atomic_t sig_done;
static void on_usr1(int sig) {
  (void)sig;
  chain_nofp(6, take_both, &sig_bt);
  sig_done = 1;
}
static int raise_leaf(void *arg) {
  (void)arg;
  raise(SIGUSR1);
  return 0;
}

static void test_signal_handler(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_usr1;
  sigaction(SIGUSR1, &sa, NULL);
  uint64_t fb = strata_bt_stats[1];
  chain_fp(10, raise_leaf, NULL);
  CHECK(sig_done);
  CHECK(same(&sig_bt));
  if (!same(&sig_bt)) dump("signal handler", &sig_bt);
  CHECK(sig_bt.n[0] >= 6 + 10 + 4); /* through __restore_rt to the interrupted chain */
  CHECK(strata_bt_stats[1] > fb);   /* the fast unwinder gave the stack to libgcc */
  signal(SIGUSR1, SIG_DFL);
}

/* ---------------------------------------------------------------- threads */
#define NTHREADS 8
static volatile int stop_threads;
static int thread_fail;
static uint64_t handler_bts;

static void on_usr2(int sig) {
  (void)sig;
  uintptr_t f[MAXF];
  if (strata_backtrace_mode(f, MAXF, 0) > 0) __atomic_add_fetch(&handler_bts, 1, __ATOMIC_RELAXED);
}

static int thread_leaf(void *arg) { return take_both(arg); }

static void *worker(void *arg) {
  unsigned seed = (unsigned)(uintptr_t)arg;
  for (int i = 0; i < 300; i++) {
    both_t b;
    seed = seed * 1103515245u + 12345u;
    int d = (int)(seed >> 16) % 30;
    switch ((seed >> 8) % 3) {
    case 0: chain_fp(d, thread_leaf, &b); break;
    case 1: chain_nofp(d, thread_leaf, &b); break;
    default: mixed_a(d, thread_leaf, &b); break;
    }
    if (!same(&b) || b.n[0] < (unsigned)d + 3) {
      __atomic_store_n(&thread_fail, 1, __ATOMIC_RELAXED);
      dump("thread", &b);
      break;
    }
  }
  return NULL;
}

static void test_threads(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_usr2;
  sa.sa_flags = SA_RESTART;
  sigaction(SIGUSR2, &sa, NULL);
  pthread_t t[NTHREADS];
  for (int i = 0; i < NTHREADS; i++) pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)(i + 1));
  for (int k = 0; k < 200; k++)
    for (int i = 0; i < NTHREADS; i++) pthread_kill(t[i], SIGUSR2); /* may find a thread gone: ESRCH */
  for (int i = 0; i < NTHREADS; i++) pthread_join(t[i], NULL);
  CHECK(!thread_fail);
  CHECK(handler_bts > 0);
  signal(SIGUSR2, SIG_DFL);
}

/* `unit_backtrace rules LIB`: LIB's load address, then for each hex offset read from
 * stdin (a return address less the load address) the rule strata computes for it:
 * "kind cfa_reg cfa_off rbp_saved rbp_off ra_undefined" (bt_rules_check.py). */
HIDDEN uint64_t strata_bt_rule_of(uintptr_t ra);
static const char *rules_lib;
static uintptr_t rules_base;
static int base_cb(struct dl_phdr_info *info, size_t size, void *arg) {
  (void)size;
  (void)arg;
  const char *n = info->dlpi_name, *slash = strrchr(n, '/');
  const char *want = strrchr(rules_lib, '/') ? strrchr(rules_lib, '/') + 1 : rules_lib;
  if (strcmp(slash ? slash + 1 : n, want) == 0 || (want[0] == '-' && n[0] == '\0')) {
    rules_base = info->dlpi_addr;
    return 1;
  }
  return 0;
}

static int rules_main(const char *lib) {
  rules_lib = lib;
  if (strcmp(lib, "-") != 0 && dlopen(lib, RTLD_NOW | RTLD_NOLOAD) == NULL && dlopen(lib, RTLD_NOW) == NULL) {
    printf("dlopen %s: %s\n", lib, dlerror());
    return 1;
  }
  dl_iterate_phdr(base_cb, NULL);
  printf("base %#lx\n", (unsigned long)rules_base);
  unsigned long off;
  while (scanf("%lx", &off) == 1) {
    uint64_t r = strata_bt_rule_of(rules_base + off);
    printf("%lx %u %s %d %d %d %d\n", off, (unsigned)(r & 3), (r & 4) ? "rbp" : "rsp", (int)(int32_t)(r >> 32),
           (r & 8) ? 1 : 0, (int)(int16_t)(r >> 16), (r & 16) ? 1 : 0);
  }
  return 0;
}

int main(int argc, char **argv) {
#if !defined(__x86_64__) || !defined(__linux__)
  printf("SKIP: the fast unwinder is x86_64 Linux only\n");
  return 77;
#endif
  if (argc == 3 && strcmp(argv[1], "rules") == 0) return rules_main(argv[2]);
  setvbuf(stdout, NULL, _IONBF, 0);
  RUN(test_exe_chains);
  RUN(test_dlopen_chain);
  RUN(test_dlclose_dlopen_same_address);
  RUN(test_signal_handler);
  RUN(test_threads);
  UNIT_EXIT();
}
