/*
 * prof_stress.c - the heap profiler under load (prof:true, a sample every 1 KiB on
 * average, so thousands of samples): the live set empties when every block is freed,
 * from whichever thread, across prof.reset, fork and thread exit; the prof mallctls.
 * Built for both builds (prefixed: strata_ names, run under TSan by scripts/sanitize.sh).
 */
#define _GNU_SOURCE
#include "strata_names.h"

#include <dlfcn.h>
#include <sys/mman.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/stat.h>

/* TSan cannot start a thread in the child of a multi-threaded fork ("starting new threads
 * after multi-threaded fork is not supported"), and strata starts its background thread in
 * a child once the child has pages to decay: the TSan build runs without it. */
#if defined(__SANITIZE_THREAD__)
const char *malloc_conf = "prof:true,lg_prof_sample:10,prof_prefix:/tmp/strata-prof-stress,background_thread:false";
#else
const char *malloc_conf = "prof:true,lg_prof_sample:10,prof_prefix:/tmp/strata-prof-stress";
#endif

extern char __executable_start, etext;
static bool in_test_program(unsigned long a) {
  return a >= (unsigned long)&__executable_start && a < (unsigned long)&etext;
}

/* Dumps and reads the sampled objects and bytes of the stacks whose innermost frame is in
 * this program (glibc keeps blocks of its own, e.g. for thread stacks and stdio):
 * "@ 0x<ret> ..." followed by "  t*: <objs>: <bytes> [...]". */
static void dump_totals(unsigned long *objs, unsigned long *bytes) {
  char path[128];
  snprintf(path, sizeof path, "/tmp/strata-prof-stress-%d.heap", (int)getpid());
  const char *pp = path;
  int rc = mallctl("prof.dump", NULL, NULL, &pp, sizeof pp);
  CHECK(rc == 0, "prof.dump returned %d", rc);
  FILE *f = fopen(path, "r");
  CHECK(f != NULL, "no dump at %s", path);
  char line[256];
  CHECK(fgets(line, sizeof line, f) && strncmp(line, "heap_v2/", 8) == 0, "bad header: %s", line);
  unsigned long to, tb;
  CHECK(fgets(line, sizeof line, f) && sscanf(line, "  t*: %lu: %lu", &to, &tb) == 2, "bad totals: %s", line);
  *objs = *bytes = 0;
  bool own = false;
  while (fgets(line, sizeof line, f) && strncmp(line, "MAPPED_LIBRARIES", 16) != 0) {
    unsigned long a, o, b;
    if (sscanf(line, "@ 0x%lx", &a) == 1) {
      own = in_test_program(a);
    } else if (sscanf(line, "  t*: %lu: %lu", &o, &b) == 2 && own) {
      *objs += o;
      *bytes += b;
    }
  }
  CHECK(*objs <= to && *bytes <= tb, "stacks sum above the totals line");
  fclose(f);
  unlink(path);
}

/* What the live set may keep after a churn frees everything: nothing. (Every sampled
 * block's free reaches the profiler: its granule's rtree class sends it to the slow path;
 * before that routing, a block with 32 zero low address bits slipped past a 32-bit mask.) */
#define CHURN_LEFTOVER_OK(objs, bytes) ((objs) == 0 && (bytes) == 0)

typedef struct {
  void **slots;
  size_t n;
  unsigned seed;
  atomic_int *stop;
} worker_t;

static void *churn(void *arg) {
  worker_t *w = arg;
  long rounds = check_scaled(200000);
  for (long i = 0; i < rounds && !(w->stop && atomic_load(w->stop)); i++) {
    size_t k = rand_r(&w->seed) % w->n;
    free(w->slots[k]);
    size_t sz = (size_t)(rand_r(&w->seed) % 4 == 0 ? rand_r(&w->seed) % 40000 : rand_r(&w->seed) % 512) + 1;
    w->slots[k] = malloc(sz);
    CHECK(w->slots[k] != NULL, "malloc(%zu)", sz);
  }
  return NULL;
}

static void run_workers(int nthreads, atomic_int *stop, void (*during)(void)) {
  pthread_t t[8];
  worker_t w[8];
  for (int i = 0; i < nthreads; i++) {
    w[i] = (worker_t){calloc(512, sizeof(void *)), 512, (unsigned)i * 7919 + 1, stop};
    CHECK(pthread_create(&t[i], NULL, churn, &w[i]) == 0, "pthread_create");
  }
  if (during) during();
  for (int i = 0; i < nthreads; i++) pthread_join(t[i], NULL);
  /* Freed by this thread, not the one that allocated them. */
  for (int i = 0; i < nthreads; i++) {
    for (size_t k = 0; k < w[i].n; k++) free(w[i].slots[k]);
    free(w[i].slots);
  }
}

TEST(test_prof_is_on_and_samples) {
  bool on = false;
  size_t len = sizeof on;
  CHECK(mallctl("opt.prof", &on, &len, NULL, 0) == 0 && on, "opt.prof is not true");
  size_t lg = 0;
  len = sizeof lg;
  CHECK(mallctl("prof.lg_sample", &lg, &len, NULL, 0) == 0 && lg == 10, "prof.lg_sample %zu", lg);
  void *keep[256];
  for (int i = 0; i < 256; i++) keep[i] = malloc(4096);
  unsigned long objs, bytes;
  dump_totals(&objs, &bytes);
  /* 1 MiB live at a 1 KiB mean: every 4 KiB block is sampled with probability 98%. */
  CHECK(objs >= 200 && objs <= 256, "%lu sampled objects of 256 live 4 KiB blocks", objs);
  CHECK(bytes == objs * 4096, "sampled bytes %lu for %lu objects", bytes, objs);
  for (int i = 0; i < 256; i++) free(keep[i]);
  dump_totals(&objs, &bytes);
  CHECK(objs == 0 && bytes == 0, "after freeing everything: %lu objects, %lu bytes", objs, bytes);
}

