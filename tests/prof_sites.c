/*
 * prof_sites.c - a program with known allocation sites for the profiling sidecar and the
 * USDT probes: site_alpha keeps 256 blocks of 64 KiB, site_beta 512 of 16 KiB; both call
 * chains are kept in the binary (noinline). It prints "ready <pid>" once they are live,
 * then makes no allocator call until SIGTERM, when it frees them and exits normally.
 * "request" first asks for a dump through the mallctl prof.dump_request (run under
 * LD_PRELOAD: found with dlsym). "wait [SEM]" prints "waiting <pid>" and allocates only
 * after SIGUSR1 (a tracer attaches in between) and, given SEM, once the semaphore is
 * raised (the probe is attached: a tracer's "Attaching" line comes before). "gate SEM
 * DIR" does what an attaching tracer does to otel_memory:alloc's semaphore (SEM: its
 * address in libstrata, from readelf -n):
 * dumps DIR/before.heap after site_beta, raises the semaphore, dumps DIR/after.heap after
 * site_alpha. "churn N [SEM]" instead allocates and frees site_gamma's 4 KiB blocks N
 * times (tracer overhead figures; SEM raised first, as in "gate") and exits. "stacks N"
 * keeps N blocks of 64 B live, each from its own call chain (N distinct stacks: the
 * dump-latency figure with lg_prof_sample:0), then idles as "idle" does. "switch SEM"
 * (a process started with prof:false) allocates and frees site_delta's 48-byte blocks with
 * the semaphore down, raised, then down twice, and prints the promoted samples of each
 * phase (stats.arenas.<all>.large.nmalloc: a sampled small block gets a page of its own)
 * and prof.dump's answer.
 */
#define _GNU_SOURCE 1
#include <dlfcn.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define NALPHA 256
#define NBETA 512

static void *alpha[NALPHA], *beta[NBETA];
static volatile sig_atomic_t stop;

static void on_term(int sig) { (void)sig; stop = 1; }

__attribute__((noinline)) void site_alpha(void) {
  for (int i = 0; i < NALPHA; i++) alpha[i] = malloc(64 << 10);
}

__attribute__((noinline)) void site_beta(void) {
  for (int i = 0; i < NBETA; i++) beta[i] = malloc(16 << 10);
}

#define NDELTA 20000
static void *delta[NDELTA];
__attribute__((noinline)) void site_delta(void) {
  for (int i = 0; i < NDELTA; i++) delta[i] = malloc(48);
}

__attribute__((noinline)) void site_gamma(long n) {
  for (long i = 0; i < n; i++) {
    void *volatile p = malloc(4096);
    free(p);
  }
}

/* Distinct call chains: walk(x, d) goes through wa or wb by x's low bit, d times, so
 * each x below 2^d has a stack of its own. The empty asm after each call keeps it a call
 * (no tail call folds the frames). */
static void *walk(unsigned x, int d);
__attribute__((noinline)) static void *wa(unsigned x, int d) {
  void *p = walk(x, d);
  __asm__ volatile("" ::: "memory");
  return p;
}
__attribute__((noinline)) static void *wb(unsigned x, int d) {
  void *p = walk(x, d);
  __asm__ volatile("" ::: "memory");
  return p;
}
__attribute__((noinline)) static void *walk(unsigned x, int d) {
  void *p = d == 0 ? malloc(64) : (x & 1) ? wa(x >> 1, d - 1) : wb(x >> 1, d - 1);
  __asm__ volatile("" ::: "memory");
  return p;
}

