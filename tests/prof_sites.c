/*
 * prof_sites.c - a program with known allocation sites for the profiling sidecar and the
 * USDT probes: site_alpha keeps 256 blocks of 64 KiB, site_beta 512 of 16 KiB; both call
 * chains are kept in the binary (noinline). It prints "ready <pid>" once they are live,
 * then makes no allocator call until SIGTERM, when it frees them and exits normally.
 * "request" first asks for a dump through the mallctl prof.dump_request (run under
 * LD_PRELOAD: found with dlsym). "wait" prints "waiting <pid>" and allocates only after
 * SIGUSR1 (a tracer attaches in between). "gate SEM DIR" does what an attaching tracer
 * does to otel_memory:alloc's semaphore (SEM: its address in libstrata, from readelf -n):
 * dumps DIR/before.heap after site_beta, raises the semaphore, dumps DIR/after.heap after
 * site_alpha. "churn N" instead allocates and frees site_gamma's
 * 4 KiB blocks N times (tracer overhead figures) and exits.
 */
#define _GNU_SOURCE 1
#include <dlfcn.h>
#include <signal.h>
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

__attribute__((noinline)) void site_gamma(long n) {
  for (long i = 0; i < n; i++) {
    void *volatile p = malloc(4096);
    free(p);
  }
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "idle";
  if (strcmp(mode, "churn") == 0) {
    struct timespec a, b;
    long n = argc > 2 ? atol(argv[2]) : 1000000;
    clock_gettime(CLOCK_MONOTONIC, &a);
    site_gamma(n);
    clock_gettime(CLOCK_MONOTONIC, &b);
    printf("%.2f ns per malloc+free of 4 KiB\n", ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / n);
    return 0;
  }
  int (*mctl)(const char *, void *, size_t *, void *, size_t) =
      (int (*)(const char *, void *, size_t *, void *, size_t))dlsym(RTLD_DEFAULT, "mallctl");
  if (strcmp(mode, "gate") == 0 && argc > 3 && mctl) {
    Dl_info di;
    if (!dladdr((void *)mctl, &di)) return 2;
    volatile unsigned short *sem = (volatile unsigned short *)((char *)di.dli_fbase + strtoul(argv[2], NULL, 0));
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
  if (strcmp(mode, "wait") == 0) {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGUSR1);
    sigprocmask(SIG_BLOCK, &set, NULL);
    printf("waiting %d\n", (int)getpid());
    fflush(stdout);
    int sig;
    sigwait(&set, &sig);
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