TEST(test_prof_live_set_empties_after_cross_thread_frees) {
  run_workers(4, NULL, NULL);
  unsigned long objs, bytes;
  dump_totals(&objs, &bytes);
  CHECK(CHURN_LEFTOVER_OK(objs, bytes), "after freeing everything: %lu objects, %lu bytes", objs, bytes);
}

static atomic_int reset_stop;
static void reset_loop(void) {
  for (int i = 0; i < 50; i++) {
    size_t lg = i % 2 ? 10 : 11;
    CHECK(mallctl("prof.reset", NULL, NULL, &lg, sizeof lg) == 0, "prof.reset");
    unsigned long objs, bytes;
    dump_totals(&objs, &bytes);
    CHECK(objs < 100000, "implausible count %lu (a counter went below zero?)", objs);
    usleep(2000);
  }
  atomic_store(&reset_stop, 1);
}

TEST(test_prof_reset_under_load) {
  run_workers(4, &reset_stop, reset_loop);
  size_t lg = 10;
  CHECK(mallctl("prof.reset", NULL, NULL, &lg, sizeof lg) == 0, "prof.reset");
  unsigned long objs, bytes;
  dump_totals(&objs, &bytes);
  CHECK(CHURN_LEFTOVER_OK(objs, bytes), "after freeing everything: %lu objects, %lu bytes", objs, bytes);
}

static void fork_during(void) {
  for (int i = 0; i < 5; i++) {
    usleep(3000);
    pid_t pid = fork();
    CHECK(pid >= 0, "fork");
    if (pid == 0) {
      void *p[64];
      for (int k = 0; k < 64; k++) p[k] = malloc(4096);
      unsigned long objs, bytes;
      dump_totals(&objs, &bytes);
      if (objs < 40) _exit(3);
      for (int k = 0; k < 64; k++) free(p[k]);
      _exit(0);
    }
    int st;
    CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0, "child status %d", st);
  }
}

TEST(test_prof_fork_while_threads_sample) {
  run_workers(3, NULL, fork_during);
  unsigned long objs, bytes;
  dump_totals(&objs, &bytes);
  CHECK(CHURN_LEFTOVER_OK(objs, bytes), "after freeing everything: %lu objects, %lu bytes", objs, bytes);
}

static void *alloc_and_exit(void *arg) {
  void **out = arg;
  for (int i = 0; i < 64; i++) out[i] = malloc((size_t)(i + 1) * 64);
  return NULL;
}

TEST(test_prof_thread_exit_leaves_blocks_to_others) {
  static void *blocks[40][64];
  for (int r = 0; r < 40; r++) {
    pthread_t t;
    CHECK(pthread_create(&t, NULL, alloc_and_exit, blocks[r]) == 0, "pthread_create");
    pthread_join(t, NULL);
  }
  unsigned long objs, bytes;
  dump_totals(&objs, &bytes);
  CHECK(objs > 0, "no sample among 40 x 130 KiB");
  for (int r = 0; r < 40; r++)
    for (int i = 0; i < 64; i++) free(blocks[r][i]);
  dump_totals(&objs, &bytes);
  CHECK(objs == 0 && bytes == 0, "after freeing everything: %lu objects, %lu bytes", objs, bytes);
}