static volatile unsigned short *semaphore_at(const char *off) {
  void *mctl = dlsym(RTLD_DEFAULT, "mallctl");
  Dl_info di;
  if (!mctl || !dladdr(mctl, &di)) return NULL;
  return (volatile unsigned short *)((char *)di.dli_fbase + strtoul(off, NULL, 0));
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "idle";
  if (strcmp(mode, "churn") == 0) {
    struct timespec a, b;
    long n = argc > 2 ? atol(argv[2]) : 1000000;
    volatile unsigned short *sem = argc > 3 ? semaphore_at(argv[3]) : NULL;
    if (sem) {
      (*sem)++;
      /* An allocation no thread cache serves looks at the semaphore (a prof:false process
       * turns its sampler on there): this loop alone never leaves its cache. */
      free(malloc(1 << 20));
    }
    clock_gettime(CLOCK_MONOTONIC, &a);
    site_gamma(n);
    clock_gettime(CLOCK_MONOTONIC, &b);
    printf("%.2f ns per malloc+free of 4 KiB\n", ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / n);
    return 0;
  }
  int (*mctl)(const char *, void *, size_t *, void *, size_t) =
      (int (*)(const char *, void *, size_t *, void *, size_t))dlsym(RTLD_DEFAULT, "mallctl");
  if (strcmp(mode, "switch") == 0 && argc > 2 && mctl) {
    volatile unsigned short *sem = semaphore_at(argv[2]);
    if (!sem) return 2;
    uint64_t n[5], e = 1;
    size_t len = sizeof(uint64_t);
    for (int phase = 0; phase < 5; phase++) {
      if (phase == 1) (*sem)++; /* what the kernel does when a uprobe attaches */
      if (phase == 2) (*sem)--; /* ... and when it detaches */
      mctl("epoch", NULL, NULL, &e, sizeof e);
      mctl("stats.arenas.4096.large.nmalloc", &n[phase], &len, NULL, 0);
      if (phase == 4) break;
      site_delta();
      for (int i = 0; i < NDELTA; i++) free(delta[i]);
    }
    const char *pp = "/nonexistent/x.heap";
    int r = mctl("prof.dump", NULL, NULL, &pp, sizeof pp);
    printf("samples %llu %llu %llu %llu dump %d\n", (unsigned long long)(n[1] - n[0]),
           (unsigned long long)(n[2] - n[1]), (unsigned long long)(n[3] - n[2]), (unsigned long long)(n[4] - n[3]), r);
    return 0;
  }
  if (strcmp(mode, "gate") == 0 && argc > 3 && mctl) {
    volatile unsigned short *sem = semaphore_at(argv[2]);
    if (!sem) return 2;
    char path[512];
    const char *pp = path;
    site_beta();
    snprintf(path, sizeof path, "%s/before.heap", argv[3]);
    int r1 = mctl("prof.dump", NULL, NULL, &pp, sizeof pp);
    (*sem)++; /* what the kernel does when a uprobe with this reference counter attaches */
    site_alpha();
    snprintf(path, sizeof path, "%s/after.heap", argv[3]);
    int r2 = mctl("prof.dump", NULL, NULL, &pp, sizeof pp);
    (*sem)--;
    printf("dumps %d %d\n", r1, r2);
    return r1 || r2;
  }
  signal(SIGTERM, on_term);
  if (strcmp(mode, "stacks") == 0) {
    unsigned n = argc > 2 ? (unsigned)atol(argv[2]) : 100000, d = 0;
    while ((1u << d) < n) d++;
    void **keep = malloc(n * sizeof(void *));
    for (unsigned i = 0; keep && i < n; i++) keep[i] = walk(i, (int)d);
    printf("ready %d\n", (int)getpid());
    fflush(stdout);
    struct timespec ts = {0, 20 * 1000000};
    while (!stop) nanosleep(&ts, NULL);
    return 0;
  }
  if (strcmp(mode, "wait") == 0) {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGUSR1);
    sigprocmask(SIG_BLOCK, &set, NULL);
    printf("waiting %d\n", (int)getpid());
    fflush(stdout);
    int sig;
    sigwait(&set, &sig);
    volatile unsigned short *sem = argc > 2 ? semaphore_at(argv[2]) : NULL;
    struct timespec ts = {0, 10 * 1000000};
    for (int i = 0; sem && *sem == 0 && i < 6000; i++) nanosleep(&ts, NULL); /* 60 s at most */
  }
  site_alpha();
  site_beta();
  if (strcmp(mode, "request") == 0) {
    int r = mctl ? mctl("prof.dump_request", NULL, NULL, NULL, 0) : -1;
    printf("dump_request %d\n", r);
  }
  printf("ready %d\n", (int)getpid());
  fflush(stdout);
  /* Idle: no allocator call from here on (nanosleep does not allocate). */
  struct timespec ts = {0, 20 * 1000000};
  while (!stop) nanosleep(&ts, NULL);
  for (int i = 0; i < NALPHA; i++) free(alpha[i]);
  for (int i = 0; i < NBETA; i++) free(beta[i]);
  return 0;
}
