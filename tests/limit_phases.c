/*
 * limit_phases - a working set that moves between threads (so between arenas) and
 * between size mixes, each phase freeing everything before the next allocates: the
 * program that must survive a memory cgroup whose limit is a little above one phase's
 * peak. Plain malloc/free (any allocator, by LD_PRELOAD); no bookkeeping outside the
 * blocks (they are chained through their first word), so the live data is the blocks.
 *
 *   limit_phases LIVE_MIB [PHASES [FIRST]]   exit 0 when every phase ran; one JSON line
 *
 * Phase k uses size mix (FIRST + k) % 5; one phase alone (PHASES 1) gives that mix's peak.
 *
 * Each phase runs in a new thread; earlier phase threads stay alive (blocked), so a new
 * phase never inherits the previous one's arena or thread cache.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <semaphore.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
  size_t min, max; /* block sizes, log-uniform */
} mix_t;
static const mix_t mixes[] = {
    {16, 256},                 /* small objects */
    {1024, 14336},             /* the largest small classes */
    {16384, 262144},           /* page runs */
    {262144, (size_t)4 << 20}, /* large blocks */
    {16, (size_t)1 << 20},     /* everything at once */
    {(size_t)8 << 20, (size_t)24 << 20}, /* oversize blocks: that arena keeps its recent peak dirty */
};
#define NMIX (sizeof(mixes) / sizeof(mixes[0]))

static size_t live_bytes;
static unsigned first_mix;
static sem_t phase_done, all_done;

static uint64_t rng(uint64_t *s) {
  uint64_t x = *s;
  x ^= x << 13, x ^= x >> 7, x ^= x << 17;
  return *s = x;
}

static size_t log_uniform(uint64_t *s, size_t lo, size_t hi) {
  /* lo * (hi/lo)^u by picking a power of two band, then uniform inside it. */
  unsigned lg_lo = 63 - (unsigned)__builtin_clzll(lo), lg_hi = 63 - (unsigned)__builtin_clzll(hi);
  unsigned b = lg_lo + (unsigned)(rng(s) % (lg_hi - lg_lo + 1));
  size_t a = (size_t)1 << b, z = a * 2;
  if (a < lo) a = lo;
  if (z > hi) z = hi;
  return a + (size_t)(rng(s) % (z - a + 1));
}

static long rss_kb(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  long size = 0, res = 0;
  if (f) {
    if (fscanf(f, "%ld %ld", &size, &res) != 2) res = 0;
    fclose(f);
  }
  return res * (sysconf(_SC_PAGESIZE) / 1024);
}

static long peak_kb[64];

static void *phase_main(void *arg) {
  unsigned k = (unsigned)(uintptr_t)arg;
  const mix_t *m = &mixes[(first_mix + k) % NMIX];
  uint64_t seed = 0x9e3779b97f4a7c15ull * (k + 1);
  void *head = NULL;
  size_t got = 0;
  while (got < live_bytes) {
    size_t s = log_uniform(&seed, m->min, m->max);
    if (s > live_bytes - got && live_bytes - got >= 16) s = live_bytes - got;
    void *p = malloc(s);
    if (p == NULL) {
      fprintf(stderr, "limit_phases: malloc(%zu) failed in phase %u\n", s, k);
      exit(2);
    }
    memset(p, (int)(k + 1), s); /* every page resident */
    *(void **)p = head;
    head = p;
    got += s;
  }
  peak_kb[k] = rss_kb();
  while (head) {
    void *next = *(void **)head;
    free(head);
    head = next;
  }
  sem_post(&phase_done);
  sem_wait(&all_done); /* stay alive: the next phase must use another thread's arena */
  return NULL;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: limit_phases LIVE_MIB [PHASES [FIRST]]\n");
    return 64;
  }
  live_bytes = (size_t)strtoul(argv[1], NULL, 10) << 20;
  unsigned nphases = argc > 2 ? (unsigned)strtoul(argv[2], NULL, 10) : 10;
  first_mix = argc > 3 ? (unsigned)strtoul(argv[3], NULL, 10) : 0;
  if (live_bytes == 0 || nphases == 0 || nphases > 64) {
    fprintf(stderr, "limit_phases: LIVE_MIB > 0 and 1..64 phases\n");
    return 64;
  }
  sem_init(&phase_done, 0, 0);
  sem_init(&all_done, 0, 0);
  pthread_t th[64];
  for (unsigned k = 0; k < nphases; k++) {
    if (pthread_create(&th[k], NULL, phase_main, (void *)(uintptr_t)k) != 0) {
      fprintf(stderr, "limit_phases: pthread_create failed\n");
      return 2;
    }
    sem_wait(&phase_done);
  }
  for (unsigned k = 0; k < nphases; k++) sem_post(&all_done);
  for (unsigned k = 0; k < nphases; k++) pthread_join(th[k], NULL);
  long peak = 0;
  for (unsigned k = 0; k < nphases; k++) peak = peak_kb[k] > peak ? peak_kb[k] : peak;
  printf("{\"live_mib\":%zu,\"phases\":%u,\"max_phase_rss_kb\":%ld,\"end_rss_kb\":%ld,\"phase_rss_kb\":[",
         live_bytes >> 20, nphases, peak, rss_kb());
  for (unsigned k = 0; k < nphases; k++) printf("%s%ld", k ? "," : "", peak_kb[k]);
  printf("]}\n");
  return 0;
}