TEST(test_prof_mallctls) {
  bool b, old;
  size_t len = sizeof old;
  b = false;
  CHECK(mallctl("prof.active", &old, &len, &b, sizeof b) == 0 && old, "prof.active");
  void *keep[64];
  for (int i = 0; i < 64; i++) keep[i] = malloc(8192);
  unsigned long objs, bytes;
  dump_totals(&objs, &bytes);
  CHECK(objs == 0, "prof.active:false still sampled %lu", objs);
  for (int i = 0; i < 64; i++) free(keep[i]);
  b = true;
  CHECK(mallctl("prof.active", NULL, NULL, &b, sizeof b) == 0, "prof.active");
  len = sizeof old;
  b = false;
  CHECK(mallctl("thread.prof.active", &old, &len, &b, sizeof b) == 0 && old, "thread.prof.active");
  for (int i = 0; i < 64; i++) keep[i] = malloc(8192);
  dump_totals(&objs, &bytes);
  CHECK(objs == 0, "thread.prof.active:false still sampled %lu", objs);
  for (int i = 0; i < 64; i++) free(keep[i]);
  b = true;
  CHECK(mallctl("thread.prof.active", NULL, NULL, &b, sizeof b) == 0, "thread.prof.active");
  const char *name = "worker-1", *got = NULL;
  CHECK(mallctl("thread.prof.name", NULL, NULL, &name, sizeof name) == 0, "thread.prof.name write");
  len = sizeof got;
  CHECK(mallctl("thread.prof.name", &got, &len, NULL, 0) == 0 && strcmp(got, "worker-1") == 0, "name");
  /* jemalloc: a read and a write in one call is EPERM; a name too long is cut, not refused. */
  const char *other = "worker-2";
  len = sizeof got;
  CHECK(mallctl("thread.prof.name", &got, &len, &other, sizeof other) == EPERM, "thread.prof.name read+write");
  char longname[200];
  memset(longname, 'n', sizeof longname - 1);
  longname[sizeof longname - 1] = '\0';
  const char *lp = longname;
  CHECK(mallctl("thread.prof.name", NULL, NULL, &lp, sizeof lp) == 0, "thread.prof.name of 199 characters refused");
  len = sizeof got;
  CHECK(mallctl("thread.prof.name", &got, &len, NULL, 0) == 0 && strlen(got) == 15 && strncmp(got, longname, 15) == 0,
        "a long thread.prof.name not cut to its first 15 characters (jemalloc 5.3.1)");
  /* jemalloc 5.3.1: NULL, or a character neither printable nor blank, is EINVAL */
  const char *bad[] = {NULL, "tab\tok", "line\nbreak", "bell\a", "\xc3\xa9t\xc3\xa9"};
  for (int i = 0; i < 5; i++) {
    int want = i == 1 ? 0 : EINVAL;
    CHECK(mallctl("thread.prof.name", NULL, NULL, &bad[i], sizeof bad[i]) == want, "thread.prof.name case %d", i);
  }
  CHECK(mallctl("thread.prof.name", NULL, NULL, &name, sizeof name) == 0, "thread.prof.name write");
  CHECK(mallctl("opt.prof", NULL, NULL, &b, sizeof b) == EPERM, "opt.prof is read-only");
  size_t lg = 99;
  CHECK(mallctl("prof.reset", NULL, NULL, &lg, sizeof lg) == EINVAL, "prof.reset 99");
  const char *prefix = NULL;
  len = sizeof prefix;
  CHECK(mallctl("opt.prof_prefix", &prefix, &len, NULL, 0) == 0 && strcmp(prefix, "/tmp/strata-prof-stress") == 0,
        "opt.prof_prefix");
  ssize_t iv = 0;
  len = sizeof iv;
  CHECK(mallctl("opt.lg_prof_interval", &iv, &len, NULL, 0) == 0 && iv == -1, "opt.lg_prof_interval %zd", iv);
  /* Default names: <prefix>.<pid>.<seq>.m<mseq>.heap */
  CHECK(mallctl("prof.dump", NULL, NULL, NULL, 0) == 0, "prof.dump default name");
  char path[128];
  struct stat st;
  int found = 0;
  for (int seq = 0; seq < 64 && !found; seq++) {
    snprintf(path, sizeof path, "/tmp/strata-prof-stress.%d.%d.m0.heap", (int)getpid(), seq);
    found = stat(path, &st) == 0;
  }
  CHECK(found, "no /tmp/strata-prof-stress.%d.<seq>.m0.heap", (int)getpid());
  unlink(path);
  size_t mib[2], miblen = 2;
  CHECK(mallctlnametomib("prof.lg_sample", mib, &miblen) == 0, "nametomib");
  len = sizeof lg;
  CHECK(mallctlbymib(mib, miblen, &lg, &len, NULL, 0) == 0 && lg == 10, "bymib prof.lg_sample %zu", lg);
}
/* prof.gdump: a new high-water mark of the in-use estimate makes the dump thread write
 * <prefix>.<pid>.<seq>.u<useq>.heap (the thread is created from a later free). */
TEST(test_prof_gdump_writes_u_dumps) {
  bool on = true;
  CHECK(mallctl("prof.gdump", NULL, NULL, &on, sizeof on) == 0, "prof.gdump");
  void *keep[64];
  for (int i = 0; i < 64; i++) keep[i] = malloc(65536);
  free(malloc(16));
  char path[128];
  struct stat st;
  int found = 0;
  for (int tries = 0; tries < 300 && !found; tries++) {
    for (int seq = 0; seq < 64 && !found; seq++) {
      snprintf(path, sizeof path, "/tmp/strata-prof-stress.%d.%d.u0.heap", (int)getpid(), seq);
      found = stat(path, &st) == 0 && st.st_size > 0;
    }
    if (!found) usleep(10000);
  }
  CHECK(found, "no /tmp/strata-prof-stress.%d.<seq>.u0.heap after 3 s", (int)getpid());
  /* Remove every u dump of this process. */
  for (int u = 0; u < 256; u++)
    for (int seq = 0; seq < 256; seq++) {
      snprintf(path, sizeof path, "/tmp/strata-prof-stress.%d.%d.u%d.heap", (int)getpid(), seq, u);
      unlink(path);
    }
  for (int i = 0; i < 64; i++) free(keep[i]);
}

/* The header's per-thread line of the thread named `name` ("  t<uid>: <objs>: <bytes>
 * [...] <name>"): its objects and bytes, or false if the dump has none. */
static bool dump_thread_line(const char *name, unsigned long *objs, unsigned long *bytes) {
  char path[128];
  snprintf(path, sizeof path, "/tmp/strata-prof-stress-t%d.heap", (int)getpid());
  const char *pp = path;
  CHECK(mallctl("prof.dump", NULL, NULL, &pp, sizeof pp) == 0, "prof.dump");
  FILE *f = fopen(path, "r");
  CHECK(f != NULL, "no dump at %s", path);
  char line[256];
  bool found = false;
  while (fgets(line, sizeof line, f) && line[0] != '@') {
    unsigned long uid, o, b, ao, ab;
    int end = 0;
    if (sscanf(line, "  t%lu: %lu: %lu [%lu: %lu]%n", &uid, &o, &b, &ao, &ab, &end) == 5 && end > 0) {
      line[strcspn(line, "\n")] = '\0';
      if (line[end] == ' ' && strcmp(line + end + 1, name) == 0) {
        CHECK(!found, "two lines named %s", name);
        found = true;
        *objs = o;
        *bytes = b;
      }
    }
  }
  fclose(f);
  unlink(path);
  return found;
}

static void *named_alloc(void *arg) {
  void **out = arg;
  const char *name = "prof-worker-7";
  CHECK(mallctl("thread.prof.name", NULL, NULL, &name, sizeof name) == 0, "thread.prof.name");
  for (int i = 0; i < 64; i++) out[i] = malloc(16384);
  unsigned long objs = 0, bytes = 0;
  CHECK(dump_thread_line("prof-worker-7", &objs, &bytes), "no line for a live named thread");
  return NULL;
}

/* thread.prof.name is written into heap_v2's per-thread lines (jemalloc's "  t<uid>: ...
 * <name>"), with that thread's live samples; the line outlives the thread while its blocks
 * live, and goes when they are freed. */
TEST(test_prof_thread_name_in_dumps) {
  static void *blocks[64];
  pthread_t t;
  CHECK(pthread_create(&t, NULL, named_alloc, blocks) == 0, "pthread_create");
  pthread_join(t, NULL);
  unsigned long objs = 0, bytes = 0;
  CHECK(dump_thread_line("prof-worker-7", &objs, &bytes), "no line for the exited thread with live samples");
  /* 16 KiB blocks at a 1 KiB mean: each sampled with probability 1 - e^-16. */
  CHECK(objs >= 60 && objs <= 64 && bytes == objs * 16384, "thread line %lu objects, %lu bytes", objs, bytes);
  for (int i = 0; i < 64; i++) free(blocks[i]);
  CHECK(!dump_thread_line("prof-worker-7", &objs, &bytes), "the exited thread's line stays after its blocks went");
}

/* A block grown in place by xallocx counts as an allocation of its new size (jemalloc's
 * prof_realloc): the sample of the old size is replaced. */
TEST(test_prof_xallocx_growth_is_sampled) {
  unsigned long objs, bytes;
  dump_totals(&objs, &bytes);
  CHECK(objs == 0, "%lu samples live before the test", objs);
  size_t grown = 0;
  void *p = NULL;
  for (int tries = 0; tries < 16 && grown == 0; tries++) {
    p = malloc(256 << 10);
    dump_totals(&objs, &bytes);
    CHECK(objs == 1 && bytes == (256u << 10), "a 256 KiB block: %lu objects, %lu bytes sampled", objs, bytes);
    size_t r = xallocx(p, 1 << 20, 0, 0);
    if (r >= (1u << 20)) grown = r;
    else free(p);
  }
  if (grown == 0) {
    printf("SKIP: xallocx never grew a block in place\n");
    return;
  }
  dump_totals(&objs, &bytes);
  CHECK(objs == 1 && bytes == grown, "after growing in place to %zu: %lu objects, %lu bytes", grown, objs, bytes);
  free(p);
  dump_totals(&objs, &bytes);
  CHECK(objs == 0 && bytes == 0, "after the free: %lu objects, %lu bytes", objs, bytes);
}

/* Blocks popped from the thread cache are sampled at jemalloc's rate: every allocation
 * spends its bytes from the thread's countdown, so a block of s bytes is sampled with
 * probability 1 - e^(-s/1024) here. 20,000 blocks each of 512 and 96 bytes, interleaved:
 * 7,869 (sd 69) and 1,790 (sd 40) samples expected. A pop that does not spend its bytes
 * moves these by hundreds. */
TEST(test_prof_cached_classes_sample_at_the_rate) {
  enum { N = 20000 };
  static void *b[2 * N];
  unsigned long objs, bytes;
  dump_totals(&objs, &bytes);
  CHECK(objs == 0, "%lu samples live before the test", objs);
  for (int i = 0; i < 2 * N; i++) b[i] = malloc(i % 2 ? 96 : 512);
  dump_totals(&objs, &bytes);
  long n512 = ((long)bytes - 96 * (long)objs) / 416, n96 = (long)objs - n512;
  CHECK(n512 > 7869 - 5 * 69 && n512 < 7869 + 5 * 69, "%ld samples of 20,000 512-byte blocks (expected 7,869)", n512);
  CHECK(n96 > 1790 - 5 * 40 && n96 < 1790 + 5 * 40, "%ld samples of 20,000 96-byte blocks (expected 1,790)", n96);
  for (int i = 0; i < 2 * N; i++) free(b[i]);
  dump_totals(&objs, &bytes);
  CHECK(objs == 0 && bytes == 0, "after freeing everything: %lu objects, %lu bytes", objs, bytes);
}

/* The same rate for blocks that come back through the thread cache: rounds of 8 mallocs
 * of one class of which 7 are freed at once, so after the first fill nearly every block
 * popped was freed just before (LIFO: the bin free pushes onto is the one malloc pops).
 * 20,000 kept blocks each of 512 and 96 bytes, chosen by position, not by sampling: 7,869
 * (sd 69) and 1,790 (sd 40) samples expected. Checked against a prof:true malloc whose
 * pops did not spend their bytes (38 of the kept 512-byte blocks sampled; the fork and
 * thread-exit forms 47 and 38) and, for mallocx, an ialloc that did not count cache pops
 * (0). */
typedef enum { FREE_PLAIN, FREE_SIZED, FREE_SDALLOCX } free_kind_t;
static void free_by(free_kind_t k, void *p, size_t sz) {
  if (k == FREE_SIZED) {
    free_sized(p, sz);
  } else if (k == FREE_SDALLOCX) {
    sdallocx(p, sz, 0);
  } else {
    free(p);
  }
}

static void reused_blocks_sample_at_the_rate_by(free_kind_t kind, bool use_mallocx) {
  enum { N = 20000, R = 8 };
  static void *b[2 * N];
  void *t[R];
  unsigned long objs, bytes;
  dump_totals(&objs, &bytes);
  CHECK(objs == 0, "%lu samples live before the test", objs);
  for (int i = 0; i < 2 * N; i++) {
    size_t sz = i % 2 ? 96 : 512;
    for (int k = 0; k < R; k++) t[k] = use_mallocx ? mallocx(sz, 0) : malloc(sz);
    b[i] = t[(i / 2) % R];
    for (int k = 0; k < R; k++)
      if (t[k] != b[i]) free_by(kind, t[k], sz);
  }
  dump_totals(&objs, &bytes);
  long n512 = ((long)bytes - 96 * (long)objs) / 416, n96 = (long)objs - n512;
  CHECK(n512 > 7869 - 5 * 69 && n512 < 7869 + 5 * 69, "%ld samples of 20,000 kept 512-byte blocks (expected 7,869)", n512);
  CHECK(n96 > 1790 - 5 * 40 && n96 < 1790 + 5 * 40, "%ld samples of 20,000 kept 96-byte blocks (expected 1,790)", n96);
  for (int i = 0; i < 2 * N; i++) free_by(kind, b[i], i % 2 ? 96 : 512);
  dump_totals(&objs, &bytes);
  CHECK(objs == 0 && bytes == 0, "after freeing everything: %lu objects, %lu bytes", objs, bytes);
}

static void reused_blocks_sample_at_the_rate(free_kind_t kind) { reused_blocks_sample_at_the_rate_by(kind, false); }

TEST(test_prof_reused_blocks_sample_at_the_rate) { reused_blocks_sample_at_the_rate(FREE_PLAIN); }

/* mallocx pops the cache through ialloc, which counts its bytes (prof_alloc). */
TEST(test_prof_mallocx_reused_blocks_sample_at_the_rate) { reused_blocks_sample_at_the_rate_by(FREE_PLAIN, true); }

/* Sized frees take free's fast path (the rtree's class is the size's): the same counts,
 * and every sampled block freed by size leaves the live set. */
TEST(test_prof_sized_frees_sample_at_the_rate) {
  reused_blocks_sample_at_the_rate(FREE_SIZED);
  reused_blocks_sample_at_the_rate(FREE_SDALLOCX);
}

/* A fork child inherits the parent's caches and countdown mid-way (the parent churned
 * first, its blocks freed into its bins): the child's reused blocks sample at the rate and
 * its live set empties; the parent's afterwards too. */
TEST(test_prof_reused_blocks_sample_at_the_rate_after_fork) {
  reused_blocks_sample_at_the_rate(FREE_PLAIN);
  pid_t pid = fork();
  CHECK(pid >= 0, "fork");
  if (pid == 0) {
    reused_blocks_sample_at_the_rate(FREE_PLAIN); /* a failed CHECK exits 1 */
    _exit(0);
  }
  int st;
  CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0, "child status %d", st);
  reused_blocks_sample_at_the_rate(FREE_PLAIN);
}

/* Threads that reuse their cached blocks and exit (their caches flushed, their countdowns
 * gone with them): the blocks they keep sample at the rate, and freeing them from this
 * thread empties the live set. 4 threads x 5,000 kept 512-byte blocks: 7,869 (sd 69)
 * samples. */
enum { EXIT_THREADS = 4, EXIT_KEEP = 5000 };
static void *reuse_and_exit(void *arg) {
  void **keep = arg, *t[8];
  for (int i = 0; i < EXIT_KEEP; i++) {
    for (int k = 0; k < 8; k++) t[k] = malloc(512);
    keep[i] = t[i % 8];
    for (int k = 0; k < 8; k++)
      if (t[k] != keep[i]) free(t[k]);
  }
  return NULL;
}

TEST(test_prof_reused_blocks_in_threads_that_exit) {
  static void *keep[EXIT_THREADS][EXIT_KEEP];
  unsigned long objs, bytes;
  dump_totals(&objs, &bytes);
  CHECK(objs == 0, "%lu samples live before the test", objs);
  pthread_t t[EXIT_THREADS];
  for (int i = 0; i < EXIT_THREADS; i++) CHECK(pthread_create(&t[i], NULL, reuse_and_exit, keep[i]) == 0, "pthread_create");
  for (int i = 0; i < EXIT_THREADS; i++) pthread_join(t[i], NULL);
  dump_totals(&objs, &bytes);
  CHECK(bytes == objs * 512, "%lu bytes in %lu samples of 512-byte blocks", bytes, objs);
  CHECK(objs > 7869 - 5 * 69 && objs < 7869 + 5 * 69, "%lu samples of 20,000 kept 512-byte blocks (expected 7,869)", objs);
  for (int i = 0; i < EXIT_THREADS; i++)
    for (int k = 0; k < EXIT_KEEP; k++) free(keep[i][k]);
  dump_totals(&objs, &bytes);
  CHECK(objs == 0 && bytes == 0, "after freeing everything: %lu objects, %lu bytes", objs, bytes);
}

/* Sampled small blocks are promoted to page extents of their own (alloc.c, prof_promote).
 * A sample takes prof_lock once (stats.mutexes.prof.num_ops, jemalloc's name; no dump
 * thread runs in these tests, and reading the count does not take it). */
static uint64_t prof_nlocks(void) {
  uint64_t e = 1, v = 0;
  size_t len = sizeof v;
  CHECK(mallctl("epoch", NULL, NULL, &e, sizeof e) == 0, "epoch");
  CHECK(mallctl("stats.mutexes.prof.num_ops", &v, &len, NULL, 0) == 0, "stats.mutexes.prof.num_ops");
  return v;
}

/* A malloc took prof_lock (was sampled) when the count grew by more than a read's own
 * share (the epoch refresh may take the lock to copy its profile: measured once). */
static bool prof_nlocks_grew(uint64_t n0) {
  static uint64_t idle = UINT64_MAX;
  if (idle == UINT64_MAX) {
    uint64_t a = prof_nlocks();
    idle = prof_nlocks() - a;
  }
  return prof_nlocks() - n0 > idle;
}

/* A small malloc and whether it was sampled, that is promoted to a page of its own. */
static void *malloc_promoted(size_t sz, bool *promoted) {
  (void)prof_nlocks_grew(0);
  uint64_t n0 = prof_nlocks();
  void *p = malloc(sz);
  *promoted = sz <= 14336 && prof_nlocks_grew(n0);
  return p;
}

/* A sampled small block is on a page of its own (a new one, or one its thread kept from a
 * freed sample), and every call sees its small class: malloc_usable_size, realloc within
 * the class (in place) and beyond it (moved, contents kept), free_sized and sdallocx with
 * the small size, MALLOCX_ALIGN, calloc's zeroes, thread.allocated. */
enum { PROMOTE_TRIES = 20000 };
static void *find_promoted(size_t sz, int flags, bool zero) {
  /* The last LIVE blocks stay allocated: next to a sampled block kept in its slab, the
   * ones allocated just before it would share its page (classes up to 2 KiB). */
  enum { LIVE = 64 };
  void *live[LIVE] = {0};
  (void)prof_nlocks_grew(0);
  for (int i = 0; i < PROMOTE_TRIES; i++) {
    uint64_t n0 = prof_nlocks(), a0 = 0, a1 = 0;
    size_t len = sizeof a0;
    CHECK(mallctl("thread.allocated", &a0, &len, NULL, 0) == 0, "thread.allocated");
    void *p = zero ? calloc(1, sz) : flags ? mallocx(sz, flags) : malloc(sz);
    CHECK(p != NULL, "allocating %zu bytes", sz);
    CHECK(mallctl("thread.allocated", &a1, &len, NULL, 0) == 0, "thread.allocated");
    CHECK(a1 - a0 == nallocx(sz, flags), "thread.allocated grew by %llu for a %zu-byte block (usable %zu)",
          (unsigned long long)(a1 - a0), sz, nallocx(sz, flags));
    if (prof_nlocks_grew(n0)) {
      for (int j = 0; j < LIVE; j++) {
        CHECK(live[j] == NULL || ((uintptr_t)live[j] >> 12) != ((uintptr_t)p >> 12),
              "sampled %zu-byte block %p shares its page with block %p", sz, p, live[j]);
        free(live[j]);
      }
      return p;
    }
    free(live[i % LIVE]);
    live[i % LIVE] = p;
  }
  CHECK(false, "no %zu-byte block sampled in %d", sz, PROMOTE_TRIES);
  return NULL;
}

TEST(test_prof_sampled_small_blocks_get_their_own_pages) {
  static const size_t sizes[] = {8, 48, 100, 1000, 3000, 4096, 6000, 14336};
  for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
    size_t sz = sizes[k], us = nallocx(sz, 0);
    unsigned char *p = find_promoted(sz, 0, false);
    CHECK(((uintptr_t)p & 4095) == 0, "promoted %zu-byte block at %p: not on a page of its own", sz, (void *)p);
    CHECK(malloc_usable_size(p) == us, "malloc_usable_size of a promoted %zu-byte block: %zu, not %zu", sz,
          malloc_usable_size(p), us);
    CHECK(sallocx(p, 0) == us, "sallocx");
    for (size_t i = 0; i < us; i++) p[i] = (unsigned char)(i * 7 + 1);
    CHECK(realloc(p, us) == p, "realloc of a promoted block within its class moved it");
    unsigned char *q = realloc(p, us * 2 + 1);
    CHECK(q != NULL, "realloc(%zu)", us * 2 + 1);
    for (size_t i = 0; i < us; i++) CHECK(q[i] == (unsigned char)(i * 7 + 1), "realloc lost byte %zu of %zu", i, us);
    free(q);
    p = find_promoted(sz, 0, false);
    free_sized(p, sz);
    p = find_promoted(sz, 0, false);
    sdallocx(p, sz, MALLOCX_ALIGN(8));
    p = find_promoted(sz, MALLOCX_ALIGN(64), false);
    CHECK(((uintptr_t)p & 63) == 0 && sallocx(p, 0) == nallocx(sz, MALLOCX_ALIGN(64)), "mallocx(%zu, MALLOCX_ALIGN(64))", sz);
    sdallocx(p, sz, MALLOCX_ALIGN(64));
    /* calloc zeroes a promoted block: dirty its page first (freed pages are reused). */
    p = find_promoted(sz, 0, false);
    memset(p, 0xa5, us);
    free(p);
    p = find_promoted(sz, 0, true);
    for (size_t i = 0; i < sz; i++) CHECK(p[i] == 0, "calloc(1, %zu): byte %zu is %u", sz, i, p[i]);
    free(p);
  }
  unsigned long objs, bytes;
  dump_totals(&objs, &bytes);
  CHECK(objs == 0 && bytes == 0, "after freeing everything: %lu objects, %lu bytes", objs, bytes);
}

/* A promoted block freed twice is reported (strata's invalid-free report, SIGABRT): after
 * its first free the thread keeps its page with no class (nkeep 0), or, with the thread's
 * kept pages full, the page goes back to its arena (nkeep 4 more promoted frees first). */
static void free_promoted_twice(void *arg) {
  int nkeep = (int)(intptr_t)arg;
  void *other[8];
  void *p = find_promoted(100, 0, false);
  for (int i = 0; i < nkeep; i++) other[i] = find_promoted(100, 0, false);
  for (int i = 0; i < nkeep; i++) free(other[i]);
  char buf[64];
  int n = snprintf(buf, sizeof buf, "addr=%p\n", p);
  if (write(1, buf, (size_t)n) < 0) _exit(3);
  free(p);
  free(p);
  _exit(0);
}

static void expect_promoted_double_free_report(int nkeep) {
  static check_child_t r;
  CHECK(check_child(free_promoted_twice, (void *)(intptr_t)nkeep, 60, &r) == 0, "fork failed");
  const char *a = strstr(r.out, "addr=");
  CHECK(a != NULL, "child did not report its address; %s; stderr:\n%s", check_status_str(r.status), r.err);
  uintptr_t addr = (uintptr_t)strtoull(a + 5, NULL, 16);
  const char *needle = "invalid pointer 0x";
  const char *m = strstr(r.err, needle);
  CHECK(m != NULL, "no \"%s...\" report for 0x%jx (child: %s); stderr:\n%s", needle, (uintmax_t)addr,
        check_status_str(r.status), r.err);
  CHECK((uintptr_t)strtoull(m + strlen(needle) - 2, NULL, 16) == addr, "report names another address: %s", r.err);
  CHECK(WIFSIGNALED(r.status) && WTERMSIG(r.status) == SIGABRT, "child ended with %s, want SIGABRT; stderr:\n%s",
        check_status_str(r.status), r.err);
}

TEST(test_prof_promoted_block_freed_twice_is_reported) {
  expect_promoted_double_free_report(0);
  expect_promoted_double_free_report(4);
}

/* prof:true reuses freed blocks as prof:false does (LIFO): a free then a malloc of the same
 * class returns the block just freed, from the small classes of malloc's lookup table (up
 * to 14 KiB), a cached class above it (20 KiB) and by way of a sized free; sampled or not
 * for the large class. A sampled small block is on a page of its own (promoted): the
 * block freed before it, or after it, is then another (at a 1 KiB mean most of the small
 * blocks are sampled). The stash bins of the earlier design handed back a block only after
 * the bin's other ~30. */
TEST(test_prof_free_then_malloc_reuses_the_block) {
  static const size_t sizes[] = {16, 24, 48, 96, 128, 512, 1000, 4096, 6144, 20480};
  void *warm[64];
  for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
    size_t sz = sizes[k];
    for (int i = 0; i < 64; i++) warm[i] = malloc(sz); /* fill the bin, then free into it */
    for (int i = 0; i < 64; i++) free(warm[i]);
    unsigned nreused = 0, npromoted = 0;
    for (int round = 0; round < 200; round++) {
      bool pp, qp;
      void *p = malloc_promoted(sz, &pp);
      CHECK(p != NULL, "malloc(%zu)", sz);
      if (round % 2) {
        free_sized(p, sz);
      } else {
        free(p);
      }
      void *q = malloc_promoted(sz, &qp);
      CHECK(q == p || pp || qp, "malloc(%zu) after freeing %p returned %p (round %d)", sz, p, q, round);
      nreused += q == p && !pp && !qp;
      npromoted += pp + qp;
      free(q);
    }
    /* At a 1 KiB mean a 16-byte block is sampled with probability 1.6%, a 1000-byte one 62%. */
    if (sz <= 96) CHECK(nreused >= 100, "malloc(%zu): %u of 200 frees reused at once", sz, nreused);
    if (sz >= 1000 && sz <= 14336) CHECK(npromoted >= 100, "malloc(%zu): %u of 400 blocks promoted", sz, npromoted);
  }
  unsigned long objs, bytes;
  dump_totals(&objs, &bytes);
  CHECK(objs == 0 && bytes == 0, "after freeing everything: %lu objects, %lu bytes", objs, bytes);
}

/* Classes at both ends of malloc's lookup table (6 KiB: malloc_prof's pop; 20 KiB, cached
 * above the table: ialloc with prof:true) spend their bytes too. At a 16 KiB mean, 2,000 kept blocks each of 6 KiB and 20 KiB in rounds of 8
 * (7 freed): 625 (sd 21) and 1,427 (sd 20) samples expected. Checked against a
 * malloc_prof that did not spend above 4 KiB (93 samples of the 6 KiB blocks) and, in the
 * unpatched run (prof_nopatch), malloc_slow popping the 20 KiB class uncounted (705). */
TEST(test_prof_classes_above_the_table_sample_at_the_rate) {
  enum { N = 2000, R = 8 };
  static void *b[2 * N];
  void *t[R];
  size_t lg = 14, lg_back = 10;
  CHECK(mallctl("prof.reset", NULL, NULL, &lg, sizeof lg) == 0, "prof.reset");
  for (int i = 0; i < 2 * N; i++) {
    size_t sz = i % 2 ? 20480 : 6144;
    for (int k = 0; k < R; k++) t[k] = malloc(sz);
    b[i] = t[(i / 2) % R];
    for (int k = 0; k < R; k++)
      if (t[k] != b[i]) free(t[k]);
  }
  unsigned long objs, bytes;
  dump_totals(&objs, &bytes);
  long n20k = ((long)bytes - 6144 * (long)objs) / (20480 - 6144), n6k = (long)objs - n20k;
  for (int i = 0; i < 2 * N; i++) free(b[i]);
  CHECK(mallctl("prof.reset", NULL, NULL, &lg_back, sizeof lg_back) == 0, "prof.reset");
  CHECK(n6k > 625 - 5 * 21 && n6k < 625 + 5 * 21, "%ld samples of 2,000 kept 6 KiB blocks (expected 625)", n6k);
  CHECK(n20k > 1427 - 5 * 20 && n20k < 1427 + 5 * 20, "%ld samples of 2,000 kept 20 KiB blocks (expected 1,427)", n20k);
}

/* prof:true turns strata_malloc's first instruction (after an endbr64) into a jmp rel32 to
 * the profiling malloc; STRATA_PROF_NOPATCH=1 (the prof_nopatch tests) leaves it as built,
 * so those tests run the fallback (malloc's fast path misses on its zero table). Looked up
 * with dlsym: &strata_malloc could be this program's PLT entry. */
TEST(test_prof_malloc_entry_is_patched_unless_told_not_to) {
  bool pp;
  void *p = malloc_promoted(24, &pp); /* strata starts (and patches) at its first call */
  CHECK(p != NULL, "malloc(24)");
  free(p);
  const unsigned char *f = dlsym(RTLD_DEFAULT, "strata_malloc");
  CHECK(f != NULL, "dlsym(strata_malloc): %s", dlerror());
  if (f[0] == 0xf3 && f[1] == 0x0f && f[2] == 0x1e && f[3] == 0xfa) f += 4; /* endbr64 */
  const char *e = getenv("STRATA_PROF_NOPATCH");
  bool off = e && e[0] == '1';
  /* Where a W^X policy refuses writable code (SELinux execmod, PaX), strata cannot patch
   * either: probe with this program's own text page, and then check only the fallback. */
  long pg = sysconf(_SC_PAGESIZE);
  void *own = (void *)((uintptr_t)&in_test_program & ~(uintptr_t)(pg - 1));
  if (mprotect(own, (size_t)pg, PROT_READ | PROT_WRITE | PROT_EXEC) != 0) {
    printf("skipped: mprotect(PROT_WRITE | PROT_EXEC) refused here, so strata keeps malloc unpatched\n");
    off = true;
  } else {
    mprotect(own, (size_t)pg, PROT_READ | PROT_EXEC);
  }
  CHECK(off ? f[0] != 0xe9 : f[0] == 0xe9, "STRATA_PROF_NOPATCH %s: strata_malloc starts with %02x %02x (0xe9: patched)",
        e ? e : "unset", f[0], f[1]);
  bool qp;
  void *q = malloc_promoted(24, &qp); /* either way the block comes back from the cache */
  CHECK(q == p || pp || qp, "malloc(24) after free(%p) returned %p", p, q);
  free(q);
}

/* The frees of a sampled block's granule neighbours ask the live set without prof_lock
 * (prof.c, live_maybe). At this rate about 500 of 8,192 64-byte blocks are sampled and
 * nearly every 4 KiB granule holds one, so most of the frees leave the fast path; only
 * the sampled ones may take the lock (stats.mutexes.prof, jemalloc's name: prof_nlocks). */

TEST(test_prof_neighbour_frees_skip_the_lock) {
  enum { N = 8192 };
  static void *b[N];
  for (int i = 0; i < N; i++) {
    b[i] = malloc(64);
    CHECK(b[i] != NULL, "malloc(64)");
  }
  uint64_t n0 = prof_nlocks();
  for (int i = 0; i < N; i++) free(b[i]);
  uint64_t n1 = prof_nlocks();
  CHECK(n1 - n0 < N / 8, "%llu prof_lock acquisitions for %d frees (about 500 blocks sampled)",
        (unsigned long long)(n1 - n0), N);
  unsigned long objs, bytes;
  dump_totals(&objs, &bytes);
  CHECK(CHURN_LEFTOVER_OK(objs, bytes), "%lu sampled blocks left in the live set", objs);
}

/* prof:true keeps a bin's nmalloc biased by its class's sample countdown (malloc_prof,
 * prof_class_take): thread.allocated and the bins' nrequests must still count every malloc.
 * 30,000 mallocs of 48 and 160 bytes with a sample every 1 KiB on average (hundreds of
 * countdowns drawn per class). Seen failing with readers of the raw nmalloc (thread.allocated
 * and nrequests off by about 2^64). */
static uint64_t rd_u64(const char *name) {
  uint64_t v = 0;
  size_t len = sizeof v;
  CHECK(mallctl(name, &v, &len, NULL, 0) == 0, "%s", name);
  return v;
}

TEST(test_prof_thread_allocated_and_nrequests_count_every_malloc) {
  enum { N = 30000 };
  static void *b[N];
  char name[96];
  unsigned bin = 0;
  for (unsigned j = 0;; j++) {
    size_t sz = 0, len = sizeof sz;
    snprintf(name, sizeof name, "arenas.bin.%u.size", j);
    CHECK(mallctl(name, &sz, &len, NULL, 0) == 0, "no bin of 48 bytes");
    if (sz == 48) {
      bin = j;
      break;
    }
  }
  unsigned arena = 0;
  size_t alen = sizeof arena;
  CHECK(mallctl("thread.arena", &arena, &alen, NULL, 0) == 0, "thread.arena");
  snprintf(name, sizeof name, "stats.arenas.%u.bins.%u.nrequests", arena, bin);
  uint64_t e = 1;
  CHECK(mallctl("epoch", NULL, NULL, &e, sizeof e) == 0, "epoch");
  uint64_t r0 = rd_u64(name), a0 = rd_u64("thread.allocated");
  uint64_t want = 0;
  for (int i = 0; i < N; i++) {
    b[i] = malloc(i % 3 ? 48 : 160);
    CHECK(b[i] != NULL, "malloc");
    want += malloc_usable_size(b[i]);
  }
  uint64_t a1 = rd_u64("thread.allocated");
  CHECK(mallctl("epoch", NULL, NULL, &e, sizeof e) == 0, "epoch");
  uint64_t r1 = rd_u64(name);
  CHECK(a1 - a0 == want, "thread.allocated grew by %llu for %llu bytes allocated", (unsigned long long)(a1 - a0),
        (unsigned long long)want);
  /* nrequests: the cache's pops (20,000 mallocs of 48 bytes, less the few that missed) plus
   * the regions its fills took from the arena (20,000 and the bin's last fill): about 40,000;
   * about 20,000 when the pops are read without the bias. */
  CHECK(r1 - r0 >= 35000 && r1 - r0 <= 50000, "bins.%u.nrequests grew by %llu for 20,000 mallocs", bin,
        (unsigned long long)(r1 - r0));
  for (int i = 0; i < N; i++) free(b[i]);
}

int main(int argc, char **argv) { return check_main(argc, argv); }
